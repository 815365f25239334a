"""The ZooKeeper session without I/O (as h11 is HTTP without sockets): bytes and instants in;
frames to write, the next deadline and decisions out. No socket, no await, no event loop.

``SessionCore`` holds what the protocol needs to remember: the session's identity (id,
password, generation, negotiated timeout, last zxid), the liveness clock (``_clock``), the
requests in flight (``_requests``), the requests queued to be written soon (``_outgoing``),
the watchers (``_watches``), and a session we let go of (a close not confirmed) that must
still be closed on the server. ``Session`` (``_session``) is the socket shell around it: it
writes what this returns, feeds in what it reads, sleeps until the next deadline the clock's
decision names (``tick``), and tells listeners about state changes.
"""

from __future__ import annotations

import enum
import logging
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiozklock._exceptions import AiozklockError, ConnectionLoss, SessionExpired, error_for_code
from aiozklock._wire import _framing as framing
from aiozklock._wire._clock import LivenessClock, Tick
from aiozklock._wire._leader import LeaderProof
from aiozklock._wire._limits import FRAME_OVERHEAD, oversized
from aiozklock._wire._outgoing import FlushScheduler, OutgoingQueue, Soon
from aiozklock._wire._records import FIRES, EventType, Op
from aiozklock._wire._requests import Pending, ReplyCallback, RequestTable, Waker
from aiozklock._wire._wake import wake_bytes
from aiozklock._wire._watches import WatchRegistry

# The session logs on one logger, whichever of its modules speaks (docs/observability.md).
log = logging.getLogger("aiozklock._wire._session")

# The spared writes' zxids kept: the proof that reads them spans one task's re-acquire,
# while every other task of the session writes twice (about 200 at C = 100).
_SPARED_KEPT = 1024
_EXPIRED = -112  # a reply's error code: the server says our session expired
# The opcodes of writes (the low byte; the others are 0): create, delete, setData, setACL,
# multi, create2, createContainer, createTTL. A committed one is a step of the leader proof.
_WRITES = frozenset({1, 2, 5, 7, 14, 15, 19, 21})


class SessionState(enum.Enum):
    """A client's session state (``zk.state``, ``StateChange.state``)."""

    CONNECTING = "CONNECTING"  # before the first session was established
    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"  # connection lost or silent; the session may still be alive
    LOST = "LOST"  # a server said the session expired; a new one is being established
    CLOSED = "CLOSED"


@dataclass(frozen=True, slots=True)
class StateChange:
    """One session state change, as listeners (``zk.add_listener``) see it."""

    state: SessionState
    previous: SessionState
    session_id: int  # the session this change is about: on LOST, the one that was lost
    generation: int  # changes whenever the session that owns our ephemeral nodes is gone
    at: float  # time.monotonic(): a timestamp, not a deadline (see aiozklock.clock())
    reason: str


StateListener = Callable[[StateChange], None]


