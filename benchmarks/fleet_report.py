"""The fleet benchmark's figures (``benchmarks/fleet.py``): pure functions from what the
runner sampled and what the workers reported to values, and the markdown tables.

Transactions are read from the leader's ``srvr`` (``Zxid: 0x...``): a zxid is the leader's
epoch (high 32 bits) and a counter of the transactions committed in it (low 32 bits), so the
counter's growth over a window, with the same leader and epoch at both ends, is the number of
transactions the ensemble committed (every session's, raw: connects and closes happen outside
the window). When the counter reaches 2^32 the leader must step down and an election start a
new epoch: :func:`days_to_wrap` is how long that takes at a given rate.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from benchmarks.report import format_ratio
from benchmarks.stats import Grants, RatioRange, median

WRAP = 2**32
SUBJECT = "aiozklock"
#: A round's values: scenario -> column -> key -> value.
Round = dict[str, dict[str, dict[str, float]]]

_ZXID = re.compile(r"^Zxid: (0x[0-9a-fA-F]+)$", re.MULTILINE)
_MODE = re.compile(r"^Mode: (\w+)$", re.MULTILINE)


class Sample(NamedTuple):
    """One reading of the leader: when (monotonic seconds), its id, its zxid."""

    t: float
    leader: int
    zxid: int


def parse_srvr(text: str) -> tuple[str | None, int | None]:
    """``(mode, zxid)`` from a ``srvr`` answer (None for what it lacks)."""
    mode, zxid = _MODE.search(text), _ZXID.search(text)
    return (mode.group(1) if mode else None, int(zxid.group(1), 16) if zxid else None)


@dataclass(frozen=True)
class CommitRate:
    transactions: int  # counter growth between the first and last sample
    window_s: float
    per_s: float
    same_leader: bool  # one leader and one epoch throughout: else the count is not comparable
    per_interval: tuple[float, ...]  # the rate between consecutive samples

    def as_dict(self) -> dict[str, Any]:
        return {
            "transactions": self.transactions,
            "window_s": round(self.window_s, 3),
            "per_s": self.per_s,
            "same_leader": self.same_leader,
            "per_interval": [round(r, 2) for r in self.per_interval],
        }


def commit_rate(samples: Sequence[Sample]) -> CommitRate:
    """The leader's transactions per second over the samples (at least two)."""
    if len(samples) < 2:
        raise ValueError("a rate needs two samples of the leader's zxid")
    first, last = samples[0], samples[-1]
    same = len({s.leader for s in samples}) == 1 and len({s.zxid >> 32 for s in samples}) == 1
    count = (last.zxid & 0xFFFFFFFF) - (first.zxid & 0xFFFFFFFF)
    window = last.t - first.t
    pairs = itertools.pairwise(samples)
    intervals = tuple((b.zxid - a.zxid) / (b.t - a.t) for a, b in pairs if b.t > a.t)
    return CommitRate(count, window, count / window if window > 0 else math.nan, same, intervals)


def days_to_wrap(per_s: float) -> float:
    """Days until the zxid counter wraps at ``per_s`` transactions a second (inf at 0)."""
    return math.inf if per_s <= 0 else WRAP / per_s / 86400


@dataclass(frozen=True)
class Kept:
    total: int
    kept: int  # same session id at mark and at stop
    lost_events: int  # LOST state changes seen after mark
    by_role: dict[str, tuple[int, int]]  # role -> (kept, total)


def sessions_kept(sessions: Sequence[Sequence[Any]]) -> Kept:
    """From the workers' ``[role, id at mark, id at stop, LOST events]`` rows."""
    by_role: dict[str, list[int]] = {}
    kept = lost = 0
    for role, at_mark, at_stop, events in sessions:
        same = int(at_mark != 0 and at_mark == at_stop)
        kept += same
        lost += events
        counts = by_role.setdefault(role, [0, 0])
        counts[0] += same
        counts[1] += 1
    roles = {role: (k, n) for role, (k, n) in sorted(by_role.items())}
    return Kept(len(sessions), kept, lost, roles)


@dataclass(frozen=True)
class GrantFlow:
    grants: int
    per_s: float
    longest_pause_s: float  # between consecutive grants, any path (and from mark, to stop)
    longest_path_pause_s: float  # the same on one path
    overlaps: int  # a section entered before another of the same path exited


