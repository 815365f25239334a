"""The session's liveness clock, without I/O: instants in, decisions out.

**One rule, on every topology: only an answer to a request we sent proves the session.**
ZooKeeper expires a session ``T`` (the negotiated timeout) after it last *read a request*
of it, never earlier (its expiry queue rounds up to the next tick). A request we sent at
``s`` and that was answered was read no earlier than ``s``: that keeper cannot expire the
session before ``s + T``. On a standalone server (its own leader) every answered request
proves its send time; on an ensemble the leader expires sessions, and only probes
committed through it prove one (``_leader``). Nothing else the server sends proves
anything: a watch event, or any frame we did not ask for, is written without reading
anything of ours, so it arrives just as well when our requests are lost (a one-way cut, a
half-open connection) while the session's clock runs out at the server. Hence:

* **proof**: ``valid_until`` = the newest proven send time + ``(1 - LOST_MARGIN) x T``.
  Connected or not, at ``valid_until`` the session is unproven: a connection still open
  is dropped (``UNPROVEN``, however alive it looks), and while SUSPENDED the session is
  given up (``LOST``). ``LOST_MARGIN`` absorbs our scheduling delays and clock rates;

and two rules that notice a dead path sooner (whichever deadline comes first drops the
connection; none extends the proof):

* **ping**: a connection on which we wrote nothing for ``T/6`` gets a ping (a probe
  through the leader, ``PROBE_GAP x T`` after the previous answer, on an ensemble), so
  that its answer has a third of ``T`` before silence is declared, not a sixth;
* **silence**: no *answer* for ``T/2`` while connected (counted from the newest answer,
  not from any frame: watch events do not count) means the path or the server is dead:
  ``SILENT``, the shell drops the connection. On an ensemble a probe unanswered for
  ``PROBE_WAIT x T`` means the server may be cut off from the leader: ``UNPROVEN`` too.

``tick(now, ...)`` applies them and says what to do and when to tick next; the shell sleeps
until then (or until the state changes) and performs the decision.
"""

from __future__ import annotations

import collections
import enum

from aiozklock._wire._leader import PROBE_WAIT, LeaderProof

LOST_MARGIN = 0.1  # LOST this fraction of the timeout before the server may expire us
SILENCE = 1 / 2  # SUSPENDED after this fraction of the timeout without an answer
# An idle connection is pinged after this fraction: the reply then has a third of the timeout
# before silence is declared (as in Java's client), not just a sixth (a JVM pause).
PING_IDLE = 1 / 6


class Tick(enum.Enum):
    """What the clock decided at a tick."""

    WAIT = "wait"  # nothing to do before the next deadline
    PING = "ping"  # write a ping now (already counted as sent)
    SILENT = "silent"  # no answer for SILENCE x timeout: drop the connection
    PROBE = "probe"  # write a probe through the leader now (already counted as written)
    UNPROVEN = "unproven"  # past valid_until, or a probe late: drop the connection
    LOST = "lost"  # suspended past valid_until: the session is gone by our clock


class LivenessClock:
    """When the server last answered us and we last wrote to it, and the send time of every
    request still waiting for its reply (replies come in order: the oldest is the next).

    Each reply (not a watch event) sets ``last_heard`` to its arrival, pops the oldest
    ``sent_at`` and raises ``last_acked_send`` to it: done inline by
    ``SessionCore._on_frame``, the path of every reply."""

    __slots__ = ("last_acked_send", "last_heard", "last_sent", "leader", "sent_at", "timeout")

    def __init__(self, timeout: float, now: float) -> None:
        self.timeout = timeout  # the negotiated one, in seconds
        self.last_heard = now  # the newest answer's arrival (a watch event is none)
        self.last_sent = now  # any request written
        self.last_acked_send = now  # send time of the newest request answered
        self.sent_at: collections.deque[float] = collections.deque()  # per reply, FIFO
        self.leader = LeaderProof(now)

    @property
    def proven(self) -> float:
        """The newest send time proven to have reached the session's keeper: on a standalone
        server our newest answered request (read no earlier than we sent it), on an
        ensemble ``_leader``'s proof."""
        leader = self.leader
        return self.last_acked_send if leader.direct else leader.proven

    @property
    def valid_until(self) -> float:
        """The instant before which no server can have expired the session, less our safety
        margin: ``proven`` plus 90 % of the timeout (the module's rule, on every topology)."""
        return self.proven + self.timeout * (1 - LOST_MARGIN)

    def attached(self, timeout: float, sent_at: float, now: float, new_session: bool) -> None:
        """A handshake answered at ``now`` for a ConnectRequest sent at ``sent_at``: the
        server refreshed the session when it read the request, no earlier than we sent it,
        which is the safe base for our own expiry deadline (at the leader: ``_leader``)."""
        self.timeout = timeout
        self.last_heard = now
        self.last_sent = self.last_acked_send = sent_at
        self.leader.attached(sent_at, new_session)

    def tick(self, now: float, connected: bool, suspended: bool) -> tuple[Tick, float]:
        """The decision at ``now`` and the instant of the next tick. ``connected``: a
        connection serves the session; ``suspended``: none does, the session may live."""
        timeout = self.timeout
        valid_until = self.valid_until
        if connected:
            silence_deadline = self.last_heard + timeout * SILENCE
            if now >= silence_deadline:
                return Tick.SILENT, now + timeout
            if now >= valid_until:
                return Tick.UNPROVEN, now + timeout  # however alive the connection looks
            wake = min(silence_deadline, valid_until)
            if self.leader.direct is False:
                return self._tick_leader(now, wake)
            decision = Tick.WAIT
            if now - self.last_sent >= timeout * PING_IDLE:
                self.sent_at.append(now)
                self.last_sent = now
                decision = Tick.PING
            return decision, min(wake, self.last_sent + timeout * PING_IDLE)
        if suspended:
            if now >= valid_until:
                return Tick.LOST, now + timeout
            return Tick.WAIT, valid_until
        return Tick.WAIT, now + timeout

    def _tick_leader(self, now: float, wake: float) -> tuple[Tick, float]:
        """Connected to an ensemble, within the proof and not silent (``wake``: the earlier
        of their deadlines): probes through the leader replace the idle pings; a late probe
        means the server may be cut off."""
        timeout, leader = self.timeout, self.leader
        outstanding = leader.outstanding
        if outstanding is not None and now - outstanding >= timeout * PROBE_WAIT:
            return Tick.UNPROVEN, now + timeout
        due = leader.due(now, timeout)
        if due is not None and now >= due:
            leader.written(now)  # the shell numbers it (its send time recorded) and writes it
            return Tick.PROBE, min(wake, now + timeout * PROBE_WAIT)
        if due is not None:
            wake = min(wake, due)
        if outstanding is not None:
            wake = min(wake, outstanding + timeout * PROBE_WAIT)
        return Tick.WAIT, wake
