"""ZooKeeper writes guarded by a holding: ``zk.set_data(..., guard=lock)`` (and ``create``,
``delete``).

The write and a ``check`` that each of the holding's nodes still exists go in one ``multi``:
ZooKeeper applies it only while we hold, and refuses all of it otherwise. The check is on
existence (``version`` -1), which is sound because the nodes' names are unique to the
acquisition that created them (a GUID per contender object, retired on loss; kazoo's and
Curator's compatible layouts too): once gone, no one creates them again, even if the
container parent is reaped and its sequence counter restarts. Recipes whose node the next
holder re-creates at the same path (the non-fair lock, the TTL lease) refuse to guard
(``Handle._unguardable``): ZooKeeper's check compares versions only, and the new node
starts at version 0 again.
"""

from __future__ import annotations

from aiozklock._exceptions import (
    ConnectionLoss,
    InvalidArgument,
    SessionExpired,
    StaleFencingToken,
    short_repr,
)
from aiozklock._recipes._core import _faces as faces
from aiozklock._recipes._core._handle import Handle
from aiozklock._recipes._core._holding import Holding
from aiozklock._wire._protocol import MultiCheck, MultiOutcome, MultiSubOp, multi_op
from aiozklock._wire._session import Session

GUARDS = (
    "zk.lock(), zk.multi_lock(), zk.election(), zk.semaphore(), or a zk.rw_lock()'s "
    "read_lock or write_lock"
)


def guard_of(guard: object, session: Session) -> Handle:
    """``guard=`` as given, if it is a recipe object of this client; ``InvalidArgument``
    otherwise (before any request)."""
    if not isinstance(guard, Handle):
        raise InvalidArgument(
            f"guard must be a recipe object the current task holds ({GUARDS}), "
            f"not {short_repr(guard)}"
        )
    if guard._session is not session:
        raise InvalidArgument(f"guard {faces.label(guard)} belongs to another client")
    return guard


async def guarded_write(
    session: Session, guard: Handle, resource: str, write: MultiSubOp
) -> MultiOutcome:
    """Apply ``write`` (on ``resource``) in one ``multi`` with the checks of ``guard``'s
    holding; returns its outcome. Sends nothing if the holding is not the current task's
    (``NotLockOwner``), is known lost (``StaleFencingToken``) or cannot guard
    (``UsageError``).

    Raises ``StaleFencingToken`` (nothing written) if the server refused the checks, the
    write's own error if it failed with the checks passed (``NoNodeError``,
    ``BadVersionError``, ``NodeExistsError``, ...), and ``ConnectionLoss`` if the reply was
    lost: the outcome is unknown, and the write is never sent again.
    """
    holding = guard._guarding(resource)
    checks = [MultiCheck(session.server_path(node), -1) for node in holding.nodes]
    op = multi_op([*checks, write], session.client_path)
    try:
        # Bound to the holding's session: in a later one, its nodes are gone.
        result = await session.call(op, generation=holding.generation)
    except SessionExpired as exc:
        # Raised for a request never written (one in flight fails with ConnectionLoss): the
        # holding's session, and its nodes with it, are gone.
        raise _stale(resource, holding, f"its session is gone: {exc}") from exc
    except ConnectionLoss as exc:
        exc.add_note(
            "the guarded write's reply was lost: it may or may not have been applied "
            "(it is not sent again); read the data back to tell"
        )
        raise
    failure = result.failure
    if failure is None:
        return result.results[-1]
    index, error = failure
    if index < len(checks):  # a node of the holding is gone: not ours any more
        node = holding.nodes[index]
        raise _stale(resource, holding, f"its node {node} is gone") from error
    raise error


def _stale(resource: str, holding: Holding, why: str) -> StaleFencingToken:
    stale = StaleFencingToken(resource, holding.token)
    stale.add_note(f"the guard's holding is no longer ours: {why}")
    return stale


__all__ = ("guard_of", "guarded_write")
