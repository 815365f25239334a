"""Smoke test of the fenced-transaction benchmark: tiny sizes, correctness only, never an
assertion on time."""

from __future__ import annotations

import asyncpg
import pytest

from aiozklock.fencing import PostgresFence
from benchmarks import postgres_fence
from tests._pg import anyio_backend

pytestmark = pytest.mark.anyio

__all__ = ["anyio_backend"]  # a fixture, imported to be used here


async def test_every_driver_is_measured_fenced_and_unfenced(pg_dsn: str) -> None:
    args = postgres_fence.parse_args(["--transactions", "3", "--rounds", "2", "--warmup", "1"])
    result = await postgres_fence.bench(args, pg_dsn)
    assert result["drivers"] == list(postgres_fence.DRIVERS)
    assert len(result["rounds"]) == 2
    for values in result["rounds"]:
        for driver in postgres_fence.DRIVERS:
            assert set(values[driver]) == {"fenced", "unfenced"}
    header = {"date": "now", "machine": "m", "versions": "v", "server": "s", "elapsed_s": 1.0}
    text = postgres_fence.report(args, result, header)
    assert all(f"| {driver} |" in text for driver in postgres_fence.DRIVERS)
    assert set(result["ratios"]) == set(postgres_fence.DRIVERS)
    conn = await asyncpg.connect(pg_dsn)
    try:
        # Each driver's fenced transactions advanced its own resource's fence. Its tokens:
        # warm-up 1-2, round 1 unfenced 3-5 then fenced 6-8, round 2 fenced first 9-11.
        fence = PostgresFence("bench_fence")
        for driver in postgres_fence.DRIVERS:
            assert await fence.current(conn, f"bench/{driver}") == 11
    finally:
        await conn.close()
