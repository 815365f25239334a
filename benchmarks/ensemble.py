"""The headline rows again on a local 3-node ZooKeeper ensemble, fsync on (scenario
``ensemble``).

Production runs a 3- or 5-node ensemble, where every write is a quorum commit through the
leader. The runner starts one (``aiozklock.testing.ZooKeeperCluster(3)``: free ports of
127.0.0.1, ZooKeeper's default ``forceSync=yes``, stopped by PID at the end), warms it up,
and in every round runs the uncontended, contended (10 and 50 sessions) and per-request
(C = 10, 100, with aiozklock's raw floor) scenarios on it, for aiozklock and Curator (the
clients of :data:`COLUMNS` that are in the run) and for the :func:`extra_drivers`, in the
same rounds as everything else; every client's connect string names all three members.
Its metrics are the main ones with the prefix ``ens_``.

With ``--baseline-commit``, the regression rows run on the ensemble too (:func:`regression`:
this checkout and the baseline commit, uncontended, contended with
:data:`REGRESSION_SESSIONS` sessions and per-request at C = :data:`REGRESSION_CONCURRENCY`,
in every round), and in round 1 both aiozklocks' own traffic is counted
(``benchmarks/probe_traffic.py``).

Other services plug in two ways. A column of the main run that already runs on a
3-member cluster of its own (:data:`MIRRORED`: ``etcd (3 members)``) is not run again: its
values of the same round (uncontended, contended 10/50, per-request) are copied under the
``ens_`` keys, so it gets its ratio in the ensemble table at no cost. Any other: through
:func:`extra_drivers`, a ``Driver`` whose ``extra`` sets ``hosts`` to that service's
endpoints (``run_workers`` applies ``extra`` to the parameters) and whose ``scenarios``
include ``uncontended``, ``contended`` and ``requests``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from benchmarks import probe_traffic, report
from benchmarks.report import Metric, Table

if TYPE_CHECKING:
    from aiozklock.testing import ZooKeeperCluster
    from benchmarks.run import Bench, Driver, Settings, Tap

SCENARIO = "ensemble"
PREFIX = "ens_"
MEMBERS = 3
#: The columns of the main run that also run on the ensemble (when they are in the run).
COLUMNS = (report.SUBJECT, "Curator")
#: Main-run columns measured on a 3-member cluster of their own: copied, not run again.
MIRRORED = ("etcd (3 members)",)
#: The scenarios run on the ensemble, in order (``run.run_scenario``'s names).
SCENARIOS = ("uncontended", "contended", "requests")
#: Contending sessions in one process, on the ensemble.
SESSIONS = (10, 50)
#: The regression rows on the ensemble: contended sessions, per-request tasks.
REGRESSION_SESSIONS = 10
REGRESSION_CONCURRENCY = 10


def extra_drivers(stack: ExitStack, libraries: Sequence[str]) -> tuple[list[Driver], list[str]]:
    """Columns of other services in the ensemble rounds, and notes on those that cannot
    run. The spot for ``etcd (3 members)``: start its cluster in ``stack`` (stopped when
    the run ends) and return its driver with ``extra=(("hosts", endpoints),)``."""
    return [], []


@dataclass
class Ensemble:
    """The ensemble's own bench (its hosts, its settings, its log directory) and the
    columns that run on it."""

    bench: Bench
    drivers: list[Driver]
    start_s: float  # how long the ensemble took to start and warm up
    cluster: ZooKeeperCluster | None = None  # None: servers not started by the runner
    runner: Runner | None = None  # run.py's pieces (None: no traffic count)
    round_s: list[float] = dataclasses.field(default_factory=list)  # its share of each round

    @property
    def columns(self) -> list[str]:
        return [driver.column for driver in self.drivers]


def settings_for(settings: Settings) -> Settings:
    """The main run's settings with the ensemble's contention sizes."""
    return dataclasses.replace(settings, sessions=SESSIONS)


class Runner(Protocol):
    """What this module takes from ``run.py`` (passed in, as run.py is also ``__main__``)."""

    def make_bench(self, settings: Settings, hosts: str, log_dir: Path) -> Bench: ...
    def warm_server(self, hosts: str, root: str, seconds: float) -> None: ...
    def say(self, message: str) -> None: ...
    def make_tap(self, upstream: str) -> Tap: ...


def start(
    stack: ExitStack,
    runner: Runner,
    settings: Settings,
    drivers: Sequence[Driver],
    log_dir: Path,
    libraries: Sequence[str],
) -> tuple[Ensemble, list[str]]:
    """Start the ensemble (closed by ``stack``), warm it up like the standalone server,
    and make its bench; notes on the columns that cannot run."""
    from aiozklock.testing import ZooKeeperCluster

    clock = time.monotonic()
    cluster = stack.enter_context(ZooKeeperCluster(MEMBERS))
    pids = ", ".join(str(member.pid) for member in cluster.members)
    runner.say(f"ZooKeeper ensemble of {MEMBERS} at {cluster.hosts} (PIDs {pids}), fsync on")
    (log_dir / "ensemble").mkdir(parents=True, exist_ok=True)
    bench = runner.make_bench(settings_for(settings), cluster.hosts, log_dir / "ensemble")
    extra, notes = extra_drivers(stack, libraries)
    chosen = [d for d in drivers if d.column in COLUMNS] + extra
    runner.warm_server(cluster.hosts, bench.root, settings.server_warmup)
    return Ensemble(bench, chosen, time.monotonic() - clock, cluster, runner), notes


def run_round(
    bench: Bench,
    ensemble: Ensemble,
    run_scenario: Callable[[Bench, str, Sequence[Driver]], None],
) -> None:
    """This round's ensemble scenarios for every ensemble column (the order rotated by
    the round, like the main run's), their values and raw summaries into ``bench``'s
    round under ``ens_`` keys, their flags and notes into ``bench``'s."""
    child = ensemble.bench
    child.round_index = bench.round_index
    drivers = ensemble.drivers
    shift = bench.round_index % max(len(drivers), 1)
    order = [*drivers[shift:], *drivers[:shift]]
    clock = time.monotonic()
    for scenario in SCENARIOS:
        run_scenario(child, scenario, order)
    if bench.baseline is not None:
        regression(child, bench.baseline, ensemble.runner)
    if child.round_index == 0 and ensemble.runner is not None:
        subject = [d for d in drivers if d.column == report.SUBJECT]
        counted = list(bench.baseline) if bench.baseline is not None else subject
        member = child.hosts.split(",")[0]
        probe_traffic.run(child, counted, ensemble.runner.make_tap(member), ensemble.runner.say)
    for column, values in child.values.items():
        bench.values.setdefault(column, {}).update({PREFIX + k: v for k, v in values.items()})
    for column, raw in child.raw.items():
        bench.raw.setdefault(column, {})[SCENARIO] = raw
    for column, flagged in child.flags.items():
        bench.flags.setdefault(column, {}).update({PREFIX + k: v for k, v in flagged.items()})
    bench.notes += [f"ensemble: {note}" for note in child.notes]
    ensemble.round_s.append(time.monotonic() - clock)
    mirror(bench.values, bench.settings.concurrency)
    child.values, child.raw, child.notes = {}, {}, []


