"""Evidence that the session lives at the **leader**, without I/O: instants in, decisions out.

In an ensemble the leader expires sessions. The server a client talks to answers its pings
and reads by itself, and tells the leader of the session's activity only in its replies to
the leader's pings (every ``tickTime/2``); cut off from the leader, it goes on answering for
``syncLimit x tickTime`` while the leader expires the session. So an answered request proves
nothing there (docs/safety.md). A **probe** does: a multi holding one ``check`` of ``/``, a
write the leader commits with a quorum after checking our session.

ZooKeeper's facts (3.5-3.9, read in 3.8.0): the server touches a session when a request
arrives; its touch table goes upstream only in its reply to a ping
(``Learner.ping``); the leader pings every learner, followers and observers alike, every
``tickTime/2`` (``Leader.lead``'s loop, ``LearnerHandler.ping``), in the queue that carries
its commits, and reads each reply's touches before what the learner sent next
(``LearnerHandler.run``, ``Leader.PING``); a request forwarded by a learner touches nothing
at the leader (``LeaderZooKeeperServer.submitLearnerRequest``). From 3.6 an observer may be
served by a follower's **ObserverMaster**: it pings its observers every ``tickTime/2`` on
its own timer (``ObserverMaster.start``), puts their touches in the follower's own table
(``ObserverMaster.touch``), which reaches the leader at the leader's next ping to that
follower: two hops. Nothing a client can ask tells whether an observer has one, nor which
server of the connect string is an observer without an extra connection: where
``/zookeeper/config`` lists an observer, every connection is proven over two hops.

The proof. ``B``, ``Y`` (and ``Y1``, ``Z``) are committed writes on one connection: probes,
or the session's own writes (a create, a delete, a guarded setData); ``A`` is any request
answered on it (a ping, a read, a write): the server touched the session when ``A`` arrived,
before it answered (``ZooKeeperServer.submitRequestNow`` touches for every request, pings
included). When ``B`` is committed, let ``Y`` be the newest write answered before ``B`` was
written, and ``A`` a request answered at least ``touch_gap`` before ``Y`` was written. Its
upstream (the leader) queued a ping between the touch and its commit of ``Y`` (those two
instants are at least ``touch_gap`` apart, the span from ``A``'s answer to ``Y``'s send, and
the leader pings at least that often, see ``touch_gap``); the server read that ping before
``Y``'s commit and wrote its reply, carrying the touch, before it forwarded ``B`` on the same
stream (a server that loses its leader drops every client connection: one connection sees
one leader); ``B``'s commit shows that this leader read the touch, still led a quorum and
still had our session. So no leader can expire the session earlier than ``timeout`` after
``A`` was sent: ``A``'s send time is **proven**. Over two hops the chain has two links:
``A`` to ``Y1`` (a ``touch_gap`` apart) brings the touch to the ObserverMaster before it
reads any write sent after ``Y1``'s answer; the first of those, ``Z``, and a ``Y`` written
``touch_gap`` after ``Z``'s answer bring it to the leader (its ping to the follower was
queued after ``Z``'s commit, which followed the touch), before ``B``, as above
(``chain_start``).

A handshake that re-attached the session made the leader revalidate (touch) it (an
ObserverMaster forwards the revalidation to the leader: ``ObserverMaster.revalidateSession``):
its send time is proven once the first probe on that connection is committed. A new session
was created by a committed transaction: its handshake's send time is proven at once. A
standalone server is its own leader (``/zookeeper/config`` is empty there): every answered
request proves its send time, and nothing is probed.

**Proofs only where a guarantee needs them.** A probe is a quorum transaction, logged and
replicated; only a holding's safety depends on the proof. While no holding needs it
(``demand`` 0: idle sessions, queued waiters) nothing is probed and the session pings as
ZooKeeper's own clients do, at no transaction's cost. Each transition keeps the argument:

* idle -> holding: the argument needs no probes in a row, only its events on one
  connection, and ``A`` may be the idle session's pings. A body starts only once
  ``valid_until`` is ``FRESH x timeout`` ahead (``Session.wait_proven``). A session that
  was idle has its grant's create as ``Y`` and writes one probe at once (``B``, then
  ``URGENT_GAP`` apart while it lacks a proof): one round trip through the leader before
  the body starts (over two hops, the chain needs ``Z`` and a second ``Y`` too: about two
  touch gaps more). A session that wrote recently (a lock cycled in a loop) starts at
  once: its create is ``B``.
* holding -> idle: nothing is claimed any more; probes stop, the proof just ages. The next
  grant is the transition above.
* reconnect while holding: ``attached`` clears the connection's events; the re-attach is
  proven by the first commit on the new connection, and probes go on while the demand
  lasts.
"""

from __future__ import annotations

import collections
import itertools
import math
from collections.abc import Sequence

from aiozklock._wire._multi import MultiCheck, MultiResult, multi_op
from aiozklock._wire._ops import get_data_op
from aiozklock._wire._records import Op, Stat

