"""The PostgreSQL fence tests' side of each driver: open a connection, run a transaction at
an isolation level, run a statement in it, and tell its server process id.

``DRIVERS`` names what a fence is given: an asyncpg ``Connection``, a psycopg
``AsyncConnection``, a SQLAlchemy ``AsyncConnection`` over asyncpg, and a SQLAlchemy
``AsyncSession`` over psycopg (so both of SQLAlchemy's asyncio dialects are covered).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import asyncpg
import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.pool import NullPool

from aiozklock.fencing import PostgresFence

DRIVERS = ["asyncpg", "psycopg", "sqlalchemy", "sqlalchemy-session"]
RESOURCE = "orders/157"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # asyncpg, psycopg and SQLAlchemy's asyncio extension are asyncio-only


@pytest.fixture(params=DRIVERS)
def driver(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
async def pg(pg_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection of the test's own (asyncpg, autocommit), to set up and to look."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def tables(pg: asyncpg.Connection) -> AsyncIterator[Tables]:
    """The test's fence table (created) and data table."""
    made = Tables.fresh()
    await PostgresFence(made.fence).create_table(pg)
    await pg.execute(f"CREATE TABLE {made.data} (id int PRIMARY KEY, value text)")
    yield made
    await pg.execute(f"DROP TABLE IF EXISTS {made.fence}, {made.data}")


class Conn:
    """One connection of one driver. ``target`` is what the fence is given."""

    target: Any

    @contextlib.asynccontextmanager
    async def transaction(self, isolation: str = "read committed") -> AsyncIterator[None]:
        """A transaction, committed on a normal exit, rolled back on an exception."""
        raise NotImplementedError
        yield

    async def scalar(self, sql: str) -> Any:
        """The first value ``sql`` returns (None if no row, or if it returns no rows)."""
        raise NotImplementedError

    async def pid(self) -> int:
        """The server process of this connection (inside a transaction)."""
        raise NotImplementedError


class AsyncpgConn(Conn):
    def __init__(self, conn: asyncpg.Connection) -> None:
        self.target = conn

    @contextlib.asynccontextmanager
    async def transaction(self, isolation: str = "read committed") -> AsyncIterator[None]:
        async with self.target.transaction(isolation=isolation.replace(" ", "_")):
            yield

    async def scalar(self, sql: str) -> Any:
        return await self.target.fetchval(sql)

    async def pid(self) -> int:
        return int(self.target.get_server_pid())


class PsycopgConn(Conn):
    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.target = conn

    @contextlib.asynccontextmanager
    async def transaction(self, isolation: str = "read committed") -> AsyncIterator[None]:
        level = psycopg.IsolationLevel[isolation.upper().replace(" ", "_")]
        await self.target.set_isolation_level(level)
        async with self.target.transaction():
            yield

    async def scalar(self, sql: str) -> Any:
        cursor = await self.target.execute(sql)
        row = await cursor.fetchone() if cursor.description else None
        return None if row is None else (row[0] if isinstance(row, tuple) else row)

    async def pid(self) -> int:
        return int(self.target.info.backend_pid)


class SqlAlchemyConn(Conn):
    """An ``AsyncConnection`` (``session=False``) or an ``AsyncSession``."""

    def __init__(self, target: Any, *, session: bool) -> None:
        self.target = target
        self.session = session

    @contextlib.asynccontextmanager
    async def transaction(self, isolation: str = "read committed") -> AsyncIterator[None]:
        options = {"isolation_level": isolation.upper()}
        if self.session:
            async with self.target.begin():
                await self.target.connection(execution_options=options)
                yield
        else:
            await self.target.execution_options(**options)
            async with self.target.begin():
                yield

    async def scalar(self, sql: str) -> Any:
        result = await self.target.execute(text(sql))
        return result.scalar() if result.returns_rows else None

    async def pid(self) -> int:
        if self.session:  # over psycopg
            conn = await self.target.connection()
            return int((await conn.get_raw_connection()).driver_connection.info.backend_pid)
        # over asyncpg
        return int((await self.target.get_raw_connection()).driver_connection.get_server_pid())


@contextlib.asynccontextmanager
async def connect(driver: str, dsn: str, **options: Any) -> AsyncIterator[Conn]:
    """A connection of ``driver`` (one of ``DRIVERS``), closed at exit. ``options`` go to
    psycopg's ``connect`` (default ``autocommit=True``, as asyncpg is)."""
    if driver == "asyncpg":
        conn = await asyncpg.connect(dsn)
        try:
            yield AsyncpgConn(conn)
        finally:
            await conn.close()
    elif driver == "psycopg":
        options.setdefault("autocommit", True)
        async with await psycopg.AsyncConnection.connect(dsn, **options) as pconn:
            yield PsycopgConn(pconn)
    else:
        session = driver == "sqlalchemy-session"
        dialect = "psycopg" if session else "asyncpg"
        engine = create_async_engine(
            dsn.replace("postgresql://", f"postgresql+{dialect}://", 1), poolclass=NullPool
        )
        try:
            if session:
                async with AsyncSession(engine) as sa_session:
                    yield SqlAlchemyConn(sa_session, session=True)
            else:
                async with engine.connect() as sa_conn:
                    yield SqlAlchemyConn(sa_conn, session=False)
        finally:
            await engine.dispose()


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a driver's error (SQLAlchemy's wraps the driver's in ``orig``)."""
    for candidate in (exc, getattr(exc, "orig", None), exc.__cause__):
        code = getattr(candidate, "sqlstate", None)
        if code:
            return str(code)
    return None


@dataclass
class Tables:
    """A fence table and a data table ``(id int PRIMARY KEY, value text)`` of one test."""

    fence: str
    data: str

    @classmethod
    def fresh(cls) -> Tables:
        suffix = uuid.uuid4().hex[:12]
        return cls(f"fence_{suffix}", f"data_{suffix}")

    def write(self, value: str, id: int = 1) -> str:
        """The caller's own write: the protected data."""
        return (
            f"INSERT INTO {self.data} (id, value) VALUES ({id}, '{value}') "
            "ON CONFLICT (id) DO UPDATE SET value = EXCLUDED.value"
        )

    def read(self, id: int = 1) -> str:
        return f"SELECT value FROM {self.data} WHERE id = {id}"


async def fenced_write(conn: Conn, tables: Tables, token: int, value: str) -> None:
    """The documented pattern: the fence first, then the caller's own write, one commit."""
    async with conn.transaction():
        await PostgresFence(tables.fence).advance(conn.target, RESOURCE, token)
        await conn.scalar(tables.write(value))


async def wait_for_waiter(observer: asyncpg.Connection, holder: int) -> int:
    """The server process that waits for a lock ``holder`` holds, once there is one. The
    server's lock table has no event to await: polled (an observation, not a delay;
    unbounded: the caller bounds it)."""
    query = "SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))"
    while True:
        waiter = await observer.fetchval(query, holder)
        if waiter is not None:
            return int(waiter)
        await anyio.sleep(0.005)
