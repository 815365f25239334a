"""The scale rows (scenario ``scale``): aiozklock holding N locks at once in one session.

For each N of ``--scale-locks`` (1,000, 10,000 and 100,000), a fresh aiozklock worker runs
``benchmarks/clients/aiozklock_scale.py``: 100 tasks acquire N distinct locks (N / 100
each, held in an ``AsyncExitStack``, so the tasks' own memory is small and constant), then
release them all. Rows per N: the RSS growth while all are held and per lock (after
``gc.collect()``, from the RSS once connected and warmed up), and the time per lock to
acquire and to release them. The RSS per lock at each N shows whether it grows linearly.
The peers keep the "1,000 distinct locks" rows of the main table (one task or thread per
lock); the table repeats their RSS growth per lock beside aiozklock's.

Sizes of ``--scale-big`` locks or more run in the first round only (the time of a round).

In the first round, the main table's "distinct locks" scenario (one task or thread per
lock) also runs with :data:`PEER_LOCKS` locks for aiozklock, aiozk and kazoo, so that the
peers are compared at a larger size too: RSS growth per lock (tasks or threads included)
and time per lock. Not for Curator: its lock is owned by the thread that acquired it, so
10,000 locks would be 10,000 JVM threads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from benchmarks import report
from benchmarks.report import Metric, Table

if TYPE_CHECKING:
    from benchmarks.run import Bench, Driver

SCENARIO = "scale"
Attempt = Callable[["Driver", str, Callable[[], None]], None]
TASKS = 100  # holders of the locks, whatever N
PEER_LOCKS = 10_000  # the peers' size, one task or thread per lock (round 1 only)
PEER_COLUMNS = (report.SUBJECT, "aiozk", "kazoo")


def run(bench: Bench, drivers: Sequence[Driver], attempt: Attempt) -> None:
    """Every size for aiozklock's column (the only one with this scenario); ``attempt``
    (``run.run_scenario``'s) runs one and turns a failed worker into a note."""
    s = bench.settings
    for driver in (d for d in drivers if d.column == report.SUBJECT):
        for locks in s.scale_locks:
            if locks < s.scale_big or bench.round_index == 0:
                attempt(driver, f"scale N={locks:,}", partial(measure, bench, driver, locks))
    if bench.round_index > 0:
        return
    for driver in (d for d in drivers if d.column in PEER_COLUMNS and "many" in d.scenarios):
        what = f"scale, one task per lock, N={PEER_LOCKS:,}"
        attempt(driver, what, partial(measure_many, bench, driver, PEER_LOCKS))
    if any(d.is_jvm for d in drivers):
        bench.notes.append(
            f"Curator, {PEER_LOCKS:,} distinct locks: not run (one JVM thread per lock: "
            "its InterProcessMutex is owned by the thread that acquired it)"
        )


def measure(bench: Bench, driver: Driver, locks: int) -> None:
    params = bench.params(bench.path(driver, f"scale-{locks}"), locks=locks, threads=TASKS)
    (result,) = bench.run_workers(driver, SCENARIO, params)
    growth_kib = result["rss_held_kib"] - result["rss_before_kib"]
    keys = [f"scale_{locks}_{name}" for name in ("rss_per_lock_kib", "rss_growth_mib")]
    keys += [f"scale_{locks}_{name}" for name in ("acquire_us", "release_us")]
    values = (
        growth_kib / locks,
        growth_kib / 1024,
        result["acquire_ns"] / 1000 / locks,
        result["release_ns"] / 1000 / locks,
    )
    bench.record(driver, **dict(zip(keys, values, strict=True)))
    if result["held"] != locks:
        bench.flag(driver, keys, f"only {result['held']:,} of {locks:,} locks were held at once")
    bench.keep(driver, f"scale-{locks}", result)


def measure_many(bench: Bench, driver: Driver, locks: int) -> None:
    """The "distinct locks" scenario of any client (one task or thread per lock; kazoo: a
    pool of threads) with ``locks`` locks: RSS growth and time per lock."""
    s = bench.settings
    params = bench.params(bench.path(driver, f"many-{locks}"), locks=locks, threads=s.kazoo_threads)
    (result,) = bench.run_workers(driver, "many", params)
    keys = [f"scale_many_{locks}_{name}" for name in ("rss_per_lock_kib", "acquire_us")]
    keys.append(f"scale_many_{locks}_release_us")
    values = (
        (result["peak_rss_kib"] - result["rss_before_kib"]) / locks,
        result["acquire_ns"] / 1000 / locks,
        result["release_ns"] / 1000 / locks,
    )
    bench.record(driver, **dict(zip(keys, values, strict=True)))
    if result["held"] != locks:
        bench.flag(driver, keys, f"only {result['held']:,} of {locks:,} locks were held at once")
    bench.keep(driver, f"scale-many-{locks}", result)


def peer_rows(locks: int) -> list[Metric]:
    what = f"{locks:,} locks, one task (thread) per lock"
    return [
        Metric(f"scale_many_{locks}_{key}", f"{what}: {label}", unit, False, digits)
        for key, label, unit, digits in (
            ("rss_per_lock_kib", "RSS growth per lock, task included", "KiB", 1),
            ("acquire_us", "acquire, per lock", "µs", 1),
            ("release_us", "release, per lock", "µs", 1),
        )
    ]


def rows(sizes: Sequence[int]) -> list[Metric]:
    found: list[Metric] = []
    for n in sizes:
        found += [
            Metric(f"scale_{n}_{key}", f"{n:,} locks: {label}", unit, False, digits)
            for key, label, unit, digits in (
                ("rss_per_lock_kib", "RSS per held lock", "KiB", 2),
                ("rss_growth_mib", "RSS growth while held", "MiB", 1),
                ("acquire_us", "acquire, per lock", "µs", 1),
                ("release_us", "release, per lock", "µs", 1),
            )
        ]
    return found


MANY_PER_LOCK = Metric(
    "many_rss_per_lock_kib",
    "1,000 locks, one task (thread) per lock: RSS growth per lock, task included",
    "KiB",
    False,
    1,
)


def with_many_per_lock(rounds: report.Rounds, locks: int) -> list[dict[str, dict[str, float]]]:
    """The rounds with each column's "1,000 distinct locks" RSS growth per lock added."""
    derived = []
    for values in rounds:
        copy = {column: dict(metrics) for column, metrics in values.items()}
        for metrics in copy.values():
            if "many_rss_growth_mib" in metrics:
                metrics[MANY_PER_LOCK.key] = metrics["many_rss_growth_mib"] * 1024 / locks
        derived.append(copy)
    return derived


def render(
    columns: Sequence[str],
    rounds: report.Rounds,
    flags: dict[str, dict[str, str]],
    sizes: Sequence[int],
    many_locks: int,
) -> tuple[str, dict[str, Any]]:
    """The scale table, and for latest.json the RSS per lock at each size (medians) and
    the largest size's over the smallest's (1.0: linear)."""
    per_lock = {
        n: report.value_of(rounds, report.SUBJECT, f"scale_{n}_rss_per_lock_kib") for n in sizes
    }
    measured = {n: v for n, v in per_lock.items() if not math.isnan(v)}
    linear = ""
    summary: dict[str, Any] = {"rss_per_lock_kib": measured, "largest_over_smallest": None}
    if len(measured) > 1:
        low, high = min(measured), max(measured)
        summary["largest_over_smallest"] = measured[high] / measured[low]
        linear = (
            f" RSS per held lock at {', '.join(f'{n:,}' for n in measured)} locks: "
            f"{', '.join(f'{v:.2f}' for v in measured.values())} KiB; at {high:,} over at "
            f"{low:,}: {summary['largest_over_smallest']:.2f} (1.00: linear growth)."
        )
    table = Table(
        "Scale: locks held at once by one session",
        f"aiozklock only: {TASKS} tasks acquire N distinct locks (N / {TASKS} each, one after "
        "the other, held in an `AsyncExitStack`), so that the tasks' own memory is small and "
        "the same at every N; then all are released. RSS (`/proc/self/statm`, after "
        "`gc.collect()`): growth from just before (connected, one lock cycle done, the "
        f"{TASKS} tasks started and waiting: their own memory is not counted) to all "
        "held. Lock paths are spread over parents of 100. The peers' rows: the main "
        f"table's {many_locks:,} distinct locks, one task (thread) per lock, so their RSS "
        f"includes the tasks' (threads'), and the same with {PEER_LOCKS:,} locks in round "
        "1 (not Curator: one JVM thread per lock)." + linear,
        report.SUBJECT,
        (report.SUBJECT, "aiozk", "kazoo", "Curator"),
        (*rows(sizes), MANY_PER_LOCK, *peer_rows(PEER_LOCKS)),
    )
    derived = with_many_per_lock(rounds, many_locks)
    keys = [m.key for m in table.rows]
    shown = [c for c in columns if any(k in r.get(c, {}) for r in derived for k in keys)]
    return table.render(shown, derived, flags), summary
