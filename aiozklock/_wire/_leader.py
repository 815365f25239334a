"""Evidence that the session lives at the **leader**, without I/O: instants in, decisions out.

In an ensemble the leader expires sessions. The server a client talks to answers its pings
and reads by itself, and tells the leader of the session's activity only in its replies to
the leader's pings (every ``tickTime/2``); cut off from the leader, it goes on answering for
``syncLimit x tickTime`` while the leader expires the session. So an answered request proves
nothing there (docs/safety.md). A **probe** does: a multi holding one ``check`` of ``/``, a
write the leader commits with a quorum after checking our session.

The proof. ``B`` and ``Y`` are committed writes on one connection (a probe, or any of our
own writes: a create, a delete, a guarded setData), ``A`` any request answered on it (a
ping, a read, a write). When ``B`` is committed, let ``Y`` be the newest write answered
before ``B`` was written, and ``A`` a request answered at least ``TOUCH_GAP x timeout``
before ``Y`` was written. The server touched the session when ``A`` arrived (it touches a
session for every request, pings included: ``ZooKeeperServer.submitRequestNow``); the leader
pinged it at least once between answering ``A`` and answering ``Y`` (it pings every
``tickTime/2``, at most ``TOUCH_GAP x timeout`` when the timeout is at least two ticks,
ZooKeeper's default ``minSessionTimeout``; where the ensemble's ``tickTime`` is known,
``TICK_SLACK x tickTime/2`` if that is shorter); the ping's reply carried the touch and was
written before ``B`` was forwarded on the same stream (a server that loses its leader drops
every client connection, so one connection sees one leader); ``B``'s commit shows that this
leader still led a quorum and still had our session. So no leader can expire the session
earlier than ``timeout`` after ``A`` was sent: ``A``'s send time is **proven**.

A handshake that re-attached the session made the leader revalidate (touch) it: its send
time is proven once the first write on that connection is committed. A new session was
created by a committed transaction: its handshake's send time is proven at once. A
standalone server is its own leader (``/zookeeper/config`` is empty there): every answered
request proves its send time, and nothing is probed.

**Proofs only where a guarantee needs them.** A proof costs a quorum transaction; only a
holding's safety depends on it. While no holding needs it (``demand`` 0: idle sessions,
queued waiters), nothing is probed and the session pings as ZooKeeper's own clients do: its
cost is no transaction at all. Each transition keeps the argument sound:

* idle -> holding: the argument above never needed probes in a row, only three events on
  one connection, and ``A`` may be any answered request (the idle session's pings). The
  grant's own create serves as ``Y`` (or ``B``, after a recent write). A body starts only
  once ``valid_until`` is at least ``FRESH x timeout`` ahead (``Session.wait_proven``): a
  session that was idle writes one probe at once after its create (``B``), one round trip
  through the leader before the body starts; a session that wrote recently (a lock cycled
  in a loop) starts at once, its create being ``B``.
* holding -> idle: nothing is claimed any more; probes stop, and the proof just ages.
* reconnect while holding: ``attached`` clears the connection's candidates; the re-attach
  is proven by the first commit, as above, and probes go on while the demand lasts.
"""

from __future__ import annotations

import collections
import math

from aiozklock._wire._multi import MultiCheck, MultiResult, multi_op
from aiozklock._wire._ops import get_data_op
from aiozklock._wire._records import Op, Stat

# A probe is written this fraction of the timeout after the previous answer.
PROBE_GAP = 1 / 8
# The leader pings a follower every tickTime/2: at most this fraction of the timeout.
TOUCH_GAP = 1 / 4
# A probe unanswered this long: the server may be cut off from the leader; try another.
PROBE_WAIT = 1 / 6
CONFIG_PATH = "/zookeeper/config"
# With tickTime known (``conf``), the leader's pings are tickTime/2 apart: this much slack.
TICK_SLACK = 1.5
# While a holding waits for its first proof, probes go out at once, this far apart at least.
URGENT_GAP = 1 / 32
# A body starts only with at least this fraction of the timeout left before valid_until.
FRESH = 1 / 6
# Answered requests kept as candidates for A: one per this fraction of the timeout (the
# newest always), enough to look back over a whole timeout.
TOUCH_SPACING = 1 / 32
_TOUCHES = 40
_WRITES = 8  # committed writes kept (a pipeline of writes: Y is among the last few)


def _same(path: str) -> str:
    return path


def probe_op() -> Op[MultiResult]:
    """The probe: ``multi([check("/", -1)])``, committed by the leader after it checked our
    session (its outcome is the proof, whatever the check says of ``/``)."""
    return multi_op((MultiCheck("/", -1),), _same)


def config_op() -> Op[tuple[bytes, Stat]]:
    """The read of ``/zookeeper/config``: empty on a standalone server."""
    return get_data_op(CONFIG_PATH)


