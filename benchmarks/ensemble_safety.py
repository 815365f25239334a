"""Margins on a real 3-node ensemble: a holder whose server is cut off from the others is
stopped before another session is granted the lock (issue 29's figures).

One run is ``aiozklock.testing.measure_cut`` on a partitionable 3-node ensemble
(``ZooKeeperCluster(3, partitionable=True)``) with the chosen server settings: a **holder**
connected to one member only (the member the fault cuts off: it cannot fail over, so its
session really expires at the leader) takes the lock and waits in its body; a **waiter**
connected to the other two queues for the same lock. At ``cut`` the fault starts:

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
session timeouts clamped to [4, 60] s: maxSessionTimeout raised from its default 40 s for the
60 s row); ``compose`` is compose.yaml's (tickTime 200, initLimit 50, syncLimit 10,
[0.4, 30] s).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

import aiozklock
from aiozklock.testing import ZooKeeperCluster, measure_cut
from aiozklock.testing._cut_margin import CutFault

SETTINGS: dict[str, tuple[int, dict[str, str]]] = {
    "stock": (
        2000,
        {
            "initLimit": "10",
            "syncLimit": "5",
            "minSessionTimeout": "4000",
            "maxSessionTimeout": "60000",  # the default is 40 s: raised for the 60 s row
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


async def one_run(
    cluster: ZooKeeperCluster,
    fault: str,
    session_timeout: float,
    policy: aiozklock.LossPolicy,
    rng: random.Random,
    *,
    protect: bool = True,
) -> dict[str, Any]:
    """One cut (``aiozklock.testing.measure_cut``), at a random phase of the probe cycle:
    from a session just proven by its handshake to one in the steady state."""
    cut: CutFault
    if fault == "split":
        cut = rng.choice(("split-follower", "split-leader"))
    else:
        cut = "isolate-leader" if fault == "isolate-leader" else "isolate-follower"
    result = await measure_cut(
        cluster,
        cut,
        session_timeout=session_timeout,
        loss_policy=policy,
        phase=rng.uniform(0, 0.625 * session_timeout),
        protect=protect,
    )
    return {
        "fault": fault,
        "server": cut.rpartition("-")[2],
        "session_timeout": session_timeout,
        "loss_policy": policy,
        "stopped": round(result.stopped, 4),
        "granted": round(result.granted, 4),
        "margin": round(result.margin, 4),
        "overlap": result.overlap,
        "protected": protect,
    }


async def run_all(args: argparse.Namespace) -> None:
    tick, config = SETTINGS[args.settings]
    rng = random.Random(args.seed)
    out = Path(args.out) if args.out else None
    with ZooKeeperCluster(3, partitionable=True, tick_time=tick, extra_config=config) as cluster:
        for fault in args.faults.split(","):
            for timeout in (float(t) for t in args.timeouts.split(",")):
                for index in range(args.runs):
                    record = await one_run(
                        cluster, fault, timeout, args.loss_policy, rng, protect=not args.unprotected
                    )
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
            policy = r["loss_policy"] + ("" if r.get("protected", True) else " (unprotected)")
            key = (r["settings"], policy, r["fault"], r["session_timeout"])
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
    parser.add_argument(
        "--unprotected",
        action="store_true",
        help="the negative control: the holder trusts its own server (no leader proof)",
    )
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
