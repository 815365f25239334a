"""The FastAPI example with a fenced write to PostgreSQL through SQLAlchemy
(``examples/fastapi_fenced.py``), against real ZooKeeper and PostgreSQL.

No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations.
"""

import importlib
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Annotated

import anyio
import asyncpg
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine

import aiozklock
from aiozklock.fastapi import lifespan, locked
from aiozklock.fencing import PostgresFence
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
from tests.test_fastapi import ORDER, post_all, serve

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # SQLAlchemy's asyncio extension and asyncpg are asyncio-only


__all__ = ["pg"]  # a fixture


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
    assert stale.headers["Aiozklock-Outcome"] == "not-written"
    assert str(newer) in stale.json()["detail"]
    row = await pg.fetchrow("SELECT shipped_with FROM orders WHERE id = 157")
    assert row["shipped_with"] == token  # the stale request's update was rolled back
    assert await PostgresFence().current(pg, "orders/157") == newer


# ---- A lock lost during an endpoint that does not commit through Commit ----------------
#
# The endpoint below writes as examples/fastapi_fenced.py did before Commit: a plain
# transaction. The dependency cannot know what it committed before a loss cancelled it.


@pytest.fixture
async def engine(pg_dsn: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(pg_dsn.replace("postgresql://", "postgresql+asyncpg://"))
    yield engine
    await engine.dispose()


def plain_app(hosts: str, engine: AsyncEngine, pauses: dict[str, Pause], shield: bool) -> FastAPI:
    """A fenced endpoint with a plain transaction, which waits at ``pauses`` ("after
    advance", "after commit"); ``shield``: its transaction is shielded from the loss's
    cancellation, as a paused process's is when it resumes and commits before it has
    processed the notification of its session's end."""
    app = FastAPI(lifespan=lifespan(hosts, session_timeout=4.0))
    Session = async_sessionmaker(engine, expire_on_commit=False)

    @app.post("/orders/{order_id:int}/ship")
    async def ship_order(
        order_id: int, lock: Annotated[aiozklock.Lock, locked(ORDER, timeout=5.0)]
    ) -> dict[str, int]:
        with anyio.CancelScope(shield=shield):
            async with Session() as session, session.begin():
                await FENCE.advance(session, RESOURCE, lock.fencing_token)
                if "after advance" in pauses:
                    await pauses["after advance"]()
                await ship(session, lock.fencing_token)
        if "after commit" in pauses:  # no await otherwise: nothing where a loss could land
            await pauses["after commit"]()
        return {"fencing_token": lock.fencing_token}

    return app


async def test_a_holder_that_committed_before_it_noticed_its_loss_gets_its_own_answer(
    proxy: FaultProxy, chroot: str, zk_hosts: str, engine: AsyncEngine, pg: asyncpg.Connection
) -> None:
    """Issue 30, item 4: a holder paused after advance() past its session resumes and
    commits before it notices the loss; its write landed, so its answer is its own: a 503
    would tell the client that nothing was written, and its retry would ship twice."""
    paused = Pause()
    app = plain_app(proxy.address + chroot, engine, {"after advance": paused}, shield=True)
    with anyio.fail_after(30):
        async with serve(app) as http, anyio.create_task_group() as tg:
            call = await start(http, tg)
            try:
                await paused.reached.wait()
                await expire_and_notice(app, proxy, zk_hosts)
            finally:
                paused.go.set()  # it resumes, and commits before it looks at its lock
    assert call.response.status_code == 200, call.response.text
    token = call.response.json()["fencing_token"]
    assert await shipments(pg) == (1, token)
    assert await FENCE.current(pg, RESOURCE) == token


async def test_a_loss_that_cancels_a_plain_endpoint_after_its_commit_is_not_a_503(
    proxy: FaultProxy, chroot: str, zk_hosts: str, engine: AsyncEngine, pg: asyncpg.Connection
) -> None:
    """An endpoint without Commit, cancelled by the loss after it committed: it has
    written, and the dependency cannot know it, so the answer says the outcome is unknown
    (500, ``Aiozklock-Outcome: unknown``), never the retry-safe 503."""
    paused = Pause()
    app = plain_app(proxy.address + chroot, engine, {"after commit": paused}, shield=False)
    with anyio.fail_after(30):
        async with serve(app) as http, anyio.create_task_group() as tg:
            call = await start(http, tg)
            try:
                await paused.reached.wait()
                await expire_and_notice(app, proxy, zk_hosts)
            finally:
                paused.go.set()
    assert paused.cancelled
    assert call.response.status_code == 500, call.response.text
    assert call.response.headers["Aiozklock-Outcome"] == "unknown"
    assert "Retry-After" not in call.response.headers
    assert (await shipments(pg))[0] == 1  # it had written
