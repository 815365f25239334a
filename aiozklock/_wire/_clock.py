"""The session's liveness clock, without I/O: instants in, decisions out.

**The rule, on every topology: only an answer proves.** The session is alive, as far as we
may claim, as of the send time of a request that the server answered (on an ensemble, that
the leader is proven to have heard of: ``_leader``); ``valid_until`` is that instant plus
``(1 - LOST_MARGIN) x T`` (``T``: the negotiated session timeout). Watch events and other
frames the server sends on its own extend nothing: a path that lost one direction (our
requests vanish, the server's events still arrive) must not look alive.

What follows from it, relative to ``T``:

* **ping**: a connection on which we wrote nothing for ``T/6`` gets a ping, so that its reply
  has a third of ``T`` before silence is declared (as Java's client does), not a sixth
  (while probes run, they take the pings' place);
* **silence**: no answer for ``T/2`` while connected means the connection is dead, one-way or
  the server frozen: SUSPENDED (the shell drops the connection);
* **proof**: while a holding needs it (``LeaderProof.demand``), on an ensemble, probes through
  the leader (``_leader``) are written at most ``PROBE_GAP x T`` after the answer to the
  newest committed write (less where the chain needs it: ``LeaderProof.probe_gap``; a grant
  that finds the proof stale gets one at once); one unanswered for
  ``PROBE_WAIT x T`` means the server may be cut off from the leader: the connection is
  dropped and another server tried. Idle and queued sessions only ping;
* **horizon**: a holding never outlives ``valid_until``: connected, the connection is then
  dropped (``UNPROVEN``); suspended, the holdings are given up (``HORIZON``: the shell tells
  the loss monitor, which cancels their bodies and leaves their nodes to the janitor);
* **loss**: the session itself is kept for as long as ZooKeeper may keep it: a new leader
  gives every session a fresh timeout when it takes office, and a server restarted with its
  data revives the sessions it had, however long the outage lasted, so no clock of ours can
  know that a session expired. It is LOST only when a server says so (at the reconnect), as
  ZooKeeper's own clients do; while none answers it stays SUSPENDED, its holdings given up.

``LivenessClock.tick(now, ...)`` applies them: it returns a decision (a ``Tick``) and the
instant of the next decision; the shell sleeps until then (or until the state changes) and
performs the decision. (``tick`` and ``Tick`` here name this step of our clock; in prose,
"tick" means ZooKeeper's ``tickTime``, as in ``_leader`` and ``_server_conf``.)
"""

from __future__ import annotations

import collections
import enum

from aiozklock._wire._leader import FRESH, PROBE_WAIT, LeaderProof

LOST_MARGIN = 0.1  # valid_until is this fraction of the timeout before the server may expire us
SILENCE = 1 / 2  # SUSPENDED after this fraction of the timeout without an answer
# An idle connection is pinged after this fraction: the reply then has a third of the timeout
# before silence is declared (as in Java's client), not just a sixth (a JVM pause).
PING_IDLE = 1 / 6


class Tick(enum.Enum):
    """What the liveness clock decided (``LivenessClock.tick``)."""

    WAIT = "wait"  # nothing to do before the next deadline
    PING = "ping"  # write a ping now (already counted as sent)
    SILENT = "silent"  # no answer for SILENCE x timeout: drop the connection
    PROBE = "probe"  # write a probe through the leader now (already counted as written)
    UNPROVEN = "unproven"  # a holding's proof ran out, or a probe went unanswered: drop it
    HORIZON = "horizon"  # suspended past valid_until: the holdings are given up


