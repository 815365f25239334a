"""What ``aiozklock demo`` prints: the grant order, the waits, and the verdict of each check."""

from __future__ import annotations

import argparse
import statistics
from typing import TYPE_CHECKING, TextIO

from aiozklock._cli._demo_race import Grant, Results, recipe_paths
from aiozklock._recipes._traits import traits_of

if TYPE_CHECKING:
    from aiozklock.testing import FencedStore, HistoryReport

_HEAD_ROWS = 12
_TAIL_ROWS = 6


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def print_report(
    args: argparse.Namespace,
    where: str,
    results: Results,
    report: HistoryReport,
    store: FencedStore,
    out: TextIO,
) -> bool:
    """Print the demo's report to ``out``; True if every check passed."""
    grants = sorted(results.grants, key=lambda g: g.entered)
    lines = [
        f"aiozklock demo: {args.workers} workers x {args.rounds} rounds of {args.recipe} "
        f"on {', '.join(recipe_paths(args))} "
        f"(each its own session; timeout {args.timeout:g} s, hold {_ms(args.hold)} ms)",
        f"ZooKeeper: {where}; backend: {args.backend}"
        + (f"; fenced store: {args.store} at {results.store_where}" if results.store_where else ""),
        "",
        *_grant_table(grants, show_all=args.all),
        "",
        *_summary(args, results, grants),
        "",
    ]
    checks = _checks(args, results, report, store, grants)
    lines += [f"  [{'PASS' if ok else 'FAIL'}] {line}" for ok, line in checks]
    passed = all(ok for ok, _ in checks)
    lines.append("")
    if not passed:
        lines.append("FAILED")
    elif traits_of(args.recipe).shares_resource:
        lines.append(f"PASSED: never more than {args.max_leases} holders at once")
    else:
        lines.append("PASSED: no two holders overlapped, fencing tokens strictly increased")
    print("\n".join(lines), file=out)
    return passed


def _grant_table(grants: list[Grant], *, show_all: bool) -> list[str]:
    lines = [
        "  grant  holder        fencing token  waited ms",
        "  -----  ------------  -------------  ---------",
    ]
    shown: list[tuple[int, Grant] | None] = list(enumerate(grants, 1))
    if len(grants) > _HEAD_ROWS + _TAIL_ROWS + 1 and not show_all:
        shown = [*shown[:_HEAD_ROWS], None, *shown[-_TAIL_ROWS:]]
    for row in shown:
        if row is None:
            hidden = len(grants) - _HEAD_ROWS - _TAIL_ROWS
            lines.append(f"  {'...':>5}  ({hidden} more grants; --all shows every one)")
            continue
        index, grant = row
        lines.append(f"  {index:>5}  {grant.holder:<12}  {grant.token:>13}  {_ms(grant.waited):>9}")
    return lines


def _summary(args: argparse.Namespace, results: Results, grants: list[Grant]) -> list[str]:
    lines = [
        f"acquisitions {len(grants)}/{args.workers * args.rounds}   timeouts "
        f"{results.timeouts}   lost {len(results.lost)}   errors {len(results.errors)}   "
        f"in {results.elapsed:.2f} s"
    ]
    waits = [g.waited for g in grants]
    if waits:
        lines.append(
            f"wait ms      min {_ms(min(waits))}   median {_ms(statistics.median(waits))}   "
            f"max {_ms(max(waits))}"
        )
    lines += [f"  ! {problem}" for problem in [*results.lost, *results.errors][:5]]
    return lines


def _checks(
    args: argparse.Namespace,
    results: Results,
    report: HistoryReport,
    store: FencedStore,
    grants: list[Grant],
) -> list[tuple[bool, str]]:
    traits = traits_of(args.recipe)
    if traits.shares_resource:
        shared = (
            0 < report.peak_holders <= args.max_leases,
            f"leases:        at most {report.peak_holders} holder(s) at once (max_leases "
            f"{args.max_leases}; they share the resource, so no fenced store)",
        )
    else:
        counter_ok = store.value == len(store.accepted) == len(grants)
        held = by = ""
        if args.store != "memory":  # the server's own value must be the record's
            counter_ok = counter_ok and results.store_held == store.value
            held, by = f"; {args.store} holds {results.store_held}", f" by {args.store}"
        shared = (
            not store.rejected and counter_ok,
            f"fenced store:  {len(store.accepted)} writes accepted, {len(store.rejected)} "
            f"stale writes rejected{by}, counter = {store.value} (expected "
            f"{len(grants)}{held})",
        )
    checks = [
        (report.ok, f"history check: {report}"),
        shared,
        (
            not results.leftover_nodes,
            f"cleanup:       {len(results.leftover_nodes)} lock node(s) of closed sessions left",
        ),
        (bool(grants), f"progress:      {len(grants)} critical section(s) recorded"),
    ]
    if traits.reads:
        checks.append(
            (
                not results.torn_reads,
                f"readers:       {results.reads} read sections, {len(results.torn_reads)} "
                "saw a write land while they read",
            )
        )
    return checks


__all__ = ("print_report",)