# A probe is written at most this fraction of the timeout after the previous answer.
PROBE_GAP = 1 / 8
# ...and at least this fraction (no more than 16 probes a timeout): else the proof cannot
# keep up with the timeout, and the client refuses it (``probe_gap`` is None).
MIN_PROBE_GAP = 1 / 16
# The tick unknown: the leader pings every tickTime/2, at most this fraction of the timeout
# where the timeout is at least two ticks (ZooKeeper's default minSessionTimeout).
TOUCH_GAP = 1 / 4
# A probe unanswered this long: the server may be cut off from the leader; try another.
PROBE_WAIT = 1 / 6
CONFIG_PATH = "/zookeeper/config"
# With tickTime known (``conf``), up to this much slack on the ping interval where the
# timeout leaves room for it.
TICK_SLACK = 1.5
# The proof may age this fraction of the timeout before the next answer renews it: it is
# valid for 90 %, and the rest absorbs the round trips of the probes of one chain.
PROOF_BUDGET = 3 / 4
# A body starts only with at least this fraction of the timeout left before valid_until
# (less than the 0.9 - PROOF_BUDGET a held proof keeps: steady probing never falls under it).
FRESH = 1 / 10
# While a holding waits for its first proof, probes go out at once, this far apart at least.
URGENT_GAP = 1 / 32
# Answered requests kept as candidates for A: the newest always, older ones one per this
# fraction of the timeout, enough to look back over more than a timeout.
TOUCH_SPACING = 1 / 32
_TOUCHES = 40


def _same(path: str) -> str:
    return path


def probe_op() -> Op[MultiResult]:
    """The probe: ``multi([check("/", -1)])``, committed by the leader after it checked our
    session (its outcome is the proof, whatever the check says of ``/``). It changes
    nothing (``Op.spares_parents``): a probe between a re-acquire's two creates leaves its
    proof standing."""
    op = multi_op((MultiCheck("/", -1),), _same)
    op.spares_parents = True
    return op


def config_op() -> Op[tuple[bytes, Stat]]:
    """The read of ``/zookeeper/config``: empty on a standalone server."""
    return get_data_op(CONFIG_PATH)


def standalone(data: bytes) -> bool:
    """Whether ``/zookeeper/config`` holding ``data`` is a standalone server's (no member
    listed). A server without the node (3.4) is taken for an ensemble."""
    return not data.strip()


def relay_hops(data: bytes | None) -> int:
    """The hops a touch may take to the leader, from ``/zookeeper/config``'s ``data``: 2
    where it lists an observer (which may be served by an ObserverMaster), else 1; 2 where
    it could not be read (None: the safe side)."""
    if data is None:
        return 2
    for line in data.decode("utf-8", "replace").splitlines():
        if line.startswith("server.") and line.partition(";")[0].endswith(":observer"):
            return 2
    return 1


def _answered_by(writes: Sequence[tuple[float, float]], end: int, instant: float) -> int | None:
    """The index of the newest of ``writes[:end]`` answered by ``instant``, or None."""
    for index in range(end - 1, -1, -1):
        if writes[index][1] <= instant:
            return index
    return None


def chain_start(
    writes: Sequence[tuple[float, float]],
    gap: float,
    hops: int,
    b_sent: float = math.inf,
    touches: Sequence[tuple[float, float]] = (),
) -> float | None:
    """The send time that ``B`` (a write sent at ``b_sent``, committed now) proves, given
    this connection's committed ``writes`` and answered ``touches`` (``(sent, answered)``,
    oldest first), or None. ``Y`` is the newest write answered before ``B`` was written;
    each hop needs a request answered ``gap`` before its ``Y`` was written: a write ``Z``
    for a hop below the last (the hop before it ends at the write answered before ``Z`` was
    written), any request (``touches``, or else ``writes``) for the last (module docstring)."""
    y = _answered_by(writes, len(writes), b_sent)
    for hop in range(hops):
        if y is None:
            return None
        limit = writes[y][0] - gap
        if hop == hops - 1:
            for a_sent, a_answered in reversed(touches or list(itertools.islice(writes, y))):
                if a_answered <= limit:
                    return a_sent
            return None
        z = _answered_by(writes, y, limit)
        if z is None:
            return None
        y = _answered_by(writes, z, writes[z][0])
    return None


