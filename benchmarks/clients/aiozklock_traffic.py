"""aiozklock's background traffic (``benchmarks/probe_traffic.py`` counts it on the wire):
``sessions`` sessions of ``session_timeout`` seconds, idle or each cycling its own lock,
for ``duration`` seconds after "go". Public API only: an older aiozklock (the runner's
``--baseline-commit``) runs them too.
"""

from __future__ import annotations

import time
from contextlib import AsyncExitStack
from typing import Any

import anyio

import aiozklock
from benchmarks.common import Gate, Params, Result

#: Seconds between the last connect and "ready": what a session sends once, at connect
#: (a read of /zookeeper/config, a 'conf' four-letter word), is answered before counting.
SETTLE = 1.0


async def _sessions(stack: AsyncExitStack, params: Params) -> list[aiozklock.ZooKeeperClient]:
    return [
        await stack.enter_async_context(
            aiozklock.connect(params.hosts, session_timeout=params.session_timeout)
        )
        for _ in range(params.sessions)
    ]


async def idle(params: Params, gate: Gate) -> Result:
    """Connected sessions that send nothing of their own."""
    async with AsyncExitStack() as stack:
        clients = await _sessions(stack, params)
        await anyio.sleep(SETTLE)
        await gate.aready()
        start = time.monotonic_ns()
        await anyio.sleep(params.duration)
        window = time.monotonic_ns() - start
        gate.measured()
        timeouts = [zk.negotiated_timeout for zk in clients]
    return {"window_ns": window, "timeouts": timeouts, "library_file": aiozklock.__file__}


async def busy(params: Params, gate: Gate) -> Result:
    """Each session cycles its own lock (``{path}/<i>``) without pause, from before "ready"
    until after the window: its cycles in the window are counted."""
    cycles = [0] * params.sessions

    async def cycle(lock: Any, index: int) -> None:
        while True:
            async with lock:
                pass
            cycles[index] += 1

    async with AsyncExitStack() as stack:
        clients = await _sessions(stack, params)
        async with anyio.create_task_group() as tasks:
            for i, zk in enumerate(clients):
                tasks.start_soon(cycle, zk.lock(f"{params.path}/{i}"), i)
            await anyio.sleep(SETTLE)
            await gate.aready()
            start, before = time.monotonic_ns(), sum(cycles)
            await anyio.sleep(params.duration)
            window, done = time.monotonic_ns() - start, sum(cycles) - before
            gate.measured()
            tasks.cancel_scope.cancel()
        timeouts = [zk.negotiated_timeout for zk in clients]
    return {
        "window_ns": window,
        "cycles": done,
        "timeouts": timeouts,
        "library_file": aiozklock.__file__,
    }
