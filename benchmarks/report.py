"""The metric table: definitions, ratios to each peer, markdown and a PNG chart."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.stats import RatioRange, median

#: The column every ratio is computed from, and the peers it is compared with.
SUBJECT = "aiozklock"
PEERS = ("aiozk", "kazoo", "Curator", "etcd", "etcd (3 members)", "Redis", "Redis (sleep 1 ms)")
#: The non-ZooKeeper peers (benchmarks.peers): the main and per-request tables only.
OTHER_PEERS = PEERS[3:]
#: A round in which the hypervisor took more than this share of the CPUs is flagged.
HEAVY_STEAL_PCT = 10.0
#: Marks a ratio whose min-max range over the rounds straddles 1.00x (not significant).
NOT_SIGNIFICANT = "~"

#: The values of one run: round -> column -> metric key -> value.
Rounds = Sequence[dict[str, dict[str, float]]]

HOW_TO_READ = (
    "Every client ran every scenario once per round, {rounds} rounds, the client order "
    "rotated by one each round, each measurement in a fresh worker process. Client columns: "
    'the median over the rounds. Ratios ("X vs Y"): how many times better X is than Y, '
    'whichever the direction of the metric ("Better" column), **> 1.00x means aiozklock is '
    "better** (X is aiozklock on asyncio, or its non-fair lock or its synchronous API in "
    "their tables); each round "
    "gives one ratio (both measured in that round), shown as **median [min-max]** over the "
    "rounds. **A trailing `~` marks a ratio whose min-max range straddles 1.00x: not "
    "significant**, the rounds disagree on which client is better. Wire counts are taken in "
    "the first round only (they do not depend on the load), so they have no range. The "
    "Rounds table gives each round's load average and CPU steal; a round with more than "
    "{steal:.0f} % steal is flagged ⚠."
)


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    digits: int = 0
    show_range: bool = False  # the cell shows "median [min-max]" over the rounds

    @property
    def better(self) -> str:
        return "higher" if self.higher_is_better else "lower"


def metrics(sessions: Sequence[int], process_sessions: Sequence[int], waiters: int) -> list[Metric]:
    """Every row of the table, in order."""
    rows = [
        Metric("cycle_median_us", "Uncontended acquire→release, median", "µs", False),
        Metric("cycle_p99_us", "Uncontended acquire→release, p99", "µs", False),
        Metric("cycles_per_s", "Uncontended cycles per second (sequential)", "/s", True),
        Metric(
            "confirmed_cycle_median_us",
            "Uncontended cycle, release confirmed by the server, median",
            "µs",
            False,
        ),
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
            "floor_true_median_us",
            "True floor: create awaited, its delete written unawaited (a correct cycle), median",
            "µs",
            False,
        ),
        Metric(
            "floor_true_cpu_us",
            "True floor: client CPU per cycle (the least a correct cycle costs on our wire)",
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
        rounds: Rounds,
        flags: dict[str, dict[str, str]],
    ) -> str:
        columns = [c for c in self.columns if c in run_columns]
        peers = [c for c in columns if c != self.subject]
        table = markdown(self.rows, columns, rounds, flags, self.subject, peers)
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


SYNC = "aiozklock (sync)"


def sync_table(sessions: Sequence[int], concurrency: Sequence[int]) -> Table:
    """The synchronous API (``aiozklock.sync``) beside kazoo, its blocking peer, and
    aiozklock's own async face: the same scenarios, as kazoo runs them (threads)."""
    rows = [
        Metric("cycle_median_us", "Uncontended acquire→release, median", "µs", False),
        Metric("cycle_p99_us", "Uncontended acquire→release, p99", "µs", False),
        Metric("cycles_per_s", "Uncontended cycles per second", "/s", True),
        Metric(
            "confirmed_cycle_median_us",
            "Uncontended cycle, release confirmed by the server, median",
            "µs",
            False,
        ),
        Metric("cpu_per_cycle_us", "Client CPU per uncontended cycle", "µs", False),
    ]
    for n in sessions:
        rows += [
            Metric(
                f"contended_{n}_per_s",
                f"Contended, {n} sessions in 1 process (a thread each)",
                "grants/s",
                True,
            ),
            Metric(f"handoff_{n}_median_us", f"Hand-off, {n} sessions, median", "µs", False),
        ]
    for n in sessions:
        rows += [
            Metric(
                f"shared_{n}_per_s",
                f"Contended, {n} threads sharing 1 client, one path",
                "grants/s",
                True,
            ),
            Metric(
                f"shared_handoff_{n}_median_us",
                f"Hand-off, {n} threads sharing 1 client, median",
                "µs",
                False,
            ),
        ]
    for c in concurrency:
        rows += [
            Metric(
                f"requests_{c}_per_s",
                f"Per-request, 1 session, {c} threads: cycles per second",
                "/s",
                True,
            ),
            Metric(f"requests_{c}_p50_us", f"Per-request, C={c}: cycle latency, p50", "µs", False),
        ]
    return Table(
        "Synchronous API",
        f"{SYNC}: `aiozklock.sync`, the blocking face of the same core, in kazoo's shape: "
        "uncontended, one client and one lock object reused, `with lock: pass` in one thread; "
        "contended, N clients (N sessions) in one process, one thread each, on one path, the "
        "body a shared-counter increment across a `time.sleep(0)`; shared, one client shared "
        "by N threads on one path (ours queue in the process on the client's one lock object, "
        "one node on the server at a time; kazoo's `Lock` belongs to no thread: one `Lock` "
        "object per thread, N nodes); per-request, one client shared by C threads, each "
        "cycling on its own path. kazoo: the same with `KazooClient`s and `client.Lock(path)`; "
        "aiozklock: its async column (tasks instead of threads). Ratios from the sync column: "
        "**> 1.00x means the sync API is better**; vs aiozklock, what the blocking face costs "
        "(1.00x: nothing).",
        SYNC,
        (SYNC, SUBJECT, "kazoo"),
        tuple(rows),
    )


