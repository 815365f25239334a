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
) -> str:
    """One row per metric, one column per client, then "aiozklock vs X" for each peer."""
    peers = [peer for peer in PEERS if peer in columns and SUBJECT in columns]
    header = ["Metric", "Better", *columns, *(f"{SUBJECT} vs {peer}" for peer in peers)]
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
                metric, values[SUBJECT].get(metric.key), values.get(peer, {}).get(metric.key)
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

    figure, axes = plt.subplots(2, 2, figsize=(12, 8))
    singles = [
        (axes[0][0], "cycles_per_s", "Uncontended cycles/s (higher is better)"),
        (axes[0][1], "cpu_per_cycle_us", "Client CPU per cycle, µs (lower is better)"),
        (axes[1][1], "many_acquire_ms", "1,000 locks: acquire all, ms (lower is better)"),
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
