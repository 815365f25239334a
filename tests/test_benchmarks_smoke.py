"""Smoke test of the benchmark runner's aiozklock measurements and of its bookkeeping:
correctness only, tiny sizes, never an assertion on time."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import aiozklock
from aiozklock._wire._protocol import CreateMode, create_op, delete_op, get_children_op
from aiozklock.testing import session_of
from benchmarks import peers, report, run
from benchmarks.clients import aiozk_bench, aiozklock_bench, kazoo_bench
from benchmarks.common import Gate, Params, member_paths
from benchmarks.stats import (
    CPU_FIELDS,
    CpuShare,
    Grants,
    LeaseGrants,
    RatioRange,
    SharedGrants,
    Summary,
    cpu_times,
)
from benchmarks.wire_tap import WireTap, is_probe
from tests.conftest import gone

pytestmark = pytest.mark.anyio


async def test_uncontended_cycles(hosts: str) -> None:
    params = Params(hosts=hosts, path="/uncontended", warmup=1, iterations=3)
    result = await aiozklock_bench.uncontended(params, Gate(None))
    assert len(result["latencies_ns"]) == 3
    assert result["wall_ns"] > 0
    assert result["cpu_ns"] >= 0


async def test_contended_sessions_keep_mutual_exclusion(hosts: str) -> None:
    params = Params(hosts=hosts, path="/contended", sessions=3, warmup=1, duration=0.2)
    result = await aiozklock_bench.contended(params, Gate(None))
    grants = Grants.of(result["intervals"])
    assert grants.count >= 3  # every session got the lock at least once
    assert grants.overlaps == 0
    assert result["counter"] == grants.count


async def test_tasks_sharing_a_client_keep_mutual_exclusion(
    zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    """The "shared" rows: aiozklock's tasks on one client, kazoo's threads on one
    ``KazooClient`` (a ``Lock`` each), one path."""
    params = Params(hosts=hosts, path="/shared", sessions=3, warmup=1, duration=0.2)
    await zk.ensure_path("/shared")  # and the chroot, which kazoo expects to exist
    for result in (
        await aiozklock_bench.contended_shared(params, Gate(None)),
        await anyio.to_thread.run_sync(kazoo_bench.contended_shared, params, Gate(None)),
    ):
        grants = Grants.of(result["intervals"])
        assert grants.count >= 3
        assert grants.overlaps == 0
        assert result["counter"] == grants.count


async def test_non_fair_contended_sessions_keep_mutual_exclusion(hosts: str) -> None:
    params = Params(hosts=hosts, path="/nonfair", sessions=3, warmup=1, duration=0.2, fair=False)
    result = await aiozklock_bench.contended(params, Gate(None))
    grants = Grants.of(result["intervals"])
    assert grants.count >= 3
    assert grants.overlaps == 0
    assert result["counter"] == grants.count


async def test_election_terms_never_overlap(hosts: str) -> None:
    params = Params(hosts=hosts, path="/election", sessions=3, warmup=1, duration=0.2)
    result = await aiozklock_bench.SCENARIOS["election"](params, Gate(None))
    terms = Grants.of(result["intervals"])
    assert terms.count >= 3  # every candidate led at least once
    assert terms.overlaps == 0  # never two leaders at once
    assert result["counter"] == terms.count


async def test_multilock_cycles_leave_no_node(zk: aiozklock.ZooKeeperClient, hosts: str) -> None:
    params = Params(hosts=hosts, path="/multi", warmup=1, iterations=3, members=3)
    result = await aiozklock_bench.multilock(params, Gate(None))
    assert len(result["latencies_ns"]) == 3
    for path in member_paths(params):
        # An empty container may already be reaped (NoNode): nothing left either way.
        with anyio.fail_after(5), contextlib.suppress(aiozklock.NoNodeError):
            await gone(zk, path)


async def test_rwmix_writers_hold_alone(hosts: str) -> None:
    params = Params(hosts=hosts, path="/rwmix", sessions=3, writers=1, warmup=1, duration=0.2)
    with anyio.fail_after(20):
        result = await aiozklock_bench.rwmix(params, Gate(None))
    grants = SharedGrants.of(result["reads"], result["writes"])
    assert grants.reads >= 3  # every reader got the lock at least once
    assert grants.writes >= 1
    assert grants.conflicts == 0


async def test_semaphore_never_grants_more_than_its_leases(hosts: str) -> None:
    params = Params(hosts=hosts, path="/semaphore", sessions=4, leases=2, warmup=1, duration=0.2)
    with anyio.fail_after(20):
        result = await aiozklock_bench.SCENARIOS["semaphore"](params, Gate(None))
    grants = LeaseGrants.of(result["intervals"], 2)
    assert grants.count >= 4
    assert 1 <= grants.most_held <= 2
    assert grants.over_limit == 0


async def test_many_locks_are_all_held_at_once(hosts: str) -> None:
    result = await aiozklock_bench.many(Params(hosts=hosts, path="/many", locks=20), Gate(None))
    assert result["held"] == 20
    assert result["peak_rss_kib"] >= result["rss_before_kib"] > 0


async def test_raw_floor(zk: aiozklock.ZooKeeperClient, hosts: str) -> None:
    await zk.ensure_path("/floor")
    params = Params(hosts=hosts, path="/floor", warmup=1, pairs=5, batch=2)
    result = await aiozklock_bench.floor(params, Gate(None))
    assert len(result["pair_latencies_ns"]) == 5
    assert result["errors"] == 0
    assert await zk.get_children("/floor") == []


def assert_every_task_cycled(result: dict[str, Any], concurrency: int) -> None:
    assert len(result["per_task"]) == concurrency
    assert min(result["per_task"]) >= 1  # no task starved
    assert len(result["latencies_ns"]) == sum(result["per_task"])
    assert result["measured_ns"] > 0
    assert result.get("errors", 0) == 0


async def test_per_request_tasks_cycle_on_their_own_locks(hosts: str) -> None:
    params = Params(hosts=hosts, path="/requests", concurrency=5, warmup=1, duration=0.2)
    with anyio.fail_after(20):
        result = await aiozklock_bench.requests(params, Gate(None))
    assert_every_task_cycled(result, 5)


async def test_per_request_floor_leaves_no_node(zk: aiozklock.ZooKeeperClient, hosts: str) -> None:
    params = Params(hosts=hosts, path="/request-floor", concurrency=4, warmup=1, duration=0.2)
    with anyio.fail_after(20):
        await zk.ensure_path("/request-floor")
        result = await aiozklock_bench.request_floor(params, Gate(None))
        assert_every_task_cycled(result, 4)
        assert await zk.get_children("/request-floor") == []


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # aiozk is asyncio only
async def test_per_request_aiozk(zk_hosts: str, chroot: str) -> None:
    # aiozk does not take a chroot in its connect string: the path goes under it instead
    path = f"{chroot}/requests-aiozk"
    params = Params(hosts=zk_hosts, path=path, concurrency=3, warmup=1, duration=0.2)
    with anyio.fail_after(20):
        result = await aiozk_bench.requests(params, Gate(None))
    assert_every_task_cycled(result, 3)


async def test_per_request_kazoo_threads(zk: aiozklock.ZooKeeperClient, hosts: str) -> None:
    params = Params(
        hosts=hosts, path="/requests-kazoo", concurrency=3, warmup=1, duration=0.2, hold=0.001
    )
    with anyio.fail_after(30):
        await zk.ensure_path("/requests-kazoo")  # and the chroot, which kazoo expects to exist
        result = await anyio.to_thread.run_sync(kazoo_bench.requests, params, Gate(None))
    assert_every_task_cycled(result, 3)
    assert min(result["latencies_ns"]) >= 1_000_000  # each cycle held its lock for 1 ms


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the tap is asyncio code
async def test_wire_tap_counts_requests_and_round_trips(zk_hosts: str, chroot: str) -> None:
    tap = WireTap(zk_hosts)
    server = await asyncio.start_server(tap.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with aiozklock.connect(f"127.0.0.1:{port}{chroot}") as zk:
            await zk.ensure_path("/tap")
            session = session_of(zk)
            tap.counts.requests.clear()
            tap.counts.round_trips = 0
            node = session.server_path("/tap/node")
            create = create_op(node, b"", CreateMode.PERSISTENT, session.client_path)
            listing = get_children_op(session.server_path("/tap"))
            await session.pipeline([create, listing])  # one write: 2 requests, 1 round trip
            await session.call(delete_op(node))
            assert sum(tap.counts.requests.values()) == 3
            assert tap.counts.round_trips == 2
            assert tap.counts.notifications == 0
    finally:
        server.close()


def test_wire_tap_tells_a_probe_from_other_multis() -> None:
    """aiozklock's probe through the leader (a multi of one check) counts as a probe; a
    multi of two checks, or of a delete, does not."""
    from aiozklock._wire._leader import probe_op
    from aiozklock._wire._multi import MultiCheck, MultiDelete, multi_op

    def frame(body: bytes) -> bytes:  # length, xid, then the op's body (opcode first)
        return len(body + b"1234").to_bytes(4, "big") + (7).to_bytes(4, "big") + body

    assert is_probe(frame(probe_op().body))
    two = multi_op((MultiCheck("/", -1), MultiCheck("/a", 3)), str)
    assert not is_probe(frame(two.body))
    assert not is_probe(frame(multi_op((MultiDelete("/a"),), str).body))


def test_grants_detect_overlaps_and_hand_offs() -> None:
    grants = Grants.of([(20, 30), (0, 10), (25, 40)])
    assert grants.count == 3
    assert grants.overlaps == 1  # (25, 40) entered before (20, 30) exited
    assert grants.handoff.n == 2


def test_summary_percentiles() -> None:
    summary = Summary.of_ns([1000 * n for n in range(1, 101)])
    assert summary.median_us == pytest.approx(50.5)
    assert summary.p99_us == pytest.approx(99.01)
    assert summary.max_us == 100


def test_params_survive_the_command_line() -> None:
    params = Params(hosts="h:1", path="/p", duration=0.5, profile=True, backend="trio")
    assert Params.from_words(params.to_words()) == params


async def test_gate_without_runner_does_not_wait() -> None:
    gate = Gate(None)
    went = []
    gate.on_go.append(lambda: went.append(True))
    with anyio.fail_after(1):
        await gate.aready()
    assert went == [True]


def test_regression_ratios_are_paired_per_round() -> None:
    rows = report.regression_rows([2])
    rounds = [
        {"now": {"cycles_per_s": 110.0, "cycle_median_us": 90.0}, "then": {"cycles_per_s": 100.0}},
        {"now": {"cycles_per_s": 90.0}, "then": {"cycles_per_s": 100.0}},
        {"now": {"cycles_per_s": 100.0}, "then": {"cycles_per_s": 100.0}},
    ]
    text, summary = report.regression(rows, rounds, "now", "then", {})
    assert summary["cycles_per_s"]["ratio_median"] == pytest.approx(1.0)
    assert summary["cycles_per_s"]["ratio_min"] == pytest.approx(0.9)
    assert summary["cycles_per_s"]["ratio_max"] == pytest.approx(1.1)
    assert "cycle_median_us" not in summary  # never measured for the baseline: no ratio
    assert "1.00x [0.90-1.10]" in text


def test_recipe_tables_skip_unmeasured_and_flag_violations() -> None:
    multilock, election, non_fair = report.recipe_tables(3, 10, [10], 50)
    values = {
        "aiozklock": {"election_handoff_median_us": 100.0},
        "kazoo": {"election_handoff_median_us": 200.0},
    }
    flags = {"kazoo": {"election_handoff_median_us": "two leaders"}}
    columns = ["aiozklock", "kazoo", "Curator"]
    assert multilock.render(columns, [values], flags) == ""
    text = election.render(columns, [values], flags)
    assert "| Hand-off, median (µs) | lower | 100 | 200 ⚠ | — | 2.00x | — |" in text  # 1 round
    assert non_fair.render(columns, [values], flags) == ""


def test_ratio_range_is_the_median_and_min_max_of_the_rounds() -> None:
    spread = RatioRange.of([1.2, None, 0.9, 1.5, 1.1])  # round 2 measured one side only
    assert spread is not None
    assert spread.ratios == (1.2, 0.9, 1.5, 1.1)
    assert spread.median == pytest.approx(1.15)
    assert (spread.low, spread.high) == (0.9, 1.5)
    assert not spread.significant  # 0.9 .. 1.5 straddles 1.00
    assert report.format_ratio(spread) == "1.15x [0.90-1.50] ~"
    slower = RatioRange.of([0.62, 0.81, 0.74])
    assert slower is not None
    assert slower.significant  # all below 1: the peer is better
    assert report.format_ratio(slower) == "0.74x [0.62-0.81]"
    assert report.format_ratio(RatioRange.of([1.3])) == "1.30x"  # one round: no range
    assert RatioRange.of([None, None]) is None


def test_table_shows_medians_and_per_round_ratios() -> None:
    rows = [report.Metric("cycles_per_s", "Cycles per second", "/s", True)]
    rounds = [
        {"aiozklock": {"cycles_per_s": 800.0}, "Curator": {"cycles_per_s": 1000.0}},
        {"aiozklock": {"cycles_per_s": 900.0}, "Curator": {"cycles_per_s": 600.0}},
        {"aiozklock": {"cycles_per_s": 700.0}, "Curator": {"cycles_per_s": 700.0}},
    ]
    text = report.markdown(rows, ["aiozklock", "Curator"], rounds, {}, peer_columns=["Curator"])
    # medians 800 and 700; ratios 0.80, 1.50, 1.00: median 1.00, straddles 1.00
    assert "| Cycles per second (/s) | higher | 800 | 700 | 1.00x [0.80-1.50] ~ |" in text
    summary = report.ratio_summary(rows, rounds, peers=["Curator"])["cycles_per_s"]["Curator"]
    assert summary["ratios"] == pytest.approx([0.8, 1.5, 1.0])
    assert summary["significant"] is False


def test_cpu_steal_between_two_proc_stat_samples() -> None:
    before = cpu_times(
        "cpu  292402 0 83411 2139160 18973 0 14194 141 0 0\n"
        "cpu0 146201 0 41705 1069580 9486 0 7097 70 0 0\n"
        "intr 123 0 0\n"
    )
    after = cpu_times("cpu  292902 0 83711 2139360 18973 0 14294 541 0 0\n")
    share = CpuShare.between(before, after)
    # deltas: user 500, system 300, idle 200, softirq 100, steal 400: total 1500 jiffies
    assert share.steal_pct == pytest.approx(100 * 400 / 1500)
    assert share.busy_pct == pytest.approx(100 * 900 / 1500)
    with pytest.raises(ValueError, match="no aggregate"):
        cpu_times("cpu0 1 2 3 4\n")


def test_rounds_table_flags_heavy_steal() -> None:
    now = run.read_cpu_times()  # this machine's /proc/stat
    assert now is not None
    assert set(now) == set(CPU_FIELDS)
    probe = run.MachineProbe().finish(["aiozklock", "Curator"])
    assert probe["order"] == ["aiozklock", "Curator"]
    calm = {**probe, "load_start": (1.5, 1, 1), "load_end": (2.25, 1, 1), "steal_pct": 2.0}
    heavy = {**probe, "duration_s": 95.0, "steal_pct": 26.7, "busy_pct": 60.0}
    lines = report.rounds_markdown([calm, heavy]).splitlines()
    assert len(lines) == 4
    assert "| 1.50 → 2.25 | 2.0 |" in lines[2]
    assert "⚠" not in lines[2]
    assert "| 2 | aiozklock, Curator | 95 |" in lines[3]
    assert "| 26.7 ⚠ heavy steal | 60 |" in lines[3]


def curator_unavailable() -> str | None:
    """Why the TLS benchmark cannot run Curator here (the script says so too), or None."""
    if shutil.which("java") is None or shutil.which("javac") is None:
        return "no java/javac (a JDK) on PATH"
    missing = [name for name in run.CURATOR_JARS if not (run.JAVA_DIR / f"{name}.jar").is_file()]
    return f"missing {', '.join(missing)}" if missing else None


@pytest.mark.timeout(300)  # the run's own bound is 240 s (the default 60 s cut it short)
async def test_tls_cost_script_measures_every_column(anyio_backend: str, tmp_path: Path) -> None:
    """asyncio: every column, Curator's too. trio: aiozklock's columns (the only ones the
    backend runs: Curator's are JVMs, started from a worker thread) with ``--no-curator``,
    which skips the JVMs (6 of them and javac: 26 of the run's 33 s)."""
    curator = anyio_backend == "asyncio"
    command = [
        sys.executable,
        str(run.ROOT / "benchmarks" / "tls_cost.py"),
        *("--cycles", "3", "--rounds", "2", "--connects", "2", "--warmup", "2"),
        *("--curator-warmup", "3", "--backend", anyio_backend, "--output", str(tmp_path)),
        *([] if curator else ["--no-curator"]),
    ]
    with anyio.fail_after(240):  # a TLS server, javac and up to 6 JVMs on 2 shared cores
        finished = await anyio.run_process(command, env=run.worker_env(), check=False)
    assert finished.returncode == 0, finished.stderr.decode(errors="replace")[-3000:]
    text = (tmp_path / "tls.md").read_text()
    doc = json.loads((tmp_path / "tls.json").read_text())
    assert len(doc["rounds"]) == 2
    for column in ("aiozklock", "aiozklock TLS"):
        assert f"| {column} |" in text
        assert all(r["per_cycle_us"][column]["wall"] > 0 for r in doc["rounds"])
        assert [len(times) for times in doc["connect_ms"][column].values()] == [2, 2]
    assert len(doc["ratios"]["aiozklock: TLS / plain"]["wall"]["ratios"]) == 2
    assert "| aiozklock: TLS / plain | TLS costs more |" in text
    assert "aiozklock reconnect, TLS / plain (per try):" in text
    if not curator:
        assert doc["notes"] == ["Curator skipped: --no-curator"]
        assert "| Curator |" not in text
        assert "| Curator TLS |" not in text
        assert list(doc["connect_ms"]) == ["aiozklock", "aiozklock TLS"]
        return
    why = curator_unavailable()
    if why is not None:
        assert any(note.startswith("Curator skipped") for note in doc["notes"])
        assert "| Curator TLS |" not in text
        pytest.skip(f"Curator columns not checked: {why}")
    assert doc["notes"] == []
    for column in ("Curator", "Curator TLS"):
        assert f"| {column} |" in text
        assert all(r["per_cycle_us"][column]["cpu"] >= 0 for r in doc["rounds"])
        assert len(doc["connect_ms"][column]["connect"]) == 2
    for name in ("aiozklock TLS vs Curator TLS", "Curator: TLS / plain"):
        assert len(doc["ratios"][name]["wall"]["ratios"]) == 2
        assert f"| {name} |" in text


def test_shared_grants_flag_writers_that_do_not_hold_alone() -> None:
    reads = [(0, 10), (5, 15), (30, 40)]
    writes = [(15, 20), (35, 50), (60, 70)]  # (15, 20) enters as (5, 15) exits: no overlap
    grants = SharedGrants.of(reads, writes)
    assert (grants.reads, grants.writes) == (3, 3)
    assert grants.conflicts == 1  # (35, 50) entered while (30, 40) was read
    assert grants.most_readers == 2  # (0, 10) and (5, 15)
    assert grants.writes_per_second == pytest.approx(3 / 70e-9)
    alone = SharedGrants.of(reads, [(15, 20), (40, 50)])
    assert alone.conflicts == 0
    assert SharedGrants.of(reads, [(12, 13)]).conflicts == 1  # a read entered before it


def test_lease_grants_count_the_holders_at_once() -> None:
    intervals = [(0, 10), (2, 12), (4, 14), (10, 20), (13, 15)]
    grants = LeaseGrants.of(intervals, 2)
    assert grants.count == 5
    assert grants.most_held == 3  # (0, 10), (2, 12) and (4, 14)
    assert grants.over_limit == 3  # (4, 14), (10, 20) and (13, 15) each made a third
    assert LeaseGrants.of(intervals, 3).over_limit == 0


def test_shared_tables_leave_out_clients_without_the_recipe() -> None:
    rwlock, semaphore = report.shared_tables(10, 20, 5)
    values = {
        "aiozklock": {"rwmix_writes_per_s": 50.0, "semaphore_20_per_s": 900.0},
        "aiozk": {"rwmix_writes_per_s": 25.0},
        "kazoo": {"semaphore_20_per_s": 300.0},
    }
    columns = ["aiozklock", "aiozk", "kazoo", "Curator"]
    text = rwlock.render(columns, [values], {})
    assert (
        "| 10 readers + 1 writer, 1 process: write grants (/s) | higher | 50 | 25 | — | — |" in text
    )
    assert "| 2.00x | — | — |" in text
    text = semaphore.render(columns, [values], {})
    assert "aiozk |" not in text  # no column: aiozk has no semaphore that waits
    assert (
        "| 20 sessions, 5 leases, 1 process: grants (/s) | higher | 900 | 300 | — | 3.00x | — |"
        in text
    )


@pytest.mark.timeout(180)
@pytest.mark.parametrize("library", ["aiozklock", "aiozk", "kazoo", "curator"])
def test_rwlock_and_semaphore_rows_through_the_runner(
    library: str, zk_hosts: str, chroot: str, tmp_path: Path
) -> None:
    """The runner's rwlock, rwmix and semaphore scenarios, tiny, in worker processes (a
    JVM for Curator): every row measured, nothing flagged, a writer alone and at most
    ``leases`` holders."""
    drivers, notes = run.make_drivers([library], tmp_path, trio=False)
    if not drivers:
        pytest.skip("; ".join(notes))
    driver = drivers[0]
    settings = dataclasses.replace(
        run.QUICK,
        iterations=6,
        warmup=2,
        duration=0.2,
        contended_warmup=1,
        readers=3,
        semaphore_clients=4,
        leases=2,
    )
    bench = run.Bench(settings, zk_hosts, tmp_path)
    bench.root = chroot  # this test's own nodes
    bench.rwlock(driver, None)
    bench.rwmix(driver)
    keys = [
        f"rw_{side}_{key}"
        for side in ("write", "read")
        for key in ("cycle_median_us", "cycles_per_s")
    ]
    keys += ["rwmix_reads_per_s", "rwmix_writes_per_s"]
    if "semaphore" in driver.scenarios:
        bench.semaphore(driver, None)
        keys += ["semaphore_cycle_median_us", "semaphore_4_per_s"]
        leases = bench.raw[driver.column]["semaphore-contended"]
        assert 1 <= leases["most_held"] <= 2
    else:
        assert library == "aiozk"
    values = bench.values[driver.column]
    assert all(values[key] > 0 for key in keys), values
    mix = bench.raw[driver.column]["rwmix"]
    assert mix["reads"] >= 3
    assert mix["writes"] >= 1
    assert bench.flags == {}
    assert bench.notes == []


def peer_unavailable(name: str) -> str | None:
    """Why the runner cannot run the peer ``name`` (``--only`` name) here, or None."""
    server, module = ("redis-server", "redis") if name == "redis" else ("etcd", "aetcd")
    if shutil.which(server) is None:
        return f"no {server} on PATH (bash .ci/dev.sh bench installs it)"
    try:
        __import__(module)
    except ImportError:
        return f"no {module} (the bench dependency group)"
    return None


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", ["etcd", "etcd3", "redis"])
def test_peer_rows_through_the_runner(
    name: str, zk_hosts: str, chroot: str, tmp_path: Path
) -> None:
    """etcd (1 and 3 members) and Redis as the runner starts them (their own servers on
    free ports) and measures them (worker processes): the uncontended, contended and
    per-request rows, every one measured, mutual exclusion kept, requests counted."""
    why = peer_unavailable(name)
    if why is not None:
        pytest.skip(why)
    settings = dataclasses.replace(
        run.QUICK, iterations=6, warmup=2, duration=0.2, contended_warmup=1, waiters=3
    )
    with contextlib.ExitStack() as stack:
        drivers, notes = peers.start_drivers(stack, [name])
        assert notes == []
        (driver,) = drivers
        assert driver.column == peers.NAMES[name]
        bench = run.Bench(settings, zk_hosts, tmp_path)
        bench.root = chroot  # this test's own nodes (the lock names follow them)
        bench.uncontended(driver)
        bench.contended(driver, 3, processes=False)
        bench.requests(driver, 3)
    values = bench.values[driver.column]
    keys = ["cycle_median_us", "cpu_per_cycle_us", "contended_3_per_s", "requests_3_per_s"]
    assert all(values[key] > 0 for key in keys), values
    assert values["requests_per_cycle"] == pytest.approx(2.0, abs=0.5)  # lock, unlock
    assert values["requests_per_grant"] >= 2.0
    grants = bench.raw[driver.column]["contended-sessions-3"]
    assert grants["count"] >= 3
    assert bench.flags == {}  # no overlap, no lost update, every task cycled
    assert bench.notes == []


@pytest.mark.timeout(120)
def test_sync_rows_through_the_runner(zk_hosts: str, chroot: str, tmp_path: Path) -> None:
    """The sync API's column (``--only sync``) as the runner measures it, in worker
    processes: the uncontended, contended (a thread per session), shared (threads sharing
    one client on one path) and per-request (threads sharing one client) rows, every one
    measured, mutual exclusion kept, every thread cycled; its table has the ratios to
    aiozklock and kazoo."""
    drivers, notes = run.make_drivers(["sync"], tmp_path, trio=False)
    assert notes == []
    (driver,) = drivers
    assert (driver.column, set(driver.scenarios)) == (report.SYNC, set(run.SYNC_SCENARIOS))
    settings = dataclasses.replace(
        run.QUICK, iterations=6, warmup=2, duration=0.2, contended_warmup=1, sessions=(3,)
    )
    bench = run.Bench(settings, zk_hosts, tmp_path)
    bench.root = chroot  # this test's own nodes
    bench.uncontended(driver)
    bench.contended(driver, 3, processes=False)
    bench.shared(driver)
    bench.requests(driver, 3)
    values = bench.values[driver.column]
    keys = ["cycle_median_us", "confirmed_cycle_median_us", "contended_3_per_s"]
    keys += ["handoff_3_median_us", "shared_3_per_s", "requests_3_per_s", "requests_3_p50_us"]
    assert all(values[key] > 0 for key in keys), values
    assert bench.raw[driver.column]["contended-sessions-3"]["count"] >= 3
    assert bench.raw[driver.column]["shared-3"]["count"] >= 3
    assert bench.flags == {}  # no overlap, no lost update, every thread cycled
    assert bench.notes == []
    # The sync table: the ratios from the sync column to aiozklock's and kazoo's.
    peers_values = {"aiozklock": {"cycle_median_us": 200.0}, "kazoo": {"cycle_median_us": 1000.0}}
    rounds = [{**peers_values, report.SYNC: {"cycle_median_us": 250.0}}]
    text = report.sync_table((3,), (3,)).render([report.SYNC, "aiozklock", "kazoo"], rounds, {})
    assert "| aiozklock (sync) vs aiozklock | aiozklock (sync) vs kazoo |" in text
    assert "| 250 | 200 | 1,000 | 0.80x | 4.00x |" in text
