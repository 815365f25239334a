"""The proof that the leader heard of the session (``_wire._leader``) and the clock's rules
around it (``_wire._clock``), with instants we choose: no server, no socket.

The rule under test (docs/safety.md): a probe ``A``'s send time is proven once a probe ``B``
is answered, written after the answer to a probe ``Y`` that was itself written at least
``TOUCH_GAP x T`` after ``A``'s answer.
"""

from __future__ import annotations

import math

import pytest

from aiozklock._wire import _framing as framing
from aiozklock._wire._clock import LOST_MARGIN, SILENCE, Tick
from aiozklock._wire._core import SessionCore, SessionState
from aiozklock._wire._leader import (
    MIN_PROBE_GAP,
    PROBE_GAP,
    PROBE_WAIT,
    TOUCH_GAP,
    URGENT_GAP,
    LeaderProof,
    chain_start,
    relay_hops,
    standalone,
)
from aiozklock._wire._probe import server_kind
from aiozklock._wire._server_conf import too_short, unknown_tick_warning
from tests.test_leader_proof_model import ENSEMBLE, OBSERVED

T = 8.0  # probes 1 s apart, the touch gap 2 s, a probe late after 1.333 s
RTT = 0.01


def probe(leader: LeaderProof, sent: float, *, proof: bool = True) -> float:
    """One probe written at ``sent`` and answered RTT later (as ``SessionCore._on_frame``
    reports it: an answer, then a commit if it was one); returns the answer's instant."""
    leader.written(sent)
    if proof:
        leader.touched(sent, sent + RTT, T)
        leader.committed(sent, sent + RTT, T)
    leader.answered(sent, sent + RTT, proof, T)
    return sent + RTT


def ping(leader: LeaderProof, sent: float) -> float:
    """A ping (or a read) answered RTT later: a touch, no commit."""
    leader.touched(sent, sent + RTT, T)
    return sent + RTT


def test_a_send_time_is_proven_two_probes_later_not_before() -> None:
    leader = LeaderProof(0.0)
    leader.attached(0.0, new_session=True)
    a = 10.0
    probe(leader, a)  # A
    y = a + RTT + T * TOUCH_GAP  # Y: written a touch gap after A's answer
    probe(leader, y)
    assert leader.proven == 0.0  # Y's answer proves nothing yet: B must follow it
    probe(leader, y + RTT + 0.001)  # B
    assert leader.proven == a


def test_probes_closer_than_the_touch_gap_prove_nothing() -> None:
    leader = LeaderProof(0.0)
    leader.attached(0.0, new_session=True)
    gap = T * TOUCH_GAP - 2 * RTT  # the leader may not have pinged in between
    at = 10.0
    for _ in range(4):
        at = probe(leader, at) + gap / 2
    assert leader.proven == 0.0


def test_a_failed_probe_proves_nothing_and_is_no_link_of_a_chain() -> None:
    leader = LeaderProof(0.0)
    leader.attached(0.0, new_session=True)
    a_answer = probe(leader, 10.0)
    y = a_answer + T * TOUCH_GAP
    probe(leader, y, proof=False)  # e.g. the connection was lost
    assert leader.outstanding is None
    probe(leader, y + 0.5)  # answered: but no answered probe a touch gap after A precedes it
    assert leader.proven == 0.0
    probe(leader, y + 1.0)  # B: Y is the probe at y + 0.5, A's answer 2.5 s before it
    assert leader.proven == 10.0


def test_a_new_session_is_proven_at_its_handshake_a_reattach_by_the_next_probe() -> None:
    leader = LeaderProof(0.0)
    leader.attached(5.0, new_session=True)  # created by a committed transaction
    assert leader.proven == 5.0
    leader.attached(9.0, new_session=False)  # revalidated: by a leader that led a quorum?
    assert leader.proven == 5.0
    probe(leader, 9.2, proof=False)
    assert leader.proven == 5.0
    probe(leader, 9.3)  # committed after the revalidation, on the same server's stream
    assert leader.proven == 9.0


def test_a_new_connection_starts_a_new_chain() -> None:
    leader = LeaderProof(0.0)
    leader.attached(0.0, new_session=True)
    a_answer = probe(leader, 10.0)
    probe(leader, a_answer + T * TOUCH_GAP)
    leader.attached(13.0, new_session=False)  # another server: its streams prove nothing old
    probe(leader, 13.1)
    assert leader.proven == 13.0  # the re-attach, not probe A of the other connection