def cycle_rows(prefix: str, what: str) -> list[Metric]:
    """The rows of a recipe's uncontended cycle (``Bench.recipe_cycles``): timed, then
    counted on the wire."""
    return [
        Metric(f"{prefix}_{key}", f"{what}: {label}", unit, better, digits)
        for key, label, unit, better, digits in (
            ("cycle_median_us", "acquire→release, median", "µs", False, 0),
            ("cycle_p99_us", "acquire→release, p99", "µs", False, 0),
            ("cycles_per_s", "cycles per second (sequential)", "/s", True, 0),
            ("cpu_per_cycle_us", "client CPU per cycle", "µs", False, 0),
            ("requests_per_cycle", "requests per cycle", "", False, 2),
            ("round_trips_per_cycle", "round trips per cycle", "", False, 2),
        )
    ]


def shared_tables(readers: int, clients: int, leases: int) -> list[Table]:
    """The read/write lock's and the semaphore's tables."""
    rwlock = Table(
        "Read/write lock",
        "Uncontended: one session, the write lock's then the read lock's acquire→release "
        "cycle, each on its own path, timed like the multi-lock (so with a shorter warm-up than "
        "the mutex: Curator's JIT is colder), and counted on the wire in round 1. Mixed: "
        f"{readers} reader sessions and 1 writer session in one process (one task or thread "
        "each) loop acquire → one yield → release on one path for `--duration` s; grants/s = "
        "each side's grants / (last exit - first entry). A section entered while a writer held, "
        "or a writer's while anyone held, would be flagged ⚠. aiozklock: `zk.rw_lock(path)` "
        "(`.read_lock`, `.write_lock`); Curator: `InterProcessReadWriteLock` (`readLock()`, "
        "`writeLock()`); kazoo: `ReadLock` and `WriteLock`; aiozk: `recipes.SharedLock` "
        "(`reader_lock`, `writer_lock`).",
        SUBJECT,
        (SUBJECT, "aiozk", "kazoo", "Curator"),
        (
            *cycle_rows("rw_write", "Write lock, uncontended"),
            *cycle_rows("rw_read", "Read lock, uncontended"),
            Metric(
                "rwmix_reads_per_s",
                f"{readers} readers + 1 writer, 1 process: read grants",
                "/s",
                True,
            ),
            Metric(
                "rwmix_writes_per_s",
                f"{readers} readers + 1 writer, 1 process: write grants",
                "/s",
                True,
            ),
        ),
    )
    semaphore = Table(
        f"Semaphore, {leases} leases",
        "Uncontended: one session takes a lease and returns it, timed and counted like the "
        f"read/write lock. Contended: {clients} sessions in one process (one task or thread "
        f"each) loop acquire → one yield → release on a semaphore of {leases} leases for "
        "`--duration` s; grants/s = grants / (last exit - first entry); more than "
        f"{leases} sections held at once would be flagged ⚠. aiozklock: `zk.semaphore(path, "
        f"{leases})`; Curator: `InterProcessSemaphoreV2` (`acquire()`, `returnLease()`); "
        "kazoo: `Semaphore(path, max_leases)`. **aiozk has no semaphore that waits** (its "
        "`Lease` counts the children and returns False when full, a check-then-create race, "
        "and expires by a timer): no column.",
        SUBJECT,
        (SUBJECT, "kazoo", "Curator"),
        (
            *cycle_rows("semaphore", "Uncontended"),
            Metric(
                f"semaphore_{clients}_per_s",
                f"{clients} sessions, {leases} leases, 1 process: grants",
                "/s",
                True,
            ),
        ),
    )
    return [rwlock, semaphore]


