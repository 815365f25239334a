"""Writers of one resource at once, on a real PostgreSQL and with each driver: a writer
waits on the fence row while another transaction holds it, then compares its token with
the committed one (READ COMMITTED), or fails to serialize (REPEATABLE READ, SERIALIZABLE)
and succeeds on retry; the highest token's data is what remains. The overlaps are made to
happen: the first writer holds the row until the server shows the second waiting for it."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

import anyio
import asyncpg
import pytest

from aiozklock import StaleFencingToken
from aiozklock.fencing import PostgresFence
from tests._pg import (
    RESOURCE,
    Conn,
    Tables,
    anyio_backend,
    connect,
    driver,
    fenced_write,
    pg,
    sqlstate,
    tables,
    wait_for_waiter,
)

pytestmark = pytest.mark.anyio

__all__ = ["anyio_backend", "driver", "pg", "tables"]  # fixtures, imported to be used here

HANG_BOUND = 20  # seconds: every wait here ends in milliseconds unless something is broken


async def while_holding(
    holder: Conn,
    tables: Tables,
    token: int,
    pg: asyncpg.Connection,
    other: Callable[[], Awaitable[None]],
) -> None:
    """Advance the fence with ``token`` and write in ``holder``'s transaction, start
    ``other()`` and commit only once the server shows a process waiting for ``holder``'s
    locks; return when ``other()`` has finished."""
    async with anyio.create_task_group() as group, holder.transaction():
        await PostgresFence(tables.fence).advance(holder.target, RESOURCE, token)
        await holder.scalar(tables.write(f"written by {token}"))
        pid = await holder.pid()
        group.start_soon(other)
        with anyio.fail_after(HANG_BOUND):
            await wait_for_waiter(pg, pid)
        # committed: the waiter goes on, and the task group waits for it


@pytest.mark.parametrize(("first", "second"), [(5, 7), (9, 8)])
async def test_writer_waiting_on_the_fence_row_compares_with_the_committed_token(
    driver: str, pg_dsn: str, pg: asyncpg.Connection, tables: Tables, first: int, second: int
) -> None:
    refused: list[StaleFencingToken] = []

    async def second_writer(conn: Conn) -> None:
        try:
            await fenced_write(conn, tables, second, f"written by {second}")
        except StaleFencingToken as exc:
            refused.append(exc)

    async with connect(driver, pg_dsn) as a, connect(driver, pg_dsn) as b:
        await while_holding(a, tables, first, pg, lambda: second_writer(b))
    highest = max(first, second)
    assert await pg.fetchval(tables.read()) == f"written by {highest}"
    assert await PostgresFence(tables.fence).current(pg, RESOURCE) == highest
    if second < first:
        assert [(exc.token, exc.newer) for exc in refused] == [(second, first)]
    else:
        assert refused == []


async def test_concurrent_writers_end_with_the_highest_tokens_data(
    driver: str, pg_dsn: str, pg: asyncpg.Connection, tables: Tables
) -> None:
    tokens = random.Random(20).sample(range(1, 1000), 8)  # interleaved: not in start order
    accepted: list[int] = []
    refused: list[StaleFencingToken] = []
    connected = 0
    start = anyio.Event()

    async def writer(token: int) -> None:
        nonlocal connected
        async with connect(driver, pg_dsn) as conn:
            connected += 1
            if connected == len(tokens):
                start.set()
            await start.wait()
            try:
                await fenced_write(conn, tables, token, f"written by {token}")
            except StaleFencingToken as exc:
                refused.append(exc)
            else:
                accepted.append(token)

    with anyio.fail_after(HANG_BOUND):
        async with anyio.create_task_group() as group:
            for token in tokens:
                group.start_soon(writer, token)
    assert sorted(accepted + [exc.token for exc in refused]) == sorted(tokens)
    assert all(exc.newer is not None and exc.newer > exc.token for exc in refused)  # type: ignore[operator]
    assert max(tokens) in accepted
    assert await pg.fetchval(tables.read()) == f"written by {max(tokens)}"
    assert await PostgresFence(tables.fence).current(pg, RESOURCE) == max(tokens)


@pytest.mark.parametrize("isolation", ["repeatable read", "serializable"])
async def test_concurrent_fence_update_fails_to_serialize_and_the_retry_succeeds(
    driver: str, isolation: str, pg_dsn: str, pg: asyncpg.Connection, tables: Tables
) -> None:
    failures: list[BaseException] = []

    async def attempt(conn: Conn) -> None:
        async with conn.transaction(isolation):
            await conn.scalar("SELECT 1")  # the snapshot: taken before the first commits
            await PostgresFence(tables.fence).advance(conn.target, RESOURCE, 7)
            await conn.scalar(tables.write("written by 7"))

    async def second_writer(conn: Conn) -> None:
        try:
            await attempt(conn)
        except Exception as exc:
            failures.append(exc)
            await attempt(conn)  # the documented retry: a new transaction, a new snapshot

    async with connect(driver, pg_dsn) as a, connect(driver, pg_dsn) as b:
        await fenced_write(a, tables, 3, "written by 3")  # the row exists before
        await while_holding(a, tables, 5, pg, lambda: second_writer(b))
    assert [sqlstate(exc) for exc in failures] == ["40001"], failures
    assert await pg.fetchval(tables.read()) == "written by 7"
    assert await PostgresFence(tables.fence).current(pg, RESOURCE) == 7


async def test_create_table_while_another_creator_has_not_committed(
    driver: str, pg_dsn: str, pg: asyncpg.Connection
) -> None:
    """Two processes deploying at once: the second's create_table() waits for the first's
    transaction, then finds the table (without turns, CREATE TABLE IF NOT EXISTS fails with
    a unique violation in the catalog)."""
    fence = PostgresFence(Tables.fresh().fence)
    first = await asyncpg.connect(pg_dsn)
    try:
        async with connect(driver, pg_dsn) as second:
            async with anyio.create_task_group() as group, first.transaction():
                await fence.create_table(first)  # in first's open transaction
                group.start_soon(fence.create_table, second.target)
                with anyio.fail_after(HANG_BOUND):
                    await wait_for_waiter(pg, first.get_server_pid())
            await fence.create_table(second.target)  # and again: nothing to do
        assert await pg.fetchval("SELECT to_regclass($1)::text", fence.table) == fence.table
        async with pg.transaction():
            await fence.advance(pg, RESOURCE, 1)
    finally:
        await first.close()
        await pg.execute(f"DROP TABLE IF EXISTS {fence.table}")
