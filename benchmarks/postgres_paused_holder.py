"""What a paused holder does to the next holder's ``PostgresFence.advance``, and what
``lock_timeout`` and ``idle_in_transaction_session_timeout`` change.

A holder process opens a transaction, advances the fence (token 5) and is SIGSTOPped, as a
GC pause or a stopped VM would leave it: its transaction stays open and keeps the fence
row locked. The next holder (token 7) then advances the same fence, and the time its
``advance()`` takes, and how it ends, is measured, with ``--pause`` seconds before the
paused process is resumed (it then tries to commit). Three settings:

- ``default``: no timeout anywhere; the new holder waits for the whole pause.
- ``lock_timeout``: ``PostgresFence(lock_timeout=...)``; the new holder's ``advance()``
  fails after that long with the driver's lock-not-available error (SQLSTATE 55P03).
- ``idle_timeout``: the holder's connection has ``idle_in_transaction_session_timeout``; the
  server ends the paused holder's session after that long (its transaction rolls back) and
  the new holder's ``advance()`` is then accepted.

    PYTHONPATH=. .venv/bin/python benchmarks/postgres_paused_holder.py [--pause 4]
        [--timeout 0.5] [--rounds 3] [--dsn DSN]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass

import asyncpg

from aiozklock.fencing import PostgresFence
from aiozklock.testing import PostgresServer

SETTINGS = ("default", "lock_timeout", "idle_timeout")
RESOURCE = "orders/157"

# The paused holder: advance, say so, block on stdin (SIGSTOPped there), then commit.
HOLDER = """
import asyncio, sys
import asyncpg
from aiozklock.fencing import PostgresFence

async def main(dsn, table, idle_ms):
    settings = {"idle_in_transaction_session_timeout": idle_ms} if idle_ms != "0" else {}
    conn = await asyncpg.connect(dsn, server_settings=settings)
    transaction = conn.transaction()
    await transaction.start()
    await PostgresFence(table).advance(conn, "orders/157", 5)
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        await transaction.commit()
        print("committed", flush=True)
    except Exception as exc:
        print("commit failed:", type(exc).__name__, flush=True)

asyncio.run(main(*sys.argv[1:4]))
"""


@dataclass(frozen=True)
class Outcome:
    """How the new holder's ``advance()`` ended, after how long, whether it was still
    waiting when the paused holder was resumed, and the paused holder's last word
    (``committed``, or ``commit failed: ...``)."""

    setting: str
    seconds: float
    result: str
    outlasted_the_pause: bool
    holder: str


async def start_holder(dsn: str, table: str, idle_ms: int) -> asyncio.subprocess.Process:
    """The holder process, once its transaction holds the fence row, SIGSTOPped."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        HOLDER,
        dsn,
        table,
        str(idle_ms),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 60)  # a hang bound
    if line.strip() != b"ready":
        raise RuntimeError(f"the holder did not start: {line!r}")
    os.kill(process.pid, signal.SIGSTOP)
    return process


async def new_holder(dsn: str, fence: PostgresFence) -> tuple[float, str]:
    """The next holder's fenced transaction: seconds its ``advance()`` took, and how it
    ended (``accepted``, or the error's class and SQLSTATE)."""
    conn = await asyncpg.connect(dsn)
    try:
        start = time.monotonic()
        try:
            async with conn.transaction():
                await fence.advance(conn, RESOURCE, 7)
        except asyncpg.PostgresError as exc:
            return time.monotonic() - start, f"{type(exc).__name__} ({exc.sqlstate})"
        return time.monotonic() - start, "accepted"
    finally:
        await conn.close()


async def measure(dsn: str, setting: str, pause: float, limit: float) -> Outcome:
    """One run of ``setting`` (one of ``SETTINGS``), ``limit`` the seconds of its timeout:
    pause the holder for ``pause`` seconds, time the next one."""
    table = f"paused_{uuid.uuid4().hex[:12]}"
    setup = await asyncpg.connect(dsn)
    try:
        await PostgresFence(table).create_table(setup)
        idle_ms = round(limit * 1000) if setting == "idle_timeout" else 0
        holder = await start_holder(dsn, table, idle_ms)
        try:
            fence = PostgresFence(table, lock_timeout=limit if setting == "lock_timeout" else None)
            waiter = asyncio.ensure_future(new_holder(dsn, fence))
            await asyncio.wait({waiter}, timeout=pause)
            outlasted = not waiter.done()
            os.kill(holder.pid, signal.SIGCONT)
            assert holder.stdin is not None
            assert holder.stdout is not None
            holder.stdin.write(b"\n")
            seconds, result = await asyncio.wait_for(waiter, 60)  # a hang bound
            last = (await asyncio.wait_for(holder.stdout.readline(), 60)).decode().strip()
            await asyncio.wait_for(holder.wait(), 60)
        finally:
            if holder.returncode is None:
                os.kill(holder.pid, signal.SIGCONT)
                holder.kill()
                await holder.wait()
        await setup.execute(f"DROP TABLE {table}")
    finally:
        await setup.close()
    return Outcome(setting, seconds, result, outlasted, last)


async def run(dsn: str, pause: float, limit: float, rounds: int) -> list[Outcome]:
    outcomes = []
    for _ in range(rounds):
        for setting in SETTINGS:
            outcomes.append(await measure(dsn, setting, pause, limit))
    return outcomes


def report(outcomes: list[Outcome], pause: float, timeout: float) -> str:
    lines = [
        f"pause {pause} s, timeouts {timeout} s; the new holder's advance(), per setting:",
        "| setting | advance() took, s (each round) | how it ended | the paused holder |",
        "|---|---|---|---|",
    ]
    for setting in SETTINGS:
        mine = [outcome for outcome in outcomes if outcome.setting == setting]
        times = ", ".join(f"{outcome.seconds:.2f}" for outcome in mine)
        results = sorted({outcome.result for outcome in mine})
        holders = sorted({outcome.holder for outcome in mine})
        lines.append(f"| {setting} | {times} | {'; '.join(results)} | {'; '.join(holders)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pause", type=float, default=4.0)
    parser.add_argument("--timeout", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dsn", default=None)
    args = parser.parse_args()
    if args.dsn:
        outcomes = asyncio.run(run(args.dsn, args.pause, args.timeout, args.rounds))
    else:
        with PostgresServer() as server:
            outcomes = asyncio.run(run(server.dsn, args.pause, args.timeout, args.rounds))
    print(report(outcomes, args.pause, args.timeout))
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
