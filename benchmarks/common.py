"""What every benchmark worker shares: its parameters, the ready/go gate, and memory probes.

A worker runs one scenario of one client library in its own process. The protocol, shared
with the Java driver (``curator/CuratorBench.java``): after its setup (connect, warm-up) the
worker prints ``{"event": "ready"}``, waits for one line on stdin, measures, prints
``{"event": "measured"}`` (before any teardown traffic: the runner reads the wire counts
then), and finally ``{"event": "result", ...}`` as one JSON line. Every time is
``time.monotonic_ns()`` (CLOCK_MONOTONIC, like Java's ``System.nanoTime()`` on Linux), so
the critical sections of several processes can be merged on one time line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
import anyio.lowlevel

#: The same session timeout for every client (seconds).
SESSION_TIMEOUT = 10.0

Result = dict[str, Any]


@dataclass(frozen=True)
class Params:
    """A scenario's parameters, passed on the command line as ``key=value`` words."""

    hosts: str
    path: str  # the lock path, or the parent of the scenario's nodes
    warmup: int = 0  # uncontended cycles (or create+delete pairs) before "ready"
    iterations: int = 0  # measured uncontended cycles
    sessions: int = 1  # contended: sessions in this process, one task/thread each (rwmix: readers)
    writers: int = 1  # rwmix: writer sessions beside the ``sessions`` readers
    leases: int = 5  # semaphore: max_leases
    duration: float = 0.0  # contended: seconds of contention after "go"
    locks: int = 0  # many: distinct locks held at once
    threads: int = 100  # many, kazoo: threads acquiring (its locks are not thread-bound)
    pairs: int = 0  # floor: create+delete pairs
    batch: int = 100  # floor: pairs in flight at once when pipelined
    backend: str = "asyncio"  # aiozklock: the anyio backend
    fair: bool = True  # aiozklock: False takes zk.lock(path, fair=False) (NonFairLock)
    members: int = 3  # multilock: member paths {path}/m0, {path}/m1, ...
    concurrency: int = 10  # requests: tasks (threads) in one session, each on its own path
    hold: float = 0.0  # requests: seconds a lock is held (0: one yield to the scheduler)
    poll: float = 0.1  # redis: redis-py Lock's sleep between tries when taken (its default)
    profile: bool = False  # profile the measured part with cProfile (top functions in result)
    session_timeout: float = SESSION_TIMEOUT  # aiozklock's idle and busy (traffic) scenarios

    def to_words(self) -> list[str]:
        return [f"{field.name}={getattr(self, field.name)}" for field in dataclasses.fields(self)]

    @classmethod
    def from_words(cls, words: list[str]) -> Params:
        types = {field.name: field.type for field in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for word in words:
            name, sep, value = word.partition("=")
            if not sep or name not in types:
                raise SystemExit(f"unknown parameter {word!r}; known: {', '.join(types)}")
            kind = types[name]
            if kind == "bool":
                values[name] = value == "True"
            elif kind == "int":
                values[name] = int(value)
            elif kind == "float":
                values[name] = float(value)
            else:
                values[name] = value
        return cls(**values)


class Gate:
    """The ready/go handshake with the runner. ``Gate(None)`` never waits (for tests)."""

    def __init__(self, stdin: TextIO | None, stdout: TextIO | None = None) -> None:
        self._stdin = stdin
        self._stdout = stdout
        self.on_go: list[Any] = []  # callbacks run right after "go" (e.g. start a profiler)

    def ready(self) -> None:
        """Block until the runner says go (threaded clients: their threads keep pinging)."""
        self._announce()
        if self._stdin is not None and not self._stdin.readline():
            raise SystemExit("stdin closed before 'go'")
        self._went()

    async def aready(self) -> None:
        """Wait for go in a thread, so that the event loop keeps the sessions alive."""
        self._announce()
        if self._stdin is not None:
            stdin = self._stdin
            if not await anyio.to_thread.run_sync(stdin.readline):
                raise SystemExit("stdin closed before 'go'")
        self._went()

    def measured(self) -> None:
        """The measured part is over (teardown, e.g. closing sessions, comes after)."""
        if self._stdout is not None:
            emit(self._stdout, {"event": "measured"})

    def _announce(self) -> None:
        if self._stdout is not None:
            emit(self._stdout, {"event": "ready"})

    def _went(self) -> None:
        for callback in self.on_go:
            callback()


def member_paths(params: Params) -> list[str]:
    """The member paths of the multi-lock scenario, in the order every client takes them."""
    return [f"{params.path}/m{i}" for i in range(params.members)]


def request_paths(params: Params) -> list[str]:
    """The lock paths of the per-request scenario: one per task, ``{path}/<i>``."""
    return [f"{params.path}/{i}" for i in range(params.concurrency)]


def emit(stream: TextIO, message: Result) -> None:
    stream.write(json.dumps(message) + "\n")
    stream.flush()


def current_rss_kib() -> int:
    with open("/proc/self/statm") as statm:
        resident_pages = int(statm.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") // 1024


def peak_rss_kib() -> int:
    """The process's peak resident set size (``ru_maxrss`` is in KiB on Linux).

    The kernel updates ``ru_maxrss`` lazily, so it can lag the current RSS: the peak is at
    least the current value."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return max(peak // 1024 if sys.platform == "darwin" else peak, current_rss_kib())


async def timed_async_cycles(lock: Any, params: Params, gate: Gate) -> Result:
    """The uncontended measurement of every asyncio/anyio client, one code for all:
    ``warmup`` cycles, then ``iterations`` timed ``async with lock: pass`` cycles."""
    for _ in range(params.warmup):
        async with lock:
            pass
    await gate.aready()
    latencies = []
    cpu_start = time.process_time_ns()
    wall_start = time.monotonic_ns()
    for _ in range(params.iterations):
        start = time.monotonic_ns()
        async with lock:
            pass
        latencies.append(time.monotonic_ns() - start)
    wall = time.monotonic_ns() - wall_start
    cpu = time.process_time_ns() - cpu_start
    gate.measured()
    return {"latencies_ns": latencies, "wall_ns": wall, "cpu_ns": cpu}


async def per_request_cycles(locks: list[Any], params: Params, gate: Gate) -> Result:
    """The per-request measurement of every async client (anyio, so on asyncio or trio):
    one task per lock, each ``warmup`` cycles, then "ready"; after "go", each loops
    acquire -> hold -> release on its own lock until ``duration`` is over."""

    async def hold() -> None:
        if params.hold > 0:
            await anyio.sleep(params.hold)
        else:
            await anyio.lowlevel.checkpoint()

    async def warm(lock: Any) -> None:
        for _ in range(params.warmup):
            async with lock:
                await hold()

    async def timed(lock: Any, latencies: list[int], deadline: int) -> None:
        while True:
            start = time.monotonic_ns()
            async with lock:
                await hold()
            end = time.monotonic_ns()
            latencies.append(end - start)
            if end >= deadline:
                return

    async with anyio.create_task_group() as tasks:
        for lock in locks:
            tasks.start_soon(warm, lock)
    await gate.aready()
    per_task: list[list[int]] = [[] for _ in locks]
    go = time.monotonic_ns()
    async with anyio.create_task_group() as tasks:
        for lock, latencies in zip(locks, per_task, strict=True):
            tasks.start_soon(timed, lock, latencies, go + int(params.duration * 1e9))
    last_end = time.monotonic_ns()
    gate.measured()
    return {
        "latencies_ns": [latency for latencies in per_task for latency in latencies],
        "per_task": [len(latencies) for latencies in per_task],
        "measured_ns": last_end - go,
    }


@contextlib.contextmanager
def zookeeper(hosts: str | None) -> Iterator[str]:
    """``hosts`` if given, else a standalone server started for the run."""
    if hosts:
        yield hosts
        return
    from aiozklock.testing import ZooKeeperCluster

    cluster = ZooKeeperCluster(1).start()
    try:
        yield cluster.hosts
    finally:
        cluster.close()


class RequestCount:
    """The requests that ``clients`` (each counting its own in a ``requests`` Counter, by
    method or command) sent between "go" and :meth:`stop`."""

    def __init__(self, clients: Sequence[Any], gate: Gate) -> None:
        self._clients = list(clients)
        self._at_go: Counter[str] = Counter()
        gate.on_go.append(self._start)

    def _total(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for client in self._clients:
            total.update(client.requests)
        return total

    def _start(self) -> None:
        self._at_go = self._total()

    def stop(self) -> dict[str, int]:
        counts = self._total()
        counts.subtract(self._at_go)
        return {name: n for name, n in counts.items() if n}
