"""``PostgresFence`` on a real PostgreSQL (the plugin's ``pg_dsn``), with each driver: a
stale token is refused and takes the caller's writes down with its transaction, bad input
and misuse fail before any SQL, and ``import aiozklock.fencing`` loads no driver."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import psycopg
import pytest
from psycopg.rows import dict_row
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.pool import NullPool

import aiozklock
from aiozklock import InvalidArgument, StaleFencingToken, UsageError
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
    tables,
)

pytestmark = pytest.mark.anyio

__all__ = ["anyio_backend", "driver", "pg", "tables"]  # fixtures, imported to be used here

ROOT = Path(__file__).resolve().parent.parent


async def write_then_advance(conn: Conn, tables: Tables, token: int, value: str) -> None:
    """The caller's write first, then the fence: a refusal rolls the write back too."""
    async with conn.transaction():
        await conn.scalar(tables.write(value))
        await PostgresFence(tables.fence).advance(conn.target, RESOURCE, token)


async def test_new_holder_commits_and_stale_holder_is_refused_with_its_writes(
    driver: str, pg_dsn: str, pg: asyncpg.Connection, tables: Tables
) -> None:
    fence = PostgresFence(tables.fence)
    async with connect(driver, pg_dsn) as conn:
        await fenced_write(conn, tables, 5, "old holder")
        await fenced_write(conn, tables, 7, "new holder")
        with pytest.raises(StaleFencingToken) as caught:
            await write_then_advance(conn, tables, 5, "stale")
    assert (caught.value.resource, caught.value.token, caught.value.newer) == (RESOURCE, 5, 7)
    assert isinstance(caught.value, aiozklock.LockLost)
    assert await pg.fetchval(tables.read()) == "new holder"
    assert await fence.current(pg, RESOURCE) == 7


async def test_equal_token_is_accepted_and_resources_are_fenced_apart(
    driver: str, pg_dsn: str, pg: asyncpg.Connection, tables: Tables
) -> None:
    fence = PostgresFence(tables.fence)
    async with connect(driver, pg_dsn) as conn:
        await fenced_write(conn, tables, 7, "first write")
        await fenced_write(conn, tables, 7, "second write, same holder")
        async with conn.transaction():
            await fence.advance(conn.target, "orders/158", 1)
    assert await pg.fetchval(tables.read()) == "second write, same holder"
    assert await fence.current(pg, RESOURCE) == 7
    assert await fence.current(pg, "orders/158") == 1
    assert await fence.current(pg, "orders/159") is None


async def fenced_write_then_fail(conn: Conn, tables: Tables, token: int) -> None:
    async with conn.transaction():
        await PostgresFence(tables.fence).advance(conn.target, RESOURCE, token)
        await conn.scalar(tables.write(str(token)))
        raise RuntimeError("the caller's own failure")


async def test_rolled_back_transaction_leaves_the_fence_where_it_was(
    driver: str, pg_dsn: str, pg: asyncpg.Connection, tables: Tables
) -> None:
    fence = PostgresFence(tables.fence)
    async with connect(driver, pg_dsn) as conn:
        await fenced_write(conn, tables, 7, "seven")
        with pytest.raises(RuntimeError, match="the caller's own failure"):
            await fenced_write_then_fail(conn, tables, 9)
        assert await fence.current(pg, RESOURCE) == 7
        await fenced_write(conn, tables, 8, "eight")  # 9 was never recorded
    assert await pg.fetchval(tables.read()) == "eight"


async def test_largest_bigint_token_round_trips(
    pg_dsn: str, pg: asyncpg.Connection, tables: Tables
) -> None:
    async with connect("asyncpg", pg_dsn) as conn:
        await fenced_write(conn, tables, (1 << 63) - 1, "max")
    assert await PostgresFence(tables.fence).current(pg, RESOURCE) == (1 << 63) - 1


@contextlib.asynccontextmanager
async def dead_connection(driver: str, dsn: str) -> AsyncIterator[Any]:
    """A connection object of ``driver`` on which any SQL fails: closed, or (a session)
    bound to a port where nothing listens."""
    if driver == "sqlalchemy-session":
        url = "postgresql+psycopg://postgres@127.0.0.1:1/postgres"
        engine = create_async_engine(url, poolclass=NullPool)
        async with AsyncSession(engine) as session:
            yield session
        await engine.dispose()
    else:
        async with connect(driver, dsn) as conn:
            await conn.target.close()
            yield conn.target


BAD_INPUT = [
    ("", 5, "must not be empty"),
    (b"orders/1", 5, "resource must be a str"),
    (None, 5, "resource must be a str"),
    ("a\x00b", 5, "NUL"),
    ("\ud800", 5, "not valid UTF-8"),
    ("é" * 1001, 5, "at most 2000 bytes"),
    (RESOURCE, "5", "token must be an int"),
    (RESOURCE, 5.0, "token must be an int"),
    (RESOURCE, True, "token must be an int"),
    (RESOURCE, None, "token must be an int"),
    (RESOURCE, -1, r"0\.\.2\*\*63-1"),
    (RESOURCE, 1 << 63, r"0\.\.2\*\*63-1"),
]


