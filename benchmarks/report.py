"""The metric table: definitions, ratios to each peer, markdown and a PNG chart."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The column every ratio is computed from, and the peers it is compared with.
SUBJECT = "aiozklock"
PEERS = ("aiozk", "kazoo", "Curator")


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    digits: int = 0

    @property
    def better(self) -> str:
        return "higher" if self.higher_is_better else "lower"


def metrics(sessions: Sequence[int], process_sessions: Sequence[int], waiters: int) -> list[Metric]:
    """Every row of the table, in order."""
    rows = [
        Metric("cycle_median_us", "Uncontended acquire→release, median", "µs", False),
        Metric("cycle_p99_us", "Uncontended acquire→release, p99", "µs", False),
        Metric("cycles_per_s", "Uncontended cycles per second (sequential)", "/s", True),
        Metric("cpu_per_cycle_us", "Client CPU per uncontended cycle", "µs", False),
        Metric("requests_per_cycle", "Requests per uncontended cycle", "", False, 2),
        Metric("round_trips_per_cycle", "Round trips per uncontended cycle", "", False, 2),
    ]
    for n in sessions:
        rows.append(
            Metric(
                f"contended_{n}_per_s", f"Contended, {n} sessions in 1 process", "grants/s", True
            )
        )
        rows.append(
            Metric(
                f"handoff_{n}_median_us",
                f"Hand-off, {n} sessions in 1 process, median",
                "µs",
                False,
            )
        )
    for n in process_sessions:
        rows.append(
            Metric(
                f"proc_contended_{n}_per_s",
                f"Contended, {n} processes, 1 session each",
                "grants/s",
                True,
            )
        )
        rows.append(
            Metric(f"proc_handoff_{n}_median_us", f"Hand-off, {n} processes, median", "µs", False)
        )
    rows += [
        Metric(
            "notifications_per_release",
            f"Watch notifications per release, {waiters} waiters",
            "",
            False,
            3,
        ),
        Metric("requests_per_grant", f"Requests per grant, {waiters} waiters", "", False, 2),
        Metric("many_acquire_ms", "1,000 distinct locks: acquire all, one session", "ms", False),
        Metric("many_release_ms", "1,000 distinct locks: release all", "ms", False),
        Metric(
            "many_peak_rss_mib", "1,000 distinct locks: peak RSS of the process", "MiB", False, 1
        ),
        Metric(
            "many_rss_growth_mib", "1,000 distinct locks: RSS growth while held", "MiB", False, 1
        ),
        Metric(
            "floor_pair_median_us",
            "Raw floor: create+delete pair, median (2 round trips)",
            "µs",
            False,
        ),
        Metric(
            "floor_pipelined_per_s",
            "Raw floor: pipelined create+delete pairs per second",
            "pairs/s",
            True,
        ),
    ]
    return rows


@dataclass(frozen=True)
class Table:
    """A table of its own: one recipe, the columns that have it, ratios from ``subject``."""

    title: str
    note: str
    subject: str
    columns: tuple[str, ...]  # in order; those not in the run are left out
    rows: tuple[Metric, ...]

    def render(
        self,
        run_columns: Sequence[str],
        values: dict[str, dict[str, float]],
        flags: dict[str, dict[str, str]],
    ) -> str:
        columns = [c for c in self.columns if c in run_columns]
        peers = [c for c in columns if c != self.subject]
        table = markdown(self.rows, columns, values, flags, self.subject, peers)
        if table.count("\n") < 2:  # no row was measured (scenario not run)
            return ""
        return f"### {self.title}\n\n{self.note}\n\n{table}"


NON_FAIR = "aiozklock (non-fair)"


def recipe_tables(
    members: int, candidates: int, sessions: Sequence[int], waiters: int
) -> list[Table]:
    """The tables of the newer recipes (multi-lock, election, non-fair lock)."""
    multilock = Table(
        f"MultiLock, {members} paths, uncontended",
        "aiozklock: `zk.multi_lock(paths)` (one `multi` create pipelined with the member "
        "listings; release: one `multi` delete). Curator: `InterProcessMultiLock` over "
        f"{members} `InterProcessMutex`es. **kazoo and aiozk have no multi-lock**: {members} "
        "of their `Lock`s acquired in a fixed order and released in reverse.",
        SUBJECT,
        (SUBJECT, "aiozk", "kazoo", "Curator"),
        tuple(
            Metric(f"multilock_{key}", label, unit, better, digits)
            for key, label, unit, better, digits in (
                ("cycle_median_us", "Acquire→release, median", "µs", False, 0),
                ("cycle_p99_us", "Acquire→release, p99", "µs", False, 0),
                ("cycles_per_s", "Cycles per second (sequential)", "/s", True, 0),
                ("cpu_per_cycle_us", "Client CPU per cycle", "µs", False, 0),
                ("requests_per_cycle", "Requests per cycle", "", False, 2),
                ("round_trips_per_cycle", "Round trips per cycle", "", False, 2),
            )
        ),
    )
    election = Table(
        f"Leader election hand-off, {candidates} candidates in 1 process",
        f"{candidates} candidates, each its own session, campaign → lead (one yield) → resign "
        "in a loop; a resigned candidate campaigns again at the back. Hand-off = the next "
        "leader's body start - the previous leader's body exit (so it includes the resignation). "
        "aiozklock: `async with zk.election(path)`; Curator: `LeaderLatch` (a new latch per "
        "campaign: `start`, `await`, `close`); kazoo: `Election(path).run(func)`; aiozk: "
        "`recipes.LeaderElection` (a new object per campaign: `volunteer`, "
        "`wait_for_leadership`, `resign`). Two leaders at once would be flagged ⚠.",
        SUBJECT,
        (SUBJECT, "aiozk", "kazoo", "Curator"),
        (
            Metric("election_handoff_median_us", "Hand-off, median", "µs", False),
            Metric("election_handoff_p90_us", "Hand-off, p90", "µs", False),
            Metric("election_terms_per_s", "Leader terms per second", "/s", True),
        ),
    )
    contended: list[Metric] = []
    for n in sessions:
        contended.append(
            Metric(
                f"contended_{n}_per_s", f"Contended, {n} sessions in 1 process", "grants/s", True
            )
        )
        contended.append(
            Metric(f"handoff_{n}_median_us", f"Hand-off, {n} sessions, median", "µs", False)
        )
    non_fair = Table(
        "Non-fair lock",
        "aiozklock (non-fair): `zk.lock(path, fair=False)`, one fixed ephemeral node; every "
        "waiter watches it, so a release notifies every waiter (a herd, by design) and they "
        "race to create it. Beside aiozklock's fair `zk.lock(path)`, Curator's "
        "`InterProcessMutex` and kazoo's `Lock` (both fair), measured in the same run.",
        NON_FAIR,
        (NON_FAIR, SUBJECT, "Curator", "kazoo"),
        (
            Metric("cycle_median_us", "Uncontended acquire→release, median", "µs", False),
            Metric("cycles_per_s", "Uncontended cycles per second", "/s", True),
            Metric("requests_per_cycle", "Requests per uncontended cycle", "", False, 2),
            Metric("round_trips_per_cycle", "Round trips per uncontended cycle", "", False, 2),
            *contended,
            Metric(
                "notifications_per_release",
                f"Watch notifications per release, {waiters} waiters",
                "",
                False,
                3,
            ),
            Metric("requests_per_grant", f"Requests per grant, {waiters} waiters", "", False, 2),
        ),
    )
    return [multilock, election, non_fair]


def regression_rows(sessions: Sequence[int]) -> list[Metric]:
    """The rows compared between this checkout and the baseline commit."""
    rows = [
        Metric("cycle_median_us", "Uncontended acquire→release, median", "µs", False),
        Metric("cycles_per_s", "Uncontended cycles per second", "/s", True),
        Metric("cpu_per_cycle_us", "Client CPU per uncontended cycle", "µs", False),
    ]
    for n in sessions:
        rows.append(
            Metric(
                f"contended_{n}_per_s", f"Contended, {n} sessions in 1 process", "grants/s", True
            )
        )
        rows.append(
            Metric(f"handoff_{n}_median_us", f"Hand-off, {n} sessions, median", "µs", False)
        )
    return rows


def regression(
    rows: Sequence[Metric],
    rounds: Sequence[dict[str, dict[str, float]]],
    current: str,
    baseline: str,
    flags: dict[str, dict[str, str]],
) -> tuple[str, dict[str, Any]]:
    """This checkout vs the baseline: medians over the rounds, and the paired ratio of each
    round (> 1.00x: this checkout is better) as median [min-max]."""
    header = ["Metric", "Better", current, baseline, "ratio, median [min-max]"]
    lines = ["| " + " | ".join(header) + " |", "|---|---|---:|---:|---:|"]
    summary: dict[str, Any] = {}
    for metric in rows:
        ours = [r[current].get(metric.key, math.nan) for r in rounds]
        theirs = [r[baseline].get(metric.key, math.nan) for r in rounds]
        factors = [ratio(metric, a, b) for a, b in zip(ours, theirs, strict=True)]
        known = sorted(f for f in factors if f is not None)
        if not known:
            continue
        cells = [f"{metric.label} ({metric.unit})" if metric.unit else metric.label, metric.better]
        for column, samples in ((current, ours), (baseline, theirs)):
            cell = format_value(metric, _median(samples))
            cells.append(cell + (" ⚠" if metric.key in flags.get(column, {}) else ""))
        middle = _median(known)
        cells.append(f"{middle:.2f}x [{known[0]:.2f}-{known[-1]:.2f}]")
        lines.append("| " + " | ".join(cells) + " |")
        summary[metric.key] = {
            "current": ours,
            "baseline": theirs,
            "ratios": factors,
            "ratio_median": middle,
            "ratio_min": known[0],
            "ratio_max": known[-1],
        }
    return "\n".join(lines), summary


def _median(samples: Sequence[float]) -> float:
    ordered = sorted(x for x in samples if not math.isnan(x))
    if not ordered:
        return math.nan
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def ratio(metric: Metric, subject: float | None, peer: float | None) -> float | None:
    """How many times better aiozklock is than the peer (> 1: aiozklock is better)."""
    if subject is None or peer is None or math.isnan(subject) or math.isnan(peer):
        return None
    if subject == 0 or peer == 0:
        return None
    return subject / peer if metric.higher_is_better else peer / subject


def format_value(metric: Metric, value: float | None) -> str:
    if value is None or math.isnan(value):
        return "—"
    return f"{value:,.{metric.digits}f}"


def markdown(
    rows: Sequence[Metric],
    columns: Sequence[str],
    values: dict[str, dict[str, float]],
    flags: dict[str, dict[str, str]],
    subject: str = SUBJECT,
    peer_columns: Sequence[str] = PEERS,
) -> str:
    """One row per metric, one column per client, then "<subject> vs X" for each peer."""
    peers = [peer for peer in peer_columns if peer in columns and subject in columns]
    header = ["Metric", "Better", *columns, *(f"{subject} vs {peer}" for peer in peers)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * 2 + "---:|" * (len(header) - 2)]
    for metric in rows:
        cells = [f"{metric.label} ({metric.unit})" if metric.unit else metric.label, metric.better]
        for column in columns:
            cell = format_value(metric, values.get(column, {}).get(metric.key))
            if metric.key in flags.get(column, {}):
                cell += " ⚠"
            cells.append(cell)
        for peer in peers:
            factor = ratio(
                metric,
                values.get(subject, {}).get(metric.key),
                values.get(peer, {}).get(metric.key),
            )
            cells.append("—" if factor is None else f"{factor:.2f}x")
        if any(cell != "—" for cell in cells[2 : 2 + len(columns)]):
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def chart(
    path: Path, columns: Sequence[str], values: dict[str, dict[str, float]], sessions: Sequence[int]
) -> None:
    """A few bar charts (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(3, 2, figsize=(12, 12))
    singles = [
        (axes[0][0], "cycles_per_s", "Uncontended cycles/s (higher is better)"),
        (axes[0][1], "cpu_per_cycle_us", "Client CPU per cycle, µs (lower is better)"),
        (axes[1][1], "many_acquire_ms", "1,000 locks: acquire all, ms (lower is better)"),
        (
            axes[2][0],
            "multilock_cycles_per_s",
            "Multi-lock (3 paths; kazoo, aiozk: 3 locks in order), cycles/s (higher is better)",
        ),
        (
            axes[2][1],
            "election_handoff_median_us",
            "Leader election hand-off, median µs (lower is better)",
        ),
    ]
    for axis, key, title in singles:
        shown = [c for c in columns if not math.isnan(values.get(c, {}).get(key, math.nan))]
        bars = axis.bar(shown, [values[c][key] for c in shown], color="tab:blue")
        axis.bar_label(bars, fmt="{:,.0f}", fontsize=8)
        axis.set_title(title, fontsize=10)
        axis.tick_params(axis="x", labelsize=8)
    axis = axes[1][0]
    keys = [f"contended_{n}_per_s" for n in sessions]
    shown = [
        c for c in columns if any(not math.isnan(values.get(c, {}).get(k, math.nan)) for k in keys)
    ]
    width = 0.8 / max(len(shown), 1)
    for index, column in enumerate(shown):
        heights = [values[column].get(key, math.nan) for key in keys]
        positions = [i + index * width for i in range(len(sessions))]
        axis.bar(positions, heights, width, label=column)
    axis.set_xticks([i + width * (len(shown) - 1) / 2 for i in range(len(sessions))])
    axis.set_xticklabels([f"{n} sessions" for n in sessions])
    axis.set_title("Contended grants/s, one process (higher is better)", fontsize=10)
    axis.set_ylim(top=axis.get_ylim()[1] * 1.2)  # room for the legend
    if shown:
        axis.legend(fontsize=8, ncols=len(shown), loc="upper center")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def notes_markdown(notes: Sequence[str]) -> str:
    return "\n".join(f"- {note}" for note in notes)


def jsonable(value: Any) -> Any:
    """NaN is not JSON: write it as null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    return value
