"""redis-py's asyncio ``Lock`` (benchmark reference row, not a ZooKeeper peer).

``redis.asyncio.Redis.lock(name, timeout=10, sleep=poll, blocking=True)``: acquiring is
``SET name token NX PX 10000``, retried every ``sleep`` seconds while the key exists (a
poll: no queue, no wake-up on release); releasing is one ``EVALSHA`` of a compare-and-delete
script. ``timeout`` is the key's expiry, the same 10 s as every client's session timeout.
``hosts`` is the server's ``redis://`` URL; each session is its own ``Redis`` client (its
own connection pool). The commands a scenario sent are counted by the clients.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Coroutine
from contextlib import AsyncExitStack
from functools import partial
from typing import Any

import redis.asyncio

from benchmarks.clients.aiozklock_bench import contend
from benchmarks.common import (
    SESSION_TIMEOUT,
    Gate,
    Params,
    RequestCount,
    Result,
    per_request_cycles,
    request_paths,
    timed_async_cycles,
)

Scenario = Callable[[Params, Gate], Coroutine[Any, Any, Result]]


def make_lock(client: redis.asyncio.Redis, name: str, params: Params) -> Any:
    # thread_local=False: the token lives on the object (one object per task anyway).
    return client.lock(
        name, timeout=SESSION_TIMEOUT, sleep=params.poll, blocking=True, thread_local=False
    )


async def connect(stack: AsyncExitStack, params: Params) -> CountingRedis:
    client = CountingRedis.from_url(params.hosts)
    assert isinstance(client, CountingRedis)  # from_url builds its class
    client.requests = Counter()
    stack.push_async_callback(client.aclose)
    await client.ping()
    return client


class CountingRedis(redis.asyncio.Redis):
    """A ``Redis`` client that counts the commands it sends, by name (a script's
    ``EVALSHA`` is one command, whatever the script calls inside the server)."""

    requests: Counter[str]

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        self.requests[str(args[0]).lower()] += 1
        return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]


async def uncontended(params: Params, gate: Gate) -> Result:
    async with AsyncExitStack() as stack:
        client = await connect(stack, params)
        count = RequestCount([client], gate)
        result = await timed_async_cycles(make_lock(client, params.path, params), params, gate)
        return {**result, "requests": count.stop()}


async def contended(params: Params, gate: Gate) -> Result:
    """``sessions`` clients (each its own connection pool), one task each, on one key."""
    async with AsyncExitStack() as stack:
        clients = [await connect(stack, params) for _ in range(params.sessions)]
        count = RequestCount(clients, gate)
        # One list per session: how evenly the grants went round (fairness) is kept too.
        loops: list[tuple[Any, list[tuple[int, int]]]] = [
            (make_lock(client, params.path, params), []) for client in clients
        ]
        counter = await contend(loops, params, gate)
        return {
            "intervals": [interval for _, intervals in loops for interval in intervals],
            "per_session": [len(intervals) for _, intervals in loops],
            "counter": counter,
            "requests": count.stop(),
        }


async def requests(params: Params, gate: Gate) -> Result:
    """One client (one connection pool), ``concurrency`` tasks, each on its own key."""
    async with AsyncExitStack() as stack:
        client = await connect(stack, params)
        count = RequestCount([client], gate)
        locks = [make_lock(client, path, params) for path in request_paths(params)]
        result = await per_request_cycles(locks, params, gate)
        return {**result, "requests": count.stop()}


SCENARIOS: dict[str, Scenario] = {
    "uncontended": uncontended,
    "contended": contended,
    "requests": requests,
}


def run(scenario: str, params: Params, gate: Gate) -> Result:
    return asyncio.run(partial(SCENARIOS[scenario], params, gate)())
