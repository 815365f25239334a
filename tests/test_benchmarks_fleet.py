"""The fleet benchmark (``benchmarks/fleet.py``): a tiny run through the real tool, and its
bookkeeping on fixed inputs. Correctness only, never an assertion on time or on a rate."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks import fleet, fleet_report
from benchmarks.clients.fleet_common import FleetParams, plan
from benchmarks.fleet_report import Row, Sample


def test_tiny_fleet_writes_its_table(tmp_path: Path) -> None:
    """10 sessions over 2 workers on a compose-like ensemble, 3 s of zxid samples: the
    markdown has the steady table and the command, the JSON every session in its role."""
    argv = [
        "--sessions", "10", "--workers", "2", "--window", "3", "--settle", "0.5",
        "--clients", "aiozklock", "--scenarios", "steady", "--settings", "compose",
        "--output", str(tmp_path), "--name", "smoke",
    ]  # fmt: skip
    assert fleet.main(argv) == 0
    text = (tmp_path / "smoke.md").read_text()
    assert "### Steady state: transactions the ensemble commits" in text
    assert "| Transactions per session per second | lower |" in text
    assert "| Sessions (idle / queued / holding) |  | 8 / 1 / 1 |" in text
    assert "--sessions 10 --workers 2" in text
    document = json.loads((tmp_path / "smoke.json").read_text())
    values = document["rounds"][0]["steady"]["aiozklock"]
    assert values["sessions_total"] == 10
    assert values["kept"] == 10  # nothing happened to the ensemble
    assert values["tx_per_s"] >= 0
    assert values["tx_per_session_s"] == pytest.approx(values["tx_per_s"] / 10)
    commits = document["raw"][0]["steady/aiozklock"]["commits"]
    assert commits["same_leader"] is True
    assert not [note for note in document["notes"] if "failed" in note]
    (tmp_path / "smoke.md").unlink()  # the markdown again from the JSON file: the same
    assert fleet.main(["--report", str(tmp_path / "smoke.json")]) == 0
    assert (tmp_path / "smoke.md").read_text() == text


def test_grant_flow_counts_overlaps_on_one_path_only() -> None:
    """The checker's negative control: two sections of one path that overlap are counted;
    the same instants on two different paths are not."""
    ms = 1_000_000
    disjoint = [(0, 10 * ms, 20 * ms), (1, 15 * ms, 25 * ms), (0, 20 * ms, 30 * ms)]
    flow = fleet_report.grant_flow(disjoint, 0, 100 * ms, paths=2)
    assert flow.overlaps == 0
    assert flow.grants == 3
    assert flow.per_s == pytest.approx(30.0)
    assert flow.longest_pause_s == pytest.approx(0.080)  # last entry (20 ms) to stop (100 ms)
    assert flow.longest_path_pause_s == pytest.approx(0.085)  # path 1: 15 ms to 100 ms
    overlapping = [*disjoint, (0, 25 * ms, 35 * ms)]  # enters before (0, 20, 30) exits
    assert fleet_report.grant_flow(overlapping, 0, 100 * ms).overlaps == 1
    outside = [(0, 200 * ms, 210 * ms)]  # entered after stop: not this window's
    assert fleet_report.grant_flow(outside, 0, 100 * ms).grants == 0


def test_grant_flow_counts_a_path_without_grants_as_paused_throughout() -> None:
    flow = fleet_report.grant_flow([(0, 10, 20)], 0, 2_000_000_000, paths=2)
    assert flow.longest_path_pause_s == pytest.approx(2.0)


def test_commit_rate_counts_the_low_32_bits_and_flags_a_new_leader() -> None:
    epoch = 5 << 32
    samples = [
        Sample(0.0, 1, epoch + 100),
        Sample(1.0, 1, epoch + 150),
        Sample(2.0, 1, epoch + 300),
    ]
    rate = fleet_report.commit_rate(samples)
    assert (rate.transactions, rate.per_s, rate.same_leader) == (200, 100.0, True)
    assert rate.per_interval == (50.0, 150.0)
    moved = [*samples[:2], Sample(3.0, 2, (6 << 32) + 3)]
    assert fleet_report.commit_rate(moved).same_leader is False
    with pytest.raises(ValueError, match="two samples"):
        fleet_report.commit_rate(samples[:1])


def test_days_to_wrap() -> None:
    assert fleet_report.days_to_wrap(800.0) == pytest.approx(2**32 / 800 / 86400)  # 62.1
    assert math.isinf(fleet_report.days_to_wrap(0.0))


def test_parse_srvr_reads_the_mode_and_the_zxid() -> None:
    text = (
        "Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0.0/0\nZxid: 0x100000a2c\nMode: leader\n"
    )
    assert fleet_report.parse_srvr(text) == ("leader", 0x100000A2C)
    assert fleet_report.parse_srvr("This ZooKeeper instance is not currently serving") == (
        None,
        None,
    )


def test_sessions_kept_only_with_the_same_id() -> None:
    rows = [
        ["idle", 7, 7, 0],
        ["idle", 8, 9, 1],  # replaced
        ["queued", 0, 0, 0],  # no session at mark: not kept
        ["holding", 10, 10, 0],
    ]
    kept = fleet_report.sessions_kept(rows)
    assert (kept.total, kept.kept, kept.lost_events) == (4, 2, 1)
    assert kept.by_role == {"holding": (1, 1), "idle": (1, 2), "queued": (0, 1)}


def test_vs_cell_is_a_ratio_or_the_difference_from_a_peer_at_zero() -> None:
    lower = Row("tx_per_s", "", True, 1)
    assert fleet_report.vs_cell(lower, [100.0, 100.0], [200.0, 300.0]) == "2.50x [2.00-3.00]"
    assert fleet_report.vs_cell(lower, [800.0], [0.0]) == "+800.0 (difference)"
    assert fleet_report.vs_cell(lower, [0.0], [0.0]) == "same"
    assert fleet_report.vs_cell(Row("sessions", "", None), [1.0], [1.0]) == "—"


def test_roles_of_a_worker_and_the_fleet_split() -> None:
    """Anchors first, cyclers spread over every shared path across workers, queued behind
    their worker's anchors; the steady fleet has no cycler."""
    base = FleetParams(hosts="h", root="/r", shared_paths=3)
    faults = fleet.shares(base, (8, 4, 10), 2, anchors=1)
    assert [(p.idle, p.queued, p.holders, p.anchors) for p in faults] == [
        (4, 2, 5, 1),
        (4, 2, 5, 1),
    ]
    cyclers = [s.shared for p in faults for s in plan(p) if s.kind == "cycler"]
    assert sorted(set(cyclers)) == [0, 1, 2]
    assert len(cyclers) == 8
    slots = plan(faults[1])
    assert [s.kind for s in slots][:3] == ["anchor", "cycler", "cycler"]
    assert {s.path for s in slots if s.kind == "queued"} == {"/r/line/1-0"}
    steady = fleet.shares(base, (8, 4, 10), 2, anchors=None)
    assert all(p.anchors == p.holders for p in steady)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--mix", "80,10"], "three percentages"),
        (["--mix", "80,10,20"], "adding up to 100"),
        (["--sessions", "10", "--workers", "4", "--mix", "60,40,0"], "need an anchor"),
        (["--sessions", "20", "--mix", "50,0,50", "--shared-paths", "30"], "cannot keep"),
        (["--session-timeout", "100"], "--session-timeout must be in"),
        (["--clients", "zk"], "--clients"),
        (["--aiozklock-path", "/nonexistent"], "no aiozklock/ package"),
        (["--aiozklock-path", ".", "--aiozklock-ref", "HEAD"], "not both"),
    ],
)
def test_bad_options_fail_before_anything_starts(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        fleet.parse_args(argv)
    assert message in capsys.readouterr().err