class LeaderProof:
    """What the leader is proven to have heard of the session, and the probe in flight.

    ``direct``: None until known (``Session.learn_server``, before ``connect()`` returns),
    True on a standalone server (answered requests prove), False on an ensemble (probed).
    ``proven``: the newest send time proven to have touched the session at a leader that
    led a quorum. ``answers``: this connection's committed writes, probes included
    (``(sent, answered)``, of the last timeout: an older one proves nothing ``valid_until``
    could use); ``touches``: its answered requests of any kind, thinned to one per
    ``TOUCH_SPACING x timeout`` (the newest always). ``tick``: the ensemble's tickTime (s),
    where ``conf`` said it; ``hops``: 1, or 2 where a touch may pass an ObserverMaster
    (``relay_hops``). ``demand``: how many holdings need the proof now (none: nothing is
    probed); ``established``: since the demand last rose from none, the proof was fresh
    once (``LivenessClock.fresh``): a body may be running, and ``valid_until`` binds it."""

    __slots__ = (
        "answers",
        "demand",
        "direct",
        "established",
        "hops",
        "outstanding",
        "pending",
        "probed_at",
        "proven",
        "tick",
        "touches",
    )

    def __init__(self, now: float) -> None:
        self.direct: bool | None = None
        self.proven = now
        self.pending: float | None = None  # a re-attach's send time, proven by the next commit
        self.answers: collections.deque[tuple[float, float]] = collections.deque()
        self.touches: collections.deque[tuple[float, float]] = collections.deque(maxlen=_TOUCHES)
        self.outstanding: float | None = None  # the send time of the probe in flight
        self.probed_at = -math.inf  # when the last probe was written
        self.tick: float | None = None
        self.hops = 1
        self.demand = 0
        self.established = False

    def attached(self, sent_at: float, new_session: bool) -> None:
        """A handshake sent at ``sent_at`` attached the session on a new connection."""
        self.answers.clear()
        self.touches.clear()
        self.outstanding = None
        if new_session:
            self.proven = sent_at
            self.pending = None
        else:
            self.pending = sent_at

    def demanded(self, count: int, now: float) -> None:
        """``count`` holdings need the proof from ``now`` on (0: none)."""
        if count and not self.demand:
            self.established = False
        self.demand = count

    def touch_gap(self, timeout: float) -> float:
        """The longest a hop's upstream may go without pinging: the tick unknown, a quarter
        of the timeout (``TOUCH_GAP``: the assumption the connect WARNING states); known,
        the ping interval ``tickTime/2`` whatever the timeout, with up to ``TICK_SLACK``
        where a quarter of the timeout exceeds it."""
        quarter, tick = timeout * TOUCH_GAP, self.tick
        if tick is None:
            return quarter
        return min(max(quarter, tick / 2), tick / 2 * TICK_SLACK)

    def probe_gap(self, timeout: float) -> float | None:
        """How long after an answer the next probe is written: ``PROBE_GAP`` of the timeout,
        or less where the chain of ``hops`` links of ``d`` probes each (``d`` gaps span the
        touch gap) would age past ``PROOF_BUDGET`` before the next answer; None where only
        a gap under ``MIN_PROBE_GAP`` would do (no proof keeps up: fail closed)."""
        touch, hops, budget = self.touch_gap(timeout), self.hops, timeout * PROOF_BUDGET
        for d in range(1, int(1 / MIN_PROBE_GAP) + 1):
            # The probe answered when a chain starting at A completes is h x (d + 1) after
            # A; one more interval passes before the answer after it.
            gap = min(timeout * PROBE_GAP, budget / (hops * (d + 1) + 1))
            if gap < timeout * MIN_PROBE_GAP * (1 - 1e-9):
                return None
            if gap * d >= touch * (1 - 1e-9):  # d gaps span it (less float rounding)
                return gap
        return None

    def due(self, now: float, timeout: float, urgent: bool = False) -> float | None:
        """When the next probe is to be written: None while one is in flight, or while no
        holding needs the proof. ``urgent``: a holding waits for a fresh proof (a grant
        after idleness): at once, but no closer than ``URGENT_GAP`` apart."""
        if self.outstanding is not None or not self.demand:
            return None
        if urgent:
            return max(now, self.probed_at + timeout * URGENT_GAP)
        answers = self.answers
        if not answers:
            return now
        gap = self.probe_gap(timeout)  # None: refused at connect; a shorter timeout since
        return answers[-1][1] + (timeout * MIN_PROBE_GAP if gap is None else gap)

    def written(self, now: float) -> None:
        """A probe was written at ``now``."""
        self.outstanding = self.probed_at = now

    def touched(self, sent: float, now: float, timeout: float) -> None:
        """A request sent at ``sent`` was answered at ``now`` (any reply: the server touched
        the session when it arrived). Kept thinned: the newest always, older ones spaced."""
        touches = self.touches
        if len(touches) >= 2 and now - touches[-2][1] < timeout * TOUCH_SPACING:
            touches[-1] = (sent, now)
        else:
            touches.append((sent, now))

    def committed(self, sent: float, now: float, timeout: float) -> None:
        """A write sent at ``sent`` was committed (answered without error) at ``now``: it
        is ``B`` of the module's proof, and a later one's ``Y`` or ``Z``."""
        if self.pending is not None:
            self.proven = max(self.proven, self.pending)
            self.pending = None
        answers = self.answers
        if answers:
            gap = self.touch_gap(timeout)
            start = chain_start(answers, gap, self.hops, sent, self.touches)
            if start is not None and start > self.proven:
                self.proven = start
        answers.append((sent, now))
        while answers[0][1] < now - timeout:
            answers.popleft()

    def answered(self, sent: float, now: float, proof: bool, timeout: float) -> None:
        """The probe written at ``sent`` was answered at ``now``: committed with our session
        alive (``proof``: already counted by ``committed``, as every write's commit is),
        or not."""
        if self.outstanding == sent:
            self.outstanding = None
