"""kazoo's scenarios: a blocking client with its own threads, so concurrency is threads."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from functools import partial
from typing import Any

from kazoo.client import KazooClient  # type: ignore[import-untyped]
from kazoo.recipe.lock import Lock  # type: ignore[import-untyped]

from benchmarks.clients.threads import Turn, contend, thread_requests, timed_cycles
from benchmarks.common import (
    SESSION_TIMEOUT,
    Gate,
    Params,
    Result,
    current_rss_kib,
    member_paths,
    peak_rss_kib,
    request_paths,
)

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
        return timed_cycles(partial(cycle, client.Lock(params.path)), params, gate)


def recipe_cycles(params: Params, gate: Gate, make: Callable[[KazooClient, Params], Any]) -> Result:
    """The uncontended cycle of another recipe (a side of the read/write lock, a lease)."""
    with connect(params) as client:
        return timed_cycles(partial(cycle, make(client, params)), params, gate)


def write_lock(client: KazooClient, params: Params) -> Any:
    return client.WriteLock(params.path)


def read_lock(client: KazooClient, params: Params) -> Any:
    return client.ReadLock(params.path)


def semaphore(client: KazooClient, params: Params) -> Any:
    return client.Semaphore(params.path, max_leases=params.leases)


def multilock(params: Params, gate: Gate) -> Result:
    """kazoo has no multi-lock: one Lock per member, acquired in order, released in reverse."""
    with connect(params) as client:
        locks = [client.Lock(path) for path in member_paths(params)]

        def one_cycle() -> None:
            with ExitStack() as held:
                for lock in locks:
                    held.enter_context(lock)

        return timed_cycles(one_cycle, params, gate)


def recipe_turn(recipe: Any) -> Turn:
    """A turn of a recipe used as a context manager (a lock, a semaphore)."""

    def turn(body: Callable[[], None]) -> None:
        with recipe:
            body()

    return turn


def lock_turn(client: KazooClient, params: Params) -> Turn:
    return recipe_turn(client.Lock(params.path))


def semaphore_turn(client: KazooClient, params: Params) -> Turn:
    return recipe_turn(semaphore(client, params))


def election_turn(client: KazooClient, params: Params) -> Turn:
    """``Election.run(func)``: campaign, run ``func`` as leader, then leave the election."""
    election = client.Election(params.path)
    return election.run  # type: ignore[no-any-return]


def contended(
    params: Params,
    gate: Gate,
    make: Callable[[KazooClient, Params], Turn] = lock_turn,
) -> Result:
    with ExitStack() as stack:
        turns = [make(stack.enter_context(connect(params)), params) for _ in range(params.sessions)]
        intervals: list[tuple[int, int]] = []
        counter = contend([(turn, intervals) for turn in turns], params, gate)
    return {"intervals": intervals, "counter": counter}


def contended_shared(params: Params, gate: Gate) -> Result:
    """One ``KazooClient`` (one session), ``sessions`` threads, each with its own ``Lock``
    on the path (kazoo's ``Lock`` belongs to no thread: one object per contender)."""
    with connect(params) as client:
        turns = [lock_turn(client, params) for _ in range(params.sessions)]
        intervals: list[tuple[int, int]] = []
        counter = contend([(turn, intervals) for turn in turns], params, gate)
    return {"intervals": intervals, "counter": counter}


def rwmix(params: Params, gate: Gate) -> Result:
    """``sessions`` reader sessions and ``writers`` writer sessions, one thread each, on
    one path: ``ReadLock`` and ``WriteLock``; the sections of each side apart."""
    with ExitStack() as stack:
        reads: list[tuple[int, int]] = []
        writes: list[tuple[int, int]] = []
        loops = []
        for i in range(params.sessions + params.writers):
            client = stack.enter_context(connect(params))
            if i < params.sessions:
                loops.append((recipe_turn(client.ReadLock(params.path)), reads))
            else:
                loops.append((recipe_turn(client.WriteLock(params.path)), writes))
        contend(loops, params, gate)
    return {"reads": reads, "writes": writes}


def requests(params: Params, gate: Gate) -> Result:
    """One ``KazooClient``, ``concurrency`` threads, each cycling on its own ``Lock``."""
    with connect(params) as client:
        return thread_requests([client.Lock(path) for path in request_paths(params)], params, gate)


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
    "contended_shared": contended_shared,
    "multilock": multilock,
    "election": partial(contended, make=election_turn),
    "rw_write": partial(recipe_cycles, make=write_lock),
    "rw_read": partial(recipe_cycles, make=read_lock),
    "rwmix": rwmix,
    "semaphore_cycle": partial(recipe_cycles, make=semaphore),
    "semaphore": partial(contended, make=semaphore_turn),
    "many": many,
    "floor": floor,
    "requests": requests,
}


def run(scenario: str, params: Params, gate: Gate) -> Result:
    return SCENARIOS[scenario](params, gate)
