"""The nemesis's state during a run: its parameters, the clients under test and what they
report (records from in-process workers and from child processes), the history and the fenced
stores (kept, or forwarded to a real server, by :mod:`._nemesis_store`); and the recipes'
settings that shape a run (:data:`MULTI_PATHS`, :data:`LEASE_JVM_PROPERTIES`). The schedule
is in :mod:`._nemesis_plan`, the faults' execution in :mod:`._nemesis_faults`, the run itself
in :mod:`._nemesis_run`."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
import anyio.to_thread
from anyio.streams.buffered import BufferedByteReceiveStream

from aiozklock._recipes._traits import RecipeTraits, traits_of
from aiozklock.testing._internals import session_of

from ._history import History
from ._history_records import FencedStore
from ._nemesis_clients import (
    _Client,
    _kill_quietly,
    _process_state,
    _py_spy,
    _wait_stopped,
)
from ._nemesis_store import StoreGate
from ._nemesis_tally import FaultRecord
from ._nemesis_worker import recorded_client, run_worker
from ._nemesis_worker_config import Record, WorkerConfig, WorkerSink
from ._server import ZooKeeperCluster
from ._server_member import ZooKeeperMember

__all__ = ["LEASE_JVM_PROPERTIES", "MULTI_PATHS"]

logger = logging.getLogger(__name__)

#: multilock: how many shared paths the clients draw their 2-3 from.
MULTI_PATHS = 4  # 4, not 3: two disjoint pairs can be held at once
#: lease: what the servers need so that an expired lease goes within 0.1 s, not a minute.
LEASE_JVM_PROPERTIES = {"znode.container.checkIntervalMs": "100"}


@dataclass(kw_only=True, eq=False, repr=False)
class _Nemesis:
    """One run's parameters (given) and state (the rest)."""

    seed: int
    duration: float
    session_timeout: float
    acquire_timeout: tuple[float, float]
    attempt_grace: float
    n_clients: int
    processes: int
    kinds: Sequence[str]
    loss_policy: str
    backend: str
    path: str
    recipe: str
    max_leases: int
    cluster: ZooKeeperCluster | None
    hosts: list[str]
    log_dir: Path
    #: the negative control: workers ignore the loss of their lock, the store does not fence
    unprotected: bool = False
    #: what the recipe is (``_recipes/_traits.py``)
    traits: RecipeTraits = field(init=False)
    #: the lock paths: one, or the multi-lock's shared ones (each a fenced resource)
    paths: tuple[str, ...] = field(init=False)
    history: History = field(init=False)
    #: where the fenced reads and writes go (a real store is set once it is open)
    gate: StoreGate = field(init=False)
    #: the record: one fenced store per lock path; none for a semaphore (its holders share it)
    stores: dict[str, FencedStore] = field(init=False)
    clients: list[_Client] = field(init=False, default_factory=list)
    by_name: dict[str, _Client] = field(init=False, default_factory=dict)
    sessions: dict[int, str] = field(init=False, default_factory=dict)
    faults: list[FaultRecord] = field(init=False, default_factory=list)
    expiries: list[tuple[str, float, float, FaultRecord]] = field(init=False, default_factory=list)
    errors: list[str] = field(init=False, default_factory=list)
    holder: _Client | None = field(init=False, default=None)
    holder_changed: anyio.Event = field(init=False, default_factory=anyio.Event)
    started: float = field(init=False, default_factory=time.monotonic)
    healed_at: float | None = field(init=False, default=None)
    progress: anyio.Event = field(init=False, default_factory=anyio.Event)
    stop: anyio.Event = field(init=False, default_factory=anyio.Event)
    close_clients: anyio.Event = field(init=False, default_factory=anyio.Event)
    control_address: str = field(init=False, default="")
    #: children that stopped themselves, until resumed (see ``_resume_later``)
    resumes: set[_Client] = field(init=False, default_factory=set)
    resumes_done: anyio.Event = field(init=False, default_factory=anyio.Event)
    task_group: anyio.abc.TaskGroup | None = field(init=False, default=None)
    faulted_members: set[ZooKeeperMember] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        self.traits = traits = traits_of(self.recipe)
        self.paths = (
            tuple(f"{self.path}/m{i}" for i in range(1, MULTI_PATHS + 1))
            if traits.multi_path
            else (self.path,)
        )
        shared = traits.shares_resource
        self.history = History(max_holders=self.max_leases if shared else 1)
        self.gate = StoreGate(
            () if shared else self.paths, self.errors.append, fenced=not self.unprotected
        )
        self.stores = self.gate.stores
        self.resumes_done.set()

    def now(self) -> float:
        return time.monotonic() - self.started

    # -------------------------------------------------------------- records

    def on_record(self, client: _Client, record: Record) -> None:
        """A record from a worker (in this process or a child): see ``_nemesis_worker``."""
        handlers: dict[str, Callable[[_Client, Record], None]] = {
            "session": self._on_session,
            "enter": self._on_enter,
            "section": self._on_section,
            "attempt": self._on_attempt,
            "watchers": self._on_watchers,
            "release_error": self._on_release_error,
            "self_stop": self._on_self_stop,
            "closed": self._on_closed,
            "hello": self._on_hello,
        }
        handler = handlers.get(str(record.get("type")))
        if handler is not None:
            handler(client, record)

    def _on_session(self, client: _Client, record: Record) -> None:
        history = self.history
        client.state = str(record["state"])
        session_id = int(record["session_id"])
        if session_id:
            client.session_id = session_id
            client.password = bytes.fromhex(str(record["password"]))
            self.sessions[session_id] = client.name
            if client.state == "CONNECTED":
                client.ready.set()
        lost = record.get("lost_session_id")
        if lost:
            history.record_session_lost(int(lost), float(record["t"]))
            history.count("session:lost")
        history.record_session_state(int(lost or session_id), client.state, float(record["t"]))

    def _on_enter(self, client: _Client, record: Record) -> None:
        self.holder = client
        client.hold_until = float(record["t"]) + float(record.get("hold", 0.0))
        self.holder_changed.set()
        self.holder_changed = anyio.Event()

    def _on_section(self, client: _Client, record: Record) -> None:
        if self.holder is client:
            self.holder = None
        section = self.history.record(
            client.name,
            int(record["token"]),
            float(record["enter"]),
            float(record["exit"]),
            outcome=str(record["outcome"]),
            node=record.get("node"),
            session_id=int(record["session_id"]),
            requested=float(record["requested"]),
            resources=[str(r) for r in record.get("resources", ())],
            expires_at=record.get("expires_at"),
            shared=bool(record.get("shared", False)),
            acts=[float(t) for t in record.get("acts", ())],
        )
        if (
            section.outcome == "completed"
            and self.healed_at is not None
            and section.enter > self.healed_at
        ):
            self.progress.set()

    def _on_attempt(self, client: _Client, record: Record) -> None:
        self.history.record_attempt(
            client.name,
            float(record["start"]),
            float(record["end"]),
            bound=float(record["bound"]),
            outcome=str(record["outcome"]),
        )

    def _on_watchers(self, client: _Client, record: Record) -> None:
        client.watchers = (int(record["count"]), int(record["baseline"]))
        client.worker_done.set()

    def _on_release_error(self, client: _Client, record: Record) -> None:
        self.history.count("release_error")
        logger.info("%s: release error %s", client.name, record.get("error"))

    def _on_self_stop(self, client: _Client, record: Record) -> None:
        client.stopped = True
        client.self_stop.set()
        assert self.task_group is not None
        self.task_group.start_soon(
            self._resume_later, client, float(record["t"]), float(record["duration"])
        )

    def _on_closed(self, client: _Client, record: Record) -> None:
        client.closed.set()

    def _on_hello(self, client: _Client, record: Record) -> None:
        client.pid = int(record["pid"])

    # -------------------------------------------------------------- children

    async def serve_child(self, stream: anyio.abc.SocketStream) -> None:
        lines = BufferedByteReceiveStream(stream)
        client: _Client | None = None
        try:
            while True:
                record: Record = json.loads(await lines.receive_until(b"\n", 1 << 20))
                if client is None:
                    client = self.by_name[str(record["name"])]
                    client.stream = stream
                kind = record.get("type")
                if kind == "read":
                    resource, token = str(record["resource"]), int(record["token"])
                    ok, value = await self.gate.read(client.name, resource, token)
                    await client.send(
                        {"type": "reply", "id": record["id"], "ok": ok, "value": value}
                    )
                elif kind == "write":
                    resource, token = str(record["resource"]), int(record["token"])
                    value = int(record["value"])
                    ok = await self.gate.write(client.name, resource, token, value)
                    await client.send({"type": "reply", "id": record["id"], "ok": ok})
                else:
                    self.on_record(client, record)
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
            pass
        finally:
            if client is not None:
                client.stream = None
                client.closed.set()
                client.worker_done.set()

    async def run_child(self, client: _Client, config: WorkerConfig) -> None:
        log = (self.log_dir / f"{client.name}.log").open("ab")
        try:
            proc = await anyio.open_process(
                [sys.executable, "-m", "aiozklock.testing._nemesis_child", config.to_json()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        finally:
            log.close()
        client.proc = proc
        client.pid = proc.pid
        try:
            rc = await proc.wait()
        finally:
            with anyio.CancelScope(shield=True):
                await self.end_child(client)
        if rc != 0:
            when = "at the end" if self.close_clients.is_set() else "during the run"
            self.errors.append(f"{client.name} (pid {proc.pid}) exited with {rc} {when}")
        client.closed.set()
        client.worker_done.set()
        client.exited.set()

    async def diagnose(self, client: _Client) -> str:
        """What a stuck client is doing: its CPU time, and for a child its Python stacks
        (``py-spy dump``, if installed) in ``<log dir>/<name>.stack``."""
        if not client.process or client.pid is None:
            return "in this process"
        pid = client.pid
        where = _process_state(pid)
        spy = _py_spy()
        if spy is not None:
            with anyio.move_on_after(20):
                result = await anyio.run_process(
                    [spy, "dump", "--pid", str(pid), "--locals"], check=False
                )
                stack = self.log_dir / f"{client.name}.stack"
                stack.write_bytes(result.stdout + result.stderr)
                where += f", stacks in {stack}"
        return where

    async def end_child(self, client: _Client) -> None:
        proc = client.proc
        if proc is None or proc.returncode is not None:
            return
        _kill_quietly(proc.pid, signal.SIGCONT)
        proc.terminate()
        with anyio.move_on_after(5):
            await proc.wait()
            return
        _kill_quietly(proc.pid, signal.SIGCONT)
        proc.kill()
        await proc.wait()

    async def _resume_later(self, client: _Client, stopped_at: float, duration: float) -> None:
        """SIGCONT a child that stopped itself, ``duration`` after it did."""
        self.resumes.add(client)
        self.resumes_done = anyio.Event()
        try:
            await anyio.sleep(max(0.0, stopped_at + duration - time.monotonic()))
        finally:
            with anyio.CancelScope(shield=True):
                if client.pid is not None:
                    # It announced the stop just before stopping: make sure it did, or our
                    # SIGCONT could come first and leave it stopped for good.
                    await anyio.to_thread.run_sync(_wait_stopped, client.pid)
                    _kill_quietly(client.pid, signal.SIGCONT)
                end = time.monotonic()
                self.history.record_pause(client.name, stopped_at, end)
                client.stopped = False
                client.resumed.set()
                self.resumes.discard(client)
                if not self.resumes:
                    self.resumes_done.set()

    # -------------------------------------------------------------- in-process clients

    async def run_local(self, client: _Client, config: WorkerConfig) -> None:
        sink: WorkerSink = _LocalSink(self, client)
        async with recorded_client(config, sink) as zk:
            baseline = session_of(zk).watcher_count()
            try:
                await run_worker(zk, config, sink, self.stop)
                client.watchers = (session_of(zk).watcher_count(), baseline)
            except Exception as exc:
                logger.exception("%s: worker failed", client.name)
                self.errors.append(f"{client.name}: worker failed: {exc!r}")
            finally:
                client.worker_done.set()
            await self.close_clients.wait()
        client.closed.set()
        client.exited.set()


class _LocalSink:
    """An in-process worker's sink: its records and fenced reads and writes go straight to
    the nemesis (a child's come over its stream: ``serve_child``)."""

    def __init__(self, nemesis: _Nemesis, client: _Client) -> None:
        self._nemesis = nemesis
        self._client = client

    def emit(self, record: Record) -> None:
        self._nemesis.on_record(self._client, record)

    async def read(self, resource: str, token: int) -> tuple[bool, int]:
        return await self._nemesis.gate.read(self._client.name, resource, token)

    async def write(self, resource: str, token: int, value: int) -> bool:
        return await self._nemesis.gate.write(self._client.name, resource, token, value)

    async def before_write(self) -> None:
        pass