def regression(child: Bench, pair: tuple[Driver, Driver], runner: Runner | None = None) -> None:
    """The regression rows on the ensemble: this checkout and the baseline commit (``pair``),
    scenario by scenario, their order alternating each round (one paired ratio per round)."""
    first, second = pair if child.round_index % 2 == 0 else pair[::-1]
    steps: list[tuple[str, Callable[[Driver], None]]] = [
        ("uncontended", child.uncontended),
        (
            f"contended N={REGRESSION_SESSIONS}",
            lambda d: child.contended(d, REGRESSION_SESSIONS, processes=False),
        ),
        (
            f"requests C={REGRESSION_CONCURRENCY}",
            lambda d: child.requests(d, REGRESSION_CONCURRENCY),
        ),
    ]
    for what, step in steps:
        for driver in (first, second):
            if runner is not None:
                runner.say(
                    f"round {child.round_index + 1}, ensemble regression {what}: {driver.column}"
                )
            try:
                step(driver)
            except RuntimeError as exc:  # run.WorkerError: noted, as the other rows' failures
                child.notes.append(
                    f"regression {what}, {driver.column} (round {child.round_index + 1}): "
                    f"failed: {exc}"
                )


def regression_rows() -> list[Metric]:
    """The regression rows measured on the ensemble (keys with the ``ens_`` prefix)."""
    c = REGRESSION_CONCURRENCY
    wanted = (f"requests_{c}_per_s", f"requests_{c}_p50_us")
    chosen = [
        *report.regression_rows([REGRESSION_SESSIONS]),
        *(m for m in report.requests_rows([c]) if m.key in wanted),
    ]
    return [dataclasses.replace(m, key=PREFIX + m.key) for m in chosen]


