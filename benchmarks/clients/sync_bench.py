"""aiozklock's synchronous face (``aiozklock.sync``): concurrency is threads, as for kazoo,
and every scenario is kazoo's shape, so that the two columns compare like for like.

- uncontended: one client, one lock object reused, ``with lock: pass`` in one thread;
- contended: ``sessions`` clients (one session each), one thread each, on one path (kazoo:
  ``sessions`` ``KazooClient``s, one thread each);
- contended_shared: one client shared by ``sessions`` threads on one path (kazoo: one
  ``KazooClient``, a ``Lock`` object per thread);
- requests: one client shared by ``concurrency`` threads, each cycling on its own path
  (kazoo: one ``KazooClient`` shared the same way).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from typing import Any

import aiozklock
import aiozklock.sync
from benchmarks.clients.threads import Turn, contend, thread_requests, timed_cycles
from benchmarks.common import SESSION_TIMEOUT, Gate, Params, Result, request_paths

Scenario = Callable[[Params, Gate], Result]
SyncClient = Any  # aiozklock.sync's client


@contextmanager
def connect(params: Params) -> Iterator[SyncClient]:
    with aiozklock.sync.connect(params.hosts, session_timeout=SESSION_TIMEOUT) as client:
        yield client


def cycle(lock: Any) -> None:
    with lock:
        pass


def uncontended(params: Params, gate: Gate) -> Result:
    with connect(params) as zk:
        lock = zk.lock(params.path)
        result = timed_cycles(partial(cycle, lock), params, gate)
        confirmed = confirmed_cycles(lock, params.iterations)
    return {**result, "confirmed_latencies_ns": confirmed, "library_file": aiozklock.__file__}


def confirmed_cycles(lock: Any, iterations: int) -> list[int] | None:
    """Cycles whose release waits for the server (``release(confirm=True)``), timed after
    the main loop, as aiozklock's async column does; None without ``confirm``."""
    if "confirm" not in inspect.signature(lock.release).parameters:
        return None
    latencies = []
    for _ in range(iterations):
        start = time.monotonic_ns()
        lock.acquire()
        lock.release(confirm=True)
        latencies.append(time.monotonic_ns() - start)
    return latencies


def lock_turn(zk: SyncClient, params: Params) -> Turn:
    lock = zk.lock(params.path)

    def turn(body: Callable[[], None]) -> None:
        with lock:
            body()

    return turn


def contended(params: Params, gate: Gate) -> Result:
    """``sessions`` clients, one thread each, loop on one lock until ``duration`` is over."""
    with ExitStack() as stack:
        turns = [
            lock_turn(stack.enter_context(connect(params)), params) for _ in range(params.sessions)
        ]
        intervals: list[tuple[int, int]] = []
        counter = contend([(turn, intervals) for turn in turns], params, gate)
    return {"intervals": intervals, "counter": counter, "library_file": aiozklock.__file__}


def contended_shared(params: Params, gate: Gate) -> Result:
    """One client (one session), ``sessions`` threads on one path: the lock is owned per
    thread, so they queue in the process on the client's one lock (one node on the server
    at a time), as a gunicorn or Celery thread pool would."""
    with connect(params) as zk:
        turns = [lock_turn(zk, params) for _ in range(params.sessions)]
        intervals: list[tuple[int, int]] = []
        counter = contend([(turn, intervals) for turn in turns], params, gate)
    return {"intervals": intervals, "counter": counter, "library_file": aiozklock.__file__}


def requests(params: Params, gate: Gate) -> Result:
    """One client, ``concurrency`` threads, each cycling on its own lock."""
    with connect(params) as zk:
        locks = [zk.lock(path) for path in request_paths(params)]
        result = thread_requests(locks, params, gate)
    return {**result, "library_file": aiozklock.__file__}


SCENARIOS: dict[str, Scenario] = {
    "uncontended": uncontended,
    "contended": contended,
    "contended_shared": contended_shared,
    "requests": requests,
}


def run(scenario: str, params: Params, gate: Gate) -> Result:
    return SCENARIOS[scenario](params, gate)
