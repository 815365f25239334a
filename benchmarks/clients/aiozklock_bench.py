"""aiozklock's scenarios, on asyncio or trio (``backend=``), through the public API only
(plus the wire session for the raw floor).

The uncontended and contended scenarios also run against an older aiozklock (the runner's
``--baseline-commit``), so they use only the API that has always been there; newer imports
are made inside the scenarios that need them.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Coroutine
from contextlib import AsyncExitStack
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

import aiozklock
from benchmarks.clients.aiozklock_scale import scale
from benchmarks.clients.aiozklock_traffic import busy, idle
from benchmarks.common import (
    SESSION_TIMEOUT,
    Gate,
    Params,
    Result,
    current_rss_kib,
    member_paths,
    peak_rss_kib,
    per_request_cycles,
    request_paths,
    timed_async_cycles,
)

if TYPE_CHECKING:  # only for types: a baseline commit run by the runner may lack them
    from aiozklock._wire._protocol import Created, CreateMode, Op
    from aiozklock._wire._session import Session

Scenario = Callable[[Params, Gate], Coroutine[Any, Any, Result]]


def connect(params: Params) -> aiozklock.ZooKeeperClient:
    return aiozklock.connect(params.hosts, session_timeout=SESSION_TIMEOUT)


Primitive = Any  # an aiozklock lock or election: ``async with`` it to hold it


def make_lock(zk: aiozklock.ZooKeeperClient, params: Params) -> Primitive:
    """The fair lock, or with ``fair=False`` the NonFairLock (an older aiozklock, run as the
    baseline, has no ``fair`` argument: it is only passed when asked for)."""
    return zk.lock(params.path) if params.fair else zk.lock(params.path, fair=False)


def make_election(zk: aiozklock.ZooKeeperClient, params: Params) -> Primitive:
    return zk.election(params.path)


def make_semaphore(zk: aiozklock.ZooKeeperClient, params: Params) -> Primitive:
    return zk.semaphore(params.path, params.leases)


def make_write_lock(zk: aiozklock.ZooKeeperClient, params: Params) -> Primitive:
    return zk.rw_lock(params.path).write_lock


def make_read_lock(zk: aiozklock.ZooKeeperClient, params: Params) -> Primitive:
    return zk.rw_lock(params.path).read_lock


async def cycle(lock: Primitive) -> None:
    async with lock:
        pass


async def uncontended(params: Params, gate: Gate) -> Result:
    async with connect(params) as zk:
        lock = make_lock(zk, params)
        result = await timed_async_cycles(lock, params, gate)
        confirmed = await confirmed_cycles(lock, params.iterations)
    return {**result, "confirmed_latencies_ns": confirmed, "library_file": aiozklock.__file__}


async def confirmed_cycles(lock: Primitive, iterations: int) -> list[int] | None:
    """Cycles whose release waits for the server (``release(confirm=True)``), timed after
    the main loop; None for a baseline without ``confirm``, whose release always waits."""
    if "confirm" not in inspect.signature(lock.release).parameters:
        return None
    latencies = []
    for _ in range(iterations):
        start = time.monotonic_ns()
        await lock.acquire()
        await lock.release(confirm=True)
        latencies.append(time.monotonic_ns() - start)
    return latencies


async def multilock(params: Params, gate: Gate) -> Result:
    """The uncontended cycle of one multi-lock on ``members`` paths."""
    async with connect(params) as zk:
        return await timed_async_cycles(zk.multi_lock(member_paths(params)), params, gate)


async def recipe_cycles(
    params: Params, gate: Gate, make: Callable[[aiozklock.ZooKeeperClient, Params], Primitive]
) -> Result:
    """The uncontended cycle of another recipe (a side of the read/write lock, a lease)."""
    async with connect(params) as zk:
        return await timed_async_cycles(make(zk, params), params, gate)


async def requests(params: Params, gate: Gate) -> Result:
    """One session, ``concurrency`` tasks, each cycling on its own lock path."""
    async with connect(params) as zk:
        locks = [zk.lock(path) for path in request_paths(params)]
        result = await per_request_cycles(locks, params, gate)
    return {**result, "library_file": aiozklock.__file__}


async def contended(
    params: Params,
    gate: Gate,
    make: Callable[[aiozklock.ZooKeeperClient, Params], Primitive] = make_lock,
) -> Result:
    """``sessions`` sessions, one task each, loop on one lock (or, with ``make_election``,
    campaign, lead and resign; with ``make_semaphore``, take a lease) until ``duration`` is
    over."""
    async with AsyncExitStack() as stack:
        locks = []
        for _ in range(params.sessions):
            zk = await stack.enter_async_context(connect(params))
            locks.append(make(zk, params))
        intervals: list[tuple[int, int]] = []
        counter = await contend([(lock, intervals) for lock in locks], params, gate)
    return {"intervals": intervals, "counter": counter, "library_file": aiozklock.__file__}


async def contended_shared(params: Params, gate: Gate) -> Result:
    """One session, ``sessions`` tasks, loop on its one lock object for the path until
    ``duration`` is over (they queue in the process: one node on the server at a time)."""
    async with connect(params) as zk:
        lock = make_lock(zk, params)
        intervals: list[tuple[int, int]] = []
        counter = await contend([(lock, intervals)] * params.sessions, params, gate)
    return {"intervals": intervals, "counter": counter, "library_file": aiozklock.__file__}


async def rwmix(params: Params, gate: Gate) -> Result:
    """``sessions`` reader sessions and ``writers`` writer sessions, one task each, loop on
    one read/write lock until ``duration`` is over; the sections of each side apart."""
    async with AsyncExitStack() as stack:
        reads: list[tuple[int, int]] = []
        writes: list[tuple[int, int]] = []
        loops = []
        for i in range(params.sessions + params.writers):
            zk = await stack.enter_async_context(connect(params))
            rw = zk.rw_lock(params.path)
            loops.append((rw.read_lock, reads) if i < params.sessions else (rw.write_lock, writes))
        await contend(loops, params, gate)
    return {"reads": reads, "writes": writes, "library_file": aiozklock.__file__}


async def contend(
    loops: list[tuple[Primitive, list[tuple[int, int]]]], params: Params, gate: Gate
) -> int:
    """Each primitive warms up (``warmup`` cycles, one after the other), then after "go"
    one task each loops acquire -> critical section -> release until ``duration`` is over,
    appending ``(enter, exit)`` to its list. Returns the shared counter, incremented across
    a checkpoint in every section (a broken mutex would lose increments)."""
    for lock, _ in loops:
        for _ in range(params.warmup):
            await cycle(lock)
    await gate.aready()
    counter = 0
    deadline = time.monotonic_ns() + int(params.duration * 1e9)

    async def loop(lock: Primitive, intervals: list[tuple[int, int]]) -> None:
        nonlocal counter
        while True:
            async with lock:
                enter = time.monotonic_ns()
                value = counter
                await anyio.lowlevel.checkpoint()
                counter = value + 1
                exit_ = time.monotonic_ns()
            intervals.append((enter, exit_))
            if exit_ >= deadline:
                return

    async with anyio.create_task_group() as tasks:
        for lock, intervals in loops:
            tasks.start_soon(loop, lock, intervals)
    gate.measured()
    return counter


async def many(params: Params, gate: Gate) -> Result:
    """``locks`` distinct locks acquired at once by one session (one task per lock, as the
    lock is owned by a task), then all released."""
    async with connect(params) as zk:
        await cycle(zk.lock(f"{params.path}/warm-up"))
        locks = [zk.lock(f"{params.path}/lock-{i}") for i in range(params.locks)]
        await gate.aready()
        rss_before = current_rss_kib()
        held = 0
        all_held = anyio.Event()
        release_now = anyio.Event()

        async def hold(lock: Primitive) -> None:
            nonlocal held
            await lock.acquire()
            held += 1
            if held == len(locks):
                all_held.set()
            await release_now.wait()
            await lock.release()

        start = time.monotonic_ns()
        async with anyio.create_task_group() as tasks:
            for lock in locks:
                tasks.start_soon(hold, lock)
            await all_held.wait()
            acquired = time.monotonic_ns()
            release_now.set()
        released = time.monotonic_ns()
        gate.measured()
    return {
        "acquire_ns": acquired - start,
        "release_ns": released - acquired,
        "held": held,
        "rss_before_kib": rss_before,
        "peak_rss_kib": peak_rss_kib(),
    }


def wire_ops(
    zk: aiozklock.ZooKeeperClient, parent: str, mode: CreateMode
) -> tuple[Callable[[str], Op[Created]], Callable[[str], Op[None]]]:
    """Builders of raw create (in ``mode``) and delete requests for ``parent/<name>``, on
    the client's own wire session (no recipe)."""
    from aiozklock._wire._protocol import create_op, delete_op
    from aiozklock.testing import session_of

    session = session_of(zk)

    def create(name: str) -> Op[Created]:
        server_path = session.server_path(f"{parent}/{name}")
        return create_op(server_path, b"", mode, session.client_path)

    def delete(name: str) -> Op[None]:
        return delete_op(session.server_path(f"{parent}/{name}"))

    return create, delete


