"""The FastAPI example with a fenced write to PostgreSQL through SQLAlchemy
(``examples/fastapi_fenced.py``), against real ZooKeeper and PostgreSQL.

No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations.
"""

import importlib
from collections.abc import AsyncIterator
from types import ModuleType

import anyio
import asyncpg
import pytest

from aiozklock.fencing import PostgresFence
from tests.test_fastapi import post_all, serve

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # SQLAlchemy's asyncio extension and asyncpg are asyncio-only


@pytest.fixture
async def pg(pg_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """The test's own connection; the example's tables dropped first (each xdist worker has
    its own PostgreSQL)."""
    conn = await asyncpg.connect(pg_dsn)
    await conn.execute("DROP TABLE IF EXISTS orders, aiozklock_fence")
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
def example(hosts: str, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("AIOZKLOCK_HOSTS", hosts)
    monkeypatch.setenv("DATABASE_URL", pg_dsn.replace("postgresql://", "postgresql+asyncpg://"))
    return importlib.reload(importlib.import_module("examples.fastapi_fenced"))


async def test_concurrent_requests_commit_in_token_order(
    example: ModuleType, pg: asyncpg.Connection
) -> None:
    with anyio.fail_after(20):
        async with serve(example.app) as http:
            responses = await post_all(http, ["/orders/157/ship"] * 3)
    assert [r.status_code for r in responses] == [200, 200, 200]
    tokens = sorted(r.json()["fencing_token"] for r in responses)
    assert tokens[0] < tokens[1] < tokens[2]
    row = await pg.fetchrow("SELECT status, shipped_with FROM orders WHERE id = 157")
    assert (row["status"], row["shipped_with"]) == ("shipped", tokens[2])
    assert await PostgresFence().current(pg, "orders/157") == tokens[2]


async def test_a_request_with_a_stale_token_is_503_and_writes_nothing(
    example: ModuleType, pg: asyncpg.Connection
) -> None:
    with anyio.fail_after(20):
        async with serve(example.app) as http:
            (first,) = await post_all(http, ["/orders/157/ship"])
            token = first.json()["fencing_token"]
            # A newer holder (another service, or this one in a later epoch) has written.
            newer = token + (1 << 32)
            async with pg.transaction():
                await PostgresFence().advance(pg, "orders/157", newer)
            (stale,) = await post_all(http, ["/orders/157/ship"])
    assert stale.status_code == 503
    assert stale.headers["Retry-After"] == "1"
    assert str(newer) in stale.json()["detail"]
    row = await pg.fetchrow("SELECT shipped_with FROM orders WHERE id = 157")
    assert row["shipped_with"] == token  # the stale request's update was rolled back
    assert await PostgresFence().current(pg, "orders/157") == newer
