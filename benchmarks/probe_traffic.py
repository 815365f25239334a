"""What aiozklock sends on its own, per session and second, on the 3-node ensemble (part of
scenario ``ensemble``, round 1 only: counts, not timings).

On an ensemble, a session that holds something proves itself through the leader: its own
writes, and a probe (``multi([check("/", -1)])``, a quorum-committed write) ``T/8`` after
the previous commit where it writes nothing else; an idle session holds nothing and pings
after ``T/6`` of idleness, as ZooKeeper's own clients do (``T``: the session timeout); a
busy session proves itself mostly with its own creates and deletes. For each session timeout
of :data:`SESSION_TIMEOUTS` and each kind of session of :data:`KINDS` (idle; busy: cycling
a lock of its own without pause), a worker of each aiozklock (this checkout and, with
``--baseline-commit``, the baseline commit: one after the other) connects its sessions to
the wire tap (``benchmarks/wire_tap.py``, its own process) in front of one member only,
waits for what a session sends once at connect to be answered, and the tap counts the
requests of the next ``traffic_window`` seconds: pings, probes (multis of one version
check), and all requests. Rates are per session: count / sessions / the worker's window.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from benchmarks.common import Params

if TYPE_CHECKING:
    from benchmarks.run import Bench, Driver, Tap

#: Session timeouts requested (seconds); the table flags a different negotiated one.
SESSION_TIMEOUTS = (4.0, 10.0)
#: The worker scenario (``benchmarks/clients/aiozklock_traffic.py``) and its sessions.
KINDS = (("idle", 4), ("busy", 2))
PREFIX = "traffic_"
#: What is counted, per session and second: (key suffix, label).
COUNTED = (
    ("own_per_s", "its own (pings + probes)"),
    ("pings_per_s", "pings"),
    ("probes_per_s", "probes through the leader"),
    ("requests_per_s", "all requests"),
    ("cycles_per_s", "lock cycles"),
)


TITLE = "### A session's own traffic on the 3-node ensemble (round 1)"
NOTE = (
    "Requests per session per second, counted by the wire tap in front of one member (every "
    "session connected to it only), after what a session sends once at connect: pings, "
    "probes through the leader (`multi([check])`, each a quorum-committed write), all "
    "requests (a busy session's lock cycles included). Idle: sessions that send nothing; "
    "busy: each cycling a lock of its own without pause. T: the session timeout."
)


def key(kind: str, timeout: float, suffix: str) -> str:
    return f"{PREFIX}{kind}_{timeout:g}s_{suffix}"


def run(bench: Bench, drivers: Sequence[Driver], tap: Tap, say: Callable[[str], None]) -> None:
    """Count each driver's traffic for every kind and timeout (the tap stopped at the end);
    a failed worker is noted and its cells stay empty."""
    try:
        for timeout in SESSION_TIMEOUTS:
            for kind, sessions in KINDS:
                for driver in drivers:
                    say(f"traffic: {driver.column}, {kind}, session timeout {timeout:g} s")
                    try:
                        measure(bench, driver, tap, kind, sessions, timeout)
                    except RuntimeError as exc:  # run.WorkerError
                        bench.notes.append(f"traffic {kind} {timeout:g} s, {driver.column}: {exc}")
    finally:
        tap.stop()


def measure(
    bench: Bench, driver: Driver, tap: Tap, kind: str, sessions: int, timeout: float
) -> None:
    params = Params(
        hosts=tap.address,
        path=bench.path(driver, f"traffic-{kind}-{timeout:g}"),
        sessions=sessions,
        duration=bench.settings.traffic_window,
        session_timeout=timeout,
    )
    (result,) = bench.run_workers(driver, kind, params, tap=tap)
    counts = bench.wire_counts
    per = sessions * result["window_ns"] / 1e9  # session-seconds
    values = {
        "own_per_s": (counts["pings"] + counts["probes"]) / per,
        "pings_per_s": counts["pings"] / per,
        "probes_per_s": counts["probes"] / per,
        "requests_per_s": (counts["requests"] + counts["pings"]) / per,
    }
    if "cycles" in result:
        values["cycles_per_s"] = result["cycles"] / per
    bench.record(driver, **{key(kind, timeout, k): v for k, v in values.items()})
    bench.keep(driver, f"traffic-{kind}-{timeout:g}", {**result, "counts": counts})
    granted = sorted(set(result["timeouts"]))
    if granted != [timeout]:
        keys = [key(kind, timeout, k) for k in values]
        bench.flag(driver, keys, f"session timeout {granted} s granted, not {timeout:g} s")


def render(
    rounds: Sequence[dict[str, dict[str, float]]], columns: Sequence[str], prefix: str
) -> str:
    """The traffic table: per kind and timeout, each column's counts per session and second
    (``columns``: after, then before; keys under ``prefix``, the ensemble's), and the
    difference (after - before)."""
    mine = prefix + PREFIX
    found = [c for c in columns if any(k.startswith(mine) for r in rounds for k in r.get(c, {}))]
    if not found:
        return ""
    header = ["Session", "Per session per second", *found]
    if len(found) == 2:
        header.append("difference")
    lines = [TITLE, "", NOTE, "", "| " + " | ".join(header) + " |"]
    lines.append("|---|---|" + "---:|" * (len(header) - 2))
    for timeout in SESSION_TIMEOUTS:
        for kind, _ in KINDS:
            for suffix, label in COUNTED:
                name = prefix + key(kind, timeout, suffix)
                cells = [_value(rounds, c, name) for c in found]
                if all(math.isnan(v) for v in cells):
                    continue
                row = [f"{kind}, T = {timeout:g} s", label, *(f"{v:.2f}" for v in cells)]
                if len(found) == 2:
                    row.append(f"{cells[0] - cells[1]:+.2f}")
                lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _value(rounds: Sequence[dict[str, dict[str, float]]], column: str, name: str) -> float:
    return next((r[column][name] for r in rounds if name in r.get(column, {})), math.nan)
