"""``PostgresFence``: a fence row per resource that PostgreSQL itself enforces.

The fence is one row per resource, ``(resource text PRIMARY KEY, token bigint)``. A write
advances it inside the caller's transaction with one statement,
``INSERT ... ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token WHERE token <=
EXCLUDED.token RETURNING token``: no row returned means the store has seen a newer token.
The statement locks the row until the transaction ends, so writers of one resource take
turns there, and the caller's own writes commit only together with a current token.

No database driver is imported here: the driver is recognised from the connection object's
type, looked up among the modules the application has already imported (see
:mod:`._postgres_drivers`).
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

from aiozklock._exceptions import InvalidArgument, StaleFencingToken, UsageError, short_repr

from ._postgres_drivers import Driver, driver_for
from ._tokens import check_token

if TYPE_CHECKING:
    from asyncpg import Connection as AsyncpgConnection
    from asyncpg.pool import PoolConnectionProxy
    from psycopg import AsyncConnection as PsycopgConnection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    #: The connections a fence accepts.
    PostgresConnection: TypeAlias = (
        AsyncpgConnection
        | PoolConnectionProxy
        | PsycopgConnection[Any]
        | AsyncConnection
        | AsyncSession
    )

__all__ = ["PostgresFence"]

#: PostgreSQL's ``bigint``; a fencing token (a ZooKeeper zxid) is never negative.
#: A resource name's limit in UTF-8 bytes: well below the 2704 bytes a b-tree index entry
#: may hold, so the primary key never refuses one.
MAX_RESOURCE_BYTES = 2000
#: PostgreSQL's NAMEDATALEN - 1: a longer name would be silently truncated.
MAX_IDENTIFIER_BYTES = 63
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")

_ADVANCE = (
    "INSERT INTO {table} AS fence (resource, token) VALUES ({p1}, {p2}) "
    "ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token "
    "WHERE fence.token <= EXCLUDED.token RETURNING fence.token"
)
_CURRENT = "SELECT token FROM {table} WHERE resource = {p1}"
_CREATE = (
    "CREATE TABLE IF NOT EXISTS {table} "
    "(resource text PRIMARY KEY, token bigint NOT NULL CHECK (token >= 0))"
)
# A refusal aborts the caller's transaction in the server: a caller that catches
# StaleFencingToken and carries on can commit nothing of it (issue 30). Only integers are
# interpolated (tokens, checked by check_token): no quoting to get wrong.
_ABORT = (
    "DO $$ BEGIN RAISE EXCEPTION 'aiozklock fence: stale fencing token {token} (the fence "
    "holds {newer}): this transaction is aborted' USING HINT = 'roll back; another "
    "holder has the lock now'; END $$"
)
# Transaction-local: in force until the caller's transaction ends. Milliseconds, an int.
_LOCK_TIMEOUT = "SET LOCAL lock_timeout = {ms}"
# Concurrent CREATE TABLE IF NOT EXISTS of one name can fail with a unique violation in
# the catalog; creators take turns on a transaction-level advisory lock instead.
_CREATE_LOCK = "SELECT pg_advisory_xact_lock({key})"


def quote_table(table: object) -> str:
    """``table`` (``name`` or ``schema.name``) as a quoted SQL identifier; raises
    ``InvalidArgument`` unless each part is a plain identifier of at most 63 bytes."""
    if not isinstance(table, str):
        raise InvalidArgument(f"table must be a str, got {type(table).__name__}")
    parts = table.split(".")
    if len(parts) > 2 or not all(
        _IDENTIFIER.fullmatch(part) and len(part) <= MAX_IDENTIFIER_BYTES for part in parts
    ):
        raise InvalidArgument(
            f"table must be an SQL identifier, optionally schema-qualified (letters, digits, "
            f"_ and $, not starting with a digit, at most {MAX_IDENTIFIER_BYTES} characters "
            f"per part), got {short_repr(table)}"
        )
    return ".".join(f'"{part}"' for part in parts)


def check_resource(resource: object) -> str:
    """``resource`` if it is a name the fence table can key on; else ``InvalidArgument``."""
    if not isinstance(resource, str):
        raise InvalidArgument(f"resource must be a str, got {type(resource).__name__}")
    if not resource:
        raise InvalidArgument("resource must not be empty")
    if "\x00" in resource:
        raise InvalidArgument(f"resource must not contain NUL characters: {short_repr(resource)}")
    try:
        size = len(resource.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"resource is not valid UTF-8: {short_repr(resource)}") from exc
    if size > MAX_RESOURCE_BYTES:
        raise InvalidArgument(
            f"resource must be at most {MAX_RESOURCE_BYTES} bytes in UTF-8, got {size}"
        )
    return resource


def check_lock_timeout(seconds: object) -> int | None:
    """``seconds`` in whole milliseconds (at least 1), or None for None; ``InvalidArgument``
    unless it is a number of seconds in (0, 86400]."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise InvalidArgument(f"lock_timeout must be seconds (a number), got {short_repr(seconds)}")
    if not 0 < seconds <= 86400:  # NaN fails this too
        raise InvalidArgument(f"lock_timeout must be in (0, 86400] seconds, got {seconds!r}")
    return max(1, math.ceil(seconds * 1000))  # 0 would mean "no timeout" to PostgreSQL


