"""kazoo's scenarios: a blocking client with its own threads, so concurrency is threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager

from kazoo.client import KazooClient  # type: ignore[import-untyped]
from kazoo.recipe.lock import Lock  # type: ignore[import-untyped]

from benchmarks.common import SESSION_TIMEOUT, Gate, Params, Result, current_rss_kib, peak_rss_kib

Scenario = Callable[[Params, Gate], Result]


@contextmanager
def connect(params: Params) -> Iterator[KazooClient]:
    client = KazooClient(hosts=params.hosts, timeout=SESSION_TIMEOUT)
    client.start(timeout=30)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def cycle(lock: Lock) -> None:
    with lock:
        pass


def uncontended(params: Params, gate: Gate) -> Result:
    with connect(params) as client:
        lock = client.Lock(params.path)
        for _ in range(params.warmup):
            cycle(lock)
        gate.ready()
        latencies = []
        cpu_start = time.process_time_ns()
        wall_start = time.monotonic_ns()
        for _ in range(params.iterations):
            start = time.monotonic_ns()
            with lock:
                pass
            latencies.append(time.monotonic_ns() - start)
        wall = time.monotonic_ns() - wall_start
        cpu = time.process_time_ns() - cpu_start
        gate.measured()
    return {"latencies_ns": latencies, "wall_ns": wall, "cpu_ns": cpu}


def contended(params: Params, gate: Gate) -> Result:
    with ExitStack() as stack:
        locks = [
            stack.enter_context(connect(params)).Lock(params.path) for _ in range(params.sessions)
        ]
        for lock in locks:
            for _ in range(params.warmup):
                cycle(lock)
        intervals: list[tuple[int, int]] = []
        counter = 0  # a broken lock would lose increments across the sleep(0)
        go = threading.Event()
        deadline = 0

        def contend(lock: Lock) -> None:
            nonlocal counter
            go.wait()
            while True:
                with lock:
                    enter = time.monotonic_ns()
                    value = counter
                    time.sleep(0)
                    counter = value + 1
                    exit_ = time.monotonic_ns()
                intervals.append((enter, exit_))
                if exit_ >= deadline:
                    return

        threads = [threading.Thread(target=contend, args=(lock,)) for lock in locks]
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
    return {"intervals": intervals, "counter": counter}


def many(params: Params, gate: Gate) -> Result:
    """kazoo's Lock is not owned by a thread: a pool of ``threads`` acquires them all."""
    with connect(params) as client:
        cycle(client.Lock(f"{params.path}/warm-up"))
        locks = [client.Lock(f"{params.path}/lock-{i}") for i in range(params.locks)]
        with ThreadPoolExecutor(max_workers=min(params.threads, len(locks))) as pool:
            gate.ready()
            rss_before = current_rss_kib()
            start = time.monotonic_ns()
            held = sum(pool.map(lambda lock: lock.acquire(), locks))
            acquired = time.monotonic_ns()
            list(pool.map(lambda lock: lock.release(), locks))
            released = time.monotonic_ns()
            gate.measured()
    return {
        "acquire_ns": acquired - start,
        "release_ns": released - acquired,
        "held": held,
        "rss_before_kib": rss_before,
        "peak_rss_kib": peak_rss_kib(),
    }


def floor(params: Params, gate: Gate) -> Result:
    with connect(params) as client:
        for i in range(params.warmup):
            client.create(f"{params.path}/w{i}")
            client.delete(f"{params.path}/w{i}")
        gate.ready()
        latencies = []
        for i in range(params.pairs):
            start = time.monotonic_ns()
            client.create(f"{params.path}/n{i}")
            client.delete(f"{params.path}/n{i}")
            latencies.append(time.monotonic_ns() - start)
        errors = 0
        start = time.monotonic_ns()
        for first in range(0, params.pairs, params.batch):
            paths = [f"{params.path}/p{i}" for i in range(first, first + params.batch)]
            paths = paths[: params.pairs - first]
            for results in (
                [client.create_async(path) for path in paths],
                [client.delete_async(path) for path in paths],
            ):
                for result in results:
                    result.wait()
                    errors += not result.successful()
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
    return SCENARIOS[scenario](params, gate)
