"""The benchmark runner's ensemble and scale rows: correctness only, tiny sizes, never an
assertion on time."""

from __future__ import annotations

import dataclasses
import math
from contextlib import ExitStack
from pathlib import Path

import pytest

import aiozklock
from aiozklock.testing import ZooKeeperCluster
from benchmarks import ensemble, probe_traffic, report, run, scale
from benchmarks.clients import aiozklock_scale
from benchmarks.common import Gate, Params
from tests.conftest import gone


@pytest.mark.anyio
async def test_scale_holds_every_lock_at_once_then_releases_all(
    zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    """130 locks over 7 tasks (uneven shares), spread over parents of 100: all held at
    once, the RSS probed while they are, and no lock node left once released."""
    params = Params(hosts=hosts, path="/scale", locks=130, threads=7)
    result = await aiozklock_scale.scale(params, Gate(None))
    assert result["held"] == 130
    assert result["rss_held_kib"] > 0
    assert result["acquire_ns"] > 0
    assert {"p0", "p1"} <= set(await zk.get_children("/scale"))  # (containers, until reaped)
    paths = [aiozklock_scale.lock_path(params, i) for i in (0, 99, 100, 129)]
    assert paths[2] == "/scale/p1/l0"
    await gone(zk, *paths)


@pytest.mark.anyio
async def test_memory_breakdown_names_the_lock_objects(hosts: str) -> None:
    text = await aiozklock_scale.breakdown(hosts, 20, "/breakdown", top=3)
    assert "tracemalloc growth while 20 locks are held" in text
    assert "one held lock (/breakdown/p0/l0)" in text
    assert "  Lock: " in text


Values = dict[str, dict[str, float]]


def rounds_with(values: Values, n: int = 2) -> list[Values]:
    """``n`` rounds with the same values (copies)."""
    return [{c: dict(v) for c, v in values.items()} for _ in range(n)]


def test_ensemble_table_has_its_columns_and_mirrors_etcd_3_members() -> None:
    """aiozklock and Curator measured on the ensemble; a 3-member etcd column of the main
    run is copied under the ensemble's keys (not run again), and gets its ratio."""
    values: dict[str, dict[str, float]] = {
        "aiozklock": {"ens_cycle_median_us": 1000.0, "ens_requests_10_per_s": 900.0},
        "Curator": {"ens_cycle_median_us": 2000.0, "ens_requests_10_per_s": 450.0},
        "etcd (3 members)": {"cycle_median_us": 4000.0, "requests_10_per_s": 300.0},
    }
    ensemble.mirror(values, (10,))
    assert values["etcd (3 members)"]["ens_cycle_median_us"] == 4000.0
    rounds = rounds_with(values)
    text, summary = ensemble.render(["aiozklock", "Curator"], rounds, {}, (10,))
    assert text.startswith("### On a 3-node ensemble, fsync on")
    header = next(line for line in text.splitlines() if line.startswith("| Metric"))
    assert "aiozklock vs Curator" in header
    assert "aiozklock vs etcd (3 members)" in header
    assert "aiozk |" not in header  # not measured: no column
    assert summary["ens_cycle_median_us"]["Curator"]["median"] == 2.0
    assert summary["ens_cycle_median_us"]["etcd (3 members)"]["median"] == 4.0
    assert summary["ens_requests_10_per_s"]["Curator"]["median"] == 2.0


def test_ensemble_table_is_empty_without_its_scenario() -> None:
    text, summary = ensemble.render(["aiozklock", "Curator"], rounds_with({}), {}, (10, 100))
    assert text == ""
    assert summary == {}


def test_scale_table_states_the_growth_per_lock_at_each_size() -> None:
    values = {
        "aiozklock": {
            "scale_1000_rss_per_lock_kib": 6.0,
            "scale_100000_rss_per_lock_kib": 5.0,
            "many_rss_growth_mib": 11.9,
        },
        "Curator": {"many_rss_growth_mib": 130.0},
    }
    text, summary = scale.render(
        ["aiozklock", "Curator"], rounds_with(values), {}, (1000, 100_000), 1000
    )
    assert "at 100,000 over at 1,000: 0.83 (1.00: linear growth)" in text
    assert summary["rss_per_lock_kib"] == {1000: 6.0, 100_000: 5.0}
    row = next(line for line in text.splitlines() if line.startswith("| 1,000 locks, one task"))
    assert "| 12.2 | 133.1 |" in row  # 11.9 MiB / 1,000 locks = 12.2 KiB each


def test_chart_draws_what_was_measured_only(tmp_path: Path) -> None:
    """An ensemble-only run (no main row, no value panel but one) still draws its ratios."""
    pytest.importorskip("matplotlib", reason="the chart needs the bench dependency group")
    values = {
        "aiozklock": {"ens_cycle_median_us": 1000.0, "ens_cycles_per_s": 900.0},
        "Curator": {"ens_cycle_median_us": 2000.0, "ens_cycles_per_s": 450.0},
    }
    rows = report.chart_rows(ensemble.headline_rows((10, 100)))
    assert [m.key for m in rows][:2] == ["ens_cycle_median_us", "ens_cpu_per_cycle_us"]
    path = tmp_path / "chart.png"
    report.chart(path, ["aiozklock", "Curator", "kazoo"], rounds_with(values), rows, (10,), (10,))
    assert path.read_bytes().startswith(b"\x89PNG")
    report.chart(path, ["aiozklock"], rounds_with({}), rows, (10,), (10,))  # nothing measured
    assert path.stat().st_size > 0


@pytest.mark.timeout(180)
def test_ensemble_round_through_the_runner(
    zk_ensemble: ZooKeeperCluster, chroot: str, tmp_path: Path
) -> None:
    """One ensemble round of aiozklock, tiny, in worker processes connected to all three
    members: every row measured (the floor's % too), under ``ens_`` keys, nothing flagged."""
    settings = dataclasses.replace(
        run.QUICK, iterations=5, warmup=2, duration=0.2, contended_warmup=1, concurrency=(3,)
    )
    drivers, _ = run.make_drivers(["aiozklock"], tmp_path, trio=False)
    main = run.Bench(settings, zk_ensemble.hosts, tmp_path)
    child = run.Bench(ensemble.settings_for(settings), zk_ensemble.hosts, tmp_path / "ens")
    child.root = main.root = chroot
    (tmp_path / "ens").mkdir()
    runs = ensemble.Ensemble(child, [d for d in drivers if d.column in ensemble.COLUMNS], 0.0)
    ensemble.run_round(main, runs, run.run_scenario)
    values = main.values["aiozklock"]
    keys = [m.key for m in ensemble.rows((3,))]
    assert all(values[key] > 0 and not math.isnan(values[key]) for key in keys), values
    assert main.flags == {}
    assert main.notes == []
    assert child.values == {}  # handed over to the main bench's round
    assert len(runs.round_s) == 1


@pytest.mark.timeout(240)
def test_ensemble_regression_and_traffic_through_the_runner(
    zk_ensemble: ZooKeeperCluster, chroot: str, tmp_path: Path
) -> None:
    """With a regression pair (here this checkout twice), an ensemble round measures both
    columns' regression rows, and round 1 counts their own traffic through the wire tap:
    an idle session on an ensemble probes through the leader and sends no ping."""
    settings = dataclasses.replace(
        run.QUICK, iterations=5, warmup=2, duration=0.2, contended_warmup=1, concurrency=(3,)
    )
    # A 1 s count still tells probes from pings: an idle session at T = 4 s pings within
    # 0.67 s (T/6) and, holding nothing, writes no probe (it would, every 0.5 s, if it did).
    settings = dataclasses.replace(settings, traffic_window=1.0)
    main = run.Bench(settings, zk_ensemble.hosts, tmp_path)
    main.baseline = (
        run.python_driver("aiozklock", "now", ["regression"]),
        run.python_driver("aiozklock", "then", ["regression"]),
    )
    child = run.Bench(ensemble.settings_for(settings), zk_ensemble.hosts, tmp_path / "ens")
    child.root = main.root = chroot
    (tmp_path / "ens").mkdir()
    runs = ensemble.Ensemble(child, [], 0.0, runner=run.ensemble_runner())
    ensemble.run_round(main, runs, run.run_scenario)
    assert main.notes == []
    for column in ("now", "then"):
        values = main.values[column]
        assert all(values[m.key] > 0 for m in ensemble.regression_rows()), values
        idle = "ens_" + probe_traffic.key("idle", 4.0, "")
        assert values[idle + "probes_per_s"] == 0  # proofs only while something is held
        assert values[idle + "pings_per_s"] > 0
        assert values["ens_" + probe_traffic.key("busy", 10.0, "cycles_per_s")] > 0
    assert main.flags == {}


def test_ensemble_starts_three_members_and_stops_them(tmp_path: Path) -> None:
    """The runner's ensemble: 3 serving members, fsync left at ZooKeeper's default (no
    ``forceSync`` in their config), all stopped when the run's stack closes."""
    settings = dataclasses.replace(run.QUICK, server_warmup=0.2)
    runner = run.ensemble_runner()
    with ExitStack() as stack:
        found, notes = ensemble.start(stack, runner, settings, [], tmp_path, ["aiozklock"])
        hosts = found.bench.hosts
        assert len(hosts.split(",")) == 3
        assert notes == []
        cluster = found.cluster
        assert cluster is not None
        assert all("forceSync" not in m.config_path.read_text() for m in cluster.members)
        pids = [m.pid for m in cluster.members]
        assert all(pids)
    assert all(not m.running for m in cluster.members)


@pytest.mark.timeout(120)
def test_scale_rows_through_the_runner(zk_hosts: str, chroot: str, tmp_path: Path) -> None:
    """aiozklock's scale size and the one-task-per-lock size, tiny, in worker processes:
    every lock held at once, per-lock values recorded, nothing flagged."""
    settings = dataclasses.replace(run.QUICK, scale_locks=(30,), kazoo_threads=4)
    drivers, _ = run.make_drivers(["aiozklock"], tmp_path, trio=False)
    bench = run.Bench(settings, zk_hosts, tmp_path)
    bench.root = chroot
    scale.measure(bench, drivers[0], 30)
    scale.measure_many(bench, drivers[0], 20)
    values = bench.values["aiozklock"]
    assert values["scale_30_rss_growth_mib"] >= 0
    assert values["scale_30_acquire_us"] > 0
    assert values["scale_many_20_acquire_us"] > 0
    assert bench.raw["aiozklock"]["scale-30"]["held"] == 30
    assert bench.raw["aiozklock"]["scale-many-20"]["held"] == 20
    assert bench.flags == {}


def test_ensemble_regression_columns_stay_out_of_the_ensemble_table() -> None:
    """The regression's columns on the ensemble get their own table: ``skip`` keeps them out
    of the ensemble's, and the ensemble's regression rows pair them per round."""
    values: Values = {
        "aiozklock": {"ens_cycle_median_us": 1000.0},
        "now": {"ens_cycle_median_us": 900.0, "ens_requests_10_per_s": 500.0},
        "then": {"ens_cycle_median_us": 1000.0, "ens_requests_10_per_s": 400.0},
    }
    text, _ = ensemble.render(["aiozklock"], rounds_with(values), {}, (10,), ["now", "then"])
    assert "| now" not in text
    assert "| then" not in text
    assert "| aiozklock |" in text
    rows = ensemble.regression_rows()
    assert all(m.key.startswith(ensemble.PREFIX) for m in rows)
    text, summary = report.regression(rows, rounds_with(values), "now", "then", {})
    assert summary["ens_cycle_median_us"]["ratio_median"] == pytest.approx(1000 / 900)
    assert summary["ens_requests_10_per_s"]["ratio_median"] == pytest.approx(1.25)


def test_traffic_table_shows_each_column_and_the_difference() -> None:
    key = "ens_" + probe_traffic.key("idle", 4.0, "own_per_s")
    values: Values = {"now": {key: 2.0}, "then": {key: 1.5}}
    rounds = [values, {}]  # counted in round 1 only
    text = probe_traffic.render(rounds, ["now", "then"], "ens_")
    assert "| idle, T = 4 s | its own (pings + probes) | 2.00 | 1.50 | +0.50 |" in text
    assert "| busy" not in text  # not measured: no row
    assert probe_traffic.render([{}], ["now", "then"], "ens_") == ""