def grant_flow(
    sections: Sequence[Sequence[int]], mark_ns: int, stop_ns: int, paths: int = 0
) -> GrantFlow:
    """Grants of the cyclers entered between mark and stop, from ``(path, enter_ns,
    exit_ns)``; ``paths``: how many there are (one without a grant paused all along)."""
    window = (stop_ns - mark_ns) / 1e9
    by_path: dict[int, list[tuple[int, int]]] = {}
    for path, enter, exit_ in sections:
        if mark_ns <= enter <= stop_ns:
            by_path.setdefault(path, []).append((enter, exit_))
    overlaps = sum(Grants.of(intervals).overlaps for intervals in by_path.values())
    entries = sorted(enter for intervals in by_path.values() for enter, _ in intervals)
    gaps = [_longest_gap(sorted(e for e, _ in v), mark_ns, stop_ns) for v in by_path.values()]
    if len(by_path) < paths or not gaps:
        gaps.append(stop_ns - mark_ns)
    path_pause = max(gaps)
    return GrantFlow(
        len(entries),
        len(entries) / window if window > 0 else math.nan,
        _longest_gap(entries, mark_ns, stop_ns) / 1e9,
        path_pause / 1e9,
        overlaps,
    )


def _longest_gap(entries: Sequence[int], start: int, end: int) -> int:
    points = [start, *entries, end]
    return max(b - a for a, b in itertools.pairwise(points))


def summarize(
    scenario: str, run: dict[str, Any], shared_paths: int
) -> tuple[dict[str, float], dict[str, Any]]:
    """A fleet's values for the tables, and its raw summary for the JSON file."""
    results = run["results"]
    sessions = [row for r in results for row in r["sessions"]]
    kept = sessions_kept(sessions)
    counts: dict[str, int] = {}
    for r in results:
        for name, n in r["counts"].items():
            counts[name] = counts.get(name, 0) + n
    roles = kept.by_role
    values: dict[str, float] = {
        "sessions_total": kept.total,
        **{role: roles.get(role, (0, 0))[1] for role in ("idle", "queued", "holding")},
        "kept": kept.kept,
        "lost_events": kept.lost_events,
        "in_role_s": run["in_role_s"],
        "left_open": math.nan if run["left_open"] is None else run["left_open"],
    }
    raw: dict[str, Any] = {"kept_by_role": roles, "counts": counts, "params": run["params"][0]}
    if scenario == "steady":
        commits = run["commits"]
        per_s = commits["per_s"]
        values.update(
            tx_per_s=per_s,
            tx_per_session_s=per_s / kept.total,
            days_to_wrap=days_to_wrap(per_s),
        )
        raw["commits"] = commits
    else:
        sections = [s for r in results for s in r["sections"]]
        flow = grant_flow(sections, run["mark_ns"], run["stop_ns"], shared_paths)
        values.update(
            grants=flow.grants,
            grants_per_s=flow.per_s,
            longest_pause_s=flow.longest_pause_s,
            longest_path_pause_s=flow.longest_path_pause_s,
            overlaps=flow.overlaps,
            queued_granted=counts.get("queued granted", 0),
            anchors_lost=counts.get("anchor lost", 0),
            window_s=(run["stop_ns"] - run["mark_ns"]) / 1e9,
        )
        raw["timeline"] = run["timeline"]
        values["leaderless_s"] = run["leaderless_s"]
    return values, raw


# ---------------------------------------------------------------- tables


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    lower_is_better: bool | None  # None: no comparison
    digits: int = 0


STEADY_ROWS = (
    Row("sessions", "Sessions (idle / queued / holding)", None),
    Row("tx_per_s", "Transactions/s the ensemble commits (leader's zxid)", True, 1),
    Row("tx_per_session_s", "Transactions per session per second", True, 3),
    Row("days_to_wrap", "Days to a zxid wrap at that rate", False, 0),
    Row("kept", "Sessions kept through the window (same session id)", False),
    Row("in_role_s", "Seconds to connect every session and put it in role", True, 1),
    Row("left_open", "Sessions the workers left open (the leader's, after they exited)", True),
)
FAULT_ROWS = (
    Row("sessions", "Sessions (idle / queued / holding)", None),
    Row("grants", "Grants on the shared paths, mark to stop", False),
    Row("grants_per_s", "Grants/s", False, 1),
    Row("longest_pause_s", "Longest pause between grants, any path (s)", True, 2),
    Row("longest_path_pause_s", "Longest pause between grants on one path (s)", True, 2),
    Row("kept", "Sessions kept (same session id at mark and at stop)", False),
    Row("lost_events", "LOST events (sessions replaced)", True),
    Row("overlaps", "Overlaps (sections of one path, by the holders' own clocks)", True),
    Row("queued_granted", "Queued sessions granted (their line's anchor lost its lock)", True),
    Row("anchors_lost", "Anchors that lost their lock", True),
    Row("leaderless_s", "Ensemble without a leader that can commit (s)", None, 1),
    Row("window_s", "Window, mark to stop (s)", None, 1),
)


