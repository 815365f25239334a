"""One nemesis client: the acquire -> fenced writes -> release loop, in-process or in a child.

The loop runs one recipe (``WorkerConfig.recipe``, see :data:`RECIPES`): ``lock`` (the fair
``zk.lock``), ``nonfair`` (``zk.lock(path, fair=False)``), ``election`` (the body runs as
leader), ``lease`` (``zk.lease_lock(path, ttl, holder_id=<client name>)``), ``multilock``
(each acquisition takes 2-3 of the shared ``paths``, a random subset in a random order) or
``rwlock`` (``zk.rw_lock(path)``: each acquisition takes its read lock or its write lock, at
random) or ``semaphore`` (``zk.semaphore(path, max_leases)``). Each path held is a resource
with its own fenced store: the section reads every store it holds (registering its token),
then each write increments every store's counter; a read lock's section (recorded as shared)
only checks ``is_held`` between its pauses, and touches no store. A semaphore's holders share
the resource with each other, so no single fenced store orders them: each records its
``acts`` instead (when it acted, right where a write would be sent), which the history
judges against the server's deletion of its node.

The same loop runs in the nemesis's own process (a task per client) and in child processes
(one client each, so that a holder *process* can be stopped with SIGSTOP). A child is started
as ``python -m aiozklock.testing._nemesis_child CONFIG_JSON``; it connects back to the
nemesis's control port and speaks newline-delimited JSON:

* child -> parent records (``time.monotonic()`` stamps, system-wide on Linux, so the parent
  merges them with its own): ``hello``, ``session`` (state changes, with the session id and
  password so that the nemesis can expire the session for real), ``enter``, ``section``,
  ``attempt``, ``watchers``, ``self_stop``, ``closed``;
* child -> parent requests ``read``/``write`` to the fenced store of a ``resource`` (a lock
  path), which lives in the parent only: a write's acceptance is decided by that single
  store when the request reaches it, as with any remote resource; answered by ``reply``;
* parent -> child commands: ``stop`` (finish the current iteration, report, close),
  ``pause_before_write`` (stop this process with SIGSTOP right after the next pre-write check
  that passes, before the write is sent: the check-then-act window that only fencing
  covers) and ``disarm``.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import logging
import math
import os
import random
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from typing import IO, Any, Protocol

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

import aiozklock
from aiozklock import SessionState, StateChange
from aiozklock._cli._choices import RECIPES
from aiozklock._recipes._core._primitive import Primitive
from aiozklock.testing._internals import session_of

__all__ = [
    "RECIPES",
    "WorkerConfig",
    "WorkerSink",
    "recorded_client",
    "run_worker",
    "session_recorder",
    "stall_watchdog",
]

logger = logging.getLogger(__name__)

Record = dict[str, Any]
_MAX_LINE = 1 << 20
#: The recipes a worker can loop on.
#: What a worker acquires: a semaphore holds its node through the current task's lease.
Held = Primitive | aiozklock.Semaphore


@dataclass(frozen=True)
class WorkerConfig:
    """What one client does; JSON-serialisable (it is a child's command line)."""

    name: str
    hosts: str  # the client's connection string: its own fault proxies
    path: str  # the lock path
    seed: int
    session_timeout: float
    loss_policy: str = "suspended"
    acquire_timeout: tuple[float, float] = (1.0, 4.0)  # uniform range, s
    attempt_grace: float = 6.0  # an attempt may take acquire_timeout + this
    max_writes: int = 3  # 1..max_writes fenced writes per critical section
    work: tuple[float, float] = (0.002, 0.03)  # s of "work" before each write
    #: some sections hold much longer (spread over their writes): long enough for a fault to
    #: be noticed while the holder still acts
    long_hold: tuple[float, float] = (0.0, 0.0)
    long_hold_probability: float = 0.0
    think: tuple[float, float] = (0.0, 0.03)  # s between release and the next attempt
    backend: str = "asyncio"
    control: str = ""  # host:port of the nemesis's control listener (children only)
    recipe: str = "lock"  # one of RECIPES
    paths: tuple[str, ...] = ()  # multilock: the shared paths (each acquisition takes 2-3)
    lease_ttl: float = 0.0  # lease: the TTL, s
    max_leases: int = 0  # semaphore: its max_leases

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerConfig:
        data = json.loads(text)
        for key in ("acquire_timeout", "work", "think", "long_hold", "paths"):
            data[key] = tuple(data[key])
        return cls(**data)


class WorkerSink(Protocol):
    """Where a worker's records go, and its access to the fenced store."""

    def emit(self, record: Record) -> None: ...

    async def read(self, resource: str, token: int) -> tuple[bool, int]: ...

    async def write(self, resource: str, token: int, value: int) -> bool: ...

    async def before_write(self) -> None:
        """Called after a pre-write check passed, right before the write is sent."""


async def stall_watchdog(file: IO[str], after: float = 20.0) -> None:
    """Dump every thread's stack to ``file`` if this event loop stops running for ``after``
    seconds (a livelock or a blocking call): re-armed while the loop runs. Process-wide
    (``faulthandler``): for the nemesis's own processes only; cancel it to disarm."""
    try:
        while True:
            faulthandler.dump_traceback_later(after, file=file)
            await anyio.sleep(after / 4)
    finally:
        faulthandler.cancel_dump_traceback_later()


def session_recorder(
    client: aiozklock.ZooKeeperClient, emit: Callable[[Record], None]
) -> Callable[[StateChange], None]:
    """A state listener that emits ``session`` records (LOST carries the session that died)."""
    current = {"id": client.session_id}

    def on_change(change: StateChange) -> None:
        record: Record = {
            "type": "session",
            "state": change.state.value,
            "t": change.at,
            "session_id": client.session_id,
            "password": client.session_password.hex(),
            "reason": change.reason,
        }
        if change.state is SessionState.LOST:
            record["lost_session_id"] = current["id"]
        if client.session_id:
            current["id"] = client.session_id
        emit(record)

    return on_change


@contextlib.asynccontextmanager
async def recorded_client(
    config: WorkerConfig, sink: WorkerSink
) -> AsyncIterator[aiozklock.ZooKeeperClient]:
    """The worker's client, its session states emitted through ``sink`` from the start."""
    async with aiozklock.connect(
        config.hosts,
        session_timeout=config.session_timeout,
        connect_timeout=30.0,
        loss_policy="expired" if config.loss_policy == "expired" else "suspended",
    ) as zk:
        zk.add_listener(session_recorder(zk, sink.emit))
        sink.emit(
            {
                "type": "session",
                "state": zk.state.value,
                "t": time.monotonic(),
                "session_id": zk.session_id,
                "password": zk.session_password.hex(),
                "reason": "connected",
            }
        )
        yield zk


class _Contention:
    """The recipe objects of one worker: ``next()`` gives what the next acquisition uses, the
    object and the resources (lock paths) it covers. One object per path is reused across
    iterations (a lease keeps its ``holder_id``: a lost create reply is re-attached); a
    multi-lock is a new object per acquisition, on a random subset in a random order."""

    def __init__(
        self, zk: aiozklock.ZooKeeperClient, config: WorkerConfig, rng: random.Random
    ) -> None:
        self._zk = zk
        self._config = config
        self._rng = rng
        recipe = config.recipe
        self._single: Held | None = None
        self._rw: aiozklock.ReadWriteLock | None = None
        if recipe == "semaphore":
            self._single = zk.semaphore(config.path, config.max_leases, identifier=config.name)
        elif recipe == "rwlock":
            self._rw = zk.rw_lock(config.path, identifier=config.name)
        elif recipe == "lock":
            self._single = zk.lock(config.path, identifier=config.name)
        elif recipe == "nonfair":
            self._single = zk.lock(config.path, identifier=config.name, fair=False)
        elif recipe == "election":
            self._single = zk.election(config.path, identifier=config.name)
        elif recipe == "lease":
            self._single = zk.lease_lock(
                config.path, config.lease_ttl, holder_id=config.name, identifier=config.name
            )
        elif recipe != "multilock" or len(config.paths) < 2:
            raise ValueError(f"unknown recipe {recipe!r} (or multilock with < 2 paths)")

    def next(self) -> tuple[Held, tuple[str, ...]]:
        if self._rw is not None:
            shared = self._rng.random() < 0.5
            return self._rw.read_lock if shared else self._rw.write_lock, (self._config.path,)
        if self._single is not None:
            return self._single, (self._config.path,)
        paths = list(self._config.paths)
        chosen = self._rng.sample(paths, self._rng.randint(2, min(3, len(paths))))
        return self._zk.multi_lock(chosen, identifier=self._config.name), tuple(chosen)


def _queued(primitive: Held) -> Primitive | None:
    """The object that owns the node: a semaphore's is the current task's lease."""
    if isinstance(primitive, aiozklock.Semaphore):
        return primitive._lease_of(anyio.get_current_task().id)
    return primitive


def _still_held(primitive: Held) -> bool:
    """Held and not lost (whichever task asks, whatever ``valid_until`` says): the test kit
    reads the private holding, which no public property exposes for every recipe."""
    queued = _queued(primitive)
    holding = queued._holding if queued is not None else None
    return holding is not None and not holding.lost


def _node_key(primitive: Held) -> str | None:
    """``{first node's path}#{czxid}``: names a node uniquely even where the recipe reuses a
    fixed name (``nonfair``, ``lease``); the observer keys its deletions the same way."""
    queued = _queued(primitive)
    holding = queued._holding if queued is not None else None
    if holding is None or not holding.nodes:
        return None
    return f"{holding.nodes[0]}#{holding.token}"


def _expires_at(primitive: Held) -> float | None:
    """A lease's ``expires_at`` (None for the session-bound recipes, or once released)."""
    if isinstance(primitive, aiozklock.LeaseLock):
        return primitive.statistics().expires_at
    return None


async def run_worker(
    zk: aiozklock.ZooKeeperClient,
    config: WorkerConfig,
    sink: WorkerSink,
    stop: anyio.Event,
) -> None:
    """Loop acquire -> critical section -> release until ``stop`` is set (checked between
    iterations: the attempt in progress ends by itself, within its bound). Raises
    ``ValueError`` for an unknown ``config.recipe``."""
    rng = random.Random(f"{config.seed}:{config.name}")
    contention = _Contention(zk, config, rng)
    name = config.name
    while not stop.is_set():
        primitive, resources = contention.next()
        timeout = rng.uniform(*config.acquire_timeout)
        bound = timeout + config.attempt_grace
        start = time.monotonic()
        acquired = False
        try:
            async with primitive.acquire(timeout=timeout):
                acquired = True
                sink.emit(
                    {
                        "type": "attempt",
                        "start": start,
                        "end": time.monotonic(),
                        "bound": bound,
                        "outcome": "acquired",
                    }
                )
                await _critical_section(zk, primitive, resources, config, sink, rng, start)
        except aiozklock.LockTimeout:
            if not acquired:
                _attempt(sink, start, bound, "timeout")
        except aiozklock.LockLost:  # LeadershipLost too
            pass  # the section recorded how it ended
        except aiozklock.ClientClosed:
            if not acquired:
                _attempt(sink, start, bound, "cancelled")
            raise
        except aiozklock.AiozklockError as exc:
            if not acquired:
                _attempt(sink, start, bound, f"error:{type(exc).__name__}")
            else:
                sink.emit({"type": "release_error", "t": time.monotonic(), "error": repr(exc)})
            logger.info("%s: %r", name, exc)
        except anyio.get_cancelled_exc_class():
            if not acquired:
                _attempt(sink, start, bound, "cancelled")
            raise
        await anyio.sleep(rng.uniform(*config.think))


def _attempt(sink: WorkerSink, start: float, bound: float, outcome: str) -> None:
    sink.emit(
        {
            "type": "attempt",
            "start": start,
            "end": time.monotonic(),
            "bound": bound,
            "outcome": outcome,
        }
    )


async def _critical_section(
    zk: aiozklock.ZooKeeperClient,
    primitive: Held,
    resources: tuple[str, ...],
    config: WorkerConfig,
    sink: WorkerSink,
    rng: random.Random,
    requested: float,
) -> None:
    token = primitive.fencing_token
    shared = isinstance(primitive, aiozklock.ReadLock)
    semaphore = isinstance(primitive, aiozklock.Semaphore)
    node = _node_key(primitive)
    session_id = zk.session_id
    expires_at = _expires_at(primitive)
    writes = rng.randint(1, config.max_writes)
    long_hold = rng.random() < config.long_hold_probability
    pauses = [
        rng.uniform(*config.long_hold) / writes if long_hold else rng.uniform(*config.work)
        for _ in range(writes)
    ]
    enter = time.monotonic()
    # ``hold``: how long it means to act, so that the nemesis can aim at long holds.
    sink.emit({"type": "enter", "token": token, "node": node, "t": enter, "hold": sum(pauses)})
    outcome = "error"
    acts: list[float] = []
    try:
        counters: dict[str, int] = {}
        # A reader shares its grant, a semaphore holder its resource: no fenced access.
        stores = () if shared or semaphore else resources
        for resource in stores:  # registers our token: older holders are fenced
            ok, counters[resource] = await sink.read(resource, token)
            if not ok:
                outcome = "rejected"
                return
        for pause in pauses:
            await anyio.sleep(pause)
            # The pre-write check: the loss policy's verdict and ``valid_until`` (a process
            # resumed from a pause may run this before its heartbeat noticed anything).
            if not primitive.is_held:
                outcome = "invalid"
                return
            expires_at = _expires_at(primitive)
            if shared:
                continue
            await sink.before_write()
            if semaphore:
                acts.append(time.monotonic())
            for resource in stores:
                if not await sink.write(resource, token, counters[resource] + 1):
                    outcome = "rejected"
                    return
                counters[resource] += 1
        outcome = "completed"
    except anyio.get_cancelled_exc_class():
        outcome = "cancelled" if _still_held(primitive) else "lost"
        raise
    finally:
        sink.emit(
            {
                "type": "section",
                "token": token,
                "node": node,
                "session_id": session_id,
                "requested": requested,
                "enter": enter,
                "exit": time.monotonic(),
                "outcome": outcome,
                "resources": list(resources),
                "expires_at": expires_at,
                "shared": shared,
                "acts": acts,
            }
        )


# ---------------------------------------------------------------------------- child process


class _ChildSink:
    """The child's side of the control connection."""

    def __init__(self, stream: anyio.abc.ByteStream, name: str) -> None:
        self._stream = stream
        self._name = name
        send, receive = anyio.create_memory_object_stream[tuple[bytes, anyio.Event | None]](
            math.inf
        )
        self._outbox = send
        self._outbox_receive = receive
        self._next_id = 0
        self._replies: dict[int, tuple[anyio.Event, list[Record]]] = {}
        self.pause_armed: float | None = None  # seconds, set by pause_before_write
        self.stop = anyio.Event()

    def emit(self, record: Record) -> None:
        self._outbox.send_nowait((json.dumps(record).encode() + b"\n", None))

    async def emit_flushed(self, record: Record) -> None:
        written = anyio.Event()
        self._outbox.send_nowait((json.dumps(record).encode() + b"\n", written))
        await written.wait()

    async def _request(self, record: Record) -> Record:
        self._next_id += 1
        request_id = self._next_id
        event = anyio.Event()
        slot: list[Record] = []
        self._replies[request_id] = (event, slot)
        try:
            self.emit({**record, "id": request_id})
            await event.wait()
        finally:
            self._replies.pop(request_id, None)
        return slot[0]

    async def read(self, resource: str, token: int) -> tuple[bool, int]:
        reply = await self._request({"type": "read", "resource": resource, "token": token})
        value = reply.get("value")
        return bool(reply["ok"]), value if isinstance(value, int) else 0

    async def write(self, resource: str, token: int, value: int) -> bool:
        reply = await self._request(
            {"type": "write", "resource": resource, "token": token, "value": value}
        )
        return bool(reply["ok"])

    async def before_write(self) -> None:
        duration = self.pause_armed
        if duration is None:
            return
        self.pause_armed = None
        # The parent resumes us after `duration`; the write below then goes out unchecked.
        await self.emit_flushed({"type": "self_stop", "t": time.monotonic(), "duration": duration})
        os.kill(os.getpid(), signal.SIGSTOP)

    async def writer(self) -> None:
        async with self._outbox_receive:
            async for data, written in self._outbox_receive:
                await self._stream.send(data)
                if written is not None:
                    written.set()

    async def reader(self) -> None:
        lines = BufferedByteReceiveStream(self._stream)
        try:
            while True:
                message: Record = json.loads(await lines.receive_until(b"\n", _MAX_LINE))
                kind = message.get("type")
                if kind == "reply":
                    entry = self._replies.get(int(message["id"]))
                    if entry is not None:
                        entry[1].append(message)
                        entry[0].set()
                elif kind == "stop":
                    self.stop.set()
                elif kind == "pause_before_write":
                    self.pause_armed = float(message["duration"])
                elif kind == "disarm":
                    self.pause_armed = None
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
            logger.warning("%s: the nemesis went away", self._name)
            raise SystemExit(3) from None


async def _child_main(config: WorkerConfig) -> None:
    host, _, port = config.control.rpartition(":")
    stream = await anyio.connect_tcp(host, int(port))
    sink = _ChildSink(stream, config.name)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sink.writer)
        tg.start_soon(sink.reader)
        tg.start_soon(stall_watchdog, sys.stderr)
        sink.emit({"type": "hello", "name": config.name, "pid": os.getpid(), "t": time.monotonic()})
        async with recorded_client(config, sink) as zk:
            baseline = session_of(zk).watcher_count()
            await run_worker(zk, config, sink, sink.stop)
            sink.emit(
                {"type": "watchers", "count": session_of(zk).watcher_count(), "baseline": baseline}
            )
        await sink.emit_flushed({"type": "closed", "t": time.monotonic()})
        tg.cancel_scope.cancel()
    await stream.aclose()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    config = WorkerConfig.from_json(args[0])
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s {config.name} %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    anyio.run(_child_main, config, backend=config.backend)


if __name__ == "__main__":
    main()
