"""The cost of a fenced write in Redis (``RedisFence.set``: one EVALSHA of a Lua script that
compares tokens and writes a hash) against a plain ``SET`` of the same value.

One redis-py asyncio client, one write at a time (latency, not throughput), on a throwaway
``redis-server`` (or ``--url``). Rounds interleave the variants (the order alternates each
batch of 50 writes) so that drift of a shared machine hits both alike; a round is ``ops``
writes of each. Reports, per variant, the median per-write wall and client CPU time,
the ratio to ``set`` (median over rounds [min-max]), and the server's own time per call
(SET and EVALSHA, from ``INFO commandstats`` before and after the rounds).

    PYTHONPATH=. .venv/bin/python benchmarks/redis_fence_cost.py [--ops 2000] [--rounds 7]
        [--url redis://host:port/db]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio

from aiozklock.fencing import RedisFence
from aiozklock.testing import RedisServer
from benchmarks.stats import RatioRange, median

VARIANTS = ("set", "fenced")
VALUE = b"x" * 100
BATCH = 50  # writes of one variant timed together, alternating with the other's
# Tokens of a real size: a zxid of epoch 7 (the high 32 bits).
FIRST_TOKEN = 7 << 32


class Writers:
    """The two ways to write ``VALUE``: ``await client.set()`` and ``await fence.set()``
    with a token that grows by one each write (every fenced write is accepted)."""

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self.client = client
        self.fence = RedisFence(client)
        self.token = FIRST_TOKEN

    async def run(self, variant: str, ops: int) -> tuple[float, float]:
        """``ops`` writes of ``variant``; returns the (wall, CPU) seconds per write."""
        wall, cpu = time.perf_counter(), time.process_time()
        if variant == "set":
            for _ in range(ops):
                await self.client.set("bench:plain", VALUE)
        else:
            for _ in range(ops):
                self.token += 1
                await self.fence.set("bench:fenced", VALUE, self.token)
        return (time.perf_counter() - wall) / ops, (time.process_time() - cpu) / ops


@dataclass(frozen=True)
class Measured:
    """Per variant: one (wall, CPU) per-write time per round, and the server's microseconds
    per call over the rounds (SET for ``set``, EVALSHA for ``fenced``)."""

    rounds: dict[str, list[tuple[float, float]]]
    server_us: dict[str, float]


def server_times(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """Microseconds per call of each variant's command between two ``INFO commandstats``."""
    times = {}
    for variant, command in (("set", "cmdstat_set"), ("fenced", "cmdstat_evalsha")):
        start = before.get(command, {"calls": 0, "usec": 0})
        calls = int(after[command]["calls"]) - int(start["calls"])
        times[variant] = (int(after[command]["usec"]) - int(start["usec"])) / max(1, calls)
    return times


async def measure(url: str, ops: int, rounds: int) -> Measured:
    """``rounds`` interleaved rounds of ``ops`` writes per variant."""
    results: dict[str, list[tuple[float, float]]] = {variant: [] for variant in VARIANTS}
    client = redis.asyncio.from_url(url)
    try:
        writers = Writers(client)
        # A missing fence refuses every token: the benchmark's own key is created at 0 (no
        # holder exists; an application creates its keys with RedisFence.recover).
        await client.delete("bench:fenced")
        await client.hset("bench:fenced", "token", "0" * 19)
        for variant in VARIANTS:
            await writers.run(variant, max(10, ops // 10))  # warm-up (and SCRIPT LOAD)
        before = await client.info("commandstats")
        for _ in range(rounds):
            totals = dict.fromkeys(VARIANTS, (0.0, 0.0))
            # Small alternating batches: a burst of load on a shared machine hits both.
            for batch in range(max(1, ops // BATCH)):
                for variant in VARIANTS if batch % 2 == 0 else VARIANTS[::-1]:
                    wall, cpu = await writers.run(variant, BATCH)
                    totals[variant] = (totals[variant][0] + wall, totals[variant][1] + cpu)
            batches = max(1, ops // BATCH)
            for variant, (wall, cpu) in totals.items():
                results[variant].append((wall / batches, cpu / batches))
        after = await client.info("commandstats")
        await client.delete("bench:plain", "bench:fenced")
    finally:
        await client.aclose()
    return Measured(results, server_times(before, after))


def report(measured: Measured) -> str:
    """A table: per variant, median per-write times, the ratios to ``set``, server time."""
    results, server = measured.rounds, measured.server_us
    lines = [
        "variant  wall/write  cpu/write   wall ratio [min-max]    cpu ratio [min-max]"
        "    server/call"
    ]
    base = results["set"]
    for variant, times in results.items():
        walls = [wall for wall, _ in times]
        cpus = [cpu for _, cpu in times]
        wall = RatioRange.of([w / b[0] for w, b in zip(walls, base, strict=True)])
        cpu = RatioRange.of([c / b[1] for c, b in zip(cpus, base, strict=True)])
        assert wall is not None
        assert cpu is not None
        lines.append(
            f"{variant:7}  {median(walls) * 1e6:7.1f} us  {median(cpus) * 1e6:6.1f} us"
            f"   {wall.median:.2f}x [{wall.low:.2f}-{wall.high:.2f}]"
            f"      {cpu.median:.2f}x [{cpu.low:.2f}-{cpu.high:.2f}]"
            f"      {server.get(variant, float('nan')):5.2f} us"
        )
    return "\n".join(lines)


@contextlib.contextmanager
def redis_url(url: str | None) -> Iterator[str]:
    """``url``, or a throwaway redis-server's for the duration."""
    if url:
        yield url
        return
    with RedisServer() as server:
        yield server.url


def main(argv: Sequence[str]) -> int:
    """Run the measurement and print the table; returns the exit status."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ops", type=int, default=2000, help="writes per variant and round")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--url", help="use this Redis (it gets keys bench:*) instead of one")
    args = parser.parse_args(argv)
    with redis_url(args.url) as url:
        measured = asyncio.run(measure(url, args.ops, args.rounds))
    print(f"redis-py asyncio, one client, {args.rounds} rounds x {args.ops} writes per variant")
    print(report(measured))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