def _values(rounds: Sequence[Round], scenario: str, column: str, key: str) -> list[float]:
    found = (r.get(scenario, {}).get(column, {}).get(key) for r in rounds)
    return [v for v in found if v is not None and not math.isnan(v)]


def _number(value: float, digits: int) -> str:
    if math.isinf(value):
        return "never"
    return f"{value:,.{digits}f}"


def value_cell(values: Sequence[float], digits: int, total: float | None = None) -> str:
    """The median, with ``[min-max]`` over more than one round; ``/ total`` when given."""
    if not values:
        return "—"
    cell = _number(median(values), digits)
    if len(values) > 1 and min(values) != max(values):
        cell += f" [{_number(min(values), digits)}-{_number(max(values), digits)}]"
    return cell + (f" / {total:,.0f}" if total is not None else "")


def vs_cell(row: Row, ours: Sequence[float], peers: Sequence[float]) -> str:
    """How many times better aiozklock is (median [min-max] of the rounds' ratios), or, where
    a round has a zero or an infinity (a peer committing nothing), the difference."""
    if row.lower_is_better is None or not ours or len(ours) != len(peers):
        return "—"
    pairs = list(zip(ours, peers, strict=True))
    if all(0 < a < math.inf and 0 < b < math.inf for a, b in pairs):
        ratios = [b / a if row.lower_is_better else a / b for a, b in pairs]
        return format_ratio(RatioRange.of(ratios))
    diffs = [a - b for a, b in pairs if math.isfinite(a) and math.isfinite(b)]
    if not diffs:
        return "—"
    if not any(diffs):
        return "same"
    text = f"{median(diffs):+,.{row.digits}f}"
    if len(diffs) > 1 and min(diffs) != max(diffs):
        text += f" [{min(diffs):+,.{row.digits}f} to {max(diffs):+,.{row.digits}f}]"
    return text + " (difference)"