async def floor(params: Params, gate: Gate) -> Result:
    """The raw floor from our own wire: create+delete of a persistent node, no recipe."""
    from aiozklock._wire._protocol import CreateMode
    from aiozklock.testing import session_of

    async with connect(params) as zk:
        session = session_of(zk)
        create, delete = wire_ops(zk, params.path, CreateMode.PERSISTENT)
        for i in range(params.warmup):
            await session.call(create(f"w{i}"))
            await session.call(delete(f"w{i}"))
        await gate.aready()
        latencies = []
        for i in range(params.pairs):
            start = time.monotonic_ns()
            await session.call(create(f"n{i}"))
            await session.call(delete(f"n{i}"))
            latencies.append(time.monotonic_ns() - start)
        errors = 0
        start = time.monotonic_ns()
        for first in range(0, params.pairs, params.batch):
            names = [f"p{i}" for i in range(first, min(first + params.batch, params.pairs))]
            results = await session.pipeline([create(name) for name in names])
            results += await session.pipeline([delete(name) for name in names])
            errors += sum(isinstance(result, BaseException) for result in results)
        wall = time.monotonic_ns() - start
        true_latencies, true_cpu = await true_cycles(zk, params)
        gate.measured()
    return {
        "pair_latencies_ns": latencies,
        "true_latencies_ns": true_latencies,
        "true_cpu_ns": true_cpu,
        "pipelined_pairs": params.pairs,
        "pipelined_ns": wall,
        "errors": errors,
    }


