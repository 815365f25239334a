"""``PostgresFence(lock_timeout=...)`` and a paused holder (issue 30, item 3): the holder's
open transaction keeps the fence row locked for as long as it is paused; the next holder's
``advance()`` waits for all of it by default, fails after ``lock_timeout`` with the option,
and is accepted once the server ends the paused session
(``idle_in_transaction_session_timeout``). A real PostgreSQL and a SIGSTOPped process
(``benchmarks/postgres_paused_holder.py``)."""

from __future__ import annotations

import math
from typing import Any

import asyncpg
import pytest

from aiozklock import InvalidArgument
from aiozklock.fencing import PostgresFence
from benchmarks.postgres_paused_holder import measure
from tests._pg import RESOURCE, Tables, anyio_backend, pg, tables

pytestmark = pytest.mark.anyio

__all__ = ["anyio_backend", "pg", "tables"]  # fixtures, imported to be used here

PAUSE = 5.0  # the timeouts below are a tenth of it: the verdicts need no timing margin
TIMEOUT = 0.5


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_paused_holder_blocks_the_next_one_until_a_timeout_ends_it(pg_dsn: str) -> None:
    default = await measure(pg_dsn, "default", PAUSE, TIMEOUT)
    assert (default.result, default.outlasted_the_pause) == ("accepted", True)
    assert default.holder == "committed"  # its token 5 was current: fenced before 7

    timed_out = await measure(pg_dsn, "lock_timeout", PAUSE, TIMEOUT)
    assert timed_out.result == "LockNotAvailableError (55P03)"
    assert not timed_out.outlasted_the_pause
    assert timed_out.seconds >= TIMEOUT * 0.9  # it did wait for the lock, that long

    ended = await measure(pg_dsn, "idle_timeout", PAUSE, TIMEOUT)
    assert (ended.result, ended.outlasted_the_pause) == ("accepted", False)
    assert ended.holder.startswith("commit failed")  # the server ended its session


async def test_lock_timeout_is_local_to_the_transaction(
    pg_dsn: str, pg: asyncpg.Connection, tables: Tables
) -> None:
    fence = PostgresFence(tables.fence, lock_timeout=1.5)
    assert repr(fence) == f"PostgresFence(table={tables.fence!r}, lock_timeout=1.5)"
    conn = await asyncpg.connect(pg_dsn)
    try:
        async with conn.transaction():
            await fence.advance(conn, RESOURCE, 3)
            assert await conn.fetchval("SHOW lock_timeout") == "1500ms"
        assert await conn.fetchval("SHOW lock_timeout") == "0"
    finally:
        await conn.close()
    assert await fence.current(pg, RESOURCE) == 3


@pytest.mark.parametrize("bad", [0, -1, 0.0, math.nan, math.inf, 86401, True, "1", "1s"])
def test_a_lock_timeout_that_is_not_seconds_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidArgument, match="lock_timeout"):
        PostgresFence(lock_timeout=bad)


def test_a_lock_timeout_under_a_millisecond_is_one() -> None:
    assert PostgresFence(lock_timeout=0.0001)._lock_timeout_ms == 1
