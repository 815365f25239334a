"""aiozk's scenarios (asyncio only): ``recipes.Lock``, ``recipes.SharedLock`` (read/write)
and ``recipes.LeaderElection``, and for the raw floor the client's own create/delete. aiozk
has no semaphore that waits (its ``Lease`` returns False when full), so no semaphore here."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import Any

import aiozk

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

Scenario = Callable[[Params, Gate], Coroutine[Any, Any, Result]]


@asynccontextmanager
async def connect(params: Params) -> AsyncIterator[Any]:
    client = aiozk.ZKClient(params.hosts, session_timeout=SESSION_TIMEOUT)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def cycle(lock: Any) -> None:
    async with lock:
        pass


async def uncontended(params: Params, gate: Gate) -> Result:
    async with connect(params) as client:
        return await timed_async_cycles(client.recipes.Lock(params.path), params, gate)


class InOrder:
    """aiozk has no multi-lock: its Locks acquired in order, released in reverse."""

    def __init__(self, locks: list[Any]) -> None:
        self._locks = locks
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> None:
        async with AsyncExitStack() as stack:
            for lock in self._locks:
                await stack.enter_async_context(lock)
            self._stack = stack.pop_all()

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stack.aclose()


class Campaign:
    """aiozk's ``LeaderElection`` as a scope: volunteer, wait for leadership, resign. One
    object per campaign: after a resign, an old object's leadership future is already done,
    so waiting on it again would return at once without being leader."""

    def __init__(self, client: Any, params: Params) -> None:
        self._client = client
        self._path = params.path
        self._election: Any = None

    async def __aenter__(self) -> None:
        self._election = self._client.recipes.LeaderElection(self._path)
        await self._election.volunteer()
        await self._election.wait_for_leadership()

    async def __aexit__(self, *exc_info: object) -> None:
        await self._election.resign()


async def rw_cycles(params: Params, gate: Gate, side: str) -> Result:
    """The uncontended cycle of one side of a ``SharedLock``: ``reader_lock`` or
    ``writer_lock``."""
    async with connect(params) as client:
        lock = getattr(client.recipes.SharedLock(params.path), side)
        return await timed_async_cycles(lock, params, gate)


async def multilock(params: Params, gate: Gate) -> Result:
    async with connect(params) as client:
        locks = [client.recipes.Lock(path) for path in member_paths(params)]
        return await timed_async_cycles(InOrder(locks), params, gate)


async def requests(params: Params, gate: Gate) -> Result:
    """One client, ``concurrency`` tasks, each with its own ``Lock`` on its own path."""
    async with connect(params) as client:
        locks = [client.recipes.Lock(path) for path in request_paths(params)]
        return await per_request_cycles(locks, params, gate)


def make_lock(client: Any, params: Params) -> Any:
    return client.recipes.Lock(params.path)


async def contended(
    params: Params, gate: Gate, make: Callable[[Any, Params], Any] = make_lock
) -> Result:
    async with AsyncExitStack() as stack:
        locks = []
        for _ in range(params.sessions):
            client = await stack.enter_async_context(connect(params))
            locks.append(make(client, params))
        intervals: list[tuple[int, int]] = []
        counter = await contend([(lock, intervals) for lock in locks], params, gate)
    return {"intervals": intervals, "counter": counter}


async def rwmix(params: Params, gate: Gate) -> Result:
    """``sessions`` reader sessions and ``writers`` writer sessions, one task each, on one
    ``SharedLock`` path (its ``reader_lock`` and ``writer_lock``); each side's sections apart."""
    async with AsyncExitStack() as stack:
        reads: list[tuple[int, int]] = []
        writes: list[tuple[int, int]] = []
        loops = []
        for i in range(params.sessions + params.writers):
            client = await stack.enter_async_context(connect(params))
            shared = client.recipes.SharedLock(params.path)
            if i < params.sessions:
                loops.append((shared.reader_lock, reads))
            else:
                loops.append((shared.writer_lock, writes))
        await contend(loops, params, gate)
    return {"reads": reads, "writes": writes}


