"""A refused ``PostgresFence.advance`` aborts the transaction in the server (issue 30, item
3): a caller that catches ``StaleFencingToken`` and carries on commits nothing, with each
driver. On a real PostgreSQL (the plugin's ``pg_dsn``)."""

from __future__ import annotations

import contextlib

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
)

pytestmark = pytest.mark.anyio

__all__ = ["anyio_backend", "driver", "pg", "tables"]  # fixtures, imported to be used here

IN_FAILED_TRANSACTION = "25P02"  # "current transaction is aborted, commands ignored ..."


async def statement_after_the_refusal(conn: Conn, tables: Tables) -> BaseException | None:
    """The caller's next write, after it caught the refusal; the error it raised, if any."""
    try:
        await conn.scalar(tables.write("written after the refusal", id=2))
    except Exception as exc:  # the driver's own error is the observation
        return exc
    return None


async def catch_and_carry_on(conn: Conn, tables: Tables) -> tuple[object, object]:
    """The issue's caller: writes, is refused, logs the refusal, writes again, commits.
    Returns what the later statement and the commit raised (None: nothing)."""
    fence = PostgresFence(tables.fence)
    later: BaseException | None = None
    try:
        async with conn.transaction():
            await conn.scalar(tables.write("written before the refusal"))
            try:
                await fence.advance(conn.target, RESOURCE, 5)
            except StaleFencingToken:
                pass  # "log it and carry on"
            else:
                raise AssertionError("token 5 was accepted after token 7")
            later = await statement_after_the_refusal(conn, tables)
    except Exception as exc:  # a driver may refuse the commit: also an answer
        return later, exc
    return later, None


async def test_a_caller_that_catches_the_refusal_commits_nothing(
    driver: str, pg_dsn: str, pg: asyncpg.Connection, tables: Tables
) -> None:
    async with connect(driver, pg_dsn) as conn:
        await fenced_write(conn, tables, 7, "the new holder")
        later, _ = await catch_and_carry_on(conn, tables)
        assert await pg.fetchval(tables.read()) == "the new holder"
        assert await pg.fetchval(tables.read(id=2)) is None
        # The connection is usable again for the next transaction.
        await fenced_write(conn, tables, 7, "the new holder, again")
    assert later is not None, "a statement after the refusal ran in a live transaction"
    assert sqlstate(later) == IN_FAILED_TRANSACTION, repr(later)
    assert await pg.fetchval(tables.read()) == "the new holder, again"
    assert await PostgresFence(tables.fence).current(pg, RESOURCE) == 7


@pytest.mark.parametrize("implicit", ["psycopg", "sqlalchemy", "sqlalchemy-session"])
async def test_an_implicit_transaction_commits_nothing_after_a_refusal(
    implicit: str, pg_dsn: str, pg: asyncpg.Connection, tables: Tables
) -> None:
    """psycopg without autocommit and SQLAlchemy: the fence begins the transaction, the
    caller catches the refusal, writes, and calls commit() itself."""
    fence = PostgresFence(tables.fence)
    async with connect(implicit, pg_dsn, autocommit=False) as conn:
        await fence.advance(conn.target, RESOURCE, 7)
        await conn.target.commit()
        await conn.scalar(tables.write("written before the refusal"))
        with pytest.raises(StaleFencingToken):
            await fence.advance(conn.target, RESOURCE, 5)
        later = await statement_after_the_refusal(conn, tables)
        with contextlib.suppress(Exception):  # a driver may refuse the commit: also fine
            await conn.target.commit()
        await conn.target.rollback()
    assert await pg.fetchval(tables.read()) is None
    assert await pg.fetchval(tables.read(id=2)) is None
    assert later is not None
    assert await fence.current(pg, RESOURCE) == 7


async def test_the_refusal_keeps_its_cause_and_the_newer_token(
    pg_dsn: str, pg: asyncpg.Connection, tables: Tables
) -> None:
    async with connect("asyncpg", pg_dsn) as conn:
        await fenced_write(conn, tables, 7, "the new holder")
        with pytest.raises(StaleFencingToken) as caught:
            await fenced_write(conn, tables, 5, "stale")
    assert (caught.value.token, caught.value.newer) == (5, 7)
    # The server's own error, which aborted the transaction, is the cause.
    assert sqlstate(caught.value.__cause__) == "P0001"  # type: ignore[arg-type]
    assert "stale fencing token 5" in str(caught.value.__cause__)
