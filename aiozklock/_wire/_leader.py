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

The proof. Probes are written one at a time, each ``probe_gap`` after the previous answer.
When probe ``B`` is answered, let ``Y`` be the probe answered before ``B`` was written, and
``A`` a probe answered at least ``touch_gap`` before ``Y`` was written. The server touched
the session when ``A`` arrived; its upstream (the leader) queued a ping between its commits
of ``A`` and ``Y`` (the queue times of those commits bracket ``A``'s answer and ``Y``'s
send, so they are at least ``touch_gap`` apart, and the leader pings at least that often,
see ``touch_gap``); the server read that ping before ``Y``'s commit and wrote its reply,
carrying the touch, before it forwarded ``B`` on the same stream; ``B``'s commit shows that
this leader read the touch, still led a quorum and still had our session. So no leader can
expire the session earlier than ``timeout`` after ``A`` was sent: ``A``'s send time is
**proven**. Over two hops the chain has two links: ``A`` to ``Y1`` (a ``touch_gap`` apart)
brings the touch to the ObserverMaster before it reads any probe written after ``Y1``'s
answer; the first of those, ``Z``, and a ``Y`` written ``touch_gap`` after ``Z``'s answer
bring it to the leader (its ping to the follower was queued after ``Z``'s commit, which
followed the touch), before ``B``, as above (``chain_start``).

A handshake that re-attached the session made the leader revalidate (touch) it (an
ObserverMaster forwards the revalidation to the leader: ``ObserverMaster.revalidateSession``):
its send time is proven once the first probe on that connection is committed. A new session
was created by a committed transaction: its handshake's send time is proven at once. A
standalone server is its own leader (``/zookeeper/config`` is empty there): every answered
request proves its send time, and nothing is probed.
"""

from __future__ import annotations

import collections
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


def chain_start(answers: Sequence[tuple[float, float]], gap: float, hops: int) -> float | None:
    """The send time that a probe answered now proves, given ``answers`` (``(sent,
    answered)``, oldest first, each written after the previous one's answer: the last
    is ``Y``), or None. Each hop needs a probe answered ``gap`` before the hop's ``Y``
    was written; the hop before it ends at the probe answered before that one was
    written (module docstring)."""
    y = len(answers) - 1
    for hop in range(hops):
        y_sent = answers[y][0]
        z = y - 1
        while z >= 0 and y_sent - answers[z][1] < gap:
            z -= 1
        if z < 0:
            return None
        if hop == hops - 1:
            return answers[z][0]
        y = z - 1
        if y < 0:
            return None
    return None


class LeaderProof:
    """What the leader is proven to have heard of the session, and the probe in flight.

    ``direct``: None until known (``Session.learn_server``, before ``connect()`` returns),
    True on a standalone server (answered requests prove), False on an ensemble (probed).
    ``proven``: the newest send time proven to have touched the session at a leader that
    led a quorum. ``answers``: this connection's answered probes, ``(sent, answered)``, of
    the last timeout (an older one proves nothing ``valid_until`` could use). ``tick``:
    the ensemble's tickTime (s), where ``conf`` said it; ``hops``: 1, or 2 where a touch
    may pass an ObserverMaster (``relay_hops``)."""

    __slots__ = ("answers", "direct", "hops", "outstanding", "pending", "proven", "tick")

    def __init__(self, now: float) -> None:
        self.direct: bool | None = None
        self.proven = now
        self.pending: float | None = None  # a re-attach's send time, proven by the next probe
        self.answers: collections.deque[tuple[float, float]] = collections.deque()
        self.outstanding: float | None = None  # the send time of the probe in flight
        self.tick: float | None = None
        self.hops = 1

    def attached(self, sent_at: float, new_session: bool) -> None:
        """A handshake sent at ``sent_at`` attached the session on a new connection."""
        self.answers.clear()
        self.outstanding = None
        if new_session:
            self.proven = sent_at
            self.pending = None
        else:
            self.pending = sent_at

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

    def due(self, now: float, timeout: float) -> float | None:
        """When the next probe is to be written (None while one is in flight)."""
        if self.outstanding is not None:
            return None
        answers = self.answers
        if not answers:
            return now
        gap = self.probe_gap(timeout)  # None: refused at connect; a shorter timeout since
        return answers[-1][1] + (timeout * MIN_PROBE_GAP if gap is None else gap)

    def written(self, now: float) -> None:
        """A probe was written at ``now``."""
        self.outstanding = now

    def answered(self, sent: float, now: float, proof: bool, timeout: float) -> None:
        """The probe written at ``sent`` was answered at ``now``: committed with our session
        alive (``proof``), or not (an error: nothing proven)."""
        if self.outstanding == sent:
            self.outstanding = None
        if not proof:
            return
        if self.pending is not None:
            self.proven = max(self.proven, self.pending)
            self.pending = None
        answers = self.answers
        if answers:
            start = chain_start(answers, self.touch_gap(timeout), self.hops)
            if start is not None:
                self.proven = max(self.proven, start)
        answers.append((sent, now))
        while answers[0][1] < now - timeout:
            answers.popleft()
