"""The randomized fault nemesis (fault-matrix F18) and its history checker.

The checker's logic is tested on hand-made histories (no server). The nemesis itself runs one
short seed per backend on the 3-node ensemble: clients in this process and in child processes,
faults on the network, the sessions, the processes and the servers; the report must pass
every check. Each other recipe (multilock, election, nonfair, lease, rwlock, semaphore) runs
one shorter seed on one backend (alternating); the lease on its own ensemble that reaps TTL
nodes every 100 ms.
Override the seed with ``AIOZKLOCK_NEMESIS_SEED`` to replay a failure.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from aiozklock.testing import (
    FAULT_KINDS,
    FaultSpec,
    FencedStore,
    FencedWrite,
    History,
    NemesisReport,
    ZooKeeperCluster,
    plan_faults,
    run_nemesis,
)
from aiozklock.testing._nemesis import LEASE_JVM_PROPERTIES
from aiozklock.testing._nemesis_checks import _counter_integrity
from aiozklock.testing._nemesis_control import control_plan
from aiozklock.testing._nemesis_faults import restore_cluster
from aiozklock.testing._nemesis_partition import lingering_config
from aiozklock.testing._nemesis_plan import (
    PARTITION_KINDS,
    PROCESS_KINDS,
    SERVER_KINDS,
    _category,
)
from aiozklock.testing._nemesis_tally import FaultRecord, render_tally, tally_by_kind
from aiozklock.testing._nemesis_worker_config import WorkerConfig

# The nemesis runs on CI with a 2 s session (as the negative control and the ensemble cuts
# do): every fault's duration is a multiple of the session timeout, so the seeds run the same
# schedules as with 4 s (the same draws: kinds, targets, options, gaps) in about half the
# time. A run starts a group only if it ends within a session timeout after the duration:
# each duration leaves the groups that complete its kinds about 4 s for the waits of a run
# (a long holder to aim at, a server restarting), as 4 s sessions and longer runs did (see
# test_ci_seeds_plan_the_kinds_they_are_chosen_for).
CI_SESSION_TIMEOUT = 2.0  # 6 s in the fault matrix
# Chosen for their schedules (plan_faults(seed, duration, 2.0)): between them, every category
# of fault, with the leader killed, a long black-hole, a real expiry, and a holder process
# stopped by SIGSTOP (971) or right between its pre-write check and its write (382).
CI_SEEDS = {"asyncio": (971, 15.5), "trio": (382, 14.5)}
# The other recipes, one backend each, chosen for their schedules (plan_faults(seed, duration,
# 2.0)): multilock 2258: a lost reply of its multi (release), expiry, pauses, a server restart;
# election 52: the leader killed while the holder is partitioned beyond its session, then an
# expiry; nonfair 1093: a lost create reply and a holder process paused past its session;
# lease 4403: a paused process and a partitioned holder both beyond the TTL, then an expiry
# (which takes nothing from a lease); semaphore 1093: a lost create reply, a holder process
# stopped beyond its session while the others take its lease (2 holders besides it), then
# the expiry of a holder.
RECIPE_SEEDS = {
    "multilock": ("asyncio", 2258, 9.2),
    "election": ("trio", 52, 8.8),
    "nonfair": ("asyncio", 1093, 7.2),
    "lease": ("trio", 4403, 7.8),
    "rwlock": ("trio", 971, 8.9),
    "semaphore": ("asyncio", 1093, 7.2),
}
# The kinds those seeds were chosen among (each kind added changes every seed's draws): all but
# the ensemble's cuts and the one-way cut, which have seeds of their own.
CI_BASE_KINDS = [k for k in FAULT_KINDS if k not in PARTITION_KINDS and k != "one-way-cut"]
# The fault kinds each CI run's schedule exercises (checked against its plan below).
CI_KINDS = {
    "lock-asyncio": {"blackhole-long", "blackhole-short", "drop", "expire", "leader-kill"}
    | {"lost-create-reply", "pause-short", "server-kill"},
    "lock-trio": {"blackhole-long", "drop", "expire", "leader-kill", "lost-create-reply"}
    | {"pause-before-write"},
    "multilock": {"drop", "expire", "lost-delete-reply", "pause-short", "server-restart"},
    "election": {"blackhole-long", "drop", "expire", "leader-kill", "server-restart"},
    "nonfair": {"expire", "lost-create-reply", "pause-long"},
    "lease": {"blackhole-long", "expire", "pause-long"},
    "rwlock": {"blackhole-long", "drop", "expire", "leader-kill"},
    "semaphore": {"expire", "lost-create-reply", "pause-long"},
}


# --- the schedule ------------------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_schedule_is_a_function_of_the_seed() -> None:
    plan = plan_faults(1234, 60, 6.0)
    assert plan == plan_faults(1234, 60, 6.0)
    assert plan != plan_faults(1235, 60, 6.0)
    assert [group.index for group in plan] == list(range(1, len(plan) + 1))
    assert sum(group.gap + group.length for group in plan) <= 60
    assert len(plan) >= 5


@pytest.mark.timeout(10)
def test_ci_seeds_plan_the_kinds_they_are_chosen_for() -> None:
    """Each CI run's plan has the fault kinds its seed was chosen for, and the groups that
    complete them end about 4 s (3.9 or more) before the run stops starting groups (a
    session timeout after its duration): room for the waits of a run."""
    allowed = CI_BASE_KINDS
    runs = {f"lock-{backend}": seed for backend, seed in CI_SEEDS.items()}
    runs.update({recipe: (seed, duration) for recipe, (_, seed, duration) in RECIPE_SEEDS.items()})
    assert runs.keys() == CI_KINDS.keys()
    for name, (seed, duration) in runs.items():
        plan = plan_faults(seed, duration, CI_SESSION_TIMEOUT, allowed)
        assert {spec.kind for group in plan for spec in group.faults} == CI_KINDS[name], name
        planned, seen = 0.0, set()
        for group in plan:
            planned += group.gap + group.length
            seen |= {spec.kind for spec in group.faults}
            if seen == CI_KINDS[name]:
                break
        assert planned + 3.9 <= duration + CI_SESSION_TIMEOUT, (name, planned)


@pytest.mark.timeout(10)
def test_schedule_respects_kinds_and_keeps_the_quorum() -> None:
    seen: set[str] = set()
    for seed in range(200):
        for group in plan_faults(seed, 60, 6.0):
            categories = [_category(spec.kind) for spec in group.faults]
            assert len(categories) == len(set(categories)), group  # e.g. never 2 servers
            for spec in group.faults:
                seen.add(spec.kind)
                assert 0 <= spec.pick < 1
                if spec.kind == "blackhole-long":
                    assert spec.duration > 6.0 + 0.2  # beyond the timeout and a tick
                if spec.kind == "blackhole-short":
                    assert spec.duration < 6.0 / 2  # shorter than our silence detection
                if spec.kind == "pause-long":
                    assert spec.duration > 6.0
                if spec.kind == "one-way-cut" and spec.option == "short":
                    assert spec.duration < 6.0 / 2  # the session survives it
                if spec.kind == "one-way-cut" and spec.option == "long":
                    assert spec.duration > 6.0 + 0.2  # the session surely expires
    assert seen == set(FAULT_KINDS)
    assert PARTITION_KINDS <= SERVER_KINDS  # never two at once, nor with a server fault
    client_only = set(FAULT_KINDS) - SERVER_KINDS - PROCESS_KINDS
    for seed in range(50):
        for group in plan_faults(seed, 60, 6.0, client_only):
            assert all(spec.kind in client_only for spec in group.faults)
    assert plan_faults(1, 60, 6.0, ()) == []
    with pytest.raises(ValueError, match="unknown fault kind"):
        plan_faults(1, 60, 6.0, ["meteor"])


@pytest.mark.timeout(10)
def test_ensemble_cuts_outlast_the_session_and_the_followers_patience() -> None:
    timeout, sync = 2.0, 1.5  # syncLimit x tickTime: how long a follower waits for its leader
    seen: set[str] = set()
    for seed in range(100):
        for group in plan_faults(seed, 60, timeout, PARTITION_KINDS, sync_time=sync):
            (spec,) = group.faults  # one server fault at a time
            seen.add(spec.kind)
            assert spec.option == "silent"
            if spec.kind == "flap":
                cuts, heals = spec.steps[::2], spec.steps[1::2]
                assert 4 <= len(cuts) <= 8
                assert len(heals) == len(cuts) - 1
                assert all(0.2 * timeout <= cut <= timeout for cut in cuts)
                assert spec.duration == pytest.approx(sum(spec.steps))
                assert spec.target == "holder-server"
            else:
                assert spec.duration >= 1.3 * timeout  # the leader expires the sessions
                assert spec.duration > sync  # and the follower gives up its leader
    assert seen == PARTITION_KINDS
    targets = {s.kind: s.target for g in plan_faults(2, 60, 4.0, PARTITION_KINDS) for s in g.faults}
    assert targets["isolate-follower"] == "holder-follower"
    assert targets["isolate-leader"] == "leader"
    assert targets["split"] == "holder-server"


@pytest.mark.timeout(10)
def test_negative_control_plan_starts_by_expiring_the_holder() -> None:
    plan = control_plan(7, 30, 4.0, ["drop", "expire"])
    first = plan[0].faults[0]
    assert (first.kind, first.target, first.option) == ("blackhole-long", "holder", "hang")
    assert first.duration == pytest.approx(6.0)  # 1.5 session timeouts: it surely expires
    assert [g.index for g in plan] == list(range(1, len(plan) + 1))
    assert {s.kind for g in plan[1:] for s in g.faults} <= {"drop", "expire"}
    assert plan == control_plan(7, 30, 4.0, ["drop", "expire"])
    # Asked for one-way cuts (and no black-hole): a one-way cut as long opens it.
    first = control_plan(7, 30, 4.0, ["one-way-cut"])[0].faults[0]
    assert (first.kind, first.target, first.duration) == ("one-way-cut", "holder", 6.0)


@pytest.mark.timeout(10)
def test_unfenced_store_accepts_stale_writes_and_the_replay_finds_them() -> None:
    history = History()
    history.record("w1", 10, 0.0, 5.0)
    history.record("w2", 20, 1.0, 2.0)
    store = FencedStore(fenced=False)
    assert store.read("w2", 20) == (True, None)
    assert store.write("w1", 10, 1)  # stale, accepted: the fence is off
    assert store.max_token == 20
    report = history.check(store=store)
    assert len(report.overlaps) == 1
    assert [s.write.token for s in report.fencing_violations] == [10]


@pytest.mark.timeout(10)
def test_tally_puts_failures_down_to_the_faults_active_then() -> None:
    history = History()
    now = time.monotonic()
    history.record("w1", 10, now + 1.0, now + 6.0)
    history.record("w2", 20, now + 5.0, now + 7.0)  # overlaps w1 from +5.0 to +6.0
    store = FencedStore(fenced=False)
    store.read("w2", 20)
    store.accepted.append(FencedWrite("w1", 10, 1, now + 5.5, True))
    report = history.check(store=store)
    early = FaultRecord(1, FaultSpec("isolate-follower", "holder-follower", 0, 3.0), start=2.0)
    early.end = 4.0  # active, with a session timeout after it, until +6.0
    late = FaultRecord(2, FaultSpec("split", "holder-server", 0, 3.0), start=10.0, end=13.0)
    skipped = FaultRecord(3, FaultSpec("split", "holder-server", 0, 3.0), note="x: skipped")
    tallies = tally_by_kind(
        [early, late, skipped],
        report.overlaps,
        report.fencing_violations,
        started=now,
        session_timeout=2.0,
    )
    assert [(k, t.run, t.skipped, t.overlaps, t.stale_accepted) for k, t in tallies.items()] == [
        ("isolate-follower", 1, 0, 1, 1),
        ("split", 2, 1, 0, 0),
    ]
    assert render_tally(tallies)[1] == (
        "  split: 2 run (1 skipped), 0 overlapping pair(s), 0 stale write(s) accepted while active"
    )


@pytest.mark.timeout(30)
def test_ensemble_cuts_and_the_negative_control_refuse_what_they_cannot_do() -> None:
    cluster = ZooKeeperCluster(3)  # not started, not partitionable
    with pytest.raises(ValueError, match="partitionable=True"):
        anyio.run(lambda: run_nemesis(cluster, seed=1, kinds=["isolate-leader"]))
    with pytest.raises(ValueError, match="partitionable=True"):
        anyio.run(lambda: run_nemesis("127.0.0.1:1", seed=1, kinds=["flap", "drop"]))
    with pytest.raises(ValueError, match="store='memory'"):
        anyio.run(lambda: run_nemesis(cluster, seed=1, unprotected=True, store="redis"))
    with pytest.raises(ValueError, match="fenced store"):
        anyio.run(lambda: run_nemesis(cluster, seed=1, unprotected=True, recipe="semaphore"))


@pytest.mark.timeout(10)
def test_fault_spec_prints_what_it_does() -> None:
    spec = FaultSpec("blackhole-long", "holder", 0.5, 7.25, "hang", 0.3)
    assert str(spec) == "blackhole-long(hang) -> holder for 7.2 s at +0.5 s"
    armed = FaultSpec("pause-before-write", "holder", 0.0, 9.0, window=6.0)
    assert armed.length == 15.0
    assert "armed up to 6.0 s" in str(armed)


@pytest.mark.timeout(10)
def test_worker_config_round_trips_through_json() -> None:
    config = WorkerConfig("p1", "127.0.0.1:1,127.0.0.1:2", "/l", 7, 4.0, acquire_timeout=(1.0, 2.0))
    assert WorkerConfig.from_json(config.to_json()) == config
    assert json.loads(config.to_json())["acquire_timeout"] == [1.0, 2.0]


# --- the checker -------------------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_overlap_of_a_paused_holder_is_judged_by_fencing() -> None:
    history = History()
    # p1 asked at 0.9, was granted at 1.0, stopped from 1.5 to 9.0, acted until 9.1.
    paused = history.record("p1", 10, 1.0, 9.1, outcome="rejected", requested=0.9)
    history.record_pause("p1", 1.5, 9.0)
    later = history.record("w1", 20, 7.0, 7.5)
    history.record("w2", 30, 8.0, 8.5)
    report = history.check()
    assert report.ok, str(report)
    assert report.overlaps == ()
    assert report.paused_sections == 1
    assert (paused, later) in report.paused_overlaps
    assert len(report.paused_overlaps) == 2
    # The same overlap without the pause is a failure.
    bare = History(sections=list(history.sections))
    assert not bare.check().ok
    assert len(bare.check().overlaps) == 2


@pytest.mark.timeout(10)
def test_a_pause_during_the_request_covers_the_section() -> None:
    history = History()
    # Stopped while waiting; the grant it acts on may predate the pause.
    section = history.record("p1", 10, 5.0, 5.2, requested=1.0)
    history.record_pause("p1", 2.0, 4.0)
    history.record("w1", 20, 4.5, 5.1)
    assert history.paused(section)
    report = history.check()
    assert report.ok, str(report)
    # Token order is judged on the other sections only (p1's grant came before the pause).
    assert report.token_order_violations == ()


@pytest.mark.timeout(10)
def test_an_expiry_window_covers_only_sections_entered_before_it_ended() -> None:
    history = History()
    hit = history.record("w1", 10, 1.0, 2.02, outcome="lost")
    fresh = history.record("w1", 30, 2.5, 2.6, requested=1.5)
    history.record("w2", 20, 2.01, 2.4)
    history.record_pause("w1", 1.9, 2.0, reason="expire", react_within=0.5)
    assert history.paused(hit)
    assert not history.paused(fresh)
    report = history.check()
    assert report.ok, str(report)
    assert report.paused_sections == 1


@pytest.mark.timeout(10)
def test_slow_reaction_to_an_expiry_fails() -> None:
    history = History()
    slow = history.record("w1", 10, 1.0, 3.0, outcome="lost")
    history.record_pause("w1", 1.9, 2.0, reason="expire", react_within=0.5)
    report = history.check()
    assert not report.ok
    assert [section for section, _ in report.slow_reactions] == [slow]
    assert "slow reaction" in str(report)
    assert "slow to react" in report.failures()[0]


@pytest.mark.timeout(10)
def test_fencing_replay_finds_accepted_stale_writes() -> None:
    history = History()
    history.record("p1", 10, 0.0, 5.0, outcome="rejected", requested=0.0)
    history.record_pause("p1", 1.0, 4.0)
    history.record("w1", 20, 2.0, 3.0)
    store = FencedStore()
    assert store.read("p1", 10) == (True, None)
    assert store.write("p1", 10, 1)
    assert store.read("w1", 20) == (True, 1)  # registers 20: p1 is fenced from now on
    assert not store.write("p1", 10, 2)  # the paused holder's stale write
    assert store.write("w1", 20, 2)
    report = history.check(store=store)
    assert report.ok, str(report)
    assert [s.write.token for s in report.stale_writes] == [10]
    assert report.stale_writes[0].paused
    assert report.stale_writes[0].newer_token == 20
    assert report.fencing_violations == ()
    # A store that let a stale write through is caught by the independent replay.
    broken = FencedStore(accepted=list(store.accepted), reads=list(store.reads))
    late = FencedWrite("p1", 10, 3, time.monotonic() + 1, True, 2)
    broken.accepted.append(late)
    report = history.check(store=broken)
    assert not report.ok
    assert [s.write for s in report.fencing_violations] == [late]


@pytest.mark.timeout(10)
def test_a_rejected_write_of_a_holder_that_was_not_paused_fails() -> None:
    history = History()
    history.record("w1", 10, 0.0, 1.0)
    history.record("w2", 20, 1.0, 2.0)
    store = FencedStore()
    store.read("w2", 20)
    assert not store.write("w1", 10, 1)  # w1 was not paused: it acted after w2 did
    report = history.check(store=store)
    assert not report.ok
    assert len(report.unpaused_rejections) == 1


@pytest.mark.timeout(10)
def test_late_writes_before_the_newer_token_reaches_the_store_are_counted() -> None:
    history = History()
    history.record("p1", 10, 0.0, 0.5)
    store = FencedStore()
    store.read("p1", 10)
    # w1 was granted token 20 just now, but has not reached the store yet.
    history.record("w1", 20, time.monotonic() - 0.001, time.monotonic() + 1)
    assert store.write("p1", 10, 1)
    report = history.check(store=store)
    assert report.late_writes == 1
    assert report.stale_writes == ()


@pytest.mark.timeout(10)
def test_attempts_must_end_within_their_bound_not_counting_pauses() -> None:
    history = History()
    history.record_attempt("w1", 0.0, 2.0, bound=2.5, outcome="timeout")
    over = history.record_attempt("w1", 10.0, 13.0, bound=2.5, outcome="timeout")
    history.record_attempt("p1", 20.0, 30.0, bound=2.5, outcome="acquired")
    history.record_pause("p1", 21.0, 29.0)  # stopped for 8 of its 10 s
    report = history.check()
    assert not report.ok
    assert report.attempts == 3
    assert [attempt for attempt, _ in report.attempt_violations] == [over]
    assert report.attempt_violations[0][1] == pytest.approx(0.5)
    assert report.max_attempt_overrun == pytest.approx(0.5)
    assert report.counters["attempt:timeout"] == 2
    assert report.counters["attempt:acquired"] == 1


@pytest.mark.timeout(10)
def test_margins_only_where_the_server_released_a_dead_session() -> None:
    history = History()
    # Cut off at 10.0 (SUSPENDED), cancelled at 10.01, the server expired the session and
    # deleted the node at 12.0: a margin of 1.99 s.
    cut = history.record("w1", 10, 9.0, 10.01, outcome="lost", node="n10", session_id=1)
    history.record_session_state(1, "CONNECTED", 0.0)
    history.record_session_state(1, "SUSPENDED", 10.0)
    history.record_session_state(1, "LOST", 11.8)
    history.record_session_lost(1, 11.8)
    history.record_deletion("n10", 12.0)
    # Dropped and reconnected in the same session: its janitor deleted the node; the
    # session died later for another reason. No margin.
    history.record("w2", 20, 13.0, 13.5, outcome="lost", node="n20", session_id=2)
    history.record_session_state(2, "SUSPENDED", 13.49)
    history.record_session_state(2, "CONNECTED", 13.6)
    history.record_deletion("n20", 13.7)
    history.record_session_lost(2, 20.0)
    # Seen by an observer that was away: counted, not measured.
    history.record("w3", 30, 21.0, 21.5, outcome="lost", node="n30", session_id=3)
    history.record_session_state(3, "SUSPENDED", 21.4)
    history.record_session_lost(3, 23.0)
    history.record_deletion("n30", 24.0, precise=False)
    history.record_deletion("n30", 25.0)  # the first report wins
    # Completed normally: never a margin.
    history.record("w4", 40, 30.0, 30.1, node="n40", session_id=4)
    history.record_session_lost(4, 31.0)
    history.record_deletion("n40", 30.2)
    report = history.check()
    assert report.ok, str(report)
    assert [margin.section for margin in report.margins] == [cut]
    assert report.margins[0].value == pytest.approx(1.99)
    assert report.margins[0].cause == "timeout"
    assert report.margin_values() == [pytest.approx(1.99)]
    assert report.imprecise_margins == 1
    assert "timeout: 1, min +1990 ms" in report.margin_summary()


@pytest.mark.timeout(10)
def test_margin_of_a_paused_holder_has_its_cause() -> None:
    history = History()
    history.record("p1", 10, 1.0, 9.0, outcome="lost", node="n", session_id=5, requested=1.0)
    history.record_pause("p1", 2.0, 8.9)
    history.record_session_state(5, "CONNECTED", 8.95)  # stale, seen right after SIGCONT
    history.record_session_lost(5, 9.1)
    history.record_deletion("n", 6.0)
    report = history.check()
    assert [(m.cause, round(m.value, 3)) for m in report.margins] == [("SIGSTOP", -3.0)]
    assert report.margin_values() == []  # no timeout margin


@pytest.mark.timeout(10)
def test_fenced_store_reads_fence_older_tokens_and_writes_keep_the_previous_value() -> None:
    store = FencedStore()
    assert store.write("a", 10, 1)
    assert store.read("b", 20) == (True, 1)
    assert store.read("a", 10) == (False, None)
    assert not store.write("a", 10, 2)
    assert store.write("b", 20, 2)
    assert [(w.value, w.previous) for w in store.accepted] == [(1, None), (2, 1)]
    assert [(r.client, r.accepted) for r in store.reads] == [("b", True), ("a", False)]
    assert store.max_token == 20


@pytest.mark.timeout(10)
def test_counter_integrity_detects_a_lost_update() -> None:
    store = FencedStore()
    for value in (1, 2, 3):
        store.write("a", 10, value)
    assert _counter_integrity(store) == []
    store.accepted.append(FencedWrite("b", 20, 3, time.monotonic(), True, 3))  # 3 over 3
    errors = _counter_integrity(store)
    assert any("wrote 3 over 3" in error for error in errors)


@pytest.mark.timeout(10)
def test_multi_path_sections_overlapping_on_one_shared_path_fail() -> None:
    history = History()
    first = history.record("w1", 10, 0.0, 1.0, resources=["/m1", "/m2"])
    second = history.record("w2", 20, 0.5, 1.5, resources=["/m3", "/m2"])
    report = history.check()
    assert not report.ok
    assert report.overlaps == ((first, second),)
    assert report.max_overlap == pytest.approx(0.5)


@pytest.mark.timeout(10)
def test_multi_path_sections_on_disjoint_paths_may_overlap_in_time() -> None:
    history = History()
    history.record("w1", 10, 0.0, 1.0, resources=["/m1", "/m2"])
    history.record("w2", 20, 0.5, 1.5, resources=["/m3", "/m4"])
    history.record("w3", 5, 0.7, 0.9, resources=["/m4"])  # older token, another path set...
    report = history.check()
    # ...but w3 overlaps w2 on /m4: the only failure.
    assert [(a.client, b.client) for a, b in report.overlaps] == [("w2", "w3")]
    clean = History(sections=history.sections[:2])
    report = clean.check()
    assert report.ok, str(report)
    assert report.overlaps == ()
    assert report.counters["concurrent:disjoint"] == 1


@pytest.mark.timeout(10)
def test_token_order_is_judged_per_path() -> None:
    history = History()
    # /a and /b are granted independently: a smaller token on /b after a larger one on /a
    # is fine, a smaller token on /a after a larger one on /a is not.
    history.record("w1", 30, 0.0, 1.0, resources=["/a"])
    history.record("w2", 10, 1.5, 2.0, resources=["/b"])
    assert history.check().ok
    offending = history.record("w3", 20, 2.5, 3.0, resources=["/a", "/b"])
    report = history.check()
    assert not report.ok
    assert [pair[1] for pair in report.token_order_violations] == [offending]  # once, on /a


@pytest.mark.timeout(10)
def test_fencing_is_replayed_per_path_store() -> None:
    history = History()
    history.record("w1", 10, 0.0, 1.0, resources=["/a"])
    history.record("w2", 20, 0.5, 1.5, resources=["/b"])
    stores = {"/a": FencedStore(), "/b": FencedStore()}
    stores["/b"].read("w2", 20)
    assert stores["/a"].write("w1", 10, 1)  # token 20 is another path's: not stale here
    report = history.check(stores=stores)
    assert report.ok, str(report)
    assert report.stale_writes == ()
    assert report.counters["store:accepted"] == 1
    # A newer holder of /a fences w1 on /a only.
    history.record("w3", 30, 1.5, 2.0, resources=["/a"])
    stores["/a"].read("w3", 30)
    assert not stores["/a"].write("w1", 10, 2)
    report = history.check(stores=stores)
    assert [s.write.token for s in report.unpaused_rejections] == [10]
    with pytest.raises(ValueError, match="not both"):
        history.check(store=FencedStore(), stores=stores)


@pytest.mark.timeout(10)
def test_a_lease_holder_writing_after_its_expiry_fails_unless_paused() -> None:
    history = History()
    store = FencedStore()
    now = time.monotonic()
    section = history.record("w1", 10, now - 1.0, now + 1.0, expires_at=now - 0.5)
    store.read("w1", 10)
    late = FencedWrite("w1", 10, 1, now, True)  # reached the store 0.5 s after expires_at
    store.accepted.append(late)
    report = history.check(store=store)
    assert not report.ok
    assert report.expired_writes == ((section, late),)
    assert "after the lease expired" in report.failures()[0]
    assert "write after expiry" in str(report)
    history.record_pause("w1", now - 0.9, now - 0.1, reason="SIGSTOP")
    report = history.check(store=store)
    assert report.ok, str(report)
    assert report.paused_sections == 1


@pytest.mark.timeout(10)
def test_lease_margin_is_the_deletion_after_exit_without_a_lost_session() -> None:
    history = History()
    # Partitioned holder: stopped at its validity (10.0), the server reaped the lease at 10.5;
    # its session survived (or not): a lease's margin does not depend on it.
    lost = history.record(
        "w1", 10, 5.0, 10.0, outcome="lost", node="/l/lease#10", session_id=1, expires_at=10.4
    )
    history.record_deletion("/l/lease#10", 10.5)
    # Lost, then re-attached to the same node and released: no margin.
    history.record(
        "w2", 20, 11.0, 12.0, outcome="invalid", node="/l/lease#20", session_id=2, expires_at=12
    )
    history.record("w2", 20, 13.0, 13.5, node="/l/lease#20", session_id=2, expires_at=16.0)
    history.record_deletion("/l/lease#20", 13.6)
    report = history.check()
    assert report.ok, str(report)
    assert [(m.section, m.cause) for m in report.margins] == [(lost, "ttl")]
    assert report.margin_values("ttl") == [pytest.approx(0.5)]


@pytest.mark.timeout(10)
def test_report_lists_failed_checks() -> None:
    history = History()
    history.record("a", 1, 0.0, 1.0)
    report = NemesisReport(
        seed=5,
        backend="asyncio",
        duration=1.0,
        session_timeout=4.0,
        clients=1,
        processes=0,
        servers="x",
        plan=[],
        faults=[],
        history=history.check(),
        orphans=["n-0001 (session 0x1: w1)"],
        leaked_watches={"w1": (2, 0)},
        recovery=0.5,
    )
    assert not report.ok
    text = str(report)
    assert "[FAIL] orphan nodes: 1" in text
    assert "[FAIL] leaked watches: 1 client(s)" in text
    assert "[PASS] mutual exclusion" in text
    assert text.endswith("FAILED (seed 5)")


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "args",
    [
        ["--kinds", "drop,meteor"],
        ["--clients", "2", "--processes", "3"],
        ["--kinds", "ensemble", "--hosts", "127.0.0.1:1"],
        ["--unprotected", "--store", "postgres"],
    ],
)
def test_cli_rejects_bad_arguments_before_starting_anything(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from aiozklock._cli import main
    from aiozklock._cli._demo import EXIT_UNAVAILABLE

    assert main(["nemesis", "--seed", "1", *args]) == EXIT_UNAVAILABLE
    assert "aiozklock nemesis:" in capsys.readouterr().err


# --- the nemesis on a real ensemble ------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.ensemble
@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_nemesis_short_seed(zk_ensemble: ZooKeeperCluster, anyio_backend: str) -> None:
    seed, duration = CI_SEEDS[anyio_backend]
    seed = int(os.environ.get("AIOZKLOCK_NEMESIS_SEED", seed))
    await zk_ensemble.await_serving(timeout=30)
    started = time.monotonic()
    try:
        with anyio.fail_after(180):
            report = await run_nemesis(
                zk_ensemble,
                seed=seed,
                duration=duration,
                session_timeout=CI_SESSION_TIMEOUT,
                clients=4,
                processes=2,
                kinds=CI_BASE_KINDS,
                command=f"AIOZKLOCK_NEMESIS_SEED={seed} pytest tests/test_nemesis.py",
            )
    finally:
        await restore_cluster(zk_ensemble)  # every member serving again, whatever happened
    print(f"\nNEMESIS {anyio_backend} in {time.monotonic() - started:.1f} s\n{report}")
    assert report.ok, str(report)
    assert report.faults, "no fault was injected"
    assert report.history.sections >= 20
    assert report.history.counters.get("section:completed", 0) >= 20
    assert report.recovery is not None
    assert all(member.mode() in ("leader", "follower") for member in zk_ensemble.members)


# The negative control: a 2 s session (the plan's black-hole of the holder then lasts 3 s)
# and 6 s of faults; drops besides.
CONTROL_SEED = 5
CONTROL_SESSION_TIMEOUT = 2.0
CONTROL_DURATION = 6.0


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_negative_control_reports_overlaps_and_accepted_stale_writes(
    zk_hosts: str, anyio_backend: str, tmp_path: Path
) -> None:
    seed = int(os.environ.get("AIOZKLOCK_NEMESIS_SEED", CONTROL_SEED))
    started = time.monotonic()
    with anyio.fail_after(90):
        report = await run_nemesis(
            zk_hosts,
            seed=seed,
            duration=CONTROL_DURATION,
            session_timeout=CONTROL_SESSION_TIMEOUT,
            clients=3,
            processes=1,
            kinds=["drop"],
            unprotected=True,
            log_dir=tmp_path,  # a failing run keeps its logs
        )
    print(f"\nNEGATIVE CONTROL {anyio_backend} in {time.monotonic() - started:.1f} s\n{report}")
    history = report.history
    assert not report.ok
    assert report.unprotected
    assert report.caught
    assert len(history.overlaps) > 0
    assert len(history.fencing_violations) > 0
    assert history.counters.get("section:ignored-loss", 0) > 0
    assert report.failures()[0].startswith("UNPROTECTED run (negative control)")
    assert report.by_kind["blackhole-long"].overlaps > 0
    text = str(report)
    assert "UNPROTECTED (negative control)" in text.splitlines()[1]
    assert "[FAIL] mutual exclusion" in text
    assert "negative control: the checker found" in text
    assert text.endswith(f"FAILED (seed {seed})")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_cli_negative_control_exits_non_zero(
    zk_hosts: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from aiozklock._cli import main
    from aiozklock._cli._demo import EXIT_FAILED

    args = ["--seed", str(CONTROL_SEED), "--duration", f"{CONTROL_DURATION:g}"]
    args += ["--session-timeout", f"{CONTROL_SESSION_TIMEOUT:g}", "--clients", "3"]
    args += ["--processes", "0", "--kinds", "drop", "--hosts", zk_hosts, "--log-dir", str(tmp_path)]
    assert main(["nemesis", "--unprotected", *args]) == EXIT_FAILED
    out = capsys.readouterr().out
    assert "--unprotected" in out.splitlines()[1]  # the command that replays it
    assert "negative control: the checker found" in out
    assert "[FAIL] fencing" in out


# One-way cuts (the client's requests lost, its server's frames and a watch notification
# every T/8 still delivered, half-open) on one server: seed 11 plans a long cut of the holder
# (its session expires) and a short one, in 5.4 s: 5.6 s left for the waits of a run (a
# long holder to aim at: up to a session timeout per fault).
ONE_WAY_SEED = 11
ONE_WAY_DURATION = 9.0


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_nemesis_one_way_cuts_short_seed(zk_hosts: str, anyio_backend: str) -> None:
    seed = int(os.environ.get("AIOZKLOCK_NEMESIS_SEED", ONE_WAY_SEED))
    started = time.monotonic()
    with anyio.fail_after(90):
        report = await run_nemesis(
            zk_hosts,
            seed=seed,
            duration=ONE_WAY_DURATION,
            session_timeout=CI_SESSION_TIMEOUT,
            clients=3,
            processes=1,
            kinds=["one-way-cut"],
            command=f"AIOZKLOCK_NEMESIS_SEED={seed} pytest tests/test_nemesis.py -k one_way",
        )
    print(f"\nNEMESIS one-way cuts in {time.monotonic() - started:.1f} s\n{report}")
    assert report.ok, str(report)
    assert report.by_kind["one-way-cut"].run == 2
    notes = [f.note for f in report.faults]  # e.g. "to member 1: 7 frame(s) lost"
    assert all(re.search(r": [1-9]\d* frame\(s\) lost", note) for note in notes), notes
    assert report.history.counters.get("section:completed", 0) >= 10


# The ensemble's cuts: seed 12332's plan is four groups, one of each kind (split,
# isolate-leader, flap, isolate-follower) in 22.3 planned seconds; its fifth would end at
# 32.0 s, past 31.5 s: not planned. The four leave 11.2 s (31.5 s and a session timeout)
# for the waits (a holder to aim at, the members rejoining and a new leader elected after
# each heal: about 1 s per group here).
ENSEMBLE_SEED = 12332
ENSEMBLE_DURATION = 31.5
ENSEMBLE_SESSION_TIMEOUT = 2.0


@pytest.mark.timeout(10)
def test_the_ensemble_cuts_seed_plans_one_group_of_each_kind() -> None:
    sync = int(lingering_config(ENSEMBLE_SESSION_TIMEOUT)["syncLimit"]) * 0.2  # tickTime 200 ms
    plan = plan_faults(
        ENSEMBLE_SEED, ENSEMBLE_DURATION, ENSEMBLE_SESSION_TIMEOUT, PARTITION_KINDS, sync_time=sync
    )
    assert sorted(spec.kind for group in plan for spec in group.faults) == sorted(PARTITION_KINDS)
    planned = sum(group.gap + group.length for group in plan)
    assert planned + 10 <= ENSEMBLE_DURATION + ENSEMBLE_SESSION_TIMEOUT


@pytest.fixture(scope="module")
def partition_ensemble() -> Iterator[ZooKeeperCluster]:
    """A 3-node ensemble with a proxy on each link between members (links can be cut), whose
    cut-off followers go on serving their clients for twice the session timeout."""
    config = lingering_config(ENSEMBLE_SESSION_TIMEOUT)
    with ZooKeeperCluster(3, partitionable=True, extra_config=config) as cluster:
        yield cluster


@pytest.mark.anyio
@pytest.mark.ensemble
@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_nemesis_ensemble_cuts_short_seed(
    partition_ensemble: ZooKeeperCluster, anyio_backend: str, tmp_path: Path
) -> None:
    seed = int(os.environ.get("AIOZKLOCK_NEMESIS_SEED", ENSEMBLE_SEED))
    cluster = partition_ensemble
    await cluster.await_serving(timeout=30)
    started = time.monotonic()
    try:
        with anyio.fail_after(150):
            report = await run_nemesis(
                cluster,
                seed=seed,
                duration=ENSEMBLE_DURATION,
                session_timeout=ENSEMBLE_SESSION_TIMEOUT,
                clients=4,
                processes=1,
                kinds=PARTITION_KINDS,
                log_dir=tmp_path,
                command=f"AIOZKLOCK_NEMESIS_SEED={seed} pytest tests/test_nemesis.py -k cuts",
            )
    finally:
        await restore_cluster(cluster)
    print(f"\nNEMESIS ensemble cuts in {time.monotonic() - started:.1f} s\n{report}")
    assert report.errors == []
    ran = {kind: t.run - t.skipped for kind, t in report.by_kind.items()}
    assert set(ran) == PARTITION_KINDS, ran
    assert all(n > 0 for n in ran.values()), ran  # each kind cut something
    text = str(report)
    for kind in PARTITION_KINDS:
        assert f"\n  {kind}: " in text
    assert report.history.counters.get("section:completed", 0) >= 10
    assert report.recovery is not None
    assert cluster.cut_links == frozenset()
    assert all(member.mode() in ("leader", "follower") for member in cluster.members)
    assert report.ok, text  # no overlap, no stale write accepted: the leader proof at work


@pytest.fixture(scope="module")
def lease_ensemble() -> Iterator[ZooKeeperCluster]:
    """A 3-node ensemble that reaps expired TTL nodes every 100 ms (the lease recipe)."""
    with ZooKeeperCluster(3, jvm_properties=LEASE_JVM_PROPERTIES) as cluster:
        yield cluster


async def _run_recipe_seed(cluster: ZooKeeperCluster, recipe: str, backend: str) -> None:
    expected, seed, duration = RECIPE_SEEDS[recipe]
    assert backend == expected
    seed = int(os.environ.get("AIOZKLOCK_NEMESIS_SEED", seed))
    await cluster.await_serving(timeout=30)
    started = time.monotonic()
    try:
        with anyio.fail_after(150):
            report = await run_nemesis(
                cluster,
                seed=seed,
                duration=duration,
                session_timeout=CI_SESSION_TIMEOUT,
                clients=4,
                processes=2,
                kinds=CI_BASE_KINDS,
                recipe=recipe,
                command=f"AIOZKLOCK_NEMESIS_SEED={seed} pytest tests/test_nemesis.py -k {recipe}",
            )
    finally:
        await restore_cluster(cluster)
    print(f"\nNEMESIS {recipe} {backend} in {time.monotonic() - started:.1f} s\n{report}")
    assert report.ok, str(report)
    assert report.recipe == recipe
    assert report.faults, "no fault was injected"
    assert report.history.counters.get("section:completed", 0) >= 10
    assert report.recovery is not None
    # Every member serves again (a one-shot srvr may time out on a loaded machine: bounded).
    await cluster.await_serving(timeout=30)
    if recipe == "semaphore":  # max_leases 2 of 4 clients: the leases were held together
        assert report.history.peak_holders == 2
        assert report.tokens_checked > 0
        assert report.starved == []


@pytest.mark.anyio
@pytest.mark.ensemble
@pytest.mark.slow
@pytest.mark.timeout(200)
@pytest.mark.parametrize(
    ("recipe", "anyio_backend"),
    [
        (recipe, RECIPE_SEEDS[recipe][0])
        for recipe in ("multilock", "election", "nonfair", "rwlock", "semaphore")
    ],
)
async def test_nemesis_recipe_short_seed(
    zk_ensemble: ZooKeeperCluster, recipe: str, anyio_backend: str
) -> None:
    await _run_recipe_seed(zk_ensemble, recipe, anyio_backend)


@pytest.mark.anyio
@pytest.mark.ensemble
@pytest.mark.slow
@pytest.mark.timeout(200)
@pytest.mark.parametrize("anyio_backend", [RECIPE_SEEDS["lease"][0]])
async def test_nemesis_lease_short_seed(
    lease_ensemble: ZooKeeperCluster, anyio_backend: str
) -> None:
    await _run_recipe_seed(lease_ensemble, "lease", anyio_backend)


@pytest.mark.timeout(30)
def test_lease_needs_a_reaping_cluster_and_recipes_are_checked() -> None:
    cluster = ZooKeeperCluster(3)  # not started: the arguments are refused before anything
    with pytest.raises(ValueError, match="checkIntervalMs"):
        anyio.run(lambda: run_nemesis(cluster, seed=1, recipe="lease"))
    with pytest.raises(ValueError, match="unknown recipe"):
        anyio.run(lambda: run_nemesis(cluster, seed=1, recipe="barrier"))
    with pytest.raises(ValueError, match="max_leases"):
        anyio.run(lambda: run_nemesis(cluster, seed=1, recipe="semaphore", max_leases=0))
