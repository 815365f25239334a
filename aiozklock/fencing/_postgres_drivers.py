"""One small adapter per PostgreSQL driver, for :class:`~aiozklock.fencing.PostgresFence`.

A connection's driver is recognised by ``isinstance`` against the classes of the driver
modules already in ``sys.modules``: an object of a driver the application never imported
cannot be an instance of it, so nothing is imported here to find out.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from aiozklock._exceptions import InvalidArgument

__all__ = ["Driver", "driver_for"]


class Driver(Protocol):
    """What the fence needs of a connection, whatever its driver."""

    name: str
    how_to_begin: str  # shown when a statement would commit on its own

    def param(self, number: int) -> str:
        """The placeholder of the ``number``-th parameter (from 1) in this driver's SQL."""
        ...

    async def in_transaction(self) -> bool: ...

    async def autocommits(self) -> bool:
        """Whether a statement sent now would be committed on its own."""
        ...

    async def fetch_token(self, sql: str, *args: object) -> int | None:
        """The first column of the first row, or None if there is no row."""
        ...

    async def run(self, *statements: str) -> None:
        """Run statements without parameters, in order."""
        ...

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        """A transaction of the connection's own, committed on a normal exit."""
        ...


def _as_token(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


class _Asyncpg:
    name = "asyncpg"
    how_to_begin = "`async with conn.transaction(): ...`"

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def param(self, number: int) -> str:
        return f"${number}"

    async def in_transaction(self) -> bool:
        return bool(self._conn.is_in_transaction())

    async def autocommits(self) -> bool:
        # asyncpg has no implicit transactions: outside one, every statement commits.
        return not self._conn.is_in_transaction()

    async def fetch_token(self, sql: str, *args: object) -> int | None:
        return _as_token(await self._conn.fetchval(sql, *args))

    async def run(self, *statements: str) -> None:
        for statement in statements:
            await self._conn.execute(statement)

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        transaction: AbstractAsyncContextManager[Any] = self._conn.transaction()
        return transaction


def _named(args: Sequence[object]) -> dict[str, object]:
    return {f"p{number}": arg for number, arg in enumerate(args, 1)}


class _Psycopg:
    name = "psycopg"
    how_to_begin = (
        "`async with conn.transaction(): ...`, or a connection with autocommit=False "
        "(its first statement begins the transaction that conn.commit() ends)"
    )

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def param(self, number: int) -> str:
        return f"%(p{number})s"

    def _idle(self) -> bool:
        from psycopg.pq import TransactionStatus

        return bool(self._conn.info.transaction_status == TransactionStatus.IDLE)

    async def in_transaction(self) -> bool:
        return not self._idle()

    async def autocommits(self) -> bool:
        # Without autocommit, psycopg begins a transaction before the first statement.
        return bool(self._conn.autocommit) and self._idle()

    async def fetch_token(self, sql: str, *args: object) -> int | None:
        from psycopg import AsyncCursor
        from psycopg.rows import tuple_row

        # A cursor of our own: the connection's factories may make dict rows or
        # server-side binding with $n placeholders.
        async with AsyncCursor(self._conn, row_factory=tuple_row) as cursor:
            await cursor.execute(sql, _named(args))
            row = await cursor.fetchone()
        return None if row is None else _as_token(row[0])

    async def run(self, *statements: str) -> None:
        from psycopg import AsyncCursor

        async with AsyncCursor(self._conn) as cursor:
            for statement in statements:
                await cursor.execute(statement)

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        transaction: AbstractAsyncContextManager[Any] = self._conn.transaction()
        return transaction


@functools.lru_cache(maxsize=64)
def _text(sql: str) -> Any:
    from sqlalchemy import text

    return text(sql)


class _SqlAlchemy:
    name = "SQLAlchemy"
    how_to_begin = "`async with engine.begin() as conn: ...` or `async with session.begin(): ...`"

    def __init__(self, target: Any, *, session: bool) -> None:
        self._target = target  # an AsyncConnection or an AsyncSession
        self._session = session

    async def _connection(self) -> Any:
        # A session's connection for its default bind (it begins the session's transaction).
        return await self._target.connection() if self._session else self._target

    def param(self, number: int) -> str:
        return f":p{number}"

    async def in_transaction(self) -> bool:
        return bool(self._target.in_transaction())

    async def autocommits(self) -> bool:
        # isolation_level="AUTOCOMMIT" sets the DBAPI connection's autocommit flag (both
        # of SQLAlchemy's asyncio PostgreSQL dialects): then every statement commits.
        raw = await (await self._connection()).get_raw_connection()
        return bool(getattr(raw.dbapi_connection, "autocommit", False))

    async def fetch_token(self, sql: str, *args: object) -> int | None:
        connection = await self._connection()
        result = await connection.execute(_text(sql), _named(args))
        return _as_token(result.scalar())

    async def run(self, *statements: str) -> None:
        connection = await self._connection()
        for statement in statements:
            await connection.execute(_text(statement))

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        transaction: AbstractAsyncContextManager[Any] = self._target.begin()
        return transaction


def driver_for(conn: object) -> Driver:
    """The adapter for ``conn``; ``InvalidArgument`` if no imported driver made it."""
    sqlalchemy = sys.modules.get("sqlalchemy.ext.asyncio")
    if sqlalchemy is not None:
        if isinstance(conn, sqlalchemy.AsyncSession):
            return _SqlAlchemy(conn, session=True)
        if isinstance(conn, sqlalchemy.AsyncConnection):
            return _SqlAlchemy(conn, session=False)
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(conn, psycopg.AsyncConnection):
        return _Psycopg(conn)
    asyncpg = sys.modules.get("asyncpg")
    if asyncpg is not None and isinstance(
        conn, (asyncpg.Connection, asyncpg.pool.PoolConnectionProxy)
    ):
        return _Asyncpg(conn)
    kind = type(conn)
    raise InvalidArgument(
        "conn must be an asyncpg Connection (or a pool's), a psycopg AsyncConnection, or a "
        f"SQLAlchemy AsyncConnection or AsyncSession; got {kind.__module__}.{kind.__qualname__}"
    )