async def _abort(driver: Driver, refusal: StaleFencingToken) -> NoReturn:
    """Make the server abort the caller's transaction, then raise ``refusal`` (its cause:
    the driver's error for the server's exception)."""
    newer = "none" if refusal.newer is None else refusal.newer
    try:
        await driver.run(_ABORT.format(token=refusal.token, newer=newer))
    except Exception as exc:  # the driver's error for our RAISE: the transaction is dead
        raise refusal from exc
    raise refusal  # not reached: RAISE EXCEPTION always raises


class PostgresFence:
    """A fence that PostgreSQL enforces: a row ``(resource, token)`` per resource in
    ``table`` (default ``aiozklock_fence``, optionally ``schema.table``; quoted, so its case
    is kept). ``InvalidArgument`` if ``table`` is not an SQL identifier.

    Pass the lock's ``fencing_token`` to :meth:`advance` first thing in the transaction that
    writes the protected data. The connection may be an **asyncpg** ``Connection`` (or a
    pool's), a **psycopg 3** ``AsyncConnection``, or a **SQLAlchemy** ``AsyncConnection``
    or ``AsyncSession`` (over asyncpg or psycopg). The drivers are asyncio-only.

    A refused :meth:`advance` aborts the transaction in the server: nothing of it can
    commit, whatever the caller catches. ``lock_timeout`` (seconds, default None: wait as
    long as it takes): the longest :meth:`advance` waits for another transaction that
    holds the fence row (a paused holder's, say), as a ``SET LOCAL lock_timeout`` in force
    until the transaction ends; ``InvalidArgument`` unless it is a number in (0, 86400].

    Isolation levels: under READ COMMITTED (PostgreSQL's default), a writer whose fence row
    another open transaction has advanced waits for it to end, then compares its token with
    the committed one. Under REPEATABLE READ or SERIALIZABLE it gets a serialization failure
    instead (SQLSTATE 40001: asyncpg's ``SerializationError``, psycopg's
    ``SerializationFailure``, which SQLAlchemy wraps in a ``DBAPIError``): roll back and
    retry the whole transaction, which then sees the committed token. The fence is sound
    under every level.
    """

    def __init__(
        self, table: str = "aiozklock_fence", *, lock_timeout: float | None = None
    ) -> None:
        self._table = quote_table(table)
        self.table = table
        self.lock_timeout = lock_timeout
        self._lock_timeout_ms = check_lock_timeout(lock_timeout)
        key = hashlib.blake2b(f"aiozklock.fencing:{self._table}".encode(), digest_size=8)
        self._lock_key = int.from_bytes(key.digest(), "big", signed=True)

    def __repr__(self) -> str:
        timeout = f", lock_timeout={self.lock_timeout!r}" if self.lock_timeout is not None else ""
        return f"PostgresFence(table={self.table!r}{timeout})"

    def _sql(self, driver: Driver, template: str) -> str:
        return template.format(table=self._table, p1=driver.param(1), p2=driver.param(2))

    async def create_table(self, conn: PostgresConnection) -> None:
        """Create the fence table if it does not exist (idempotent, also when several
        processes call it at once). Runs in the connection's transaction if one is open
        (it then commits with it), else in a transaction of its own, committed on return.

        Raises ``InvalidArgument`` if ``conn`` is not a connection of a supported driver;
        database errors (e.g. no CREATE privilege) are the driver's own.
        """
        driver = driver_for(conn)
        lock = _CREATE_LOCK.format(key=self._lock_key)
        create = self._sql(driver, _CREATE)
        if await driver.in_transaction():
            await driver.run(lock, create)
        else:
            async with driver.transaction():
                await driver.run(lock, create)

    async def advance(self, conn: PostgresConnection, resource: str, token: int) -> None:
        """Record ``token`` as the newest fencing token of ``resource``, inside the caller's
        open transaction; a token equal to the stored one is accepted (the same holder
        writing twice). Until the transaction ends, other writers of ``resource`` wait.

        Raises ``StaleFencingToken`` (``newer``: the stored token) if the store has seen a
        newer token: nothing is recorded, and the fence makes the server abort the
        transaction first (a ``RAISE EXCEPTION``, the exception's ``__cause__``): whatever
        the caller catches, its later statements fail (SQLSTATE 25P02) and its ``COMMIT``
        rolls back, so nothing of the transaction can commit (a savepoint the caller opened
        before ``advance()`` and rolls back to is the one way around: don't). With
        ``lock_timeout``, the driver's lock-not-available error (SQLSTATE 55P03) when
        another transaction keeps the fence row longer (the transaction is aborted: retry
        it). ``InvalidArgument`` for a resource that is not a
        non-empty str (at most 2000 UTF-8 bytes, no NUL), a token that is not an int in
        ``[0, 2**63 - 1]`` or a connection of no supported driver, and ``UsageError`` if
        the statement would commit on its own (asyncpg outside ``conn.transaction()``, a
        psycopg connection in autocommit mode outside ``conn.transaction()``, SQLAlchemy
        with ``isolation_level="AUTOCOMMIT"``): all before any SQL. A serialization failure
        under REPEATABLE READ or SERIALIZABLE is the driver's own exception (retry).
        """
        check_resource(resource)
        check_token(token)
        driver = driver_for(conn)
        if await driver.autocommits():
            raise UsageError(
                f"advance() needs an open transaction on {driver.name}'s connection, that "
                f"the caller's own writes join: {driver.how_to_begin} (outside one, the "
                "fence would be committed alone, which protects nothing)"
            )
        if self._lock_timeout_ms is not None:
            await driver.run(_LOCK_TIMEOUT.format(ms=self._lock_timeout_ms))
        accepted = await driver.fetch_token(self._sql(driver, _ADVANCE), resource, token)
        if accepted is None:
            # The row is ours locked until the transaction ends: this reads the token that
            # refused us (READ COMMITTED: the newest committed one).
            newer = await driver.fetch_token(self._sql(driver, _CURRENT), resource)
            await _abort(driver, StaleFencingToken(resource, token, newer))

    async def current(self, conn: PostgresConnection, resource: str) -> int | None:
        """The newest token recorded for ``resource`` that ``conn`` can see, or None if
        there is none. ``InvalidArgument`` as for :meth:`advance`, before any SQL."""
        check_resource(resource)
        driver = driver_for(conn)
        return await driver.fetch_token(self._sql(driver, _CURRENT), resource)
