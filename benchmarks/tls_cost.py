"""The cost of TLS on the uncontended lock cycle, on connecting, and on reconnecting.

One ZooKeeper (Netty connection factory) serves a plain port and a TLS port; two clients in
one process use one each. Rounds interleave the variants (the order alternates each round)
so that drift of a shared machine hits both alike; each variant's time is ``cycles``
acquire+release cycles timed together. Then, per variant: the time ``async with connect()``
takes to establish a new session, and the time from a dropped connection (a FaultProxy
drops it) to CONNECTED again in the same session. Reports medians and TLS/plain ratios
(median over rounds, and min-max).

    PYTHONPATH=. .venv/bin/python benchmarks/tls_cost.py [--cycles 500] [--rounds 7]
        [--connects 20] [--backend asyncio|trio]
"""

from __future__ import annotations

import argparse
import ssl
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path

import anyio

import aiozklock
from aiozklock import SessionState, StateChange
from aiozklock.testing import FaultProxy, TLSFiles, ZooKeeperCluster
from benchmarks.otel_overhead import cycles
from benchmarks.stats import RatioRange, median

VARIANTS = ("plain", "tls")
Endpoints = dict[str, tuple[str, ssl.SSLContext | None]]


async def measure_cycles(
    endpoints: Endpoints, count: int, rounds: int
) -> dict[str, list[tuple[float, float]]]:
    """Per variant, one (wall, CPU) per-cycle time per round."""
    results: dict[str, list[tuple[float, float]]] = {variant: [] for variant in VARIANTS}
    async with AsyncExitStack() as stack:
        locks = {}
        for variant, (hosts, context) in endpoints.items():
            zk = await stack.enter_async_context(aiozklock.connect(hosts, ssl=context))
            locks[variant] = zk.lock(f"/bench/tls/{variant}")
            await cycles(locks[variant], max(10, count // 10))  # warm-up (and the parents)
        for round_ in range(rounds):
            order = VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                results[variant].append(await cycles(locks[variant], count))
    return results


async def connect_time(hosts: str, context: ssl.SSLContext | None) -> float:
    """Seconds for ``async with connect()`` to establish a new session."""
    started = time.perf_counter()
    async with aiozklock.connect(hosts, ssl=context):
        return time.perf_counter() - started


async def reconnect_time(proxy: FaultProxy, zk: aiozklock.ZooKeeperClient) -> float:
    """Seconds from dropping the connection to CONNECTED again (the same session)."""
    back = anyio.Event()

    def on_change(change: StateChange) -> None:
        if change.state is SessionState.CONNECTED:
            back.set()

    remove = zk.add_listener(on_change)
    try:
        started = time.perf_counter()
        await proxy.drop_all()
        with anyio.fail_after(10):
            await back.wait()
        return time.perf_counter() - started
    finally:
        remove()


async def measure_connects(endpoints: Endpoints, count: int) -> dict[str, dict[str, float]]:
    """Per variant, the median connect and reconnect times over ``count`` tries each."""
    results: dict[str, dict[str, float]] = {}
    for variant, (hosts, context) in endpoints.items():
        connects = [await connect_time(hosts, context) for _ in range(count)]
        async with FaultProxy(hosts) as proxy, aiozklock.connect(proxy.address, ssl=context) as zk:
            reconnects = [await reconnect_time(proxy, zk) for _ in range(count)]
            assert zk.state is SessionState.CONNECTED
        results[variant] = {"connect": median(connects), "reconnect": median(reconnects)}
    return results


def report(cycle_times: dict[str, list[tuple[float, float]]]) -> str:
    """A table: per variant, median per-cycle times and the ratios to ``plain``."""
    lines = ["variant  wall/cycle  cpu/cycle   wall ratio (min-max)    cpu ratio (min-max)"]
    base = cycle_times["plain"]
    for variant, times in cycle_times.items():
        walls = [wall for wall, _ in times]
        cpus = [cpu for _, cpu in times]
        wall = RatioRange.of([w / b[0] for w, b in zip(walls, base, strict=True)])
        cpu = RatioRange.of([c / b[1] for c, b in zip(cpus, base, strict=True)])
        assert wall is not None
        assert cpu is not None
        lines.append(
            f"{variant:7}  {median(walls) * 1e6:7.0f} us  {median(cpus) * 1e6:6.0f} us   "
            f"{wall.median:.3f} ({wall.low:.3f}-{wall.high:.3f})"
            f"     {cpu.median:.3f} ({cpu.low:.3f}-{cpu.high:.3f})"
        )
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """Start a TLS server, measure, print the tables; returns the exit status."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cycles", type=int, default=500, help="cycles per variant and round")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--connects", type=int, default=20, help="connects and reconnects")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="aiozklock-tls-bench-") as directory:
        files = TLSFiles.generate(Path(directory))
        with ZooKeeperCluster(1, tls=files) as cluster:
            endpoints: Endpoints = {
                "plain": (cluster.hosts, None),
                "tls": (cluster.secure_hosts, files.client_context()),
            }
            cycle_times = anyio.run(
                measure_cycles, endpoints, args.cycles, args.rounds, backend=args.backend
            )
            connects = anyio.run(measure_connects, endpoints, args.connects, backend=args.backend)
    print(f"{args.backend}, {args.rounds} rounds x {args.cycles} cycles per variant")
    print(report(cycle_times))
    print(f"medians of {args.connects}: new session (connect)   reconnect (same session)")
    for variant, times in connects.items():
        print(
            f"{variant:7}  {times['connect'] * 1e3:8.1f} ms"
            f"               {times['reconnect'] * 1e3:8.1f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