async def true_cycles(zk: aiozklock.ZooKeeperClient, params: Params) -> tuple[list[int], int]:
    """The true floor of an uncontended cycle: what a correct lock cycle cannot do without,
    on our own wire: a create (ephemeral) awaited, then its delete written (its own
    transaction) and not awaited, as a release returns; the next create's reply comes after
    the delete's (ZooKeeper answers a session in order). One cycle per latency; and the
    process's CPU time over them (the least client CPU a correct cycle costs on our wire)."""
    from aiozklock._wire._protocol import CreateMode
    from aiozklock.testing import session_of

    session = session_of(zk)
    create, delete = wire_ops(zk, params.path, CreateMode.EPHEMERAL)
    latencies = []
    cpu_start = time.process_time_ns()
    for _ in range(params.pairs):
        start = time.monotonic_ns()
        await session.call(create("t"))
        write_unawaited(session, delete("t"))
        latencies.append(time.monotonic_ns() - start)
    cpu = time.process_time_ns() - cpu_start
    await session.call(create("t-end"))  # every delete applied (in order) before we go
    await session.call(delete("t-end"))
    return latencies, cpu


def write_unawaited(session: Session, op: Op[None]) -> None:
    """Write ``op`` now, its reply awaited by nobody: a release's delete, as the true floor
    counts it (here and in ``benchmarks/cycle_cost.py``)."""
    session.send((op,), generation=session.generation, on_done=_ignore)


