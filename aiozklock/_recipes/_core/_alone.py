"""A re-join proven alone: when a join may skip its listing, and the proof that it may. Pure.

Our last holding was proven to be the only node of its queue (a listing after its create,
or this same proof), its release deleted it (that delete's reply came before our new
create's: same session, in order), and every transaction the ensemble committed between
the old node's create and our new one's (their czxids) was a write of this session that
spared parents (``Session.spared_parents``: a create, a probe, the delete of an ephemeral,
such as that release's). So no other session did anything in between, and nothing deleted
the parent (which would restart its sequence count: a reaped container, a path deleted and
created again), and our new node's sequence follows the old one's by exactly one
(ZooKeeper names a sequential node after its parent's child version, which every child
create increments and a delete leaves): nothing else was created in the queue, by anyone
(other tasks of this session included). Nothing older is left either: we are first.
Otherwise the join lists, one round trip more.

The proof is tried only if nothing the session has heard of since the old create is known
to break it (a reply's zxid says another session wrote), and, after one failed, only on
every 2nd, 4th, ... 64th chance (``Backoff``): where other sessions write all the time it
would nearly always fail and cost a round trip more, so the listing goes with the create,
in the same round trip. Other tasks cycling on the same session do not break it: their
transactions are ours.
"""

from __future__ import annotations

from aiozklock._recipes._core._names import sequence_of
from aiozklock._recipes._core._place import Alone
from aiozklock._wire._session import Session

_WRAP = 1 << 32  # the sequence is the parent's signed 32-bit child version
_MAX_BACKOFF = 6  # a proof failed this many times in a row is tried on every 64th chance


class Backoff:
    """When to try a join's proof after failed ones: after ``n`` in a row, on every
    ``2**n``-th chance (at most every 64th); a success tries every time again."""

    __slots__ = ("_failed", "_skip")

    def __init__(self) -> None:
        self._failed = 0
        self._skip = 0

    def tries(self) -> bool:
        """Whether this chance is tried (each call is one chance)."""
        if self._skip:
            self._skip -= 1
            return False
        return True

    def record(self, proven: bool) -> None:
        """A tried proof held (``proven``) or failed."""
        self._failed = 0 if proven else min(self._failed + 1, _MAX_BACKOFF)
        self._skip = (1 << self._failed) - 1


def worth_trying(alone: Alone, session: Session, backoff: Backoff | None) -> bool:
    """Whether a join after the holding ``alone`` tries the proof: nothing ``session`` has
    heard of since that holding's create says another session wrote, and ``backoff`` (None:
    no proof failed yet) gives this chance."""
    last = session.last_zxid  # (nothing heard since our old create: nothing to check)
    if last != alone.token and not session.spared_parents(alone.token, last + 1):
        return False
    return backoff is None or backoff.tries()


def holds(alone: Alone, ours: str, token: int | None, session: Session) -> bool:
    """Whether our new node ``ours`` (czxid ``token``) is proven alone after the holding
    ``alone`` (see the module docstring)."""
    return (
        alone.deleted
        and token is not None
        and session.spared_parents(alone.token, token)
        and (sequence_of(ours) - sequence_of(alone.name)) % _WRAP == 1
    )


__all__ = ("Backoff", "holds", "worth_trying")
