"""The real stores a nemesis or a demo run can write its fenced counter to: PostgreSQL
(asyncpg, through :class:`~aiozklock.fencing.PostgresFence`) and Redis (redis-py, through
:class:`~aiozklock.fencing.RedisFence`). Each answers one fenced read or write with the
server's own verdict; :mod:`._nemesis_store` keeps the record of what it decided.

Both drivers run on asyncio only; they are imported when a store is opened, never by
importing the test kit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from aiozklock._exceptions import StaleFencingToken

if TYPE_CHECKING:
    import asyncpg
    from redis.asyncio import Redis

    from aiozklock.fencing import PostgresFence, RedisFence

__all__ = ["COUNTER_TABLE", "PostgresCounter", "RealStore", "RedisCounter", "redis_key"]

#: The counters' table (the fence's is ``PostgresFence``'s default, ``aiozklock_fence``).
COUNTER_TABLE = "aiozklock_nemesis_counter"
_CREATE_COUNTER = (
    f"CREATE TABLE IF NOT EXISTS {COUNTER_TABLE} (resource text PRIMARY KEY, value bigint NOT NULL)"
)
_SELECT = f"SELECT value FROM {COUNTER_TABLE} WHERE resource = $1"
_UPDATE = f"UPDATE {COUNTER_TABLE} SET value = $2 WHERE resource = $1"
#: The Redis keys of a run's counters: a prefix of their own.
_REDIS_PREFIX = "aiozklock-nemesis:"


class RealStore(Protocol):
    """A counter per resource that a real server fences: each call is the server's verdict."""

    #: ``postgres`` or ``redis``: what the report names
    name: str

    async def read(self, client: str, resource: str, token: int) -> tuple[bool, int]:
        """A fenced read: ``(True, value)`` once ``token`` is registered (it then fences
        every older token), ``(False, 0)`` if the server refused it as stale."""
        ...

    async def write(self, client: str, resource: str, token: int, value: int) -> tuple[bool, int]:
        """A fenced write of ``value``: ``(accepted, the value it replaced)``."""
        ...

    async def values(self) -> dict[str, int]:
        """Every resource's value, as the server holds it now."""
        ...

    async def aclose(self) -> None:
        """Remove the run's rows or keys and close the connections."""
        ...


class PostgresCounter:
    """Counters in PostgreSQL, one row per resource, each fenced write a transaction of
    ``PostgresFence.advance`` and the counter's ``SELECT``/``UPDATE`` on the client's own
    asyncpg connection (opened on first use): the server refuses a stale token."""

    name = "postgres"

    def __init__(self, dsn: str, resources: Sequence[str], fence: PostgresFence) -> None:
        self._dsn = dsn
        self._resources = list(resources)
        self._fence = fence
        self._connections: dict[str, asyncpg.Connection[Any]] = {}

    @classmethod
    async def open(cls, dsn: str, resources: Sequence[str]) -> PostgresCounter:
        """Create the tables if need be and the run's counters at 0; raises asyncpg's
        errors (e.g. the server is unreachable)."""
        import asyncpg

        from aiozklock.fencing import PostgresFence

        store = cls(dsn, resources, PostgresFence())
        conn = await asyncpg.connect(dsn)
        store._connections[""] = conn
        await store._fence.create_table(conn)
        async with conn.transaction():
            await conn.execute(_CREATE_COUNTER)
            await conn.executemany(
                f"INSERT INTO {COUNTER_TABLE} (resource, value) VALUES ($1, 0) "
                "ON CONFLICT (resource) DO UPDATE SET value = 0",
                [(resource,) for resource in store._resources],
            )
        return store

    async def _connection(self, client: str) -> asyncpg.Connection[Any]:
        conn = self._connections.get(client)
        if conn is None:
            import asyncpg

            conn = self._connections[client] = await asyncpg.connect(self._dsn)
        return conn

    async def read(self, client: str, resource: str, token: int) -> tuple[bool, int]:
        conn = await self._connection(client)
        try:
            async with conn.transaction():
                await self._fence.advance(conn, resource, token)
                value = await conn.fetchval(_SELECT, resource)
        except StaleFencingToken:
            return False, 0
        return True, int(value)

    async def write(self, client: str, resource: str, token: int, value: int) -> tuple[bool, int]:
        conn = await self._connection(client)
        try:
            async with conn.transaction():
                await self._fence.advance(conn, resource, token)
                # The fence row is ours until the commit: nobody writes in between.
                previous = await conn.fetchval(_SELECT, resource)
                await conn.execute(_UPDATE, resource, value)
        except StaleFencingToken:
            return False, 0
        return True, int(previous)

    async def values(self) -> dict[str, int]:
        conn = self._connections[""]
        rows = await conn.fetch(
            f"SELECT resource, value FROM {COUNTER_TABLE} WHERE resource = ANY($1)",
            self._resources,
        )
        return {str(row["resource"]): int(row["value"]) for row in rows}

    async def aclose(self) -> None:
        try:
            conn = self._connections.get("")
            if conn is not None and not conn.is_closed():
                await conn.execute(
                    f"DELETE FROM {COUNTER_TABLE} WHERE resource = ANY($1)", self._resources
                )
                await conn.execute(
                    'DELETE FROM "aiozklock_fence" WHERE resource = ANY($1)', self._resources
                )
        finally:
            for conn in self._connections.values():
                try:
                    await conn.close(timeout=5)
                except Exception:  # a broken connection: drop it without the goodbye
                    conn.terminate()
            self._connections.clear()


