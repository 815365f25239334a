"""What a fenced request whose lock is lost is answered, when its endpoint commits through
``aiozklock.fastapi.Commit``: 503 (``Aiozklock-Outcome: not-written``) if nothing was
committed, its own answer once its commit returned, 500 (``Aiozklock-Outcome: unknown``)
if the COMMIT's outcome is unknown; against real ZooKeeper and PostgreSQL.

Each case is made to happen: the endpoint waits at a point (or PostgreSQL's COMMIT is held
by a proxy) while the application's session is cut off and expired.

No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations.
"""

import importlib
from collections.abc import AsyncIterator
from typing import Annotated

import anyio
import asyncpg
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine

import aiozklock
from aiozklock.fastapi import Commit, lifespan, locked
from aiozklock.testing import FaultProxy
from tests._fastapi_pg import (
    FENCE,
    RESOURCE,
    Pause,
    expire_and_notice,
    pg,
    ship,
    shipments,
    start,
)
from tests._pg_proxy import PgProxy, pg_proxy
from tests.test_fastapi import ORDER, serve

pytestmark = pytest.mark.anyio
__all__ = ["pg"]  # a fixture


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # SQLAlchemy's asyncio extension and asyncpg are asyncio-only


@pytest.fixture
async def db(pg_dsn: str) -> AsyncIterator[PgProxy]:
    """PostgreSQL behind a proxy that can hold or cut a COMMIT."""
    async with pg_proxy(pg_dsn) as proxy:
        yield proxy


@pytest.fixture
async def engine(db: PgProxy) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(db.dsn("postgresql+asyncpg"))
    yield engine
    await engine.dispose()


def committing_app(
    hosts: str, engine: AsyncEngine, pauses: dict[str, Pause], shield: bool = False
) -> FastAPI:
    """A fenced endpoint that commits through Commit, waiting at ``pauses`` ("after
    advance", "after commit"); ``shield``: as ``plain_app`` in test_fastapi_fenced.py."""
    app = FastAPI(lifespan=lifespan(hosts, session_timeout=4.0))
    Session = async_sessionmaker(engine, expire_on_commit=False)

    @app.post("/orders/{order_id:int}/ship")
    async def ship_order(
        order_id: int,
        lock: Annotated[aiozklock.Lock, locked(ORDER, timeout=5.0)],
        commit: Commit,
    ) -> dict[str, int]:
        with anyio.CancelScope(shield=shield):
            async with Session() as session, commit(session.begin()):
                await FENCE.advance(session, RESOURCE, lock.fencing_token)
                if "after advance" in pauses:
                    await pauses["after advance"]()
                await ship(session, lock.fencing_token)
        if "after commit" in pauses:
            await pauses["after commit"]()
        return {"fencing_token": lock.fencing_token}

    return app


async def test_a_loss_after_the_commit_gets_the_endpoints_own_answer(
    proxy: FaultProxy, chroot: str, zk_hosts: str, engine: AsyncEngine, pg: asyncpg.Connection
) -> None:
    paused = Pause()
    app = committing_app(proxy.address + chroot, engine, {"after commit": paused})
    with anyio.fail_after(30):
        async with serve(app) as http, anyio.create_task_group() as tg:
            call = await start(http, tg)
            try:
                await paused.reached.wait()
                await expire_and_notice(app, proxy, zk_hosts)
            finally:
                paused.go.set()
    assert not paused.cancelled  # the commit was sent: the loss no longer cancels
    assert call.response.status_code == 200, call.response.text
    token = call.response.json()["fencing_token"]
    assert await shipments(pg) == (1, token)


async def test_a_loss_before_the_commit_is_503_not_written_and_writes_nothing(
    proxy: FaultProxy, chroot: str, zk_hosts: str, engine: AsyncEngine, pg: asyncpg.Connection
) -> None:
    paused = Pause()
    app = committing_app(proxy.address + chroot, engine, {"after advance": paused})
    with anyio.fail_after(30):
        async with serve(app) as http, anyio.create_task_group() as tg:
            call = await start(http, tg)
            try:
                await paused.reached.wait()
                await expire_and_notice(app, proxy, zk_hosts)
            finally:
                paused.go.set()
    assert paused.cancelled
    assert call.response.status_code == 503, call.response.text
    assert call.response.headers["Aiozklock-Outcome"] == "not-written"
    assert call.response.headers["Retry-After"] == "1"
    assert await shipments(pg) == (0, None)
    assert await FENCE.current(pg, RESOURCE) is None  # the advance was rolled back


