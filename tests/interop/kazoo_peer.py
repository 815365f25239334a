"""kazoo as a peer in the interoperability tests (the protocol of ``peers.py``).

Usage: ``python -m tests.interop.kazoo_peer HOSTS PATH RECIPE THREADS HOLD_MICROS
[PATTERN | MAX_LEASES]``, RECIPE being ``lock`` (``Lock``, told of ``PATTERN`` through
``extra_lock_patterns`` if given), ``election`` (``Election``, which takes no patterns) or
``semaphore`` (``Semaphore`` with ``MAX_LEASES``). Its threads loop from the first line on
stdin until the next one.
Each thread has its own recipe object, as kazoo's are not shared between threads.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient

_printing = threading.Lock()


def say(line: str) -> None:
    """One whole line on stdout, at once (threads print concurrently)."""
    with _printing:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def hold(micros: int, sections: list[tuple[int, int]]) -> None:
    """The critical section: a busy wait, timed on the shared monotonic clock."""
    start = time.monotonic_ns()
    say(f"held {start}")
    while time.monotonic_ns() - start < micros * 1000:
        pass
    sections.append((start, time.monotonic_ns()))


def hold_with(recipe: Any, micros: int, sections: list[tuple[int, int]]) -> None:
    with recipe:
        hold(micros, sections)


def worker(
    client: KazooClient, args: list[str], stop: threading.Event, sections: list[tuple[int, int]]
) -> Callable[[], None]:
    path, recipe, micros = args[1], args[2], int(args[4])
    extra = args[5:]

    def make_turn() -> Callable[[], None]:
        """A turn, acquire → hold → release, on this thread's own recipe object."""
        if recipe == "election":
            election = client.Election(path, "kazoo")
            return lambda: election.run(hold, micros, sections)
        if recipe == "semaphore":
            semaphore = client.Semaphore(path, "kazoo", max_leases=int(extra[0]))
            return lambda: hold_with(semaphore, micros, sections)
        lock = client.Lock(path, "kazoo", extra_lock_patterns=extra)
        return lambda: hold_with(lock, micros, sections)

    def run() -> None:
        try:
            turn = make_turn()
            while not stop.is_set():
                turn()
                start, end = sections[-1]
                say(f"released {start} {end}")
        except Exception as error:  # the test fails on this line
            say(f"error {error!r}".replace("\n", " "))

    return run


def main(args: list[str]) -> None:
    client = KazooClient(hosts=args[0], timeout=10.0)
    client.start(timeout=20)
    say("ready")
    sys.stdin.readline()
    stop = threading.Event()
    sections: list[list[tuple[int, int]]] = [[] for _ in range(int(args[3]))]
    threads = [threading.Thread(target=worker(client, args, stop, mine)) for mine in sections]
    for thread in threads:
        thread.start()
    sys.stdin.readline()  # "stop", or the end of stdin
    stop.set()
    for thread in threads:
        thread.join()
    client.stop()
    client.close()
    say(json.dumps({"intervals": [section for mine in sections for section in mine]}))


if __name__ == "__main__":
    main(sys.argv[1:])
