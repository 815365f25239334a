"""One nemesis client: the acquire -> fenced writes -> release loop, in-process or in a child.

The loop runs one recipe (``WorkerConfig.recipe``: its entry in ``_recipes/_traits.py``
makes its objects): ``lock`` (the fair ``zk.lock``), ``nonfair``
(``zk.lock(path, fair=False)``), ``election`` (the body runs as leader), ``lease``
(``zk.lease_lock(path, ttl, holder_id=<client name>)``), ``multilock``
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
(one client each, see :mod:`._nemesis_worker_child`). The configuration, the records and
the sink are in :mod:`._nemesis_worker_config`.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from typing import NamedTuple, cast

import anyio

import aiozklock
from aiozklock import SessionState, StateChange
from aiozklock._exceptions import NotLockOwner
from aiozklock._recipes._core._holding import Holding
from aiozklock._recipes._traits import Setup, Sides, traits_of

from ._nemesis_worker_config import Held, Record, Section, WorkerConfig, WorkerSink
from ._nemesis_worker_unprotected import act_ignoring_loss

__all__ = [
    "recorded_client",
    "run_worker",
    "session_recorder",
]

logger = logging.getLogger(__name__)


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


class _Turn(NamedTuple):
    """What one acquisition uses: the object, the resources (lock paths) it covers, and
    whether it is the recipe's shared read side (``Sides.read``: it writes nothing)."""

    held: Held
    resources: tuple[str, ...]
    shared: bool = False


class _Contention:
    """The recipe objects of one worker: ``next()`` gives what the next acquisition uses (a
    ``_Turn``). One object per path is reused across
    iterations (a lease keeps its ``holder_id``: a lost create reply is re-attached); a
    multi-lock is a new object per acquisition, on a random subset in a random order."""

    def __init__(
        self, zk: aiozklock.ZooKeeperClient, config: WorkerConfig, rng: random.Random
    ) -> None:
        self._zk = zk
        self._config = config
        self._rng = rng
        self._traits = traits = traits_of(config.recipe)  # ValueError if unknown
        # One object (and its read side) reused, or a new multi-path object each time.
        self._sides: Sides | None = None
        if not traits.multi_path:
            self._sides = traits.make(zk, self._setup((config.path,)))
        elif len(config.paths) < 2:
            raise ValueError(f"recipe {config.recipe!r} needs at least 2 paths")

    def _setup(self, paths: tuple[str, ...]) -> Setup:
        config = self._config
        return Setup(
            paths,
            config.name,
            ttl=config.lease_ttl,
            holder_id=config.name,
            max_leases=config.max_leases,
        )

    def next(self) -> _Turn:
        sides = self._sides
        if sides is not None:
            if sides.read is not None:
                shared = self._rng.random() < 0.5
                return _Turn(sides.read if shared else sides.main, (self._config.path,), shared)
            return _Turn(sides.main, (self._config.path,))
        paths = list(self._config.paths)
        chosen = self._rng.sample(paths, self._rng.randint(2, min(3, len(paths))))
        return _Turn(self._traits.make(self._zk, self._setup(tuple(chosen))).main, tuple(chosen))


def _holding_of(primitive: Held) -> Holding | None:
    """The current task's holding (lost or not; a semaphore's is its lease's), read from
    the engine: the test kit reads what no public property exposes for every recipe."""
    try:
        return primitive._held_engine("")._holding
    except NotLockOwner:
        return None


def _still_held(primitive: Held) -> bool:
    """Held and not lost (whatever ``valid_until`` says)."""
    holding = _holding_of(primitive)
    return holding is not None and not holding.lost


def _node_key(primitive: Held) -> str | None:
    """``{first node's path}#{czxid}``: names a node uniquely even where the recipe reuses a
    fixed name (``nonfair``, ``lease``); the observer keys its deletions the same way."""
    holding = _holding_of(primitive)
    if holding is None or not holding.nodes:
        return None
    return f"{holding.nodes[0]}#{holding.token}"


def _expires_at(primitive: Held, ttl_lease: bool) -> float | None:
    """A TTL lease's ``expires_at`` (None for the session-bound recipes, or once released);
    ``ttl_lease``: the recipe's description says it is one (its objects are ``LeaseLock``).
    On the history's clock (``time.monotonic()``): the lease's is ``aiozklock.clock()``,
    which counts a suspend; the two move together while the machine runs."""
    if not ttl_lease:
        return None
    expires_at = cast("aiozklock.LeaseLock", primitive).statistics().expires_at
    return None if expires_at is None else expires_at - aiozklock.clock() + time.monotonic()


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
        turn = contention.next()
        primitive = turn.held
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
                await _critical_section(zk, turn, config, sink, rng, start)
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


def _pauses(config: WorkerConfig, rng: random.Random) -> list[float]:
    """The "work" before each write: 1..max_writes of them, sometimes spread over a long hold."""
    writes = rng.randint(1, config.max_writes)
    long_hold = rng.random() < config.long_hold_probability
    return [
        rng.uniform(*config.long_hold) / writes if long_hold else rng.uniform(*config.work)
        for _ in range(writes)
    ]


async def _critical_section(
    zk: aiozklock.ZooKeeperClient,
    turn: _Turn,
    config: WorkerConfig,
    sink: WorkerSink,
    rng: random.Random,
    requested: float,
) -> None:
    primitive = turn.held
    traits = traits_of(config.recipe)
    section = Section(
        token=primitive.fencing_token,
        shared=turn.shared,
        shares_resource=traits.shares_resource,
        ttl_lease=traits.ttl_lease,
        node=_node_key(primitive),
        session_id=zk.session_id,
        expires_at=_expires_at(primitive, traits.ttl_lease),
        requested=requested,
        resources=turn.resources,
    )
    pauses = _pauses(config, rng)
    section.enter = time.monotonic()
    # ``hold``: how long it means to act, so that the nemesis can aim at long holds.
    sink.emit(
        {
            "type": "enter",
            "token": section.token,
            "node": section.node,
            "t": section.enter,
            "hold": sum(pauses),
        }
    )
    try:
        if config.unprotected:  # the negative control
            section.outcome = await act_ignoring_loss(
                primitive, section, pauses, sink, config.linger
            )
        else:
            section.outcome = await _act(primitive, section, pauses, sink)
    except anyio.get_cancelled_exc_class():
        section.outcome = "cancelled" if _still_held(primitive) else "lost"
        raise
    finally:
        sink.emit(section.record())


async def _act(primitive: Held, section: Section, pauses: list[float], sink: WorkerSink) -> str:
    """The section's fenced reads, then its pauses and writes; returns its outcome."""
    counters: dict[str, int] = {}
    # A reader shares its grant, a semaphore holder its resource: no fenced access.
    stores = () if section.shared or section.shares_resource else section.resources
    for resource in stores:  # registers our token: older holders are fenced
        ok, counters[resource] = await sink.read(resource, section.token)
        if not ok:
            return "rejected"
    for pause in pauses:
        await anyio.sleep(pause)
        # The pre-write check: the loss policy's verdict and ``valid_until`` (a process
        # resumed from a pause may run this before its heartbeat noticed anything).
        if not primitive.is_held:
            return "invalid"
        section.expires_at = _expires_at(primitive, section.ttl_lease)
        if section.shared:
            continue
        await sink.before_write()
        if section.shares_resource:
            section.acts.append(time.monotonic())
        for resource in stores:
            if not await sink.write(resource, section.token, counters[resource] + 1):
                return "rejected"
            counters[resource] += 1
    return "completed"