class SessionCore:
    """One logical ZooKeeper session across connections, as a state machine (not public
    API). ``now`` arguments are ``uptime()`` instants (``_now``); ``new_waker`` makes what a
    caller waits on for its reply; ``scheduler`` is told when queued requests need a flush."""

    def __init__(
        self,
        *,
        chroot: str,
        session_timeout: float,
        max_request_bytes: int,
        now: float,
        new_waker: Callable[[], Waker],
        scheduler: FlushScheduler,
    ) -> None:
        self.chroot = chroot
        # The servers' jute.maxbuffer: a longer frame is refused here, before it is sent.
        self.max_request_bytes = max_request_bytes
        self._max_body = max_request_bytes - FRAME_OVERHEAD
        self.requested_timeout_ms = int(session_timeout * 1000)
        self.session_id = 0
        self._password = bytes(16)
        self.generation = 0  # changes whenever the session that owns our ephemerals is gone
        self.state = SessionState.CONNECTING
        self.last_zxid = 0
        self._clock = LivenessClock(session_timeout, now)
        self.leader: LeaderProof = self._clock.leader  # what the leader surely heard of us
        self._watches = WatchRegistry(self.client_path)
        self._requests = RequestTable(self._watches, self._clock.sent_at, new_waker)
        self._outgoing = OutgoingQueue(scheduler)
        # The zxids of this session's newest answered writes that spared parents, in
        # ascending order (``spared_parents``); bounded: a forgotten one only fails a proof.
        self._spared = array("q")
        self._read_buffer = bytearray()  # the current connection's incomplete frame
        # A session we let go of (a close() the server did not confirm, or credentials it
        # refused) while the server may still keep it (or revive it after a restart): closed
        # explicitly once we can, so its nodes go at once. Our clock never gives one up.
        self._stale_session: tuple[int, bytes] | None = None
        self._stale_answered_at: float | None = None  # a server first answered for it

    # ---------------------------------------------------------------- identity and clock

    @property
    def password(self) -> bytes:
        """The session password (with ``session_id``, what re-attaches to the session)."""
        return self._password

    @property
    def timeout(self) -> float:
        """The negotiated session timeout in seconds (the server may clamp what we asked)."""
        return self._clock.timeout

    @property
    def last_heard(self) -> float:
        """When the server last answered (a reply or a handshake; a watch event is no
        answer)."""
        return self._clock.last_heard

    @property
    def valid_until(self) -> float:
        """The ``uptime()`` instant before which no server can have expired this session,
        less our safety margin: ``proven`` plus 90 % of the timeout (``_clock``'s one rule,
        on every topology: only an answer proves). ``proven`` is the send time of our newest
        answered request on a standalone server; on an ensemble, of the newest request the
        leader is proven to have heard of (``_leader``: an answered request, then writes
        committed on the same connection; an answer alone proves nothing there). Probes run
        only while a holding needs the proof, so on an ensemble an idle session's
        ``valid_until`` may be past: a grant waits for a fresh one (``Session.wait_proven``)."""
        return self._clock.valid_until

    @property
    def proven(self) -> float:
        """The send time of our newest request proven to have reached the session's keeper
        (``valid_until`` is 90 % of the timeout later)."""
        return self._clock.proven

    def tick(self, now: float, connected: bool) -> tuple[Tick, float]:
        """The liveness clock's decision at ``now`` (``_clock``) and the instant of the next;
        ``connected``: a connection serves the session now."""
        return self._clock.tick(now, connected, self.state is SessionState.SUSPENDED)

    # ---------------------------------------------------------------- paths and limits

    def server_path(self, path: str) -> str:
        if not self.chroot:
            return path
        return self.chroot if path == "/" else self.chroot + path

    def client_path(self, server_path: str) -> str:
        if self.chroot and server_path.startswith(self.chroot):
            return server_path[len(self.chroot) :] or "/"
        return server_path

    def fits(self, op: Op[Any]) -> bool:
        """Whether ``op`` may be sent: its frame is at most ``max_request_bytes``."""
        return len(op.body) <= self._max_body

    def _refuse_oversized(self, ops: Sequence[Op[Any]]) -> None:
        """Raise ``InvalidArgument`` if any of ``ops`` is too large to send. Checked before
        anything of ``ops`` is numbered, registered or written: a refused request leaves no
        trace, and the server never sees the frame it would drop the connection for."""
        limit = self._max_body
        for op in ops:
            if len(op.body) > limit:
                raise oversized(op, self.max_request_bytes, self.client_path(op.path))

    def watcher_count(self) -> int:
        return self._watches.count()

    # ---------------------------------------------------------------- outgoing

    def frame_now(
        self,
        ops: Sequence[Op[Any]],
        generation: int | None,
        on_done: ReplyCallback | None,
        now: float,
    ) -> tuple[list[Pending], bytes]:
        """Number ``ops`` and return them with the bytes to write now: what was queued to be
        written soon, then ``ops``. Raises ``SessionExpired`` (nothing numbered) if
        ``generation`` is gone."""
        if generation is not None and generation != self.generation:
            raise SessionExpired(f"session generation {generation} is gone")
        frames: list[bytes] = []
        if self._outgoing:
            self._frame_queued(frames, now)
        pendings = self._requests.number(ops, on_done, frames, now)
        self._clock.last_sent = now
        return pendings, b"".join(frames) if len(frames) > 1 else frames[0] if frames else b""

    def frame_queued(self, now: float) -> bytes:
        """The bytes of what was queued to be written soon (numbered now), or b""."""
        if not self._outgoing:
            return b""
        frames: list[bytes] = []
        self._frame_queued(frames, now)
        self._clock.last_sent = now
        return b"".join(frames)

    def _frame_queued(self, frames: list[bytes], now: float) -> None:
        # All of the current generation: a new one comes only after fail_all emptied it.
        number = self._requests.number
        for soon in self._outgoing.take_all():
            number(soon.ops, soon.on_done, frames, now)

    def queue_soon(
        self, ops: Sequence[Op[Any]], generation: int, on_done: ReplyCallback
    ) -> Callable[[], bool]:
        """Queue ``ops`` to be written soon (``_outgoing``); returns ``take_back()``. Raises
        ``SessionExpired`` if ``generation`` is gone, ``InvalidArgument`` if too large."""
        self._refuse_oversized(ops)
        if generation != self.generation:
            raise SessionExpired(f"session generation {generation} is gone")
        soon = Soon(ops, generation, on_done)
        outgoing = self._outgoing
        outgoing.queue(soon)
        return lambda: outgoing.take_back(soon)

    def forget(self, pendings: Sequence[Pending]) -> None:
        """Their callers are gone: late replies are skipped, their watchers dropped."""
        self._requests.forget(pendings)

    def fail_all(self, error_factory: Callable[[], AiozklockError]) -> None:
        """The connection (or the session) is gone: everything queued or in flight fails."""
        self._outgoing.fail_all(error_factory)
        self._clock.sent_at.clear()
        self._requests.fail_all(error_factory)

    # ---------------------------------------------------------------- incoming

    def connection_started(self) -> None:
        """A new connection serves the session: no partial frame from the last one."""
        self._read_buffer = bytearray()

    def receive(self, data: bytes, now: float) -> str | None:
        """Bytes read from the connection at ``now``: settle the replies and fire the
        watches they complete. Returns why the connection must be dropped (the server says
        the session expired), else None; raises on a frame it cannot read."""
        buffer = self._read_buffer
        # Nearly always nothing is left from the last read: the frames are cut from ``data``
        # itself (one copy each), not from the buffer (two, and the buffer's own).
        source: bytes | bytearray = data
        if buffer:
            buffer += data
            source = buffer
        length = framing.LENGTH
        start = 0
        available = len(source)
        drop = None
        while available - start >= 4:
            (size,) = length.unpack_from(source, start)
            end = start + 4 + size
            if end > available:
                break
            if self._on_frame(bytes(source[start + 4 : end]), now):
                drop = "server reports session expired"
            start = end
        if source is buffer:
            del buffer[:start]
        elif start < available:
            buffer += data[start:]
        return drop

    def _on_frame(self, data: bytes, now: float) -> bool:
        """One frame; True if it says that the session expired. Only a reply is an answer
        (``_clock``): a watch event moves no clock."""
        xid, zxid, err = framing.REPLY_HEADER.unpack_from(data, 0)
        if zxid > self.last_zxid:
            self.last_zxid = zxid
        if xid == framing.WATCH_XID:
            event = framing.parse_watch_event(data, framing.REPLY_HEADER_SIZE)
            if event.type in FIRES:
                self._watches.fire(EventType(event.type), event.path)
            return False
        # An answer (a watch event is none: it proves nothing, see _clock). Replies come in
        # request order: the oldest send is this one's (see LivenessClock).
        clock = self._clock
        clock.last_heard = now
        sent_at = None
        # A standalone server proves the session with every answer (``last_acked_send``):
        # the leader proof's chain is kept only where it is read (an ensemble, or unknown).
        leader = self.leader if self.leader.direct is not True else None
        if clock.sent_at:
            sent_at = clock.sent_at.popleft()
            if sent_at > clock.last_acked_send:
                clock.last_acked_send = sent_at
            if leader is not None:
                leader.touched(sent_at, now, clock.timeout)
        if xid in framing.SPECIAL_XIDS:
            if err:
                log.warning("reply with xid %d carried error %d", xid, err)
            return False
        pending = self._requests.take(xid)
        if pending is None:
            return False  # the caller was cancelled; the reply is not wanted
        op = pending.op
        if err == 0:
            try:
                pending.result = op.parse(data, framing.REPLY_HEADER_SIZE)
            except Exception as exc:
                pending.error = ConnectionLoss(f"unreadable reply: {exc!r}")
                pending.finish()
                raise
        elif err == framing.NO_NODE and op.absent_ok:
            pending.result = None
        else:
            pending.error = error_for_code(err, self.client_path(op.path) if op.path else None)
        if err == 0 and op.spares_parents:
            self._spare(zxid)
        if op.watcher is not None:  # (most requests set none)
            self._watches.settle(op, pending.error is not None, pending.result)
        if (
            err == 0
            and sent_at is not None
            and leader is not None
            and op.body[3] in _WRITES
            and op.body[2] == 0
            and getattr(pending.result, "failure", None) is None  # a multi: all applied
        ):
            leader.committed(sent_at, now, clock.timeout)
        pending.finish()
        expired: bool = err == _EXPIRED
        return expired

    def _spare(self, zxid: int) -> None:
        """Record a spared write's zxid (``spared_parents``): ascending, the newest kept."""
        spared = self._spared
        if spared and zxid <= spared[-1]:
            del spared[:]  # not a new transaction's (never seen): trust none before it
        elif len(spared) >= _SPARED_KEPT:
            del spared[: _SPARED_KEPT // 2]
        spared.append(zxid)

    def wake_bytes(self) -> int:
        """The unread bytes worth waking the reader for (``_wake``: the rule and its proof)."""
        urgent = bool(self.leader.demand or self._read_buffer or self._watches.watching())
        return wake_bytes(self._requests.written, urgent=urgent)

    def spared_parents(self, low: int, high: int) -> bool:
        """Whether every transaction the ensemble committed after zxid ``low`` and before
        ``high`` was a write of this session that spared parents (``Op.spares_parents``):
        none deleted a node able to have children.

        Sound because zxids are dense (each transaction takes the next one; an epoch change
        jumps by 2**32, and the count fails) and a successful write's reply carries its
        transaction's zxid: the server applies writes one at a time and reads its last
        applied zxid right after applying the write it answers (``FinalRequestProcessor``,
        3.4 to 3.9). Replies come in request order, so every write of ours with a zxid
        below ``high`` is recorded once ``high``'s reply was read. A write whose reply was
        lost, or forgotten here, only makes this False."""
        spared = self._spared
        return bisect_left(spared, high) - bisect_right(spared, low) == high - low - 1

    # ---------------------------------------------------------------- attaching

    def connect_request(self) -> tuple[bytes, int]:
        """The ConnectRequest presenting our session (after a loss, id 0: a new one) and
        the session id it presents."""
        session_id = self.session_id
        request = framing.connect_frame(
            self.last_zxid, self.requested_timeout_ms, session_id, self._password
        )
        return request, session_id

    def rearm_request(self, now: float) -> bytes:
        """Our session was re-attached: the SetWatches frames that re-arm every watch, in
        chunks that fit ``max_request_bytes``, to write before any other request; b"" if
        there is no watch."""
        self._clock.sent_at.clear()
        frames = framing.set_watches_frames(
            self.last_zxid, *self._watches.rearm_paths(), self.max_request_bytes
        )
        self._clock.sent_at.extend(now for _ in frames)
        return b"".join(frames)

    def attached(self, handshake: framing.Handshake, sent_at: float, now: float) -> bool:
        """The server attached ``handshake``'s session (answered at ``now`` to a request
        sent at ``sent_at``); True if it is a new one."""
        new = not self.session_id  # we asked for a new session
        self.session_id = handshake.session_id
        self._password = handshake.password
        self._clock.attached(handshake.timeout_ms / 1000, sent_at, now, new)
        if new:
            log.info("new session 0x%x, timeout %.3f s", self.session_id, self.timeout)
            if handshake.timeout_ms != self.requested_timeout_ms:
                # Loss detection and re-grants run on the server's value, not the one asked.
                log.warning(
                    "session 0x%x: session_timeout %g s was clamped by the server to %g s",
                    self.session_id,
                    self.requested_timeout_ms / 1000,
                    self.timeout,
                )
        return new

    def reconnect_bound(self, hosts: int, connect_timeout: float) -> float:
        """How long one reconnect attempt may take: short, so that a server that accepts
        but does not answer (frozen, or just restarted) cannot eat the session's life."""
        return min(max(self.timeout / (2 * (hosts + 1)), 0.25), connect_timeout)

    def reconnect_cap(self) -> float:
        """The longest pause between reconnect attempts: a fifth of the timeout (at least
        five tries within it), 0.5 to 2 s. A fleet's sessions all retry at once when their
        servers go away; 1,000 sessions retrying every 0.5 s kept a 2-core ensemble without
        a leader for 21 s of a rolling restart, against 2.6 s at 2 s (benchmarks/fleet.py)."""
        return min(max(self.timeout / 5, 0.5), 2.0)

    def forget_session(self, reason: str) -> int:
        """A server said the session that owns our ephemerals expired (our clock never
        gives one up: ``_clock``): everything waiting fails with ``SessionExpired``, the
        next connection asks for a new session, the generation changes. Returns the id of
        the session lost."""
        self.fail_all(lambda: SessionExpired(reason))
        lost_id, self.session_id = self.session_id, 0
        self._password = bytes(16)
        self.generation += 1
        return lost_id

    # ---------------------------------------------------------------- a session to close

    def mark_stale(self, session_id: int, password: bytes) -> None:
        """Close this session, no longer ours, before the next connection."""
        self._stale_session = (session_id, password)
        self._stale_answered_at = None

    def stale_to_close(self, now: float) -> tuple[int, bytes] | None:
        """The session to close before connecting, if any: however long ago we let go of
        it (a server keeps a session a timeout after it last heard from it, and one restarted
        with its data revives the sessions it had, however long it was down). Given up
        (None, logged) once servers answered for it for a whole timeout without the close
        going through: then it is left to the server's expiry."""
        stale, answered_at = self._stale_session, self._stale_answered_at
        if stale is not None and answered_at is not None and now - answered_at > self.timeout:
            log.warning(
                "could not close session 0x%x that we let go of; its nodes stay until "
                "the server expires it",
                stale[0],
            )
            self._stale_session = None
            return None
        return stale

    def stale_answered(self, now: float) -> None:
        """A server answered for the stale session (it is alive there): from the first such
        answer, its close has a session timeout to go through."""
        if self._stale_answered_at is None:
            self._stale_answered_at = now

    def stale_closed(self) -> None:
        """The stale session is closed (or the server said it expired): nothing to close."""
        self._stale_session = None

    @property
    def stale_id(self) -> int | None:
        """The id of the session to close before connecting, if any."""
        return None if self._stale_session is None else self._stale_session[0]