def requests_rows(concurrency: Sequence[int]) -> list[Metric]:
    """The per-request rows, for each number of concurrent tasks C."""
    rows: list[Metric] = []
    for c in concurrency:
        rows += [
            Metric(f"requests_{c}_per_s", f"C={c}: cycles per second", "/s", True),
            Metric(f"requests_{c}_p50_us", f"C={c}: cycle latency, p50", "µs", False),
            Metric(f"requests_{c}_p99_us", f"C={c}: cycle latency, p99", "µs", False),
            Metric(
                f"requests_{c}_floor_per_s",
                f"C={c}: raw floor, delete+create transactions per second, {c} in flight",
                "/s",
                True,
            ),
            Metric(
                f"requests_{c}_floor_pct",
                f"C={c}: aiozklock's cycles/s, % of the floor (per round)",
                "%",
                True,
                show_range=True,
            ),
            Metric(
                f"requests_{c}_truefloor_per_s",
                f"C={c}: true floor, create then its own delete transaction, {c} in flight",
                "/s",
                True,
            ),
            Metric(
                f"requests_{c}_truefloor_pct",
                f"C={c}: aiozklock's cycles/s, % of the true floor (per round)",
                "%",
                True,
                show_range=True,
            ),
        ]
    return rows


def requests_table(concurrency: Sequence[int], hold_ms: float) -> Table:
    """Per-request locking: one session, C tasks, each cycling on its own lock path."""
    hold = (
        "a yield (`await sleep(0)`, `time.sleep(0)`, `Thread.yield()`)"
        if hold_ms <= 0
        else (f"a sleep of {hold_ms:g} ms")
    )
    return Table(
        "Per-request locking: one session, C tasks, each on its own lock",
        f"One client (one session); C tasks (threads for kazoo and Curator) each loop "
        f"acquire → hold ({hold}) → release on their own path `req/<i>`, after a warm-up, "
        "for `--duration` s. Cycles/s = cycles / (last cycle end - go); latency: one "
        "acquire→release cycle, caller's view. aiozklock: `zk.lock(path)`; aiozk: "
        "`recipes.Lock` on one shared `ZKClient`; kazoo: `client.Lock(path)` on one shared "
        "`KazooClient`; Curator: an `InterProcessMutex` per path on one shared "
        "`CuratorFramework`; etcd: one aetcd channel and one lease, etcd's `v3lockpb.Lock` "
        "service per name; Redis: one `redis.asyncio.Redis`, a redis-py `Lock` per key. "
        "The raw floor is the same loop on aiozklock's own wire session "
        "with each lock replaced by a bare create (ephemeral) of the task's node, whose "
        "delete goes with the task's next create in one `multi` (one transaction and one "
        "round trip per cycle, no listing: less than a lock cycle can cost, since the lock "
        "also lists its queue); the % row is each round's aiozklock "
        "cycles/s over that round's floor, median [min-max]. The true floor is what a "
        "correct cycle costs: the create awaited, then the delete as its own transaction, "
        "written (not awaited) when the task leaves, as a release returns; two writes per "
        "cycle, no listing.",
        SUBJECT,
        (SUBJECT, "aiozk", "kazoo", "Curator", *OTHER_PEERS),
        tuple(requests_rows(concurrency)),
    )


