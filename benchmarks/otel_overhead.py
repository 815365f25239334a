"""The cost of ``aiozklock.otel`` on the uncontended lock cycle (acquire + release, one path).

Three clients in one process, on one ZooKeeper: ``off`` (no telemetry: the library's hooks are
one ``is None`` check each, and OpenTelemetry is not even imported by aiozklock), ``metrics``
(the SDK's ``MeterProvider``, no spans) and ``traces`` (metrics, and an SDK ``TracerProvider``
whose spans go through a ``BatchSpanProcessor`` to an in-memory exporter). Rounds interleave the
variants (the order alternates each round) so that drift of a shared machine hits all alike;
each variant's time is ``cycles`` cycles timed together. Reports, per variant, the median
per-cycle wall and CPU time, and the ratio to ``off``: median over rounds, and min-max.

    PYTHONPATH=. .venv/bin/python benchmarks/otel_overhead.py [--cycles 500] [--rounds 7]
        [--backend asyncio|trio] [--hosts HOST:PORT]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack

import anyio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider

import aiozklock
from aiozklock.otel import Telemetry
from benchmarks.common import zookeeper
from benchmarks.stats import RatioRange, median

VARIANTS = ("off", "metrics", "traces")


def telemetry(variant: str) -> Telemetry | None:
    """The client's ``telemetry=`` argument for ``variant``."""
    if variant == "off":
        return None
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()], shutdown_on_exit=False)
    if variant == "metrics":
        return Telemetry(meter_provider=meters, tracer_provider=NoOpTracerProvider())
    tracers = TracerProvider(shutdown_on_exit=False)
    tracers.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    return Telemetry(meter_provider=meters, tracer_provider=tracers)


async def cycles(lock: aiozklock.Lock, count: int) -> tuple[float, float]:
    """``count`` acquire+release cycles; returns the (wall, CPU) seconds per cycle."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        async with lock:
            pass
    return (time.perf_counter() - wall) / count, (time.process_time() - cpu) / count


async def measure(hosts: str, count: int, rounds: int) -> dict[str, list[tuple[float, float]]]:
    """Per variant, one (wall, CPU) per-cycle time per round."""
    results: dict[str, list[tuple[float, float]]] = {variant: [] for variant in VARIANTS}
    async with AsyncExitStack() as stack:
        locks = {}
        for variant in VARIANTS:
            zk = await stack.enter_async_context(
                aiozklock.connect(hosts, telemetry=telemetry(variant))
            )
            locks[variant] = zk.lock(f"/bench/otel/{variant}")
            await cycles(locks[variant], max(10, count // 10))  # warm-up (and the parents)
        for round_ in range(rounds):
            order = VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                results[variant].append(await cycles(locks[variant], count))
    return results


def report(results: dict[str, list[tuple[float, float]]]) -> str:
    """A table: per variant, median per-cycle times and the ratios to ``off``."""
    lines = ["variant   wall/cycle  cpu/cycle   wall ratio (min-max)    cpu ratio (min-max)"]
    base = results["off"]
    for variant, times in results.items():
        walls = [wall for wall, _ in times]
        cpus = [cpu for _, cpu in times]
        wall = RatioRange.of([w / b[0] for w, b in zip(walls, base, strict=True)])
        cpu = RatioRange.of([c / b[1] for c, b in zip(cpus, base, strict=True)])
        assert wall is not None
        assert cpu is not None
        lines.append(
            f"{variant:8}  {median(walls) * 1e6:7.0f} us  {median(cpus) * 1e6:6.0f} us   "
            f"{wall.median:.3f} ({wall.low:.3f}-{wall.high:.3f})"
            f"     {cpu.median:.3f} ({cpu.low:.3f}-{cpu.high:.3f})"
        )
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """Run the measurement and print the table; returns the exit status."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cycles", type=int, default=500, help="cycles per variant and round")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--hosts", help="use these ZooKeeper servers instead of starting one")
    args = parser.parse_args(argv)
    with zookeeper(args.hosts) as hosts:
        results = anyio.run(measure, hosts, args.cycles, args.rounds, backend=args.backend)
    print(f"{args.backend}, {args.rounds} rounds x {args.cycles} cycles per variant")
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
