"""Child process of the Redis SIGSTOP test: a lock holder that writes through a RedisFence.

It takes the lock with ``acquire()`` (no body for a loss to cancel: like the client in
Kleppmann's scenario, it goes on believing it holds the lock), makes one fenced write, then
blocks synchronously on stdin: the parent SIGSTOPs it there. On resume it makes WRITES
fenced writes with its old token, checking nothing first, and reports each outcome as a
JSON line on stdout.

    python -m tests._redis_pause_holder HOSTS PATH SESSION_TIMEOUT REDIS_URL KEY WRITES
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from typing import Any

import redis.asyncio

import aiozklock
from aiozklock.fencing import RedisFence


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


async def hold(
    hosts: str, path: str, session_timeout: float, url: str, key: str, writes: int
) -> None:
    client = redis.asyncio.from_url(url)
    try:
        fence = RedisFence(client)
        async with aiozklock.connect(hosts, session_timeout=session_timeout) as zk:
            lock = zk.lock(path, identifier="paused-holder")
            await lock.acquire()
            token = lock.fencing_token
            emit("acquired", token=token, node=lock.statistics().node)
            await fence.set(key, b"before the pause", token)
            emit("written", token=token)
            sys.stdin.readline()  # blocks the event loop; the parent pauses us here
            for attempt in range(writes):
                try:
                    await fence.set(key, f"stale write {attempt}".encode(), token)
                except aiozklock.StaleFencingToken as exc:
                    emit("write", accepted=False, newer=exc.newer, is_held=lock.is_held)
                else:
                    emit("write", accepted=True, is_held=lock.is_held)
            with contextlib.suppress(aiozklock.LockLost):
                await lock.release()
            emit("exit")
    finally:
        await client.aclose()


def main() -> None:
    hosts, path, session_timeout, url, key, writes = sys.argv[1:7]
    asyncio.run(hold(hosts, path, float(session_timeout), url, key, int(writes)))


if __name__ == "__main__":
    main()