def redis_key(resource: str) -> str:
    """The Redis key of a resource's fenced counter."""
    return _REDIS_PREFIX + resource


class RedisCounter:
    """Counters in Redis, one fenced key per resource: writes are ``RedisFence.set``, reads
    ``RedisFence.advance``, which registers the token without changing the value, so that
    the new holder fences older ones from its grant on (a read-modify-write whose read did
    not would lose the update of a stale holder that wrote in between)."""

    name = "redis"

    def __init__(self, redis: Redis, resources: Sequence[str]) -> None:
        from aiozklock.fencing import RedisFence

        self._redis = redis
        self._resources = list(resources)
        self._fence: RedisFence = RedisFence(redis)

    @classmethod
    async def open(cls, url: str, resources: Sequence[str]) -> RedisCounter:
        """Connect and reset the run's keys; raises redis-py's errors."""
        from redis.asyncio import Redis

        redis = Redis.from_url(url)
        try:
            if resources:
                await redis.delete(*[redis_key(resource) for resource in resources])
                # A missing fence refuses every token: the run's keys are created new, at
                # token 0, in the fence's own layout, before any holder of the run exists.
                for resource in resources:
                    await redis.hset(redis_key(resource), "token", "0" * 19)
        except BaseException:
            await redis.aclose()
            raise
        return cls(redis, resources)

    async def read(self, client: str, resource: str, token: int) -> tuple[bool, int]:
        try:
            value = await self._fence.advance(redis_key(resource), token)
        except StaleFencingToken:
            return False, 0
        return True, int(value or 0)

    async def write(self, client: str, resource: str, token: int, value: int) -> tuple[bool, int]:
        key = redis_key(resource)
        # One call at a time per resource (the record keeper's turn): nothing between the two.
        stored = await self._fence.get(key)
        previous = int(stored[0]) if stored is not None else 0
        try:
            await self._fence.set(key, str(value), token)
        except StaleFencingToken:
            return False, previous
        return True, previous

    async def values(self) -> dict[str, int]:
        found = {}
        for resource in self._resources:
            stored = await self._fence.get(redis_key(resource))
            found[resource] = int(stored[0]) if stored is not None else 0
        return found

    async def aclose(self) -> None:
        try:
            if self._resources:
                await self._redis.delete(*[redis_key(r) for r in self._resources])
        finally:
            await self._redis.aclose()
