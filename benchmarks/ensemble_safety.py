"""Margins on a real 3-node ensemble: a holder whose server is cut off from the others is
stopped before another session is granted the lock (issue 29's figures).

One run: a partitionable 3-node ensemble (``ZooKeeperCluster(3, partitionable=True)``) with
the chosen server settings; a **holder** connected to one member only (the member the fault
cuts off: it cannot fail over, so its session really expires at the leader) takes the lock
and waits in its body; a **waiter** connected to the other two queues for the same lock. At
``cut`` the fault starts:

* ``isolate-follower``: every link of a follower (the holder's server) held silently;
* ``isolate-leader``: every link of the leader (the holder's server) held silently;
* ``split``: a 1|2 partition with the holder's server alone on its side, leader or follower
  at random (a seeded choice per run).

Recorded, in seconds after the cut: ``stopped`` (the holder's body saw its cancellation)
and ``granted`` (the waiter holds). ``margin = granted - stopped``; an **overlap** is a
negative margin. Then the links heal, the member rejoins, and the next run starts on the
same ensemble.

    python -m benchmarks.ensemble_safety --faults isolate-follower --timeouts 4,6,10,30 \\
        --runs 10 --settings stock --out benchmarks/results/safety-isolate-follower.jsonl
    python -m benchmarks.ensemble_safety --report benchmarks/results/safety-*.jsonl

``--settings stock`` is ZooKeeper's sample zoo.cfg (tickTime 2000, initLimit 10, syncLimit 5,
session timeouts clamped to [4, 40] s); ``compose`` is compose.yaml's (tickTime 200,
initLimit 50, syncLimit 10, [0.4, 30] s).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

import aiozklock
from aiozklock.testing import ZooKeeperCluster, ZooKeeperMember

SETTINGS: dict[str, tuple[int, dict[str, str]]] = {
    "stock": (
        2000,
        {
            "initLimit": "10",
            "syncLimit": "5",
            "minSessionTimeout": "4000",
            "maxSessionTimeout": "40000",
        },
    ),
    "compose": (
        200,
        {
            "initLimit": "50",
            "syncLimit": "10",
            "minSessionTimeout": "400",
            "maxSessionTimeout": "30000",
        },
    ),
}
FAULTS = ("isolate-follower", "isolate-leader", "split")


def _target(cluster: ZooKeeperCluster, fault: str, rng: random.Random) -> ZooKeeperMember:
    leader = cluster.leader()
    followers = [m for m in cluster.members if m is not leader]
    if fault == "isolate-leader":
        return leader
    if fault == "isolate-follower":
        return rng.choice(followers)
    return rng.choice([leader, *followers])


def _cut(cluster: ZooKeeperCluster, fault: str, target: ZooKeeperMember) -> None:
    if fault == "split":
        cluster.partition([target], [m for m in cluster.members if m is not target])
    else:
        cluster.isolate(target)


async def _queued(zk: aiozklock.ZooKeeperClient, path: str, count: int) -> None:
    """Until ``path`` has ``count`` contenders (polled: the waiter's node is its queue entry)."""
    while len(await zk.get_children(path, missing_ok=True)) < count:
        await anyio.sleep(0.01)


async def one_run(
    cluster: ZooKeeperCluster,
    fault: str,
    timeout: float,
    policy: aiozklock.LossPolicy,
    rng: random.Random,
) -> dict[str, Any]:
    """One cut, measured from the cut; the ensemble is healed and serving again after it."""
    target = _target(cluster, fault, rng)
    role = "leader" if target is cluster.leader() else "follower"
    others = ",".join(m.address for m in cluster.members if m is not target)
    path = f"/safety/{uuid.uuid4().hex}"
    times: dict[str, float] = {}
    held, granted, stopped = anyio.Event(), anyio.Event(), anyio.Event()
    bound = timeout * 2 + 60.0
    async with contextlib.AsyncExitStack() as stack:
        # Closed last to first, bounded and shielded: the cluster heals before, and serves after.
        stack.push_async_callback(cluster.await_serving, 120)
        stack.callback(cluster.heal)
        holder_zk = await stack.enter_async_context(
            aiozklock.connect(target.address, session_timeout=timeout, loss_policy=policy)
        )
        waiter_zk = await stack.enter_async_context(
            aiozklock.connect(others, session_timeout=timeout)
        )

        async def hold() -> None:
            try:
                async with holder_zk.lock(path):
                    held.set()
                    try:
                        await anyio.sleep_forever()
                    finally:
                        times["stopped"] = time.monotonic()
                        stopped.set()
            except aiozklock.LockLost:
                pass

        async def wait() -> None:
            async with waiter_zk.lock(path):
                times["granted"] = time.monotonic()
                granted.set()

        with anyio.fail_after(bound):
            async with anyio.create_task_group() as tg:
                tg.start_soon(hold)
                await held.wait()
                tg.start_soon(wait)
                await _queued(waiter_zk, path, 2)
                # A random phase of the probe cycle: from a session just proven by its
                # handshake to one in the steady state (its proof ~0.4-0.5 x T old).
                await anyio.sleep(rng.uniform(0, 0.625 * timeout))
                times["cut"] = time.monotonic()
                _cut(cluster, fault, target)
                await granted.wait()
                await stopped.wait()  # the holder may stop after the grant: an overlap
                cluster.heal()
                tg.cancel_scope.cancel()
    cut = times["cut"]
    stopped, granted_at = times["stopped"] - cut, times["granted"] - cut
    return {
        "fault": fault,
        "server": role,
        "session_timeout": timeout,
        "loss_policy": policy,
        "stopped": round(stopped, 4),
        "granted": round(granted_at, 4),
        "margin": round(granted_at - stopped, 4),
        "overlap": stopped > granted_at,
    }


async def run_all(args: argparse.Namespace) -> None:
    tick, config = SETTINGS[args.settings]
    rng = random.Random(args.seed)
    out = Path(args.out) if args.out else None
    with ZooKeeperCluster(3, partitionable=True, tick_time=tick, extra_config=config) as cluster:
        for fault in args.faults.split(","):
            for timeout in (float(t) for t in args.timeouts.split(",")):
                for index in range(args.runs):
                    record = await one_run(cluster, fault, timeout, args.loss_policy, rng)
                    record.update(settings=args.settings, run=index)
                    line = json.dumps(record)
                    print(line, flush=True)
                    if out is not None:
                        with out.open("a") as stream:
                            stream.write(line + "\n")


def report(paths: Sequence[str]) -> str:
    """A markdown table per settings and loss policy: each fault x timeout with the stop and
    grant times (median), the margin (min, median) and the overlaps."""
    rows: dict[tuple[str, str, str, float], list[dict[str, Any]]] = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            r = json.loads(line)
            key = (r["settings"], r["loss_policy"], r["fault"], r["session_timeout"])
            rows.setdefault(key, []).append(r)
    lines = [
        "| settings | loss policy | fault | session timeout | runs | holder stopped (median) "
        "| other granted (median) | margin min | margin median | overlaps |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (settings, policy, fault, timeout), runs in sorted(rows.items()):
        margins = [r["margin"] for r in runs]
        lines.append(
            f"| {settings} | {policy} | {fault} | {timeout:g} s | {len(runs)} "
            f"| {statistics.median(r['stopped'] for r in runs):.2f} s "
            f"| {statistics.median(r['granted'] for r in runs):.2f} s "
            f"| {min(margins):.2f} s | {statistics.median(margins):.2f} s "
            f"| {sum(r['overlap'] for r in runs)} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--timeouts", default="4,6,10,30")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--settings", choices=sorted(SETTINGS), default="stock")
    parser.add_argument("--loss-policy", choices=("suspended", "expired"), default="suspended")
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--out", help="append one JSON line per run to this file")
    parser.add_argument("--report", nargs="+", metavar="JSONL", help="print the table only")
    args = parser.parse_args(argv)
    if args.report:
        print(report(args.report))
        return 0
    anyio.run(run_all, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
