"""What the tests of fenced FastAPI requests whose lock is lost share: a point where the
endpoint waits for the test, the real expiry of the application's session, and the shop's
tables in PostgreSQL.

No ``from __future__ import annotations``: the tests' endpoints are read by FastAPI.
"""

from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
import asyncpg
import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

import aiozklock
from aiozklock.fastapi import STATE_ATTRIBUTE
from aiozklock.fencing import PostgresFence
from aiozklock.testing import FaultProxy, expire_session

FENCE = PostgresFence()
RESOURCE = "orders/157"
URL = "/orders/157/ship"


class Pause:
    """A point in the endpoint: it says it got there, and waits until the test lets it on."""

    def __init__(self) -> None:
        self.reached = anyio.Event()
        self.go = anyio.Event()
        self.cancelled = False

    async def __call__(self) -> None:
        self.reached.set()
        try:
            await self.go.wait()
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise


async def expire_and_notice(app: Any, proxy: FaultProxy, zk_hosts: str) -> None:
    """Cut the application's client (behind ``proxy``) off, return once it has noticed
    (the loss policy has run: its locks are lost), and expire its session on the server
    meanwhile, so that the lock is really free; the client then reconnects to a new one."""
    zk: aiozklock.ZooKeeperClient = getattr(app.state, STATE_ATTRIBUTE)
    noticed = anyio.Event()

    def changed(change: aiozklock.StateChange) -> None:
        if change.state is not aiozklock.SessionState.CONNECTED:
            noticed.set()

    remove = zk.add_listener(changed)
    try:
        proxy.blackhole(True)  # the client cannot take its session back from the expiry
        await proxy.drop_all()
        await noticed.wait()
        await expire_session(zk_hosts, zk.session_id, zk.session_password)
    finally:
        remove()
        proxy.blackhole(False)


async def ship(session: AsyncSession, token: int) -> None:
    """The order's update: one more shipment, with the token that wrote it."""
    await session.execute(
        text(
            "INSERT INTO orders (id, status, shipped_with, shipments) "
            "VALUES (157, 'shipped', :token, 1) ON CONFLICT (id) DO UPDATE "
            "SET shipped_with = :token, shipments = orders.shipments + 1"
        ),
        {"token": token},
    )


async def shipments(pg: asyncpg.Connection) -> tuple[int, int | None]:
    """How many times the order was shipped, and the token of the last one."""
    row = await pg.fetchrow("SELECT shipments, shipped_with FROM orders WHERE id = 157")
    return (0, None) if row is None else (row["shipments"], row["shipped_with"])


@pytest.fixture
async def pg(pg_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """The test's own connection, with the shop's tables made afresh (each xdist worker has
    its own PostgreSQL)."""
    conn = await asyncpg.connect(pg_dsn)
    await conn.execute("DROP TABLE IF EXISTS orders, requests, aiozklock_fence")
    await FENCE.create_table(conn)
    await conn.execute(
        "CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL, "
        "shipped_with bigint NOT NULL, shipments int NOT NULL)"
    )
    try:
        yield conn
    finally:
        await conn.close()


async def start(http: httpx.AsyncClient, tg: anyio.abc.TaskGroup, **kwargs: Any) -> Any:
    """POST ``URL`` in the background; ``.response`` once answered."""

    class Call:
        response: httpx.Response | None = None

    call = Call()

    async def post() -> None:
        call.response = await http.post(URL, **kwargs)

    tg.start_soon(post)
    return call
