"""aiozklock's scale scenario: ``locks`` distinct locks held at once by one session.

Not one task per lock (as the "1,000 distinct locks" row does, for every client): a fixed
number of tasks (``threads``, 100 by default) each acquire ``locks / threads`` locks one
after the other and hold them in an ``AsyncExitStack``, so that the tasks' own memory is
small and the same at every size; the RSS growth per lock is then the library's cost of a
held lock (the lock object, its handle, its registry entries, its node's bookkeeping).

The lock paths are spread over parents of 100 (``{path}/p<i // 100>/l<i % 100>``), so that
no listing of a parent grows with the number of locks.

Run directly, it prints where the memory of the held locks goes (``tracemalloc``, grouped
by traceback) and the sizes of one lock's objects:

    PYTHONPATH=. python -m benchmarks.clients.aiozklock_scale HOST:PORT 10000
"""

from __future__ import annotations

import gc
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import anyio

import aiozklock
from benchmarks.common import SESSION_TIMEOUT, Gate, Params, Result, current_rss_kib

#: Lock paths per parent node.
PER_PARENT = 100


def lock_path(params: Params, index: int) -> str:
    return f"{params.path}/p{index // PER_PARENT}/l{index % PER_PARENT}"


async def hold_all(
    zk: aiozklock.ZooKeeperClient,
    params: Params,
    while_held: Callable[[], Awaitable[None]],
    before: Callable[[], Awaitable[None]] | None = None,
) -> tuple[int, int, int]:
    """Acquire ``locks`` locks with ``threads`` tasks (task ``t`` takes every lock ``i``
    with ``i % threads == t``), call ``while_held`` once all are held, then release all.
    ``before`` is called once every task exists (with its exit stack) and waits to begin,
    so that a measurement there leaves the tasks' own memory out. Returns (locks held at
    once, acquire ns, release ns); the time of ``before`` and ``while_held`` is in
    neither."""
    tasks = max(1, min(params.threads, params.locks))
    held = started = 0
    all_started, go = anyio.Event(), anyio.Event()
    all_held = anyio.Event()
    release_now = anyio.Event()

    async def holder(first: int) -> None:
        nonlocal held, started
        async with AsyncExitStack() as stack:
            started += 1
            if started == tasks:
                all_started.set()
            await go.wait()
            for index in range(first, params.locks, tasks):
                await stack.enter_async_context(zk.lock(lock_path(params, index)))
                held += 1
            if held == params.locks:
                all_held.set()
            await release_now.wait()

    async with anyio.create_task_group() as group:
        for first in range(tasks):
            group.start_soon(holder, first)
        await all_started.wait()
        if before is not None:
            await before()
        start = time.monotonic_ns()
        go.set()
        await all_held.wait()
        acquired = time.monotonic_ns()
        count = held
        await while_held()
        releasing = time.monotonic_ns()
        release_now.set()
    released = time.monotonic_ns()
    return count, acquired - start, released - releasing


def settled_rss_kib() -> int:
    """The RSS once the garbage collector has run (so that it counts what is reachable)."""
    gc.collect()
    return current_rss_kib()


async def scale(params: Params, gate: Gate) -> Result:
    """RSS before (connected, one lock cycle done, the tasks started; collected), while all
    ``locks`` are held (collected), and after all are released; the time to acquire and to
    release them."""
    async with aiozklock.connect(params.hosts, session_timeout=SESSION_TIMEOUT) as zk:
        async with zk.lock(f"{params.path}/warm-up"):
            pass
        await gate.aready()
        rss: dict[str, int] = {}

        async def start() -> None:  # the tasks exist: their memory is not the locks'
            rss["before"] = settled_rss_kib()

        async def probe() -> None:
            rss["held"] = settled_rss_kib()

        held, acquire_ns, release_ns = await hold_all(zk, params, probe, start)
        rss_before = rss["before"]
        rss_after = settled_rss_kib()
        gate.measured()
    return {
        "held": held,
        "acquire_ns": acquire_ns,
        "release_ns": release_ns,
        "rss_before_kib": rss_before,
        "rss_held_kib": rss["held"],
        "rss_after_kib": rss_after,
        "library_file": aiozklock.__file__,
    }