@pytest.mark.parametrize(("resource", "token", "message"), BAD_INPUT)
async def test_bad_input_is_refused_before_any_sql(
    driver: str, pg_dsn: str, resource: Any, token: Any, message: str
) -> None:
    fence = PostgresFence()
    async with dead_connection(driver, pg_dsn) as dead:
        with pytest.raises(InvalidArgument, match=message):
            await fence.advance(dead, resource, token)
        if resource != RESOURCE:  # current() checks the resource too
            with pytest.raises(InvalidArgument, match=message):
                await fence.current(dead, resource)
        # The proof: any SQL would have failed, with the driver's error.
        with pytest.raises(Exception) as sent:  # noqa: PT011
            await fence.current(dead, RESOURCE)
        assert not isinstance(sent.value, aiozklock.AiozklockError)


@pytest.mark.parametrize(
    "table",
    ["", "1fence", "a b", 'x"; DROP TABLE y; --', "a.b.c", ".t", "s.", "a-b", "x" * 64, 5],
)
def test_table_that_is_not_an_identifier_is_refused(table: Any) -> None:
    with pytest.raises(InvalidArgument, match="table must be"):
        PostgresFence(table)


async def test_table_name_is_quoted_and_may_be_schema_qualified(
    pg_dsn: str, pg: asyncpg.Connection
) -> None:
    schema = Tables.fresh().fence.replace("fence_", "schema_")
    await pg.execute(f"CREATE SCHEMA {schema}")
    try:
        for table in (f"{schema}.Mixed_Case$1", f"{schema}.order", f"{schema}.{'x' * 63}"):
            fence = PostgresFence(table)
            await fence.create_table(pg)
            async with pg.transaction():
                await fence.advance(pg, RESOURCE, 3)
            assert await fence.current(pg, RESOURCE) == 3
        query = "SELECT tablename FROM pg_tables WHERE schemaname = $1"
        names = await pg.fetch(query, schema)
        assert sorted(row[0] for row in names) == sorted(["Mixed_Case$1", "order", "x" * 63])
    finally:
        await pg.execute(f"DROP SCHEMA {schema} CASCADE")


async def test_unsupported_connection_is_refused(pg_dsn: str) -> None:
    fence = PostgresFence()
    engine = create_async_engine(pg_dsn.replace("postgresql://", "postgresql+asyncpg://"))
    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=1)
    try:
        with psycopg.connect(pg_dsn) as sync_conn:
            for conn in (None, object(), engine, pool, sync_conn):
                with pytest.raises(InvalidArgument, match="conn must be an asyncpg Connection"):
                    await fence.advance(conn, RESOURCE, 1)  # type: ignore[arg-type]
    finally:
        await pool.close()
        await engine.dispose()


async def test_statement_that_would_commit_alone_is_a_usage_error(
    driver: str, pg_dsn: str, pg: asyncpg.Connection, tables: Tables
) -> None:
    fence = PostgresFence(tables.fence)
    async with connect(driver, pg_dsn) as conn:  # asyncpg, and psycopg with autocommit=True
        if driver == "sqlalchemy":
            await conn.target.execution_options(isolation_level="AUTOCOMMIT")
        elif driver == "sqlalchemy-session":
            await conn.target.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
        with pytest.raises(UsageError, match="needs an open transaction"):
            await fence.advance(conn.target, RESOURCE, 5)
    assert await fence.current(pg, RESOURCE) is None


@pytest.mark.parametrize("implicit", ["psycopg", "sqlalchemy", "sqlalchemy-session"])
async def test_implicit_transaction_is_the_callers_and_commits_with_its_writes(
    implicit: str, pg_dsn: str, pg: asyncpg.Connection, tables: Tables
) -> None:
    """psycopg without autocommit, and SQLAlchemy, begin a transaction before the first
    statement: the fence's, which the caller's writes join until its commit()."""
    fence = PostgresFence(tables.fence)
    async with connect(implicit, pg_dsn, autocommit=False) as conn:
        await fence.advance(conn.target, RESOURCE, 5)
        await conn.scalar(tables.write("five"))
        assert await fence.current(pg, RESOURCE) is None  # not committed yet
        await conn.target.commit()
        assert await pg.fetchval(tables.read()) == "five"
        with pytest.raises(StaleFencingToken):
            await fence.advance(conn.target, RESOURCE, 4)
        await conn.target.rollback()
    assert await fence.current(pg, RESOURCE) == 5


async def test_psycopg_connection_factories_do_not_matter(
    pg_dsn: str, pg: asyncpg.Connection, tables: Tables
) -> None:
    """Dict rows and server-side binding ($1 placeholders) set on the connection."""
    options = {"row_factory": dict_row, "cursor_factory": psycopg.AsyncRawCursor}
    async with connect("psycopg", pg_dsn, **options) as conn:
        await fenced_write(conn, tables, 5, "five")
        assert await PostgresFence(tables.fence).current(conn.target, RESOURCE) == 5


async def test_asyncpg_pool_connection(pg_dsn: str, pg: asyncpg.Connection, tables: Tables) -> None:
    fence = PostgresFence(tables.fence)
    async with (
        asyncpg.create_pool(pg_dsn, min_size=1, max_size=1) as pool,
        pool.acquire() as conn,
        conn.transaction(),
    ):
        await fence.advance(conn, RESOURCE, 5)
    assert await fence.current(pg, RESOURCE) == 5


def test_import_loads_no_driver() -> None:
    code = (
        "import sys, aiozklock, aiozklock.fencing\n"
        "from aiozklock.fencing import PostgresFence\n"
        "PostgresFence('t')\n"
        "drivers = {'asyncpg', 'psycopg', 'psycopg_binary', 'sqlalchemy', 'greenlet'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in drivers))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", code]
    done = subprocess.run(
        command, capture_output=True, text=True, check=True, timeout=60, cwd=ROOT, env=env
    )
    assert done.stdout.strip() == "[]"