def standalone(data: bytes) -> bool:
    """Whether ``/zookeeper/config`` holding ``data`` is a standalone server's (no member
    listed). A server without the node (3.4) is taken for an ensemble."""
    return not data.strip()


class LeaderProof:
    """What the leader is proven to have heard of the session, and the probe in flight.

    ``direct``: None until known (``Session.learn_server``, before ``connect()`` returns),
    True on a standalone server (answered requests prove), False on an ensemble (probed).
    ``proven``: the newest send time proven to have touched the session at a leader that
    led a quorum. ``touches``: this connection's answered requests of any kind (candidates
    for ``A``), thinned to one per ``TOUCH_SPACING x timeout``; ``writes``: its committed
    writes, probes included (``Y`` and ``B``). ``demand``: how many holdings need the proof
    now (none: no probe is written, the session pings as on a standalone server);
    ``demanded_at``: when the demand last rose from none."""

    __slots__ = (
        "demand",
        "demanded_at",
        "direct",
        "outstanding",
        "pending",
        "probed_at",
        "proven",
        "tick",
        "touches",
        "writes",
    )

    def __init__(self, now: float) -> None:
        self.direct: bool | None = None
        self.proven = now
        self.pending: float | None = None  # a re-attach's send time, proven by the next commit
        self.touches: collections.deque[tuple[float, float]] = collections.deque(maxlen=_TOUCHES)
        self.writes: collections.deque[tuple[float, float]] = collections.deque(maxlen=_WRITES)
        self.outstanding: float | None = None  # the send time of the probe in flight
        self.probed_at = -math.inf  # when the last probe was written
        self.tick: float | None = None  # the ensemble's tickTime (s), where ``conf`` said it
        self.demand = 0
        self.demanded_at = now

    def attached(self, sent_at: float, new_session: bool) -> None:
        """A handshake sent at ``sent_at`` attached the session on a new connection."""
        self.touches.clear()
        self.writes.clear()
        self.outstanding = None
        if new_session:
            self.proven = sent_at
            self.pending = None
        else:
            self.pending = sent_at

    def demanded(self, count: int, now: float) -> None:
        """``count`` holdings need the proof from ``now`` on (0: none)."""
        if count and not self.demand:
            self.demanded_at = now
        self.demand = count

    def touch_gap(self, timeout: float) -> float:
        """The longest the leader may go without pinging the server: a quarter of the
        timeout, or less where the ensemble's ``tickTime`` is known."""
        gap = timeout * TOUCH_GAP
        return gap if self.tick is None else min(gap, self.tick / 2 * TICK_SLACK)

    def due(self, now: float, timeout: float, urgent: bool) -> float | None:
        """When the next probe is to be written (None while one is in flight, or while no
        holding needs the proof). ``urgent``: a holding waits for a fresh proof (a grant
        after the session was idle): at once, but no closer than ``URGENT_GAP`` apart."""
        if self.outstanding is not None or not self.demand:
            return None
        if urgent:
            return max(now, self.probed_at + timeout * URGENT_GAP)
        writes = self.writes
        return writes[-1][1] + timeout * PROBE_GAP if writes else now

    def written(self, now: float) -> None:
        """A probe was written at ``now``."""
        self.outstanding = self.probed_at = now

    def touched(self, sent: float, now: float, timeout: float) -> None:
        """A request sent at ``sent`` was answered at ``now``: the server touched the session
        when it arrived (``ZooKeeperServer.submitRequestNow`` touches for every request,
        pings included). Kept thinned: the newest always, older ones spaced."""
        touches = self.touches
        if len(touches) >= 2 and now - touches[-2][1] < timeout * TOUCH_SPACING:
            touches[-1] = (sent, now)
        else:
            touches.append((sent, now))

    def committed(self, sent: float, now: float, timeout: float) -> None:
        """A write sent at ``sent`` was committed (answered without error) at ``now``: it is
        ``B``; ``Y`` is the newest write answered before it was written, ``A`` the newest
        request answered a touch gap before ``Y`` was written (the module's proof)."""
        if self.pending is not None:
            self.proven = max(self.proven, self.pending)
            self.pending = None
        y_sent = None
        for w_sent, w_answered in reversed(self.writes):
            if w_answered <= sent:
                y_sent = w_sent
                break
        if y_sent is not None:
            limit = y_sent - self.touch_gap(timeout)
            for a_sent, a_answered in reversed(self.touches):
                if a_answered <= limit:
                    if a_sent > self.proven:
                        self.proven = a_sent
                    break
        self.writes.append((sent, now))

    def answered(self, sent: float, now: float, proof: bool, timeout: float) -> None:
        """The probe written at ``sent`` was answered at ``now``: committed with our session
        alive (``proof``, already counted by ``committed``), or not (nothing proven)."""
        if self.outstanding == sent:
            self.outstanding = None