def mirror(values: dict[str, dict[str, float]], concurrency: Sequence[int]) -> None:
    """Copy the :data:`MIRRORED` columns' values of this round (main keys) under the
    ensemble's keys (the scenarios ran before ``ensemble`` in the round)."""
    keys = [m.key.removeprefix(PREFIX) for m in rows(concurrency)]
    for column in MIRRORED:
        found = values.get(column, {})
        found.update({PREFIX + key: found[key] for key in keys if key in found})


def rows(concurrency: Sequence[int]) -> list[Metric]:
    """The ensemble table's rows (keys with the ``ens_`` prefix)."""
    main = {m.key: m for m in report.metrics(SESSIONS, (), 50)}
    keys = ["cycle_median_us", "cycle_p99_us", "cycles_per_s", "cpu_per_cycle_us"]
    for n in SESSIONS:
        keys += [f"contended_{n}_per_s", f"handoff_{n}_median_us"]
    chosen = [main[key] for key in keys]
    chosen += [m for m in report.requests_rows(concurrency) if not m.key.endswith("_p99_us")]
    return [dataclasses.replace(m, key=PREFIX + m.key) for m in chosen]


def table(concurrency: Sequence[int], extra_columns: Sequence[str] = ()) -> Table:
    """The table "On a 3-node ensemble, fsync on"."""
    return Table(
        f"On a {MEMBERS}-node ensemble, fsync on",
        f"The headline scenarios again, on a local {MEMBERS}-node ZooKeeper ensemble (one "
        "machine, each member its own JVM and data directory, ZooKeeper's default "
        "`forceSync=yes`), every client connected with all three members in its connect "
        "string, in the same rounds as the tables above: every write is a quorum commit "
        "through the leader. Uncontended, contended (1 process) and per-request as in the "
        "main and per-request tables; the % row is aiozklock's cycles/s over its raw floor "
        "on the ensemble.",
        report.SUBJECT,
        (report.SUBJECT, "aiozk", "kazoo", "Curator", *MIRRORED, *extra_columns),
        tuple(rows(concurrency)),
    )


def render(
    columns: Sequence[str],
    rounds: report.Rounds,
    flags: dict[str, dict[str, str]],
    concurrency: Sequence[int],
    skip: Sequence[str] = (),
) -> tuple[str, dict[str, Any]]:
    """The ensemble table (its columns: whichever have an ``ens_`` value in some round, but
    ``skip``: the regression's) and its ratio summary for latest.json."""
    measured = {c for r in rounds for c, v in r.items() if any(k.startswith(PREFIX) for k in v)}
    measured -= set(skip)
    known = {report.SUBJECT, "aiozk", "kazoo", "Curator", *MIRRORED}
    extra = sorted(measured - known)
    ens = table(concurrency, extra)
    peers = [c for c in ens.columns if c != report.SUBJECT and c in measured]
    summary = report.ratio_summary(ens.rows, rounds, peers=peers)
    return ens.render([*columns, *measured], rounds, flags), summary


def headline_rows(concurrency: Sequence[int]) -> list[Metric]:
    """The ensemble's rows for the chart's ratio panel, labelled as such."""
    return [
        dataclasses.replace(m, label=f"{MEMBERS}-node ensemble: {m.label}")
        for m in report.headline(rows(concurrency))
    ]


def timing(ensemble: Ensemble) -> dict[str, Any]:
    """What the ensemble cost (for latest.json and the notes): its start and warm-up,
    and its seconds in each round."""
    return {
        "members": MEMBERS,
        "columns": ensemble.columns,
        "start_s": round(ensemble.start_s, 1),
        "round_s": [round(s, 1) for s in ensemble.round_s],
    }
