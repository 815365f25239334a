"""Child process of the lock-delay tests: a holder with ``lock_delay`` that the parent
SIGKILLs while it holds (no release, no close: the server expires its session).

It acquires, prints one JSON line (its node, with ``time.monotonic()``), then holds until
killed.

    python -m tests._delay_holder HOSTS PATH SESSION_TIMEOUT LOCK_DELAY BACKEND
"""

from __future__ import annotations

import json
import sys
import time

import anyio

import aiozklock


async def hold(hosts: str, path: str, session_timeout: float, lock_delay: float) -> None:
    async with aiozklock.connect(hosts, session_timeout=session_timeout) as zk:
        lock = zk.lock(path, identifier="delay-holder", lock_delay=lock_delay)
        async with lock:
            node = lock.statistics().node
            print(json.dumps({"event": "acquired", "t": time.monotonic(), "node": node}))
            sys.stdout.flush()
            await anyio.sleep_forever()


def main() -> None:
    hosts, path, session_timeout, lock_delay, backend = sys.argv[1:6]
    anyio.run(hold, hosts, path, float(session_timeout), float(lock_delay), backend=backend)


if __name__ == "__main__":
    main()