class LivenessClock:
    """When the server last answered and we last wrote to it, and the send time of every
    request still waiting for its reply (replies come in order: the oldest is the next).

    Each reply (not a watch event) pops the oldest ``sent_at``, raises ``last_acked_send``
    to it and sets ``last_heard``: done inline by ``SessionCore._on_frame``, the path of
    every reply."""

    __slots__ = (
        "horizon_passed",
        "last_acked_send",
        "last_heard",
        "last_sent",
        "leader",
        "sent_at",
        "timeout",
    )

    def __init__(self, timeout: float, now: float) -> None:
        self.timeout = timeout  # the negotiated one, in seconds
        self.last_heard = now  # the newest answer (a reply or a handshake), not any frame
        self.last_sent = now  # any request written
        self.last_acked_send = now  # send time of the newest request answered
        self.sent_at: collections.deque[float] = collections.deque()  # per reply, FIFO
        self.leader = LeaderProof(now)
        self.horizon_passed = False  # HORIZON was decided since the last attach

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

    def fresh(self, now: float) -> bool:
        """Whether a body may start now: ``valid_until`` is ``FRESH x timeout`` ahead. Once
        it is while a holding needs the proof, the proof is established (``_tick_connected``
        then holds the connection to ``valid_until``)."""
        fresh = self.valid_until - now >= self.timeout * FRESH
        if fresh and self.leader.demand:
            self.leader.established = True
        return fresh

    def due_with_demand(self, now: float) -> float:
        """The earliest instant from which ``tick`` may decide otherwise for a demand that
        has just risen from none (``LeaderProof.demanded``) than it planned without one
        (pure): ``valid_until`` (the holdings' bound, connected or not) and, on an
        ensemble, the next probe, or ``now`` with one in flight. A tick planned after
        ``now`` and no later than this decides the same as one run now (the demand drops
        nothing else: silence and pings do not depend on it)."""
        bound = self.valid_until
        leader = self.leader
        if leader.direct is False:
            if leader.outstanding is not None:
                return now
            due = leader.due(now, self.timeout, urgent=bound - now < self.timeout * FRESH)
            if due is not None and due < bound:
                return due
        return bound

    def attached(self, timeout: float, sent_at: float, now: float, new_session: bool) -> None:
        """A handshake answered at ``now`` for a ConnectRequest sent at ``sent_at``: the
        server refreshed the session when it read the request, no earlier than we sent it,
        so ``sent_at`` is the safe base of ``valid_until`` on a standalone server; on an
        ensemble ``_leader`` proves it (a new session at once, a re-attach with the first
        commit on the connection)."""
        self.timeout = timeout
        self.last_heard = now
        self.last_sent = self.last_acked_send = sent_at
        self.horizon_passed = False
        self.leader.attached(sent_at, new_session)

    def tick(self, now: float, connected: bool, suspended: bool) -> tuple[Tick, float]:
        """The decision at ``now`` and the instant of the next one. ``connected``: a
        connection serves the session; ``suspended``: none does, the session may live."""
        if connected:
            return self._tick_connected(now)
        if suspended:
            return self._tick_suspended(now)
        return Tick.WAIT, now + self.timeout

    def _tick_connected(self, now: float) -> tuple[Tick, float]:
        timeout, leader = self.timeout, self.leader
        silence_deadline = self.last_heard + timeout * SILENCE
        if now >= silence_deadline:
            return Tick.SILENT, now + timeout
        wake = silence_deadline
        if leader.demand:
            # The proof's own deadline binds once it was established for the holdings (a
            # body may run): a grant after idleness waits (Session.wait_proven) for a fresh
            # proof instead, and meanwhile only a late probe drops the connection.
            valid_until = self.valid_until
            if self.fresh(now) or leader.established:
                if now >= valid_until:
                    return Tick.UNPROVEN, now + timeout
                wake = min(wake, valid_until)
            if leader.direct is False:
                return self._tick_leader(now, wake)
        decision = Tick.WAIT
        if now - self.last_sent >= timeout * PING_IDLE:
            self.sent_at.append(now)
            self.last_sent = now
            decision = Tick.PING
        return decision, min(wake, self.last_sent + timeout * PING_IDLE)

    def _tick_leader(self, now: float, wake: float) -> tuple[Tick, float]:
        """Connected to an ensemble while a holding needs the proof: probes through the
        leader replace the idle pings; a late probe means the server may be cut off."""
        timeout, leader = self.timeout, self.leader
        outstanding = leader.outstanding
        if outstanding is not None:
            if now - outstanding >= timeout * PROBE_WAIT:
                return Tick.UNPROVEN, now + timeout
            return Tick.WAIT, min(wake, outstanding + timeout * PROBE_WAIT)
        due = leader.due(now, timeout, urgent=not self.fresh(now))
        if due is not None and now >= due:
            leader.written(now)  # the shell numbers it (its send time recorded) and writes it
            return Tick.PROBE, min(wake, now + timeout * PROBE_WAIT)
        return Tick.WAIT, wake if due is None else min(wake, due)

    def _tick_suspended(self, now: float) -> tuple[Tick, float]:
        if self.leader.demand and not self.horizon_passed:
            horizon = self.valid_until
            if now >= horizon:
                self.horizon_passed = True
                return Tick.HORIZON, now + self.timeout
            return Tick.WAIT, horizon
        return Tick.WAIT, now + self.timeout


__all__ = ("LOST_MARGIN", "PING_IDLE", "SILENCE", "LivenessClock", "Tick")