def headline(rows: Sequence[Metric]) -> list[Metric]:
    """The rows of the chart's ratio panel: rates, medians, CPU and wall times (not p99s,
    counts, memory or the raw floor)."""
    ends = ("_per_s", "_median_us", "cpu_per_cycle_us", "_ms")
    return [m for m in rows if m.key.endswith(ends) and "floor" not in m.key]


def rounds_markdown(machine: Sequence[dict[str, Any]]) -> str:
    """One line per round: its client order, duration, load average and CPU steal."""
    lines = [
        "| Round | Client order | Duration (s) | Load average (1 min), start → end "
        "| CPU steal (%) | CPU busy (%) |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for index, state in enumerate(machine, 1):
        steal = state["steal_pct"]
        heavy = " ⚠ heavy steal" if steal > HEAVY_STEAL_PCT else ""
        lines.append(
            f"| {index} | {', '.join(state['order'])} | {state['duration_s']:.0f} "
            f"| {state['load_start'][0]:.2f} → {state['load_end'][0]:.2f} "
            f"| {steal:.1f}{heavy} | {state['busy_pct']:.0f} |"
        )
    return "\n".join(lines)


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
    rounds: Rounds,
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
        spread = ratio_range(metric, rounds, current, baseline)
        if spread is None:
            continue
        cells = [label(metric), metric.better]
        for column in (current, baseline):
            cells.append(value_cell(metric, rounds, column, flags))
        cells.append(format_ratio(spread))
        lines.append("| " + " | ".join(cells) + " |")
        summary[metric.key] = {
            "current": samples(rounds, current, metric.key),
            "baseline": samples(rounds, baseline, metric.key),
            "ratios": list(spread.ratios),
            "ratio_median": spread.median,
            "ratio_min": spread.low,
            "ratio_max": spread.high,
            "significant": spread.significant,
        }
    return "\n".join(lines), summary


def label(metric: Metric) -> str:
    return f"{metric.label} ({metric.unit})" if metric.unit else metric.label


def samples(rounds: Rounds, column: str, key: str) -> list[float]:
    """One value per round (NaN where that round has none)."""
    return [r.get(column, {}).get(key, math.nan) for r in rounds]


def value_of(rounds: Rounds, column: str, key: str) -> float:
    """A column's value for the table: the median over the rounds that measured it."""
    return median(samples(rounds, column, key))


def ratio(metric: Metric, subject: float | None, peer: float | None) -> float | None:
    """How many times better aiozklock is than the peer (> 1: aiozklock is better)."""
    if subject is None or peer is None or math.isnan(subject) or math.isnan(peer):
        return None
    if subject == 0 or peer == 0:
        return None
    return subject / peer if metric.higher_is_better else peer / subject


def ratio_range(metric: Metric, rounds: Rounds, subject: str, peer: str) -> RatioRange | None:
    """The ratio of each round (both measured in it), as median and min-max."""
    return RatioRange.of(
        [
            ratio(metric, r.get(subject, {}).get(metric.key), r.get(peer, {}).get(metric.key))
            for r in rounds
        ]
    )


def format_ratio(spread: RatioRange | None) -> str:
    """``1.06x [0.94-1.21] ~``: median [min-max] of the rounds' ratios, ``~`` when the range
    straddles 1.00x; one round alone is just ``1.06x``."""
    if spread is None:
        return "—"
    if len(spread.ratios) < 2:
        return f"{spread.median:.2f}x"
    text = f"{spread.median:.2f}x [{spread.low:.2f}-{spread.high:.2f}]"
    return text if spread.significant else f"{text} {NOT_SIGNIFICANT}"


def format_value(metric: Metric, value: float | None) -> str:
    if value is None or math.isnan(value):
        return "—"
    return f"{value:,.{metric.digits}f}"


def value_cell(
    metric: Metric, rounds: Rounds, column: str, flags: dict[str, dict[str, str]]
) -> str:
    """The median over the rounds (with ``show_range``, its min-max too), ⚠ if flagged."""
    values = [v for v in samples(rounds, column, metric.key) if not math.isnan(v)]
    cell = format_value(metric, median(values))
    if metric.show_range and len(values) > 1:
        low, high = format_value(metric, min(values)), format_value(metric, max(values))
        cell += f" [{low}-{high}]"
    if metric.key in flags.get(column, {}):
        cell += " ⚠"
    return cell


def markdown(
    rows: Sequence[Metric],
    columns: Sequence[str],
    rounds: Rounds,
    flags: dict[str, dict[str, str]],
    subject: str = SUBJECT,
    peer_columns: Sequence[str] = PEERS,
) -> str:
    """One row per metric, one column per client (medians over the rounds), then
    "<subject> vs X" for each peer (the rounds' ratios: median [min-max])."""
    peers = [peer for peer in peer_columns if peer in columns and subject in columns]
    header = ["Metric", "Better", *columns, *(f"{subject} vs {peer}" for peer in peers)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * 2 + "---:|" * (len(header) - 2)]
    for metric in rows:
        cells = [label(metric), metric.better]
        cells += [value_cell(metric, rounds, column, flags) for column in columns]
        if all(cell.startswith("—") for cell in cells[2:]):
            continue  # not measured for any client
        cells += [format_ratio(ratio_range(metric, rounds, subject, peer)) for peer in peers]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratio_summary(
    rows: Sequence[Metric], rounds: Rounds, subject: str = SUBJECT, peers: Sequence[str] = PEERS
) -> dict[str, dict[str, Any]]:
    """For latest.json: metric -> peer -> the rounds' ratios, median, min, max, significance."""
    summary: dict[str, dict[str, Any]] = {}
    for metric in rows:
        for peer in peers:
            spread = ratio_range(metric, rounds, subject, peer)
            if spread is not None:
                summary.setdefault(metric.key, {})[peer] = spread.as_dict()
    return summary


#: The rows of the chart's ratio panel (when measured), in order: the headline of each table.
CHART_KEYS = (
    "cycle_median_us",
    "cycles_per_s",
    "cpu_per_cycle_us",
    "contended_10_per_s",
    "contended_50_per_s",
    "handoff_50_median_us",
    "proc_contended_10_per_s",
    "many_acquire_ms",
    "many_rss_growth_mib",
    "requests_10_per_s",
    "requests_100_per_s",
    "ens_cycle_median_us",
    "ens_cpu_per_cycle_us",
    "ens_contended_10_per_s",
    "ens_contended_50_per_s",
    "ens_requests_10_per_s",
    "ens_requests_100_per_s",
)


def chart_rows(rows: Sequence[Metric]) -> list[Metric]:
    """The rows of ``rows`` that the ratio panel shows (:data:`CHART_KEYS`, in that order)."""
    by_key = {m.key: m for m in rows}
    return [by_key[key] for key in CHART_KEYS if key in by_key]


def chart(
    path: Path,
    columns: Sequence[str],
    rounds: Rounds,
    ratio_rows: Sequence[Metric],
    sessions: Sequence[int],
    concurrency: Sequence[int],
) -> None:
    """The ratios to each peer (matplotlib, Agg backend) on top, then the value panels that
    have data: every value is the median over the rounds, its error bar their min-max.
    Panels and peers that were not measured are left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    singles = [
        ("cycles_per_s", "Uncontended cycles/s (higher is better)"),
        ("cpu_per_cycle_us", "Client CPU per cycle, µs (lower is better)"),
        ("many_acquire_ms", "1,000 locks: acquire all, ms (lower is better)"),
        ("multilock_cycles_per_s", "Multi-lock (3 paths), cycles/s (higher is better)"),
        ("election_handoff_median_us", "Election hand-off, median µs (lower is better)"),
        ("ens_cycles_per_s", "3-node ensemble: uncontended cycles/s (higher is better)"),
    ]
    panels: list[Any] = [
        partial(_bars, columns=columns, rounds=rounds, key=key, title=title)
        for key, title in singles
        if _measured(rounds, columns, [key])
    ]
    contended = [(c, c, [f"contended_{n}_per_s" for n in sessions]) for c in columns]
    if _measured(rounds, columns, contended[0][2] if contended else []):
        groups = [f"{n} sessions" for n in sessions]
        title = "Contended grants/s, one process (higher is better)"
        panels.append(
            partial(_grouped, series=contended, rounds=rounds, groups=groups, title=title)
        )
    per_request = [(c, c, [f"requests_{n}_per_s" for n in concurrency]) for c in columns]
    if per_request and _measured(rounds, columns, per_request[0][2]):
        floor = [f"requests_{n}_floor_per_s" for n in concurrency]
        per_request.append(("folded floor (aiozklock's wire)", SUBJECT, floor))
        true = [f"requests_{n}_truefloor_per_s" for n in concurrency]
        per_request.append(("true floor (aiozklock's wire)", SUBJECT, true))
        groups = [f"C={n} tasks" for n in concurrency]
        title = "Per-request locking, one session, C tasks: cycles/s (higher is better)"
        panels.append(
            partial(_grouped, series=per_request, rounds=rounds, groups=groups, title=title)
        )
    shown = [m for m in ratio_rows if _ratio_peers(m, rounds, columns)]
    value_rows = (len(panels) + 1) // 2
    top = max(2.0, 0.22 * len(shown) * max(1, len(_peers(columns))) ** 0.5)
    figure = plt.figure(figsize=(12, top + 3.2 * value_rows))
    grid = figure.add_gridspec(1 + value_rows, 2, height_ratios=[top, *([3.2] * value_rows)])
    _ratio_panel(figure.add_subplot(grid[0, :]), shown, rounds, columns)
    for index, draw in enumerate(panels):
        draw(figure.add_subplot(grid[1 + index // 2, index % 2]))
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _peers(columns: Sequence[str]) -> list[str]:
    return [p for p in PEERS if p in columns and SUBJECT in columns]


def _ratio_peers(metric: Metric, rounds: Rounds, columns: Sequence[str]) -> list[str]:
    """The peers with a ratio for ``metric`` (both measured in some round)."""
    return [p for p in _peers(columns) if ratio_range(metric, rounds, SUBJECT, p) is not None]


def _measured(rounds: Rounds, columns: Sequence[str], keys: Sequence[str]) -> bool:
    return any(not math.isnan(_spread(rounds, c, k)[0]) for c in columns for k in keys)


def _spread(rounds: Rounds, column: str, key: str) -> tuple[float, float, float]:
    """Median, and how far below and above it the rounds' min and max are."""
    values = [v for v in samples(rounds, column, key) if not math.isnan(v)]
    if not values:
        return math.nan, 0.0, 0.0
    middle = median(values)
    return middle, middle - min(values), max(values) - middle


def _bars(axis: Any, columns: Sequence[str], rounds: Rounds, key: str, title: str) -> None:
    spreads = {c: _spread(rounds, c, key) for c in columns}
    shown = [c for c in columns if not math.isnan(spreads[c][0])]
    errors = [[spreads[c][1] for c in shown], [spreads[c][2] for c in shown]]
    bars = axis.bar(shown, [spreads[c][0] for c in shown], yerr=errors, capsize=3, color="tab:blue")
    axis.bar_label(bars, fmt="{:,.0f}", fontsize=8, label_type="center", color="white")
    axis.set_title(title, fontsize=10)
    axis.tick_params(axis="x", labelsize=7, rotation=15)


def _grouped(
    axis: Any,
    series: Sequence[tuple[str, str, Sequence[str]]],
    rounds: Rounds,
    groups: Sequence[str],
    title: str,
) -> None:
    """One bar per (legend label, column, key of each group), grouped by ``groups``."""
    shown = [
        (name, column, keys)
        for name, column, keys in series
        if any(not math.isnan(_spread(rounds, column, k)[0]) for k in keys)
    ]
    width = 0.8 / max(len(shown), 1)
    for index, (name, column, keys) in enumerate(shown):
        spreads = [_spread(rounds, column, key) for key in keys]
        positions = [i + index * width for i in range(len(groups))]
        errors = [[s[1] for s in spreads], [s[2] for s in spreads]]
        heights = [s[0] for s in spreads]
        axis.bar(positions, heights, width, yerr=errors, capsize=2, label=name)
    axis.set_xticks([i + width * (len(shown) - 1) / 2 for i in range(len(groups))])
    axis.set_xticklabels(groups)
    axis.set_title(title, fontsize=10)
    axis.set_ylim(top=axis.get_ylim()[1] * 1.25)  # room for the legend
    if shown:
        axis.legend(fontsize=7, ncols=min(len(shown), 4), loc="upper center")


def _ratio_panel(axis: Any, rows: Sequence[Metric], rounds: Rounds, columns: Sequence[str]) -> None:
    """One line per row, one marker per peer: the median of the rounds' ratios "aiozklock
    vs peer", whiskers from their min to their max, log scale, the 1.0x line; a hollow
    marker is not significant (its range straddles 1.0x)."""
    peers = _peers(columns)
    step = 0.8 / max(len(peers), 1)
    spreads = []
    for index, peer in enumerate(peers):
        colour = f"C{index}"
        for position, metric in enumerate(rows):
            spread = ratio_range(metric, rounds, SUBJECT, peer)
            if spread is None:
                continue
            spreads.append(spread)
            axis.errorbar(
                spread.median,
                position + (index - (len(peers) - 1) / 2) * step,
                xerr=[[spread.median - spread.low], [spread.high - spread.median]],
                fmt="o",
                color=colour,
                markerfacecolor=colour if spread.significant else "white",
                capsize=3,
                markersize=5,
                label=f"vs {peer}",  # one legend entry per peer: deduplicated below
            )
    axis.axvline(1.0, color="black", linewidth=0.8)
    axis.set_xscale("log")
    low = min([s.low for s in spreads] + [1.0]) / 1.25
    high = max([s.high for s in spreads] + [1.0]) * 1.25
    ticks = [t for t in (0.125, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64) if low <= t <= high]
    axis.set_xticks(ticks, [f"{t:g}x" for t in ticks])
    axis.minorticks_off()
    axis.set_xlim(low, high)
    axis.set_yticks(range(len(rows)), [m.label for m in rows], fontsize=7)
    axis.set_ylim(max(len(rows), 1) - 0.5, -0.5)
    axis.grid(axis="x", alpha=0.3)
    axis.set_title(
        "aiozklock vs each peer: > 1x, aiozklock is better (median of the rounds' ratios, "
        "whiskers: min-max;\nhollow: the range straddles 1x, not significant)",
        fontsize=10,
    )
    handles, labels = axis.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    if unique:
        axis.legend(
            unique.values(),
            unique.keys(),
            fontsize=8,
            loc="upper left",
            bbox_to_anchor=(1.005, 1.0),  # outside, right of the panel: no tick hidden
        )


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
