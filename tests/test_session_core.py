"""The sans-I/O session core (``_wire._core``), with a fake clock and no socket: the liveness
clock, reply matching, the reconnect decisions, SetWatches re-arming, and the release fold.

Every instant is a number we choose; every "server reply" is bytes we build.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from aiozk import protocol as jute

from aiozklock._exceptions import (
    AiozklockError,
    ConnectionLoss,
    NoNodeError,
    SessionExpired,
)
from aiozklock._wire import _framing as framing
from aiozklock._wire._clock import Tick
from aiozklock._wire._core import SessionCore, SessionState
from aiozklock._wire._ops import delete_op, exists_op
from aiozklock._wire._protocol import CreateMode, WatchedEvent

EPHEMERAL_SEQUENTIAL = CreateMode.EPHEMERAL | CreateMode.SEQUENTIAL
T = 6.0  # session timeout: pings after 1 s idle, silence after 3 s, LOST 5.4 s after a send


class Waker:
    def __init__(self) -> None:
        self.woken = False

    def set(self) -> None:
        self.woken = True

    async def wait(self) -> None:  # the shell's side; never awaited here
        raise AssertionError


class Scheduler:
    """Records when the core asks for a flush of what it queued for soon."""

    def __init__(self) -> None:
        self.scheduled = 0
        self.cancelled = 0

    def schedule(self) -> None:
        self.scheduled += 1

    def cancel(self) -> None:
        self.cancelled += 1


Replies = list[tuple[Any, AiozklockError | None]]


def core(
    *, max_request_bytes: int = 0xFFFFF, session_id: int = 0x42, standalone: bool = True
) -> SessionCore:
    """A core attached at t=0 to session ``session_id`` (0: none yet), CONNECTED, to a
    ``standalone`` server (else an ensemble: the clock probes through the leader, see
    tests/test_leader_proof.py)."""
    session = SessionCore(
        chroot="",
        session_timeout=T,
        max_request_bytes=max_request_bytes,
        now=0.0,
        new_waker=Waker,
        scheduler=Scheduler(),
    )
    session.leader.direct = standalone
    if session_id:
        handshake = framing.Handshake(int(T * 1000), session_id, b"p" * 16)
        assert session.attached(handshake, sent_at=0.0, now=0.0)
        session.state = SessionState.CONNECTED
    return session


def scheduler_of(session: SessionCore) -> Scheduler:
    scheduler = session._outgoing._scheduler
    assert isinstance(scheduler, Scheduler)
    return scheduler


def reply(xid: int, err: int = 0, zxid: int = 7, body: bytes = b"") -> bytes:
    """A server frame: length, reply header (xid, zxid, err), body."""
    frame = framing.REPLY_HEADER.pack(xid, zxid, err) + body
    return framing.LENGTH.pack(len(frame)) + frame


def xids_of(data: bytes) -> list[int]:
    """The xids of the request frames in ``data``, in order."""
    xids, offset = [], 0
    while offset < len(data):
        size, xid = framing.XID_PREFIX.unpack_from(data, offset)
        xids.append(xid)
        offset += 4 + size
    return xids


def frames_of(data: bytes) -> list[bytes]:
    frames, offset = [], 0
    while offset < len(data):
        (size,) = framing.LENGTH.unpack_from(data, offset)
        frames.append(data[offset : offset + 4 + size])
        offset += 4 + size
    return frames


def recorder(replies: Replies) -> Any:
    return lambda result, error: replies.append((result, error))


# ---------------------------------------------------------------- the liveness clock


def test_an_idle_connection_is_pinged_after_a_sixth_of_the_timeout() -> None:
    session = core()
    assert session.tick(0.5, connected=True) == (Tick.WAIT, pytest.approx(T / 6))
    decision, next_at = session.tick(T / 6, connected=True)
    assert decision is Tick.PING
    assert next_at == pytest.approx(2 * T / 6)  # the next ping, before silence at T/2
    assert session.tick(T / 6 + 0.1, connected=True)[0] is Tick.WAIT  # just pinged


def test_a_request_written_counts_as_activity_and_delays_the_ping() -> None:
    session = core()
    session.frame_now([delete_op("/a")], None, recorder([]), now=0.9)
    assert session.tick(T / 6, connected=True) == (Tick.WAIT, pytest.approx(0.9 + T / 6))


def test_silence_for_half_the_timeout_drops_the_connection() -> None:
    session = core()
    session.receive(reply(framing.PING_XID), now=0.2)
    assert session.tick(0.2 + T / 2 - 0.01, connected=True)[0] is not Tick.SILENT
    assert session.tick(0.2 + T / 2, connected=True)[0] is Tick.SILENT


def test_a_late_but_in_time_ping_reply_is_not_silence() -> None:
    session = core()
    assert session.tick(T / 6, connected=True)[0] is Tick.PING
    # The reply comes a moment before silence would be declared: it counts.
    session.receive(reply(framing.PING_XID), now=T / 2 - 0.01)
    decision, next_at = session.tick(T / 2, connected=True)
    assert decision is not Tick.SILENT
    assert next_at <= T / 2 - 0.01 + T / 2
    assert session.tick(T - 0.02, connected=True)[0] is not Tick.SILENT
    assert session.tick(T - 0.01, connected=True)[0] is Tick.SILENT


def test_suspended_gives_up_holdings_at_valid_until_and_keeps_the_session() -> None:
    session = core()
    session.frame_now([delete_op("/a")], None, recorder([]), now=2.0)
    session.receive(reply(1), now=2.5)  # answered: the server heard us no earlier than 2.0
    session.frame_now([delete_op("/b")], None, recorder([]), now=3.0)  # never answered
    session.leader.demanded(1, 2.6)  # a holding
    session.state = SessionState.SUSPENDED
    horizon = 2.0 + T * 0.9  # less LOST_MARGIN
    assert session.valid_until == pytest.approx(horizon)
    assert session.tick(horizon - 0.01, connected=False) == (Tick.WAIT, pytest.approx(horizon))
    assert session.tick(horizon, connected=False)[0] is Tick.HORIZON
    # Told once; the session is never given up by our clock: only a server can say so.
    assert session.tick(horizon + 100 * T, connected=False)[0] is Tick.WAIT


def test_suspended_without_holdings_has_no_horizon() -> None:
    session = core()
    session.frame_now([delete_op("/a")], None, recorder([]), now=2.0)
    session.receive(reply(1), now=2.5)
    session.state = SessionState.SUSPENDED
    assert session.tick(2.0 + T, connected=False) == (Tick.WAIT, pytest.approx(2.0 + 2 * T))


def watch_event(path: str = "/w") -> bytes:
    """A server-sent notification (NodeDeleted): no request of ours asked for it."""
    encoded = path.encode()
    body = struct.pack("!iii", 2, 3, len(encoded)) + encoded  # type, state, path
    frame = framing.REPLY_HEADER.pack(framing.WATCH_XID, -1, 0) + body
    return framing.LENGTH.pack(len(frame)) + frame


@pytest.mark.parametrize("standalone", [True, False], ids=["standalone", "ensemble"])
def test_watch_events_extend_neither_the_silence_nor_the_proof(standalone: bool) -> None:
    """A one-way cut: our requests are lost, the server's notifications still arrive. They
    count for nothing: silence from the newest answer, and the proof's ``valid_until``
    drops a connection that looks alive, on either topology."""
    session = core(standalone=standalone)
    session.receive(reply(framing.PING_XID), now=0.2)  # the last answer
    at = 0.2
    while at < T:
        at += 0.25
        session.receive(watch_event(), now=at)
    assert session.last_heard == 0.2
    assert session.tick(0.2 + T / 2, connected=True)[0] is Tick.SILENT


def test_connected_to_a_standalone_server_past_valid_until_drops_the_connection() -> None:
    """A holding on a standalone server: answers keep arriving (no silence) but none to a
    request sent after 1.0: at ``valid_until`` the connection is unproven, as on an
    ensemble, and the holdings are given up (the session is kept)."""
    session = core()
    session.frame_now([delete_op("/a")], None, recorder([]), now=1.0)
    session.receive(reply(1), now=1.1)
    session.leader.demanded(1, 1.05)  # a holding, granted on that answer
    assert session._clock.fresh(1.1)  # its body started: the proof binds it
    lost_at = 1.0 + T * 0.9
    assert session.valid_until == pytest.approx(lost_at)
    session._clock.last_heard = lost_at  # an answer arrives: not silent
    assert session.tick(lost_at - 0.01, connected=True)[1] <= lost_at
    assert session.tick(lost_at, connected=True)[0] is Tick.UNPROVEN
    session.state = SessionState.SUSPENDED
    assert session.tick(lost_at, connected=False)[0] is Tick.HORIZON


def test_connecting_or_closed_has_no_deadline_but_the_next_tick() -> None:
    session = core(session_id=0)
    assert session.tick(100.0, connected=False) == (Tick.WAIT, 100.0 + T)


# ---------------------------------------------------------------- replies


def test_replies_are_matched_by_xid_and_settled_in_order() -> None:
    session = core()
    replies: Replies = []
    pendings, data = session.frame_now(
        [delete_op("/a"), exists_op("/b")], None, recorder(replies), now=1.0
    )
    assert xids_of(data) == [p.xid for p in pendings] == [1, 2]
    session.receive(reply(1, err=-101, zxid=9), now=1.1)
    assert session.last_zxid == 9
    assert replies[0][0] is None
    assert isinstance(replies[0][1], NoNodeError)
    session.receive(reply(2, err=-101), now=1.2)  # exists: NoNode is an answer
    assert replies[1] == (None, None)


def test_only_answered_writes_that_spare_parents_fill_the_zxids_between() -> None:
    """``spared_parents``: every zxid strictly between two must be an answered write of
    ours that spared parents; a plain delete (it may delete a parent), an error, a read or
    an unknown zxid leaves a gap."""
    session = core()
    ops = [
        delete_op("/q/n1", ephemeral=True),  # zxid 11
        delete_op("/q"),  # 12: a delete the caller does not know is an ephemeral's
        delete_op("/q/n2", ephemeral=True),  # 13
        delete_op("/q/n3", ephemeral=True),  # 14: fails: no transaction of ours is known
        exists_op("/q"),  # a read (NoNode: an answer): its zxid (15), another session's write
        delete_op("/q/n4", ephemeral=True),  # 16
    ]
    session.frame_now(ops, None, recorder([]), now=1.0)
    for xid, zxid, err in [(1, 11, 0), (2, 12, 0), (3, 13, 0), (4, 14, -101), (5, 15, -101)]:
        session.receive(reply(xid, err=err, zxid=zxid), now=1.1)
    assert session.spared_parents(10, 12)  # 11
    assert session.spared_parents(10, 11)  # nothing between
    assert not session.spared_parents(10, 13)  # 12: a plain delete
    assert session.spared_parents(12, 14)  # 13
    assert not session.spared_parents(13, 15)  # 14: an error's zxid is not known to be ours
    assert not session.spared_parents(15, 17)  # 16: not answered yet
    session.receive(reply(6, zxid=16), now=1.2)
    assert session.spared_parents(15, 17)
    assert not session.spared_parents(14, 17)  # 15: the read's zxid was another's write
    assert not session.spared_parents(10, 1 << 32 | 1)  # an epoch later: never dense


def test_the_last_request_of_an_awaited_batch_wakes_its_caller() -> None:
    session = core()
    pendings, _ = session.frame_now([delete_op("/a"), delete_op("/b")], None, None, now=1.0)
    assert pendings[0].event is None  # replies come in order: only the last is awaited
    waker = pendings[1].event
    assert isinstance(waker, Waker)
    session.receive(reply(1) + reply(2)[:5], now=1.1)  # the second frame is incomplete
    assert not waker.woken
    session.receive(reply(2)[5:], now=1.2)
    assert waker.woken
    assert pendings[1].error is None


def test_a_request_left_unanswered_while_a_later_one_is_answered_fails_with_connection_loss() -> (
    None
):
    session = core()
    replies: Replies = []
    session.frame_now([delete_op("/a"), delete_op("/b")], None, recorder(replies), now=1.0)
    session.frame_now([delete_op("/c")], None, recorder(replies), now=1.0)
    session.receive(reply(3), now=1.1)  # the server skipped 1 and 2
    assert [type(error) for _, error in replies] == [ConnectionLoss, ConnectionLoss, type(None)]
    assert "later request" in str(replies[0][1])
    session.receive(reply(1), now=1.2)  # a reply for a request already failed: ignored
    assert len(replies) == 3


def test_a_forgotten_request_is_neither_answered_nor_failed_as_skipped() -> None:
    session = core()
    replies: Replies = []
    pendings, _ = session.frame_now([delete_op("/a")], None, None, now=1.0)
    session.forget(pendings)  # its caller was cancelled
    session.frame_now([delete_op("/b")], None, recorder(replies), now=1.0)
    session.receive(reply(2), now=1.1)
    assert pendings[0].error is None
    assert replies == [(None, None)]


def test_the_server_saying_the_session_expired_drops_the_connection() -> None:
    session = core()
    replies: Replies = []
    session.frame_now([delete_op("/a")], None, recorder(replies), now=1.0)
    assert session.receive(reply(1, err=-112), now=1.1) == "server reports session expired"
    assert isinstance(replies[0][1], SessionExpired)


def test_a_lost_connection_fails_everything_in_flight_and_queued() -> None:
    session = core()
    replies: Replies = []
    session.frame_now([delete_op("/a")], None, recorder(replies), now=1.0)
    session.queue_soon([delete_op("/b")], session.generation, recorder(replies))
    session.fail_all(lambda: ConnectionLoss("connection lost"))
    assert [type(error) for _, error in replies] == [ConnectionLoss, ConnectionLoss]
    assert session.frame_queued(2.0) == b""
    session.receive(reply(1), now=2.0)  # a late reply (the old connection's): ignored
    assert len(replies) == 2


# ---------------------------------------------------------------- reconnect decisions


def test_a_reconnect_presents_our_session_until_it_is_lost() -> None:
    session = core(session_id=0x42)
    request, presented = session.connect_request()
    assert presented == 0x42
    assert jute.ConnectRequest.parse(request, 4)[0].password == b"p" * 16
    generation = session.generation
    replies: Replies = []
    session.frame_now([delete_op("/a")], None, recorder(replies), now=1.0)
    assert session.forget_session("expired") == 0x42
    assert isinstance(replies[0][1], SessionExpired)
    assert session.generation == generation + 1
    request, presented = session.connect_request()
    assert presented == 0  # a new session
    assert jute.ConnectRequest.parse(request, 4)[0].password == bytes(16)
    assert session.stale_id is None  # the server said it expired: nothing to close
    with pytest.raises(SessionExpired):
        session.frame_now([delete_op("/a")], generation, None, now=2.0)


def test_a_session_we_gave_up_is_closed_at_the_next_connection_however_long_ago() -> None:
    session = core(session_id=0)
    session.mark_stale(0x42, b"p" * 16)  # what close() does when the server did not confirm
    assert session.stale_id == 0x42
    assert session.stale_to_close(now=10_000.0) == (0x42, b"p" * 16)
    session.stale_closed()
    assert session.stale_to_close(now=10_001.0) is None


def test_closing_a_stale_session_is_given_up_after_servers_answered_for_a_whole_timeout() -> None:
    session = core(session_id=0)
    session.mark_stale(0x42, b"p" * 16)
    session.stale_answered(100.0)  # alive on a server, but the close did not go through
    session.stale_answered(102.0)  # later answers do not move the start
    assert session.stale_to_close(now=100.0 + T - 0.01) == (0x42, b"p" * 16)
    assert session.stale_to_close(now=100.0 + T + 0.01) is None
    assert session.stale_id is None


def test_a_session_refused_at_authentication_is_closed_next_time() -> None:
    session = core(session_id=0)
    session.mark_stale(0x77, b"q" * 16)  # what the handshake does when auth is refused
    assert session.stale_to_close(now=1.0) == (0x77, b"q" * 16)


def test_the_server_clamping_the_timeout_moves_the_clock() -> None:
    session = core(session_id=0)
    assert session.attached(framing.Handshake(4000, 0x99, b"x" * 16), sent_at=5.0, now=5.2)
    assert session.timeout == 4.0
    assert session.valid_until == pytest.approx(5.0 + 4.0 * 0.9)
    assert session.tick(5.0 + 4.0 / 6, connected=True)[0] is Tick.PING


def test_set_watches_rearm_every_watch_in_chunks_under_max_request_bytes() -> None:
    limit = 128 * 1024
    session = core(max_request_bytes=limit)
    paths = [f"/w/{i:04d}-" + "x" * 1000 for i in range(300)]  # ~300 KB of paths

    def watcher(event: WatchedEvent) -> None:
        pass

    session.frame_now([exists_op(p, watcher) for p in paths], None, recorder([]), now=1.0)
    data = session.rearm_request(now=2.0)
    frames = frames_of(data)
    assert len(frames) >= 3
    rearmed: list[str] = []
    for frame in frames:
        assert len(frame) - 4 <= limit
        (xid,) = framing.LENGTH.unpack_from(frame, 4)
        assert xid == framing.SET_WATCHES_XID
        request = jute.SetWatchesRequest.parse(frame, 12)[0]  # after length, xid, opcode
        assert request.relative_zxid == session.last_zxid
        rearmed += request.exist_watches
    assert sorted(rearmed) == sorted(paths)


def test_no_watch_nothing_to_rearm() -> None:
    assert core().rearm_request(now=1.0) == b""


# ---------------------------------------------------------------- requests written soon

MARK = delete_op("/l/n-1")


def test_a_request_queued_for_soon_is_flushed_alone_when_nothing_follows() -> None:
    session = core()
    replies: Replies = []
    session.queue_soon([MARK], session.generation, recorder(replies))
    assert scheduler_of(session).scheduled == 1
    data = session.frame_queued(1.0)
    assert frames_of(data) == [framing.frame(1, MARK.body)]
    session.receive(reply(1), now=1.1)
    assert len(replies) == 1


def test_a_request_made_before_the_flush_goes_after_the_queued_one_in_one_write() -> None:
    session = core()
    session.queue_soon([MARK], session.generation, recorder([]))
    pendings, data = session.frame_now([exists_op("/l")], None, None, now=1.0)
    assert xids_of(data) == [1, 2]
    assert pendings[0].xid == 2
    assert session.frame_queued(1.0) == b""


def test_a_queued_request_is_never_written_across_a_reconnect() -> None:
    session = core()
    replies: Replies = []
    take_back = session.queue_soon([MARK], session.generation, recorder(replies))
    session.fail_all(lambda: ConnectionLoss("connection lost"))  # the connection dropped
    assert isinstance(replies[0][1], ConnectionLoss)  # its caller hands it to the janitor
    assert not take_back()
    assert session.frame_queued(1.0) == b""


def test_a_taken_back_request_is_never_written_nor_told() -> None:
    session = core()
    replies: Replies = []
    take_back = session.queue_soon([delete_op("/a")], session.generation, recorder(replies))
    assert take_back()
    assert not take_back()
    assert session.frame_queued(1.0) == b""
    session.fail_all(lambda: ConnectionLoss("connection lost"))
    assert replies == []


# ---------------------------------------------------------------- the reader's wake-ups


def test_the_reader_wakes_once_for_a_reply_nobody_awaits_and_the_awaited_one_after_it() -> None:
    """``wake_bytes`` (``_wake``): a release's delete (nobody awaits it) then the next
    acquire's request (awaited): woken once both have at least a reply header's worth of
    bytes, 20 each; any byte while the first request in flight is awaited, or nothing is."""
    least = 4 + framing.REPLY_HEADER_SIZE
    session = core()
    assert session.wake_bytes() == 1  # nothing in flight
    session.frame_now([delete_op("/q/n1", ephemeral=True)], None, recorder([]), now=1.0)
    assert session.wake_bytes() == 1  # only replies nobody awaits: each read as it comes
    session.frame_now([exists_op("/q")], None, None, now=1.0)  # awaited
    assert session.wake_bytes() == 2 * least
    # Read in one wake-up: both frames (the awaited one carries a body).
    session.receive(reply(1) + reply(2, body=b"\0" * 68), now=1.1)
    assert session.wake_bytes() == 1

    session.frame_now([exists_op("/q")], None, None, now=1.2)  # awaited, first in flight
    session.frame_now([delete_op("/q/n2", ephemeral=True)], None, recorder([]), now=1.2)
    assert session.wake_bytes() == 1
    session.receive(reply(3, err=-101) + reply(4), now=1.3)

    for _ in range(3):
        session.frame_now([delete_op("/q/n", ephemeral=True)], None, recorder([]), now=1.4)
    session.frame_now([delete_op("/q/m"), delete_op("/q/n")], None, None, now=1.4)
    assert session.wake_bytes() == 4 * least  # a pipeline: its first request counts
    session.frame_now([delete_op("/q/o", ephemeral=True)], None, recorder([]), now=1.4)
    session.receive(reply(5), now=1.5)
    assert session.wake_bytes() == 3 * least
    session.receive(reply(6)[:7], now=1.5)  # an incomplete frame: any byte completes it
    assert session.wake_bytes() == 1
    session.receive(reply(6)[7:], now=1.5)
    assert session.wake_bytes() == 2 * least


@pytest.mark.parametrize("urgent", ["holding", "watch", "five before"])
def test_the_reader_wakes_for_any_byte_while_something_needs_an_early_read(urgent: str) -> None:
    """A holding needs every answer for its proof at once; a watcher its notification,
    which can be shorter than the mark; past ``SCANNED`` requests nobody awaits, none is
    counted (a release of many locks costs nothing per request in flight)."""
    session = core()
    if urgent == "holding":
        session.leader.demanded(1, 1.0)
    elif urgent == "watch":
        session.frame_now([exists_op("/w", watcher=lambda event: None)], None, None, now=1.0)
        session.receive(reply(1, body=b"\0" * 68), now=1.0)
    count = 5 if urgent == "five before" else 1
    for _ in range(count):
        session.frame_now([delete_op("/q/n", ephemeral=True)], None, recorder([]), now=1.0)
    session.frame_now([exists_op("/q")], None, None, now=1.0)
    assert session.wake_bytes() == 1
