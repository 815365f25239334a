"""The cost of a fenced PostgreSQL transaction against the same transaction unfenced, per
driver, in the same run.

The transaction is the smallest useful one: ``BEGIN; UPDATE bench_data SET value = ...
WHERE id = ...; COMMIT``; fenced, ``PostgresFence.advance()`` comes first (one more
statement, an upsert of the fence row; every transaction carries a new, higher token, as a
new holder's would). One connection per driver (asyncpg; psycopg 3; SQLAlchemy's
``AsyncConnection`` over asyncpg), on a throwaway local server (``--dsn``: another one).
Each round measures, per driver, ``--transactions`` unfenced and as many fenced
transactions, which of the two goes first alternating by round; the ratio fenced/unfenced
is computed within each round and reported as median [min-max] over the rounds. Per
measurement: the median transaction's latency and the client process's CPU time per
transaction. Writes ``postgres-fence.md`` and ``postgres-fence.json`` into ``--output``
(``postgres-fence-durable.*`` with ``--durable``).

The local server runs without durability (``fsync``, ``synchronous_commit`` off, as in the
tests) unless ``--durable``: a commit then waits for the disk, which makes the fence's extra
statement a smaller share of the transaction.

    PYTHONPATH=. .venv/bin/python benchmarks/postgres_fence.py [--transactions 1000]
        [--rounds 7] [--warmup 300] [--drivers asyncpg,psycopg,sqlalchemy] [--durable]
        [--dsn DSN] [--output benchmarks/results]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import platform
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

from aiozklock.fencing import PostgresFence
from aiozklock.testing import PostgresServer
from benchmarks.stats import RatioRange, median

DRIVERS = ("asyncpg", "psycopg", "sqlalchemy")
TABLE = "bench_data"
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
Transaction = Callable[[bool, int], Awaitable[None]]  # (fenced, token)


@contextlib.asynccontextmanager
async def client(driver: str, dsn: str, fence: PostgresFence, row: int) -> AsyncIterator[Any]:
    """``run(fenced, token)``: one transaction of ``driver`` updating row ``row``."""
    resource = f"bench/{driver}"
    update = f"UPDATE {TABLE} SET value = {{}} WHERE id = {row}"
    if driver == "asyncpg":
        import asyncpg

        conn = await asyncpg.connect(dsn)

        async def run(fenced: bool, token: int) -> None:
            async with conn.transaction():
                if fenced:
                    await fence.advance(conn, resource, token)
                await conn.execute(update.format("$1"), str(token))

        try:
            yield run
        finally:
            await conn.close()
    elif driver == "psycopg":
        import psycopg

        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as pconn:

            async def run(fenced: bool, token: int) -> None:
                async with pconn.transaction():
                    if fenced:
                        await fence.advance(pconn, resource, token)
                    await pconn.execute(update.format("%s"), (str(token),))

            yield run
    else:
        from sqlalchemy import text
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(dsn.replace("postgresql://", "postgresql+asyncpg://", 1))
        statement = text(update.format(":value"))
        try:
            async with engine.connect() as sa_conn:

                async def run(fenced: bool, token: int) -> None:
                    async with sa_conn.begin():
                        if fenced:
                            await fence.advance(sa_conn, resource, token)
                        await sa_conn.execute(statement, {"value": str(token)})

                yield run
        finally:
            await engine.dispose()


class Tokens:
    """Ever higher fencing tokens, shared by every transaction of one driver."""

    def __init__(self) -> None:
        self.last = 0

    def next(self) -> int:
        self.last += 1
        return self.last


async def measure(run: Transaction, fenced: bool, count: int, tokens: Tokens) -> dict[str, float]:
    """``count`` transactions: the median's latency and the CPU time per transaction (µs)."""
    latencies = []
    cpu = time.process_time()
    for _ in range(count):
        token = tokens.next()
        start = time.perf_counter()
        await run(fenced, token)
        latencies.append(time.perf_counter() - start)
    return {
        "median_us": median(latencies) * 1e6,
        "cpu_us": (time.process_time() - cpu) / count * 1e6,
    }


