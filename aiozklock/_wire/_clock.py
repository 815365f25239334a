"""The session's liveness clock, without I/O: instants in, decisions out.

Three rules, all relative to the negotiated session timeout ``T``:

* **ping**: a connection on which we wrote nothing for ``T/6`` gets a ping, so that its reply
  has a third of ``T`` before silence is declared (as Java's client does), not a sixth;
* **silence**: nothing heard (any frame) for ``T/2`` while connected means the connection is
  dead or the server frozen: SUSPENDED (the shell drops the connection);
* **leader**: in an ensemble, a probe through the leader (``_leader``) is written
  ``PROBE_GAP x T`` after the previous answer; one unanswered for ``PROBE_WAIT x T``, or a
  proof older than ``valid_until``, means the server may be cut off from the leader:
  SUSPENDED (the shell drops the connection and tries another server);
* **loss**: while SUSPENDED, the session is given up (LOST) at ``valid_until``: the leader
  expires a session ``T`` after it last heard from it, and ``_leader`` says since when it
  surely has (on a standalone server: since we sent our newest *answered* request);
  ``LOST_MARGIN`` absorbs our own scheduling delays and clock rates.

``tick(now, ...)`` applies them and says what to do and when to tick next; the shell sleeps
until then (or until the state changes) and performs the decision.
"""

from __future__ import annotations

import collections
import enum

from aiozklock._wire._leader import PROBE_WAIT, LeaderProof

LOST_MARGIN = 0.1  # LOST this fraction of the timeout before the server may expire us
SILENCE = 1 / 2  # SUSPENDED after this fraction of the timeout without a frame
# An idle connection is pinged after this fraction: the reply then has a third of the timeout
# before silence is declared (as in Java's client), not just a sixth (a JVM pause).
PING_IDLE = 1 / 6


class Tick(enum.Enum):
    """What the clock decided at a tick."""

    WAIT = "wait"  # nothing to do before the next deadline
    PING = "ping"  # write a ping now (already counted as sent)
    SILENT = "silent"  # nothing heard for SILENCE x timeout: drop the connection
    PROBE = "probe"  # write a probe through the leader now (already counted as written)
    UNPROVEN = "unproven"  # the leader has not answered a probe in time: drop the connection
    LOST = "lost"  # suspended past valid_until: the session is gone by our clock


class LivenessClock:
    """When we last heard from the server and last wrote to it, and the send time of every
    request still waiting for its reply (replies come in order: the oldest is the next).

    Each reply (not a watch event) pops the oldest ``sent_at`` and raises ``last_acked_send``
    to it: done inline by ``SessionCore._on_frame``, the path of every reply."""

    __slots__ = ("last_acked_send", "last_heard", "last_sent", "leader", "sent_at", "timeout")

    def __init__(self, timeout: float, now: float) -> None:
        self.timeout = timeout  # the negotiated one, in seconds
        self.last_heard = now  # any frame from the server
        self.last_sent = now  # any request written
        self.last_acked_send = now  # send time of the newest request answered
        self.sent_at: collections.deque[float] = collections.deque()  # per reply, FIFO
        self.leader = LeaderProof(now)

    @property
    def valid_until(self) -> float:
        """The instant before which no leader can have expired the session (less our safety
        margin): ``_leader``'s proof, or on a standalone server our newest answered request,
        which the server heard no earlier than we sent it."""
        leader = self.leader
        base = self.last_acked_send if leader.direct else leader.proven
        return base + self.timeout * (1 - LOST_MARGIN)

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
        if connected:
            silence_deadline = self.last_heard + timeout * SILENCE
            if now >= silence_deadline:
                return Tick.SILENT, now + timeout
            if self.leader.direct is False:
                return self._tick_leader(now, silence_deadline)
            decision = Tick.WAIT
            if now - self.last_sent >= timeout * PING_IDLE:
                self.sent_at.append(now)
                self.last_sent = now
                decision = Tick.PING
            return decision, min(silence_deadline, self.last_sent + timeout * PING_IDLE)
        if suspended:
            lost_at = self.valid_until
            if now >= lost_at:
                return Tick.LOST, now + timeout
            return Tick.WAIT, lost_at
        return Tick.WAIT, now + timeout

    def _tick_leader(self, now: float, silence_deadline: float) -> tuple[Tick, float]:
        """Connected to an ensemble: probes through the leader replace
        the idle pings; a late probe or an old proof means the server may be cut off."""
        timeout, leader = self.timeout, self.leader
        valid_until = self.valid_until
        outstanding = leader.outstanding
        if now >= valid_until or (
            outstanding is not None and now - outstanding >= timeout * PROBE_WAIT
        ):
            return Tick.UNPROVEN, now + timeout
        due = leader.due(now, timeout)
        if due is not None and now >= due:
            leader.written(now)  # the shell numbers it (its send time recorded) and writes it
            return Tick.PROBE, min(silence_deadline, valid_until, now + timeout * PROBE_WAIT)
        wake = min(silence_deadline, valid_until)
        if due is not None:
            wake = min(wake, due)
        if outstanding is not None:
            wake = min(wake, outstanding + timeout * PROBE_WAIT)
        return Tick.WAIT, wake
