"""Kleppmann's scenario end to end, with PostgreSQL as the fenced store: a holder process
is paused (SIGSTOP) past its session, the lock is granted to another client, which commits
a fenced write; the paused holder resumes and writes with its old token: PostgreSQL refuses
every such write, and the new holder's data stays."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import anyio
import asyncpg
import pytest

from aiozklock.fencing import PostgresFence
from aiozklock.testing import RawZooKeeperConnection
from tests._pg import RESOURCE, Tables, anyio_backend, connect, fenced_write, pg, tables
from tests.conftest import ClientFactory, gone
from tests.test_faults import STEADY_TIMEOUT, TIMEOUT, DeletionWatch, observer, report
from tests.test_pause import ChildLines, open_holder

pytestmark = [pytest.mark.anyio]

__all__ = ["anyio_backend", "observer", "pg", "tables"]  # fixtures, imported to be used here

PATH = "/locks/pg-pause"


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_paused_holders_writes_are_refused_by_postgres(
    zk_hosts: str,
    chroot: str,
    open_client: ClientFactory,
    observer: RawZooKeeperConnection,
    pg_dsn: str,
    pg: asyncpg.Connection,
    tables: Tables,
) -> None:
    process = await open_holder(
        "_pg_pause_holder",
        zk_hosts + chroot,
        PATH,
        str(TIMEOUT),
        pg_dsn,
        tables.fence,
        tables.data,
    )
    other = await open_client(session_timeout=STEADY_TIMEOUT)
    other_lock = other.lock(PATH, identifier="other")
    try:
        lines = ChildLines(process)
        with anyio.fail_after(30):  # a hang bound: a Python process starts, connects, acquires
            acquired = await lines.next()
            first_write = await lines.next()
        assert acquired["event"] == "acquired"
        old_token: int = acquired["token"]
        assert first_write["result"] == "accepted"

        deletion = DeletionWatch(observer, f"{chroot}{PATH}/{acquired['node']}")
        await deletion.arm()
        os.kill(process.pid, signal.SIGSTOP)
        paused_at = time.monotonic()
        with anyio.fail_after(5 * TIMEOUT):  # a hang bound
            await deletion.run()  # the server expired the paused holder's session
        with anyio.fail_after(5):
            await other_lock.acquire()
        new_token = other_lock.fencing_token
        assert new_token > old_token
        async with connect("asyncpg", pg_dsn) as conn:
            await fenced_write(conn, tables, new_token, "the new holder")

        await process.stdin.send(b"\n")  # read by the child as soon as it runs again
        await anyio.sleep(max(0.0, paused_at + 2.5 * TIMEOUT - time.monotonic()))  # the pause
        os.kill(process.pid, signal.SIGCONT)

        writes: list[dict[str, Any]] = []
        with anyio.fail_after(20):  # a hang bound
            while (record := await lines.next())["event"] == "write":
                writes.append(record)
        assert record == {**record, "event": "exit", "error": "LockLost"}
        assert writes, "the paused holder wrote nothing after resuming"
        assert [(write["result"], write.get("newer")) for write in writes] == [
            ("refused", new_token)
        ] * len(writes)
        assert await pg.fetchval(tables.read()) == "the new holder"
        assert await PostgresFence(tables.fence).current(pg, RESOURCE) == new_token
        report("PG-F9", stale_writes_refused=len(writes), stale_writes_accepted=0)
        await other_lock.release()
        with anyio.fail_after(20):  # a hang bound
            assert await process.wait() == 0
        await gone(other, PATH)
    finally:
        if process.returncode is None:
            os.kill(process.pid, signal.SIGCONT)
            process.kill()
            await process.wait()