async def bench(args: argparse.Namespace, dsn: str) -> dict[str, Any]:
    fence = PostgresFence("bench_fence")
    drivers = [name.strip() for name in args.drivers.split(",") if name.strip()]
    rounds: list[dict[str, dict[str, dict[str, float]]]] = []
    async with contextlib.AsyncExitStack() as stack:
        import asyncpg

        setup = await asyncpg.connect(dsn)
        stack.push_async_callback(setup.close)
        await fence.create_table(setup)
        await setup.execute(f"DROP TABLE IF EXISTS {TABLE}")
        await setup.execute(f"CREATE TABLE {TABLE} (id int PRIMARY KEY, value text)")
        await setup.execute(f"TRUNCATE {fence.table}")
        runs: dict[str, Transaction] = {}
        tokens = {driver: Tokens() for driver in drivers}
        for row, driver in enumerate(drivers):
            await setup.execute(f"INSERT INTO {TABLE} VALUES ({row}, '')")
            runs[driver] = await stack.enter_async_context(client(driver, dsn, fence, row))
            for fenced in (False, True):
                await measure(runs[driver], fenced, args.warmup, tokens[driver])
        for index in range(args.rounds):
            values: dict[str, dict[str, dict[str, float]]] = {}
            order = (True, False) if index % 2 else (False, True)
            for driver in drivers:
                values[driver] = {}
                for fenced in order:
                    column = "fenced" if fenced else "unfenced"
                    sample = await measure(runs[driver], fenced, args.transactions, tokens[driver])
                    values[driver][column] = sample
            rounds.append(values)
            print(f"round {index + 1}/{args.rounds} done (load {os.getloadavg()[0]:.2f})")
    return {"drivers": drivers, "rounds": rounds}


def spread(values: list[float], digits: int = 0) -> str:
    return f"{median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def ratio_text(ratio: RatioRange | None) -> str:
    if ratio is None:
        return "—"
    mark = "" if ratio.significant else " ~"
    return f"{ratio.median:.2f}x [{ratio.low:.2f}-{ratio.high:.2f}]{mark}"


def report(args: argparse.Namespace, result: dict[str, Any], header: dict[str, Any]) -> str:
    rows = []
    ratios: dict[str, dict[str, Any]] = {}
    for driver in result["drivers"]:
        per_round = [values[driver] for values in result["rounds"]]
        cells = []
        ratios[driver] = {}
        for metric in ("median_us", "cpu_us"):
            for column in ("unfenced", "fenced"):
                cells.append(spread([r[column][metric] for r in per_round]))
            range_ = RatioRange.of([r["fenced"][metric] / r["unfenced"][metric] for r in per_round])
            ratios[driver][metric] = range_.as_dict() if range_ else None
            cells.append(ratio_text(range_))
        rows.append(f"| {driver} | " + " | ".join(cells) + " |")
    result["ratios"] = ratios
    return "\n".join(
        [
            f"# The cost of a fenced PostgreSQL transaction ({header['date']})",
            "",
            f"Machine: {header['machine']}. Versions: {header['versions']}. Server: "
            f"{header['server']}. {args.rounds} rounds x {args.transactions} transactions "
            f"per measurement, {args.warmup} untimed of each kind per driver first. Wall time: "
            f"{header['elapsed_s']:.0f} s.",
            "",
            "Transaction: `BEGIN; UPDATE` one row `; COMMIT`; fenced: `fence.advance()` first. "
            "Values: median [min-max] over the rounds, in µs (the median transaction's "
            "latency; the client process's CPU time per transaction). Ratios fenced / "
            "unfenced: computed within each round, median [min-max]; a trailing `~` marks a "
            "range that straddles 1.00x.",
            "",
            "| Driver | Latency unfenced | Latency fenced | Latency ratio | CPU unfenced "
            "| CPU fenced | CPU ratio |",
            "|---|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
        ]
    )


async def main_async(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The report's markdown and its JSON document."""
    started = datetime.datetime.now(datetime.UTC)
    load_at_start = os.getloadavg()[0]
    with contextlib.ExitStack() as stack:
        if args.dsn:
            dsn, server = args.dsn, "the one at --dsn"
        else:
            local = PostgresServer(settings=DURABLE if args.durable else None)
            dsn = stack.enter_context(local).dsn
            server = "a local throwaway one, " + ("durable" if args.durable else "fsync off")
        result = await bench(args, dsn)
    names = ("asyncpg", "psycopg", "sqlalchemy")
    header = {
        "date": started.isoformat(timespec="seconds"),
        "elapsed_s": (datetime.datetime.now(datetime.UTC) - started).total_seconds(),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load average {load_at_start:.2f} at start, "
        f"{os.getloadavg()[0]:.2f} at end",
        "versions": ", ".join(f"{name} {version(name)}" for name in names),
        "server": server,
    }
    text = report(args, result, header)
    # Not the DSN (it may hold a password) nor the local output path.
    settings = {k: v for k, v in vars(args).items() if k not in ("dsn", "output")}
    return text, {**header, "settings": settings, **result}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--drivers", default=",".join(DRIVERS))
    parser.add_argument("--durable", action="store_true")
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--output", default=str(Path(__file__).parent / "results"))
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    text, document = asyncio.run(main_async(args))
    print(text)
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    name = "postgres-fence-durable" if args.durable else "postgres-fence"
    (output / f"{name}.md").write_text(text)
    (output / f"{name}.json").write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
