"""aiozk's scenarios (asyncio only): ``recipes.Lock`` and, for the raw floor, the client's own
create/delete."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import aiozk

from benchmarks.common import (
    SESSION_TIMEOUT,
    Gate,
    Params,
    Result,
    current_rss_kib,
    peak_rss_kib,
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


async def contended(params: Params, gate: Gate) -> Result:
    async with AsyncExitStack() as stack:
        locks = []
        for _ in range(params.sessions):
            client = await stack.enter_async_context(connect(params))
            locks.append(client.recipes.Lock(params.path))
        for lock in locks:
            for _ in range(params.warmup):
                await cycle(lock)
        await gate.aready()
        intervals: list[tuple[int, int]] = []
        counter = 0  # a broken lock would lose increments across the sleep(0)
        deadline = time.monotonic_ns() + int(params.duration * 1e9)

        async def contend(lock: Any) -> None:
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

        await asyncio.gather(*(contend(lock) for lock in locks))
        gate.measured()
    return {"intervals": intervals, "counter": counter}


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
    "many": many,
    "floor": floor,
}


def run(scenario: str, params: Params, gate: Gate) -> Result:
    return asyncio.run(SCENARIOS[scenario](params, gate))
