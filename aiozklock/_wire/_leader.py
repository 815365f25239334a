"""Evidence that the session lives at the **leader**, without I/O: instants in, decisions out.

In an ensemble the leader expires sessions. The server a client talks to answers its pings
and reads by itself, and tells the leader of the session's activity only in its replies to
the leader's pings (every ``tickTime/2``); cut off from the leader, it goes on answering for
``syncLimit x tickTime`` while the leader expires the session. So an answered request proves
nothing there (docs/safety.md). A **probe** does: a multi holding one ``check`` of ``/``, a
write the leader commits with a quorum after checking our session.

The proof. Probes are written one at a time, each ``PROBE_GAP x timeout`` after the previous
answer. When probe ``B`` is answered, let ``Y`` be the probe answered before ``B`` was
written, and ``A`` a probe answered at least ``TOUCH_GAP x timeout`` before ``Y`` was
written. The server touched the session when ``A`` arrived; the leader pinged it at least
once between answering ``A`` and answering ``Y`` (it pings every ``tickTime/2``, at most
``TOUCH_GAP x timeout`` when the timeout is at least two ticks, ZooKeeper's default
``minSessionTimeout``; where the ensemble's ``tickTime`` is known, ``TICK_SLACK x tickTime/2``
if that is shorter); the ping's reply carried the touch and was written before ``B`` was
forwarded on the same stream; ``B``'s commit shows that this leader still led a quorum and
still had our session. So no leader can expire the session earlier than ``timeout`` after
``A`` was sent: ``A``'s send time is **proven**.

A handshake that re-attached the session made the leader revalidate (touch) it: its send
time is proven once the first probe on that connection is committed. A new session was
created by a committed transaction: its handshake's send time is proven at once. A
standalone server is its own leader (``/zookeeper/config`` is empty there): every answered
request proves its send time, and nothing is probed.
"""

from __future__ import annotations

import collections

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
# Enough answers to find one TOUCH_GAP before the newest (PROBE_GAP >= TOUCH_GAP / 3).
_KEPT = 4


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
    led a quorum. ``answers``: this connection's answered probes, ``(sent, answered)``."""

    __slots__ = ("answers", "direct", "outstanding", "pending", "proven", "tick")

    def __init__(self, now: float) -> None:
        self.direct: bool | None = None
        self.proven = now
        self.pending: float | None = None  # a re-attach's send time, proven by the next probe
        self.answers: collections.deque[tuple[float, float]] = collections.deque(maxlen=_KEPT)
        self.outstanding: float | None = None  # the send time of the probe in flight
        self.tick: float | None = None  # the ensemble's tickTime (s), where ``conf`` said it

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
        """The longest the leader may go without pinging the server: a quarter of the
        timeout, or less where the ensemble's ``tickTime`` is known."""
        gap = timeout * TOUCH_GAP
        return gap if self.tick is None else min(gap, self.tick / 2 * TICK_SLACK)

    def due(self, now: float, timeout: float) -> float | None:
        """When the next probe is to be written (None while one is in flight)."""
        if self.outstanding is not None:
            return None
        answers = self.answers
        return answers[-1][1] + timeout * PROBE_GAP if answers else now

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
            y_sent, gap = answers[-1][0], self.touch_gap(timeout)
            for a_sent, a_answered in reversed(answers):
                if y_sent - a_answered >= gap:
                    self.proven = max(self.proven, a_sent)
                    break
        answers.append((sent, now))
