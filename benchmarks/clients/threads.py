"""What the thread-based clients (kazoo, aiozklock.sync) share: the timed loop of the
uncontended cycle, contention of one thread per session, and the per-request loop of one
thread per lock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from benchmarks.common import Gate, Params, Result

Turn = Callable[[Callable[[], None]], None]  # take the lock (or lead), run the body, give it up


def timed_cycles(one_cycle: Callable[[], None], params: Params, gate: Gate) -> Result:
    for _ in range(params.warmup):
        one_cycle()
    gate.ready()
    latencies = []
    cpu_start = time.process_time_ns()
    wall_start = time.monotonic_ns()
    for _ in range(params.iterations):
        start = time.monotonic_ns()
        one_cycle()
        latencies.append(time.monotonic_ns() - start)
    wall = time.monotonic_ns() - wall_start
    cpu = time.process_time_ns() - cpu_start
    gate.measured()
    return {"latencies_ns": latencies, "wall_ns": wall, "cpu_ns": cpu}


def contend(loops: list[tuple[Turn, list[tuple[int, int]]]], params: Params, gate: Gate) -> int:
    """Each turn warms up (``warmup`` turns, one after the other), then after "go" one
    thread each takes turns until ``duration`` is over, appending ``(enter, exit)`` of its
    body to its list. Returns the shared counter, incremented across a ``sleep(0)`` in every
    body (a broken mutex would lose increments)."""
    for turn, _ in loops:
        for _ in range(params.warmup):
            turn(lambda: None)
    counter = 0
    go = threading.Event()
    deadline = 0

    def loop(turn: Turn, intervals: list[tuple[int, int]]) -> None:
        go.wait()
        while True:
            span: list[int] = []
            turn(partial(section, span))
            intervals.append((span[0], span[1]))
            if span[1] >= deadline:
                return

    def section(span: list[int]) -> None:
        nonlocal counter
        span.append(time.monotonic_ns())
        value = counter
        time.sleep(0)
        counter = value + 1
        span.append(time.monotonic_ns())

    threads = [threading.Thread(target=loop, args=args) for args in loops]
    for thread in threads:
        thread.start()
    try:
        gate.ready()
    finally:
        deadline = time.monotonic_ns() + int(params.duration * 1e9)
        go.set()
        for thread in threads:
            thread.join()
    gate.measured()
    return counter


def thread_requests(locks: Sequence[Any], params: Params, gate: Gate) -> Result:
    """``concurrency`` threads, each cycling on its own lock (``with lock``): each warms
    up, then all wait for "go" and loop until ``duration`` is over."""
    per_thread: list[list[int]] = [[] for _ in locks]
    warmed = threading.Barrier(len(locks) + 1)
    go = threading.Event()
    deadline = 0
    errors: list[str] = []

    def cycle_until(lock: Any, latencies: list[int]) -> None:
        for _ in range(params.warmup):
            with lock:
                time.sleep(params.hold)
        warmed.wait()
        go.wait()
        while True:
            start = time.monotonic_ns()
            with lock:
                time.sleep(params.hold)  # 0: a yield of the GIL
            end = time.monotonic_ns()
            latencies.append(end - start)
            if end >= deadline:
                return

    def loop(lock: Any, latencies: list[int]) -> None:
        try:
            cycle_until(lock, latencies)
        except BaseException as exc:
            errors.append(repr(exc))
            warmed.abort()  # the others (and the main thread) stop waiting
            raise

    threads = [
        threading.Thread(target=loop, args=args) for args in zip(locks, per_thread, strict=True)
    ]
    for thread in threads:
        thread.start()
    try:
        warmed.wait()
        gate.ready()
    finally:
        started = time.monotonic_ns()
        deadline = started + int(params.duration * 1e9)
        go.set()
        for thread in threads:
            thread.join()
    measured = time.monotonic_ns() - started
    gate.measured()
    return {
        "latencies_ns": [latency for latencies in per_thread for latency in latencies],
        "per_task": [len(latencies) for latencies in per_thread],
        "measured_ns": measured,
        "errors": len(errors),
    }
