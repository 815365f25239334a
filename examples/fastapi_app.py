"""A FastAPI service that ships each order under its own ZooKeeper lock.

    AIOZKLOCK_HOSTS=127.0.0.1:2181/shop uvicorn examples.fastapi_app:app

(``pip install "aiozklock[fastapi]" uvicorn``.) Then ``curl -X POST
localhost:8000/orders/157/ship``: concurrent calls for one order take turns (or get 409
after 1 s), distinct orders run in parallel, and if the lock is lost mid-request the
handler is cancelled and the caller gets 503 with ``Retry-After``.
"""

import os
from typing import Annotated

import anyio
from fastapi import FastAPI

import aiozklock
from aiozklock.fastapi import lifespan, locked

app = FastAPI(lifespan=lifespan(os.environ.get("AIOZKLOCK_HOSTS", "127.0.0.1:2181/shop")))

OrderLock = Annotated[aiozklock.Lock, locked("/locks/orders/{order_id}", timeout=1.0)]

# Stands for the resource the lock protects: it keeps the highest fencing token it has seen
# per order, and refuses a write with a lower one (a holder that lost the lock without knowing).
shipped: dict[int, int] = {}


@app.post("/orders/{order_id:int}/ship")
async def ship(order_id: int, lock: OrderLock) -> dict[str, int]:
    await anyio.sleep(0.1)  # the slow part of shipping
    if lock.fencing_token < shipped.get(order_id, 0):
        raise RuntimeError("stale fencing token")
    shipped[order_id] = lock.fencing_token
    return {"order": order_id, "fencing_token": lock.fencing_token}