async def breakdown(hosts: str, locks: int, path: str, top: int = 15) -> str:
    """Where the memory of ``locks`` held locks goes: tracemalloc's growth grouped by
    traceback (top ``top``), and the shallow sizes of one held lock's objects."""
    params = Params(hosts=hosts, path=path, locks=locks)
    lines: list[str] = []
    async with aiozklock.connect(hosts, session_timeout=SESSION_TIMEOUT) as zk:
        async with zk.lock(f"{path}/warm-up"):
            pass
        tracemalloc.start(10)
        snapshots: list[tracemalloc.Snapshot] = []

        async def start() -> None:
            gc.collect()
            snapshots.append(tracemalloc.take_snapshot())

        async def probe() -> None:
            gc.collect()
            after = tracemalloc.take_snapshot()
            lines.extend(_top_growth(snapshots[0], after, locks, top))
            lines.extend(_one_lock_sizes(zk, lock_path(params, 0)))

        await hold_all(zk, params, probe, start)
        tracemalloc.stop()
    return "\n".join(lines)


def _top_growth(
    before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, locks: int, top: int
) -> list[str]:
    """The growth per lock by allocating line, then by traceback (most recent call first,
    the frames of aiozklock only)."""
    by_line = after.compare_to(before, "lineno")
    total = sum(stat.size_diff for stat in by_line)
    lines = [
        f"tracemalloc growth while {locks:,} locks are held: {total / locks:,.0f} B per lock",
        "",
        "by allocating line:",
    ]
    for stat in by_line[:top]:
        frame = stat.traceback[0]
        lines.append(
            f"{stat.size_diff / locks:8.0f} B/lock {stat.count_diff / locks:6.2f} blocks/lock  "
            f"{_short(frame.filename)}:{frame.lineno}"
        )
    lines += ["", "by traceback (aiozklock's frames, most recent first):"]
    for stat in after.compare_to(before, "traceback")[:top]:
        frames = [
            f"{_short(frame.filename)}:{frame.lineno}"
            for frame in reversed(stat.traceback)
            if "/aiozklock/" in frame.filename
        ][:5]
        lines.append(
            f"{stat.size_diff / locks:8.0f} B/lock {stat.count_diff / locks:6.2f} blocks/lock  "
            + " <- ".join(frames or [str(stat.traceback[-1])])
        )
    return lines


def _short(filename: str) -> str:
    return filename.rsplit("/aiozklock/", 1)[-1].rsplit("/site-packages/", 1)[-1]


def _one_lock_sizes(zk: aiozklock.ZooKeeperClient, path: str) -> list[str]:
    """``sys.getsizeof`` of a held lock and of what it refers to directly (shallow)."""
    lock: Any = zk.lock(path)
    lines = [f"one held lock ({path}): sys.getsizeof, shallow"]
    lines.append(f"  {type(lock).__name__}: {sys.getsizeof(lock)} B")
    names = set(getattr(lock, "__dict__", {}))
    for cls in type(lock).__mro__:
        names.update(getattr(cls, "__slots__", ()))
    for name in sorted(names):
        if hasattr(lock, name):
            value = getattr(lock, name)
            lines.append(f"  .{name} ({type(value).__name__}): {sys.getsizeof(value)} B")
    return lines


def main(argv: list[str]) -> None:
    hosts, locks = argv[0], int(argv[1]) if len(argv) > 1 else 10_000
    path = f"/aiozklock-scale-breakdown-{time.time_ns()}"
    print(anyio.run(breakdown, hosts, locks, path))


if __name__ == "__main__":
    main(sys.argv[1:])