def table(
    rounds: Sequence[Round], scenario: str, rows: Sequence[Row], columns: Sequence[str]
) -> str:
    """One row per metric, one column per client that ran ``scenario``, then aiozklock vs
    each peer."""
    present = [c for c in columns if _values(rounds, scenario, c, "sessions_total")]
    peers = [c for c in present if c != SUBJECT] if SUBJECT in present else []
    header = ["Metric", "Better", *present, *(f"{SUBJECT} vs {p}" for p in peers)]
    lines = ["| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 2)]
    for row in rows:
        better = {True: "lower", False: "higher", None: ""}[row.lower_is_better]
        cells = [row.label, better, *(_cell(rounds, scenario, c, row) for c in present)]
        for peer in peers:
            ours = _values(rounds, scenario, SUBJECT, row.key)
            theirs = _values(rounds, scenario, peer, row.key)
            cells.append(vs_cell(row, ours, theirs))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(rounds: Sequence[Round], scenario: str, column: str, row: Row) -> str:
    if row.key == "sessions":
        parts = [_values(rounds, scenario, column, k) for k in ("idle", "queued", "holding")]
        return " / ".join(f"{median(p):,.0f}" if p else "—" for p in parts)
    values = _values(rounds, scenario, column, row.key)
    total = None
    if row.key == "kept":
        totals = _values(rounds, scenario, column, "sessions_total")
        total = median(totals) if totals else None
    return value_cell(values, row.digits, total)


# ---------------------------------------------------------------- the document


HOW_TO_READ = (
    "Each fleet ran in fresh worker processes, {rounds} round(s), the steady fleets' client "
    "order rotated each round. Client columns: the median over the rounds, with [min-max] "
    'where they differ. "aiozklock vs X": how many times better aiozklock is (> 1.00x: '
    "aiozklock is better; median [min-max] of the rounds' ratios, `~` when the range "
    "straddles 1.00x), or, where a value is 0 or never (a peer committing no transaction), "
    "the difference aiozklock - X."
)
STEADY_NOTE = (
    "All sessions connected and in role (idle: nothing held; queued: waiting in line behind "
    "a holder; holding: its own path), then the leader's `srvr` Zxid read every "
    "{every:g} s for {window:g} s: transactions = growth of its low 32 bits (same leader "
    "and epoch throughout), raw (every session's, nothing subtracted). Days to a zxid wrap "
    "= 2^32 / rate / 86400."
)
FAULT_NOTES = {
    "rolling": (
        "Rolling restart: each member stopped (SIGTERM) and started again, followers "
        "first, the leader last, each serving (and the ensemble with a leader) before the "
        "next."
    ),
    "isolation": (
        "Leader isolation: every server link of the leader held silently for {cut:g} s "
        "(syncLimit x tickTime = {sync:g} s), then healed."
    ),
}
FAULT_COMMON = (
    " Holders cycle locks on {paths} shared paths (hold {hold:g} ms), one anchor per "
    "worker holds a line lock with the queued sessions behind it; {lead:g} s of grants "
    "before the fault, {tail:g} s after the ensemble serves again. A session is kept if "
    "its session id is the same at mark and at stop. Each fleet's timeline in round 1 "
    "(seconds after its mark): {timeline}."
)
TITLES = {
    "steady": "Steady state: transactions the ensemble commits",
    "rolling": "Rolling restart, grants flowing",
    "isolation": "Leader isolation, grants flowing",
}


def document_markdown(document: dict[str, Any], columns: Sequence[str]) -> str:
    """The markdown page: the command, the machine, a table per scenario, the notes."""
    s, e, m = document["settings"], document["ensemble"], document["machine"]
    rounds = document["rounds"]
    load = m["load_average_at_start"][0], m["load_average_at_end"][0]
    found = ", ".join(f"{k} {v}" for k, v in document["versions"].items())
    checkout = document["aiozklock_checkout"]
    lines = [
        f"# Fleet: {s['sessions']:,} sessions on a 3-node ensemble ({s['settings']} settings, "
        f"T = {s['session_timeout']:g} s)",
        "",
        f"Command: `{document['command']}` ({document['date']}, "
        f"{document['elapsed_s'] / 60:.1f} min).",
        "",
        f"Machine: {m.get('cpu')}, {m['cpus']} CPUs, Python {m['python']}, {m.get('java')}; "
        f"load average {load[0]:.2f} at start, {load[1]:.2f} at end. Ensemble: 3 members, "
        f"tickTime {e['tickTime']} ms, syncLimit {e['syncLimit']}, initLimit "
        f"{e['initLimit']}, fsync on, no limit on connections per address, empty "
        "containers reaped once a day (not every minute: a fleet's would be deleted, one "
        "transaction each, in the next fleet's window). aiozklock "
        f"measured: {checkout['path']} @ {checkout['git']}. Versions: {found}. "
        f"{s['workers']} worker processes per fleet; mix idle/queued/holding "
        f"{'/'.join(f'{p:g}' for p in s['mix'])} %.",
        "",
        HOW_TO_READ.format(rounds=len(rounds)),
    ]
    for scenario in ("steady", "rolling", "isolation"):
        if not any(scenario in r for r in rounds):
            continue
        rows = STEADY_ROWS if scenario == "steady" else FAULT_ROWS
        lines += ["", f"### {TITLES[scenario]}", "", _note(document, scenario), ""]
        lines.append(table(rounds, scenario, rows, columns))
    if document["notes"]:
        lines += ["", "Notes:", "", *(f"- {note}" for note in document["notes"])]
    return "\n".join(lines) + "\n"


def _note(document: dict[str, Any], scenario: str) -> str:
    s, e = document["settings"], document["ensemble"]
    if scenario == "steady":
        return STEADY_NOTE.format(every=s["sample_every"], window=s["window"])
    fleets = [(k, raw[k]) for raw in document["raw"][:1] for k in raw if k.startswith(scenario)]
    timelines = [
        f"{key.partition('/')[2]}: " + "; ".join(f"{t:g} s {what}" for t, what in raw["timeline"])
        for key, raw in fleets
    ]
    sync = int(e["syncLimit"]) * e["tickTime"] / 1000
    text = FAULT_NOTES[scenario].format(cut=s["cut"], sync=sync)
    return text + FAULT_COMMON.format(
        paths=s["shared_paths"],
        hold=s["hold_ms"],
        lead=s["lead"],
        tail=s["tail"],
        timeline=" | ".join(timelines) or "—",
    )


def from_json(value: Any) -> Any:
    """A document read back from its JSON file, "never" as infinity again (the tables
    render from it as from the run's own)."""
    if value == "never":
        return math.inf
    if isinstance(value, dict):
        return {key: from_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [from_json(item) for item in value]
    return value


def jsonable(value: Any) -> Any:
    """NaN as null and infinity as "never": neither is JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else "never"
    if isinstance(value, dict):
        return {key: jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    return value