async def contend(
    loops: list[tuple[Any, list[tuple[int, int]]]], params: Params, gate: Gate
) -> int:
    """Each lock warms up (``warmup`` cycles, one after the other), then after "go" one task
    each loops acquire -> critical section -> release until ``duration`` is over, appending
    ``(enter, exit)`` to its list. Returns the shared counter, incremented across a
    ``sleep(0)`` in every section (a broken mutex would lose increments)."""
    for lock, _ in loops:
        for _ in range(params.warmup):
            await cycle(lock)
    await gate.aready()
    counter = 0
    deadline = time.monotonic_ns() + int(params.duration * 1e9)

    async def loop(lock: Any, intervals: list[tuple[int, int]]) -> None:
        nonlocal counter
        while True:
            async with lock:
                enter = time.monotonic_ns()
                value = counter
                await asyncio.sleep(0)
                counter = value + 1
                exit_ = time.monotonic_ns()
            intervals.append((enter, exit_))
            if exit_ >= deadline:
                return

    await asyncio.gather(*(loop(lock, intervals) for lock, intervals in loops))
    gate.measured()
    return counter


async def many(params: Params, gate: Gate) -> Result:
    async with connect(params) as client:
        await cycle(client.recipes.Lock(f"{params.path}/warm-up"))
        locks = [client.recipes.Lock(f"{params.path}/lock-{i}") for i in range(params.locks)]
        await gate.aready()
        rss_before = current_rss_kib()
        start = time.monotonic_ns()
        await asyncio.gather(*(lock.acquire() for lock in locks))
        acquired = time.monotonic_ns()
        held = sum(lock.locked() for lock in locks)
        await asyncio.gather(*(lock.release() for lock in locks))
        released = time.monotonic_ns()
        gate.measured()
    return {
        "acquire_ns": acquired - start,
        "release_ns": released - acquired,
        "held": held,
        "rss_before_kib": rss_before,
        "peak_rss_kib": peak_rss_kib(),
    }


async def floor(params: Params, gate: Gate) -> Result:
    async with connect(params) as client:
        for i in range(params.warmup):
            await client.create(f"{params.path}/w{i}")
            await client.delete(f"{params.path}/w{i}", force=True)
        await gate.aready()
        latencies = []
        for i in range(params.pairs):
            start = time.monotonic_ns()
            await client.create(f"{params.path}/n{i}")
            await client.delete(f"{params.path}/n{i}", force=True)
            latencies.append(time.monotonic_ns() - start)
        errors = 0
        start = time.monotonic_ns()
        for first in range(0, params.pairs, params.batch):
            paths = [f"{params.path}/p{i}" for i in range(first, first + params.batch)]
            paths = paths[: params.pairs - first]
            created = await asyncio.gather(
                *(client.create(path) for path in paths), return_exceptions=True
            )
            deleted = await asyncio.gather(
                *(client.delete(path, force=True) for path in paths), return_exceptions=True
            )
            errors += sum(isinstance(result, BaseException) for result in created + deleted)
        wall = time.monotonic_ns() - start
        gate.measured()
    return {
        "pair_latencies_ns": latencies,
        "pipelined_pairs": params.pairs,
        "pipelined_ns": wall,
        "errors": errors,
    }


SCENARIOS: dict[str, Scenario] = {
    "uncontended": uncontended,
    "contended": contended,
    "multilock": multilock,
    "election": partial(contended, make=Campaign),
    "rw_write": partial(rw_cycles, side="writer_lock"),
    "rw_read": partial(rw_cycles, side="reader_lock"),
    "rwmix": rwmix,
    "many": many,
    "floor": floor,
    "requests": requests,
}


def run(scenario: str, params: Params, gate: Gate) -> Result:
    return asyncio.run(SCENARIOS[scenario](params, gate))
