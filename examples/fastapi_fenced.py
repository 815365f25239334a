"""A FastAPI service whose writes to PostgreSQL are fenced: PostgreSQL itself refuses the
write of a request whose lock is no longer current (a paused or partitioned holder).

    AIOZKLOCK_HOSTS=127.0.0.1:2181/shop \\
    DATABASE_URL=postgresql+asyncpg://postgres@127.0.0.1:5432/postgres \\
    uvicorn examples.fastapi_fenced:app

(``pip install "aiozklock[fastapi,postgres]" "sqlalchemy[asyncio]" uvicorn``.) Then ``curl -X
POST -H "Idempotency-Key: $(uuidgen)" localhost:8000/orders/157/ship``.

What a client gets says what was written:

* 200: shipped (the endpoint's own answer), even if the lock was lost after the commit;
* 503 with ``Retry-After`` and ``Aiozklock-Outcome: not-written``: the lock was lost, or the
  database refused a token older than one it has accepted, before anything was committed:
  retry;
* 500 with ``Aiozklock-Outcome: unknown``: the commit may or may not have landed (the
  connection to PostgreSQL died during COMMIT): send the request again with the same
  ``Idempotency-Key``. The key is recorded in the transaction that ships, so a request
  that did commit answers the replay with its recorded answer, and ships nothing again.
"""

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import FastAPI, Header
from sqlalchemy import text
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

import aiozklock
from aiozklock.fastapi import Commit, lifespan, locked
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
                "CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, status text NOT NULL, "
                "shipped_with bigint NOT NULL, shipments int NOT NULL)"
            )
        )
        # The answers of the requests that committed, by their Idempotency-Key.
        await conn.execute(
            text("CREATE TABLE IF NOT EXISTS requests (key text PRIMARY KEY, answer text NOT NULL)")
        )
    yield
    await engine.dispose()


app = FastAPI(
    lifespan=lifespan(
        os.environ.get("AIOZKLOCK_HOSTS", "127.0.0.1:2181/shop"), app_lifespan=database
    )
)
OrderLock = Annotated[aiozklock.Lock, locked("/locks/orders/{order_id}", timeout=1.0)]


@app.post("/orders/{order_id:int}/ship")
async def ship(
    order_id: int,
    lock: OrderLock,
    commit: Commit,
    idempotency_key: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    # commit(...): a lost lock is answered by what was committed (503 before, our own
    # answer after, 500 "unknown" if the COMMIT itself failed).
    async with Session() as session, commit(session.begin()):
        # First in the transaction: StaleFencingToken (503, nothing written) if the
        # database has seen a newer token for this order; the update below then never commits.
        await fence.advance(session, f"orders/{order_id}", lock.fencing_token)
        if idempotency_key is not None:
            done = await session.scalar(
                text("SELECT answer FROM requests WHERE key = :key"), {"key": idempotency_key}
            )
            if done is not None:  # a replay of a request that committed: its answer again
                answer: dict[str, Any] = json.loads(done)
                return answer
        await session.execute(
            text(
                "INSERT INTO orders (id, status, shipped_with, shipments) "
                "VALUES (:id, 'shipped', :token, 1) ON CONFLICT (id) DO UPDATE "
                "SET status = 'shipped', shipped_with = :token, shipments = orders.shipments + 1"
            ),
            {"id": order_id, "token": lock.fencing_token},
        )
        answer = {"order": order_id, "fencing_token": lock.fencing_token}
        if idempotency_key is not None:
            await session.execute(
                text("INSERT INTO requests (key, answer) VALUES (:key, :answer)"),
                {"key": idempotency_key, "answer": json.dumps(answer)},
            )
    return answer
