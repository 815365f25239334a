"""Child process of the PostgreSQL SIGSTOP test: a lock holder whose writes go through
``PostgresFence`` (asyncpg).

It acquires the lock, makes one fenced write (committed), then blocks synchronously on stdin
(the parent SIGSTOPs it there). On resume it keeps writing with its old token, as a holder
paused between its check and its write would, until its body is cancelled (``LockLost``).
Each write after the pause is shielded from that cancellation: it was under way when the
loss was noticed, so it reaches PostgreSQL, whose verdict is what the test counts. Every
step is a JSON line on stdout.

    python -m tests._pg_pause_holder HOSTS PATH SESSION_TIMEOUT DSN FENCE_TABLE DATA_TABLE
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import anyio
import asyncpg

import aiozklock
from aiozklock.fencing import PostgresFence

RESOURCE = "orders/157"  # tests._pg.RESOURCE


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t": time.monotonic(), **fields}), flush=True)


async def fenced_write(
    conn: asyncpg.Connection, fence: PostgresFence, data: str, token: int, value: str
) -> dict[str, Any]:
    """One transaction: the fence, then the data; PostgreSQL's verdict."""
    try:
        async with conn.transaction():
            await fence.advance(conn, RESOURCE, token)
            await conn.execute(
                f"INSERT INTO {data} (id, value) VALUES (1, $1) "
                "ON CONFLICT (id) DO UPDATE SET value = EXCLUDED.value",
                value,
            )
    except aiozklock.StaleFencingToken as exc:
        return {"result": "refused", "newer": exc.newer}
    return {"result": "accepted"}


async def hold(hosts: str, path: str, session_timeout: float, dsn: str, tables: list[str]) -> None:
    fence, data = PostgresFence(tables[0]), tables[1]
    conn = await asyncpg.connect(dsn)
    try:
        async with aiozklock.connect(hosts, session_timeout=session_timeout) as zk:
            lock = zk.lock(path, identifier="paused-holder")
            try:
                async with lock:
                    token = lock.fencing_token
                    emit("acquired", token=token, node=lock.statistics().node)
                    before = await fenced_write(conn, fence, data, token, "before the pause")
                    emit("write", token=token, **before)
                    sys.stdin.readline()  # blocks the event loop; the parent pauses us here
                    while True:
                        with anyio.CancelScope(shield=True):
                            after = await fenced_write(conn, fence, data, token, "stale")
                        emit("write", token=token, is_held=lock.is_held, **after)
                        await anyio.sleep(0.01)
            except aiozklock.LockLost as exc:
                emit("exit", error=type(exc).__name__)
    finally:
        await conn.close()


def main() -> None:
    hosts, path, session_timeout, dsn, *tables = sys.argv[1:]
    anyio.run(hold, hosts, path, float(session_timeout), dsn, tables, backend="asyncio")


if __name__ == "__main__":
    main()
