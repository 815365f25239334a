"""A demand for the proof that rises (a grant: ``Session.demand_proof``) wakes the liveness
clock's task only where its next tick, planned before, could come too late: when that tick
is planned after now and no later than ``LivenessClock.due_with_demand(now)``, a tick run
now decides nothing (``Tick.WAIT``) and plans nothing earlier. So skipping the wake (every
cycle of a lock taken in a loop) changes no decision. Instants we choose: no server, no
socket, no event loop.
"""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from aiozklock._wire._clock import LivenessClock, Tick

T = 8.0


def _answer(clock: LivenessClock, sent: float, at: float, write: bool) -> None:
    """A request sent at ``sent`` answered at ``at``, as ``SessionCore._on_frame`` counts
    it (a committed write is a step of the leader proof)."""
    clock.last_heard = max(clock.last_heard, at)
    clock.last_acked_send = max(clock.last_acked_send, sent)
    clock.leader.touched(sent, at, clock.timeout)
    if write:
        clock.leader.committed(sent, at, clock.timeout)


# One request: sent this long after the previous instant, answered this long after it
# (None: not answered yet), a write or a read.
_REQUESTS = st.lists(
    st.tuples(
        st.floats(0.0, T / 3),
        st.one_of(st.none(), st.floats(0.0, T / 2)),
        st.booleans(),
    ),
    max_size=6,
)


@settings(max_examples=500, deadline=None)
@given(
    direct=st.sampled_from([True, False, None]),
    hops=st.sampled_from([1, 2]),
    connected=st.booleans(),
    before=_REQUESTS,
    between=_REQUESTS,
    outstanding=st.one_of(st.none(), st.floats(0.0, T)),
    wait=st.floats(0.0, T),
)
def test_a_skipped_wake_would_have_decided_nothing_earlier(
    direct: bool | None,
    hops: int,
    connected: bool,
    before: list[tuple[float, float | None, bool]],
    between: list[tuple[float, float | None, bool]],
    outstanding: float | None,
    wait: float,
) -> None:
    clock = LivenessClock(T, 0.0)
    clock.attached(T, 0.0, 0.0, new_session=True)
    clock.leader.direct = direct
    clock.leader.hops = hops
    now = 0.0

    def run(requests: list[tuple[float, float | None, bool]]) -> None:
        nonlocal now
        for gap, answered_after, write in requests:
            now += gap
            clock.last_sent = now
            if answered_after is not None:
                _answer(clock, now, now + answered_after, write)
                now += answered_after

    run(before)
    if outstanding is not None:  # a probe in flight from an earlier demand
        clock.leader.written(max(now - outstanding, 0.0))
    # The clock's task ticks without demand and sleeps until its plan; a silent connection
    # is dropped, and the state change wakes it.
    decision, planned = clock.tick(now, connected, suspended=not connected)
    if decision is Tick.SILENT:
        return
    run(between)  # answers and writes that wake no one
    now = max(now, min(now + wait, planned))
    clock.leader.demanded(1, now)  # a grant
    if not now < planned <= clock.due_with_demand(now):
        return  # the task is woken
    skipped = copy.deepcopy(clock)
    decision, next_at = skipped.tick(now, connected, suspended=not connected)
    assert decision is Tick.WAIT
    assert next_at >= planned - 1e-9


def test_an_ensemble_probe_due_sooner_than_the_plan_wakes_the_clock() -> None:
    clock = LivenessClock(T, 0.0)
    clock.attached(T, 0.0, 0.0, new_session=True)
    clock.leader.direct = False
    clock.last_sent = 1.0
    _answer(clock, 1.0, 1.01, write=True)  # the grant's create
    _, planned = clock.tick(1.01, True, suspended=False)  # a ping a sixth later
    clock.leader.demanded(1, 1.01)
    assert clock.due_with_demand(1.01) < planned  # the next probe: woken
    clock.leader.written(1.02)
    assert clock.due_with_demand(1.03) == 1.03  # a probe in flight: at once


def test_a_standalone_server_is_due_at_valid_until() -> None:
    clock = LivenessClock(T, 0.0)
    clock.attached(T, 0.0, 0.0, new_session=True)
    clock.leader.direct = True
    _answer(clock, 1.0, 1.01, write=True)
    clock.leader.demanded(1, 1.01)
    assert clock.due_with_demand(1.01) == clock.valid_until


def test_an_ensemble_plan_before_the_next_probe_needs_no_wake() -> None:
    clock = LivenessClock(T, 0.0)
    clock.attached(T, 0.0, 0.0, new_session=True)
    clock.leader.direct = False
    clock.last_sent = 1.0
    _answer(clock, 1.0, 1.5, write=True)  # a slow create: the ping is planned first
    decision, planned = clock.tick(1.5, True, suspended=False)
    assert decision is Tick.WAIT
    clock.leader.demanded(1, 1.5)
    assert 1.5 < planned <= clock.due_with_demand(1.5)  # not woken
    assert clock.tick(1.5, True, suspended=False) == (Tick.WAIT, clock.due_with_demand(1.5))