def test_only_an_empty_config_is_a_standalone_server() -> None:
    assert standalone(b"")
    assert not standalone(b"server.1=127.0.0.1:2888:3888:participant;0.0.0.0:2181\n")


# ---------------------------------------------------------------- the clock on an ensemble


def ensemble_core() -> SessionCore:
    class Scheduler:
        def schedule(self) -> None: ...

        def cancel(self) -> None: ...

    class Waker:
        def set(self) -> None: ...

        async def wait(self) -> None:
            raise AssertionError

    session = SessionCore(
        chroot="",
        session_timeout=T,
        max_request_bytes=0xFFFFF,
        now=0.0,
        new_waker=Waker,
        scheduler=Scheduler(),
    )
    assert session.attached(framing.Handshake(int(T * 1000), 0x42, b"p" * 16), 0.0, 0.0)
    session.state = SessionState.CONNECTED
    session.leader.direct = False
    session.leader.demanded(1, 0.0)  # a holding needs the proof (see the idle tests below)
    return session


def test_an_ensemble_is_probed_not_pinged_and_a_late_probe_drops_the_server() -> None:
    session = ensemble_core()
    decision, wake = session.tick(0.0, connected=True)
    assert decision is Tick.PROBE
    assert wake == pytest.approx(T * PROBE_WAIT)  # when the probe is late
    assert session.tick(T * PROBE_WAIT - 0.01, connected=True)[0] is Tick.WAIT
    session._clock.last_heard = T * PROBE_WAIT  # the server answers its pings meanwhile
    assert session.tick(T * PROBE_WAIT, connected=True)[0] is Tick.UNPROVEN


def test_the_next_probe_is_written_a_probe_gap_after_the_answer() -> None:
    session = ensemble_core()
    assert session.tick(0.0, connected=True)[0] is Tick.PROBE
    session.leader.committed(0.0, 0.05, T)
    session.leader.answered(0.0, 0.05, True, T)
    decision, wake = session.tick(0.06, connected=True)
    assert (decision, wake) == (Tick.WAIT, pytest.approx(0.05 + T * PROBE_GAP))
    session._clock.last_heard = wake
    assert session.tick(wake, connected=True)[0] is Tick.PROBE


def test_connected_past_the_proof_drops_the_server_then_gives_up_the_holdings() -> None:
    session = ensemble_core()
    valid_until = session.valid_until
    assert valid_until == pytest.approx(T * (1 - LOST_MARGIN))  # the new session's handshake
    assert session._clock.fresh(0.0)  # the body started: the proof binds it from now on
    for at in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0):
        # Probes answered with errors (a leader that refuses them): nothing proven.
        session.leader.written(at)
        session.leader.answered(at, at + RTT, False, T)
    session._clock.last_heard = valid_until
    assert session.tick(valid_until, connected=True)[0] is Tick.UNPROVEN
    session.state = SessionState.SUSPENDED
    # Suspended past the proof: the holdings are given up, once; the session is kept, however
    # long no server answers (only a server can say it expired).
    assert session.tick(valid_until, connected=False) == (Tick.HORIZON, valid_until + T)
    assert session.tick(valid_until + 1, connected=False) == (Tick.WAIT, valid_until + 1 + T)
    assert session.tick(valid_until + 10 * T, connected=False)[0] is Tick.WAIT


def test_a_standalone_server_keeps_the_answered_request_rule() -> None:
    session = ensemble_core()
    session.leader.direct = True
    assert session.tick(0.0, connected=True)[0] is Tick.WAIT  # a ping later, no probe
    session._clock.last_acked_send = 3.0
    assert session.valid_until == pytest.approx(3.0 + T * (1 - LOST_MARGIN))


def test_a_known_tick_time_makes_the_proof_one_probe_fresher() -> None:
    leader = LeaderProof(0.0)
    leader.tick = 0.2  # the leader pings every 0.1 s: a gap of 0.15 s is enough
    assert leader.touch_gap(T) == pytest.approx(0.15)
    leader.attached(0.0, new_session=True)
    a_answer = probe(leader, 10.0)
    y = a_answer + T * PROBE_GAP  # one probe gap, less than T * TOUCH_GAP
    probe(leader, y)
    probe(leader, y + RTT + 0.001)
    assert leader.proven == 10.0


# ---------------------------------------------------------------- what the server guarantees


