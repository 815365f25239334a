"""A FastAPI service whose writes to PostgreSQL are fenced: PostgreSQL itself refuses the
write of a request whose lock is no longer current (a paused or partitioned holder).

    AIOZKLOCK_HOSTS=127.0.0.1:2181/shop \\
    DATABASE_URL=postgresql+asyncpg://postgres@127.0.0.1:5432/postgres \\
    uvicorn examples.fastapi_fenced:app

(``pip install "aiozklock[fastapi,postgres]" "sqlalchemy[asyncio]" uvicorn``.) Then ``curl -X
POST localhost:8000/orders/157/ship``. A request whose fencing token is older than one the
database has already accepted for the order gets 503 with ``Retry-After``, and its
transaction (the fence and the order's update) is rolled back.
"""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

import aiozklock
from aiozklock.fastapi import lifespan, locked
from aiozklock.fencing import PostgresFence

engine = create_async_engine(
    os.environ.get("DATABASE_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres")
)
Session = async_sessionmaker(engine, expire_on_commit=False)
fence = PostgresFence()  # table "aiozklock_fence": one row (resource, token) per order


@asynccontextmanager
async def database(app: FastAPI) -> AsyncIterator[None]:
    async with engine.begin() as conn:
        await fence.create_table(conn)
        await conn.execute(
            text(
                "CREATE TABLE IF NOT EXISTS orders "
                "(id bigint PRIMARY KEY, status text NOT NULL, shipped_with bigint NOT NULL)"
            )
        )
    yield
    await engine.dispose()


app = FastAPI(
    lifespan=lifespan(
        os.environ.get("AIOZKLOCK_HOSTS", "127.0.0.1:2181/shop"), app_lifespan=database
    )
)
OrderLock = Annotated[aiozklock.Lock, locked("/locks/orders/{order_id}", timeout=1.0)]


@app.exception_handler(aiozklock.StaleFencingToken)
async def stale(request: Request, exc: aiozklock.StaleFencingToken) -> JSONResponse:
    # As for a lock lost during the request: the caller may retry (and gets a newer token).
    return JSONResponse({"detail": str(exc)}, status_code=503, headers={"Retry-After": "1"})


@app.post("/orders/{order_id:int}/ship")
async def ship(order_id: int, lock: OrderLock) -> dict[str, int]:
    async with Session() as session, session.begin():
        # First in the transaction: StaleFencingToken if the database has seen a newer token
        # for this order; the update below then never commits.
        await fence.advance(session, f"orders/{order_id}", lock.fencing_token)
        await session.execute(
            text(
                "INSERT INTO orders (id, status, shipped_with) VALUES (:id, 'shipped', :token) "
                "ON CONFLICT (id) DO UPDATE SET status = 'shipped', shipped_with = :token"
            ),
            {"id": order_id, "token": lock.fencing_token},
        )
    return {"order": order_id, "fencing_token": lock.fencing_token}
