"""``locked(identifier=...)`` is checked by the recipes' own rule when it is declared: an
identifier the lock would refuse (longer than 1,024 characters) is refused at once, not
answered with a 500 by every request. Real FastAPI over httpx's ASGI transport, real
ZooKeeper.

No ``from __future__ import annotations`` here: FastAPI reads the endpoints' annotations.
"""

from typing import Annotated

import anyio
import pytest
from fastapi import FastAPI

import aiozklock
from aiozklock.fastapi import lifespan, locked, locked_all
from tests.test_fastapi import ORDER, serve

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("error::RuntimeWarning")]

LONGEST = "x" * 1024


async def test_an_identifier_the_lock_refuses_is_refused_at_declaration(hosts: str) -> None:
    too_long = LONGEST + "x"
    with pytest.raises(aiozklock.InvalidArgument, match="longer than 1024 characters"):
        locked(ORDER, timeout=1, identifier=too_long)
    with pytest.raises(aiozklock.InvalidArgument, match="longer than 1024 characters"):
        locked_all([ORDER], timeout=1, identifier=too_long)
    with pytest.raises(aiozklock.InvalidArgument, match="identifier must be a str, not int"):
        locked(ORDER, timeout=1, identifier=7)  # type: ignore[arg-type]


async def test_the_longest_identifier_is_accepted_and_stored(
    hosts: str, zk: aiozklock.ZooKeeperClient
) -> None:
    app = FastAPI(lifespan=lifespan(hosts, session_timeout=4.0))
    seen: list[str | None] = []

    @app.post("/orders/{order_id:int}")
    async def ship(
        order_id: int,
        lock: Annotated[aiozklock.Lock, locked(ORDER, timeout=5, identifier=LONGEST)],
    ) -> int:
        (contender,) = await zk.lock(lock.path).contenders()
        seen.append(contender.identifier)
        return lock.fencing_token

    with anyio.fail_after(10):
        async with serve(app) as http:
            response = await http.post("/orders/7")
    assert response.status_code == 200, response.text
    assert seen == [LONGEST]