def _ignore(result: object, error: BaseException | None) -> None:
    """A true-floor delete's reply: a failure shows in the next create (NodeExists)."""


class RawPair:
    """The per-request floor's stand-in for a lock: entering creates an ephemeral node,
    leaving writes nothing; the delete goes with the next create, in one transaction (one
    write on the server, one round trip per cycle: the least a lock cycle can cost)."""

    def __init__(self, session: Session, server_path: str) -> None:
        from aiozklock._wire._protocol import (
            CreateMode,
            MultiCreate,
            MultiDelete,
            create_op,
            delete_op,
            multi_op,
        )

        mode, strip = CreateMode.EPHEMERAL, session.client_path
        self._session = session
        self._create = create_op(server_path, b"", mode, strip)
        self._replace = multi_op(
            [MultiDelete(server_path), MultiCreate(server_path, b"", mode)], strip
        )
        self._delete = delete_op(server_path)
        self._pending_delete = False

    async def __aenter__(self) -> None:
        op: Op[Any] = self._replace if self._pending_delete else self._create
        self._pending_delete = False
        result = await self._session.call(op)
        if getattr(result, "ok", True) is False:
            raise RuntimeError(f"the floor's transaction failed: {result}")

    async def __aexit__(self, *exc_info: object) -> None:
        self._pending_delete = True

    async def flush(self) -> None:
        if self._pending_delete:
            self._pending_delete = False
            await self._session.call(self._delete)


class TruePair:
    """The true floor's stand-in for a lock: entering creates an ephemeral node (awaited),
    leaving writes its delete, its own transaction, without awaiting the reply: what a
    correct cycle costs (the release on the wire when it returns), less the listing."""

    def __init__(self, session: Session, server_path: str) -> None:
        from aiozklock._wire._protocol import CreateMode, create_op, delete_op

        self._session = session
        self._create = create_op(server_path, b"", CreateMode.EPHEMERAL, session.client_path)
        self._delete = delete_op(server_path)

    async def __aenter__(self) -> None:
        await self._session.call(self._create)

    async def __aexit__(self, *exc_info: object) -> None:
        session = self._session
        session.send((self._delete,), generation=session.generation, on_done=_ignore)

    async def flush(self) -> None:
        await self._session.call(self._create)  # ordered after the last delete
        await self._session.call(self._delete)


async def request_floor(params: Params, gate: Gate, pair: type[Any] | None = None) -> Result:
    """The per-request scenario with each lock replaced by a bare create (ephemeral) of
    the task's node, its delete in one transaction with the next create: ``concurrency``
    tasks in flight on one session, no recipe."""
    from aiozklock.testing import session_of

    async with connect(params) as zk:
        await zk.ensure_path(params.path)
        session = session_of(zk)
        make = RawPair if pair is None else pair
        pairs = [
            make(session, session.server_path(f"{params.path}/{i}"))
            for i in range(params.concurrency)
        ]
        result = await per_request_cycles(pairs, params, gate)
        for pair in pairs:  # the last deletes, after the measurement
            await pair.flush()
    return result


SCENARIOS: dict[str, Scenario] = {
    "uncontended": uncontended,
    "contended": contended,
    "contended_shared": contended_shared,
    "multilock": multilock,
    "election": partial(contended, make=make_election),
    "rw_write": partial(recipe_cycles, make=make_write_lock),
    "rw_read": partial(recipe_cycles, make=make_read_lock),
    "rwmix": rwmix,
    "semaphore_cycle": partial(recipe_cycles, make=make_semaphore),
    "semaphore": partial(contended, make=make_semaphore),
    "many": many,
    "floor": floor,
    "requests": requests,
    "request_floor": request_floor,
    "request_truefloor": partial(request_floor, pair=TruePair),
    "scale": scale,
    "idle": idle,
    "busy": busy,
}


def run(scenario: str, params: Params, gate: Gate) -> Result:
    return anyio.run(partial(SCENARIOS[scenario], params, gate), backend=params.backend)
