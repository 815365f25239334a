"""kazoo as a peer in the interoperability tests (the protocol of ``peers.py``).

Usage: ``python -m tests.interop.kazoo_peer HOSTS PATH RECIPE THREADS SECONDS HOLD_MICROS
[PATTERN | MAX_LEASES]``, RECIPE being ``lock`` (``Lock``, told of ``PATTERN`` through
``extra_lock_patterns`` if given), ``election`` (``Election``, which takes no patterns) or
``semaphore`` (``Semaphore`` with ``MAX_LEASES``).
Each thread has its own recipe object, as kazoo's are not shared between threads.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient


def hold(micros: int, intervals: list[tuple[int, int]]) -> None:
    """The critical section: a busy wait, timed on the shared monotonic clock."""
    start = time.monotonic_ns()
    while time.monotonic_ns() - start < micros * 1000:
        pass
    intervals.append((start, time.monotonic_ns()))


def worker(
    client: KazooClient, args: list[str], until: float, intervals: list[tuple[int, int]]
) -> Callable[[], None]:
    path, recipe, micros = args[1], args[2], int(args[5])
    patterns = args[6:]

    def run() -> None:
        if recipe == "election":
            election = client.Election(path, "kazoo")
            while time.monotonic() < until:
                election.run(hold, micros, intervals)
            return
        if recipe == "semaphore":
            semaphore = client.Semaphore(path, "kazoo", max_leases=int(patterns[0]))
            while time.monotonic() < until:
                with semaphore:
                    hold(micros, intervals)
            return
        lock = client.Lock(path, "kazoo", extra_lock_patterns=patterns)
        while time.monotonic() < until:
            with lock:
                hold(micros, intervals)

    return run


def main(args: list[str]) -> None:
    client = KazooClient(hosts=args[0], timeout=10.0)
    client.start(timeout=20)
    print("ready", flush=True)
    sys.stdin.readline()
    until = time.monotonic() + float(args[4])
    intervals: list[tuple[int, int]] = []
    threads = [
        threading.Thread(target=worker(client, args, until, intervals)) for _ in range(int(args[3]))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    client.stop()
    client.close()
    print(json.dumps({"intervals": intervals}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