async def test_a_holder_resumed_after_its_loss_is_refused_at_the_commit_point(
    proxy: FaultProxy, chroot: str, zk_hosts: str, engine: AsyncEngine, pg: asyncpg.Connection
) -> None:
    """Issue 30's paused holder, with Commit: it resumes after its loss and goes on
    writing (shielded, as a process that has not processed the notification yet); right
    before COMMIT its lock is checked, the transaction rolled back: 503, nothing written."""
    paused = Pause()
    app = committing_app(proxy.address + chroot, engine, {"after advance": paused}, shield=True)
    with anyio.fail_after(30):
        async with serve(app) as http, anyio.create_task_group() as tg:
            call = await start(http, tg)
            try:
                await paused.reached.wait()
                await expire_and_notice(app, proxy, zk_hosts)
            finally:
                paused.go.set()
    assert not paused.cancelled
    assert call.response.status_code == 503, call.response.text
    assert call.response.headers["Aiozklock-Outcome"] == "not-written"
    assert "before the commit" in call.response.json()["detail"]
    assert await shipments(pg) == (0, None)


async def test_a_loss_during_the_commit_lets_it_finish_and_gets_the_endpoints_answer(
    proxy: FaultProxy,
    chroot: str,
    zk_hosts: str,
    db: PgProxy,
    engine: AsyncEngine,
    pg: asyncpg.Connection,
) -> None:
    app = committing_app(proxy.address + chroot, engine, {})
    with anyio.fail_after(30):
        async with serve(app) as http, anyio.create_task_group() as tg:
            db.hold_commit()
            call = await start(http, tg)
            try:
                await db.commit_seen.wait()  # the COMMIT is on its way, held
                await expire_and_notice(app, proxy, zk_hosts)
            finally:
                db.release()
    assert call.response.status_code == 200, call.response.text
    assert await shipments(pg) == (1, call.response.json()["fencing_token"])


async def test_a_commit_whose_reply_is_lost_is_500_unknown_and_a_replay_ships_once(
    hosts: str, db: PgProxy, pg: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection to PostgreSQL dies during COMMIT, after the server committed: the
    client cannot be told nothing was written (it was), nor what was: 500 with
    ``Aiozklock-Outcome: unknown``. The example's replay with the same Idempotency-Key
    answers the recorded answer and ships nothing again."""
    monkeypatch.setenv("AIOZKLOCK_HOSTS", hosts)
    monkeypatch.setenv("DATABASE_URL", db.dsn("postgresql+asyncpg"))
    example = importlib.reload(importlib.import_module("examples.fastapi_fenced"))
    key = {"Idempotency-Key": "7b4e0c6a-shipping-157"}
    with anyio.fail_after(30):
        async with serve(example.app) as http:
            db.lose_commit_reply()
            lost = await http.post("/orders/157/ship", headers=key)
            assert db.commit_seen.is_set()
            replay = await http.post("/orders/157/ship", headers=key)
    assert lost.status_code == 500, lost.text
    assert lost.headers["Aiozklock-Outcome"] == "unknown"
    assert "Retry-After" not in lost.headers
    token = (await shipments(pg))[1]
    assert await shipments(pg) == (1, token)  # it was committed
    assert replay.status_code == 200, replay.text
    assert replay.json() == {"order": 157, "fencing_token": token}
    assert await shipments(pg) == (1, token)  # shipped once


async def test_commit_on_a_route_without_a_lock_is_refused_at_startup(hosts: str) -> None:
    app = FastAPI(lifespan=lifespan(hosts, session_timeout=4.0))

    @app.post("/orders/{order_id:int}/ship")
    async def ship_order(order_id: int, commit: Commit) -> None:
        return None

    with pytest.raises(aiozklock.UsageError, match="declares Commit but holds no lock"):
        async with serve(app):
            pass
