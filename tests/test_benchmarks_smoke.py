"""Smoke test of the benchmark runner's aiozklock measurements and of its bookkeeping:
correctness only, tiny sizes, never an assertion on time."""

from __future__ import annotations

import asyncio
import contextlib

import anyio
import pytest

import aiozklock
from aiozklock._wire._protocol import CreateMode, create_op, delete_op, get_children_op
from aiozklock.testing import session_of
from benchmarks import report
from benchmarks.clients import aiozklock_bench
from benchmarks.common import Gate, Params, member_paths
from benchmarks.stats import Grants, Summary
from benchmarks.wire_tap import WireTap
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
    assert multilock.render(columns, values, flags) == ""
    text = election.render(columns, values, flags)
    assert "| Hand-off, median (µs) | lower | 100 | 200 ⚠ | — | 2.00x | — |" in text
    assert non_fair.render(columns, values, flags) == ""