def test_an_unknown_tick_assumes_two_ticks_a_timeout() -> None:
    leader = LeaderProof(0.0)
    assert leader.tick is None
    assert leader.touch_gap(T) == T * TOUCH_GAP
    assert leader.probe_gap(T) == T * PROBE_GAP  # a follower: as before, 8 probes a timeout


def test_observers_in_the_config_mean_two_hops() -> None:
    assert relay_hops(ENSEMBLE) == 1
    assert relay_hops(OBSERVED) == 2
    assert relay_hops(None) == 2  # unreadable: the safe side
    assert relay_hops(b"server.1=[::1]:2888:3888:observer;[::1]:2181\n") == 2
    leader = LeaderProof(0.0)
    server_kind(leader, OBSERVED)
    assert (leader.direct, leader.hops) == (False, 2)


def test_a_chain_of_two_hops_needs_two_gaps_and_a_probe_between() -> None:
    gap = 1.0
    # (sent, answered), each written after the previous answer.
    one_hop = [(0.0, 0.1), (1.1, 1.2)]  # Y written a gap after A's answer
    assert chain_start(one_hop, gap, 1) == 0.0
    assert chain_start(one_hop, gap, 2) is None
    # A, Y1 a gap later, Z after Y1's answer, Y a gap after Z's answer.
    two_hops = [(0.0, 0.1), (1.1, 1.2), (1.3, 1.4), (2.4, 2.5)]
    assert chain_start(two_hops, gap, 2) == 0.0
    assert chain_start(two_hops, gap, 1) == 1.3  # one hop: Z is proven
    # Without a probe between the links (Z = Y1), the touch may not have left the first hop.
    assert chain_start([(0.0, 0.1), (1.1, 1.2), (2.3, 2.4)], gap, 2) is None


@pytest.mark.parametrize("hops", [1, 2])
@pytest.mark.parametrize("ticks", [0.8, 1.0, 1.5, 2.0, 3.0, 10.0, 100.0])
def test_the_probe_gap_lets_the_chain_renew_the_proof_in_time(hops: int, ticks: float) -> None:
    """Where ``probe_gap`` gives a gap, a chain over ``hops`` links spans the touch gap and
    is renewed before it ages past the budget; where none does, the timeout is refused."""
    leader = LeaderProof(0.0)
    leader.tick, leader.hops = 1.0, hops
    timeout = ticks * 1.0
    gap, touch = leader.probe_gap(timeout), leader.touch_gap(timeout)
    reason = too_short(leader, timeout)
    if gap is None:
        assert reason is not None
        assert "session_timeout >= 2 s (2 x tickTime)" in reason
        assert (hops, ticks) in {(1, 0.8), (2, 0.8), (2, 1.0), (2, 1.5)}
        return
    assert reason is None
    assert timeout * MIN_PROBE_GAP <= gap <= timeout * PROBE_GAP
    d = math.ceil(touch / gap - 1e-9)  # probes per link
    assert d * gap >= touch * (1 - 1e-9)
    assert (hops * (d + 1) + 1) * gap <= 0.75 * timeout * (1 + 1e-9)


@pytest.mark.parametrize(("hops", "shortest"), [(1, 0.8), (2, 1.834)])
def test_timeouts_are_refused_below_one_threshold_only(hops: int, shortest: float) -> None:
    leader = LeaderProof(0.0)
    leader.tick, leader.hops = 1.0, hops
    feasible = [t / 1000 for t in range(300, 5000) if leader.probe_gap(t / 1000) is not None]
    assert feasible[0] == pytest.approx(shortest, abs=0.001)
    assert len(feasible) == 5000 - int(feasible[0] * 1000)  # every longer one is proven


def test_the_warning_for_an_unknown_tick_says_what_is_assumed_and_what_to_allow() -> None:
    refused = "conf is not executed because it is not in the whitelist.\n"
    warning = unknown_tick_warning(refused, 2.0)
    assert "default 4lw.commands.whitelist, since 3.5.3, is srvr alone" in warning
    assert "every 0.5 s" in warning  # a quarter of the timeout
    assert "at least 2 x tickTime" in warning
    assert "4lw.commands.whitelist=srvr,conf" in warning
    assert "did not answer" in unknown_tick_warning("", 2.0)


# ---------------------------------------------------------------- proofs only when held


