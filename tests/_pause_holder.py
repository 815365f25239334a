"""Child process of the F9 test: a lock holder whose work blocks its event loop.

It acquires the lock, makes one protected write, then blocks synchronously on stdin (the
"work" during which the parent SIGSTOPs it). On resume, before its event loop runs again, it
asks the lock whether it may still act, and keeps writing until its body is cancelled.
Every step is a JSON line on stdout with ``time.monotonic()`` (system-wide on Linux).

    python -m tests._pause_holder HOSTS PATH SESSION_TIMEOUT BACKEND
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import anyio

import aiozklock
from tests._clocks import on_monotonic


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t": time.monotonic(), **fields}), flush=True)


def valid(lock: aiozklock.Lock) -> float:
    """Its ``valid_until``, on the scale of ``t`` (``time.monotonic()``)."""
    return on_monotonic(lock.valid_until)


async def hold(hosts: str, path: str, session_timeout: float) -> None:
    async with aiozklock.connect(hosts, session_timeout=session_timeout) as zk:
        lock = zk.lock(path, identifier="paused-holder")
        try:
            async with lock:
                token = lock.fencing_token
                emit("acquired", token=token, node=lock.statistics().node)
                emit("write", token=token, is_held=lock.is_held, valid_until=valid(lock))
                sys.stdin.readline()  # blocks the event loop; the parent pauses us here
                while True:
                    emit("write", token=token, is_held=lock.is_held, valid_until=valid(lock))
                    await anyio.sleep(0.01)
        except aiozklock.LockLost as exc:
            emit("exit", error=type(exc).__name__)


def main() -> None:
    hosts, path, session_timeout, backend = sys.argv[1:5]
    anyio.run(hold, hosts, path, float(session_timeout), backend=backend)


if __name__ == "__main__":
    main()