def test_an_idle_ensemble_session_pings_and_writes_no_probe() -> None:
    session = ensemble_core()
    session.leader.demanded(0, 0.0)  # nothing held: waiters and idle sessions
    assert session.tick(0.0, connected=True)[0] is Tick.WAIT
    assert session.tick(T / 6, connected=True)[0] is Tick.PING
    # Long after the handshake's proof ran out: an idle session is not dropped for it.
    session._clock.last_heard = 3 * T
    session._clock.last_sent = 3 * T
    assert session.tick(3 * T, connected=True)[0] is Tick.WAIT
    session.state = SessionState.SUSPENDED
    assert session.tick(3 * T + 0.1, connected=False) == (Tick.WAIT, 4 * T + 0.1)  # no horizon


def test_any_answered_request_is_a_candidate_for_a() -> None:
    leader = LeaderProof(0.0)
    leader.attached(0.0, new_session=True)
    a_answer = ping(leader, 10.0)  # an idle session's ping
    y = a_answer + T * TOUCH_GAP  # the grant's create
    probe(leader, y)
    assert leader.proven == 0.0  # a create alone proves nothing
    probe(leader, y + RTT + 0.001)  # B: the probe written after the create's answer
    assert leader.proven == 10.0


def test_a_grant_after_idleness_gets_a_probe_at_once_not_a_dropped_connection() -> None:
    session = ensemble_core()
    session.leader.demanded(0, 0.0)
    at = 3 * T  # the handshake's proof ran out long ago
    session._clock.last_heard = session._clock.last_sent = at
    session.leader.demanded(1, at)  # granted: the holding waits for a fresh proof
    assert not session._clock.fresh(at)
    assert session.tick(at, connected=True)[0] is Tick.PROBE  # not UNPROVEN
    session.leader.answered(at, at + RTT, False, T)  # answered, but no proof yet
    decision, wake = session.tick(at + RTT, connected=True)
    assert decision is Tick.WAIT
    assert wake == pytest.approx(at + T * URGENT_GAP)  # the next one soon, not a gap later


def test_a_busy_session_proves_itself_with_its_own_writes() -> None:
    session = ensemble_core()
    leader = session.leader
    at = 10.0
    for _ in range(int((T * TOUCH_GAP + 1.0) / RTT)):  # creates and deletes, back to back
        leader.touched(at, at + RTT, T)
        leader.committed(at, at + RTT, T)
        at += RTT
    assert leader.proven == pytest.approx(at - T * TOUCH_GAP - 3 * RTT, abs=T / 16)
    assert session._clock.fresh(at)


def test_a_watch_event_is_no_answer() -> None:
    session = ensemble_core()
    session._clock.last_heard = 1.0
    header = framing.REPLY_HEADER.pack(framing.WATCH_XID, 7, 0)
    path = b"/x"
    event = header + (3).to_bytes(4, "big") + (3).to_bytes(4, "big")
    event += len(path).to_bytes(4, "big") + path
    assert session.receive(len(event).to_bytes(4, "big") + event, 2.5) is None
    assert session.last_heard == 1.0  # the event moved no clock
    assert session.tick(1.0 + T * SILENCE, connected=True)[0] is Tick.SILENT


def test_a_grant_on_a_reattach_not_yet_proven_fresh_is_not_dropped_at_its_old_bound() -> None:
    """Granted moments after a reconnect: the re-attach's proof (its handshake) gives a
    ``valid_until`` too close for a body to start; while the first fresh proof is awaited,
    that bound does not drop the connection (only a late probe would): the body has not
    started. Found on CI in a leader isolation: the waiter's session was dropped."""
    session = ensemble_core()
    session.leader.demanded(0, 0.0)
    at = 20.0
    session.attached(framing.Handshake(int(T * 1000), 0x42, b"p" * 16), at, at)  # re-attach
    session.leader.committed(at + 0.1, at + 0.1 + RTT, T)  # a write: the re-attach proven
    now = at + T * (1 - LOST_MARGIN) - 0.05  # granted just before that bound
    session._clock.last_heard = session._clock.last_sent = now
    session.leader.demanded(1, now)
    assert not session._clock.fresh(now)
    assert session.tick(now, connected=True)[0] is Tick.PROBE
    session.leader.answered(now, now + RTT, False, T)
    past = at + T * (1 - LOST_MARGIN) + 0.01
    session._clock.last_heard = past
    assert session.tick(past, connected=True)[0] is not Tick.UNPROVEN
