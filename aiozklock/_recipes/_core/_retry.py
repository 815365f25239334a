"""When a request may be sent again, written once: reads, creates under a container parent,
and deletes of a node that must be ours.

* ``Retry``: the one retry policy (as kazoo's ``KazooRetry`` is one object). A read is asked
  again after a lost reply (``RETRY``); for a node not bound to a session (a TTL lease) a lost
  session is no reason to stop asking either (``RETRY_ANY_SESSION``).
* ``create_in``: a create sent with its container parent once the parent is missing (the
  server reaps an empty container, even between our requests).
* ``delete_node``: a delete whose lost reply is resolved before any retry: a unique name is
  deleted again (NoNode then means it worked); a fixed name, which another holder may reuse,
  only while the node found there is still ours (czxid, and ``owned`` if given).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from aiozklock._exceptions import (
    BadVersionError,
    ClientClosed,
    ConnectionLoss,
    InvalidACLError,
    NoAuthError,
    NoNodeError,
    SessionExpired,
    ZooKeeperError,
)
from aiozklock._wire._protocol import (
    Op,
    Stat,
    container_path_ops,
    delete_op,
    exists_op,
    get_children_op,
    get_data_op,
)
from aiozklock._wire._session import Session
from aiozklock._wire._validation import join

T = TypeVar("T")
Owned = Callable[[bytes, Stat], bool]  # is the node read back (data, stat) ours?

# A delete that failed with these needs no retry: the node is gone, or its session is (and
# the server deletes it with the session).
GONE_ALREADY = (NoNodeError, SessionExpired, ClientClosed)
PARENT_ATTEMPTS = 3  # the server may reap an empty container parent between our requests


@dataclass(frozen=True, slots=True)
class Retry:
    """Repeat an idempotent request whose reply was lost with one of ``on`` (the session
    waits for the reconnection, until the request's ``wait_until``)."""

    on: tuple[type[Exception], ...] = (ConnectionLoss,)

    async def call(
        self,
        session: Session,
        op: Op[T],
        *,
        generation: int | None = None,
        wait_until: float | None = None,
    ) -> T:
        """``session.call(op)``, repeated after a lost reply; other errors are raised."""
        while True:
            try:
                return await session.call(op, generation=generation, wait_until=wait_until)
            except self.on:
                continue

    async def lookup(
        self, session: Session, op: Op[T], *, wait_until: float | None = None
    ) -> T | NoNodeError:
        """As ``call``, but a missing node's ``NoNodeError`` is returned, not raised."""
        try:
            return await self.call(session, op, wait_until=wait_until)
        except NoNodeError as exc:
            return exc

    async def pipeline(
        self,
        session: Session,
        ops: Sequence[Op[Any]],
        *,
        generation: int | None = None,
        wait_until: float | None = None,
    ) -> list[Any]:
        """``session.pipeline(ops)``, repeated whole while any reply was lost."""
        while True:
            results = await session.pipeline(ops, generation=generation, wait_until=wait_until)
            if not any(isinstance(result, self.on) for result in results):
                return results


RETRY = Retry()
RETRY_ANY_SESSION = Retry((ConnectionLoss, SessionExpired))


def refused(results: Sequence[object]) -> ZooKeeperError | None:
    """The first container create an ACL refused (creating again cannot help), or None."""
    for result in results:
        if isinstance(result, NoAuthError | InvalidACLError):
            return result
    return None


async def create_in(
    session: Session,
    op: Op[Any],
    parent: str,
    acl: bytes,
    *,
    generation: int | None = None,
    deadline: float | None = None,
) -> object:
    """Send the create ``op`` of a child of ``parent``; while the parent is missing, send it
    again after the parent's container create (its whole chain once that is not enough).
    Returns the create's reply or its exception (``NoNodeError`` once the attempts are
    spent); raises the parent's ``NoAuthError``/``InvalidACLError``, and what
    ``session.pipeline`` raises when nothing was sent."""
    parents: list[Op[Any]] = []
    attempts = PARENT_ATTEMPTS
    while True:
        *made, created = await session.pipeline(
            [*parents, op], generation=generation, wait_until=deadline
        )
        if not isinstance(created, NoNodeError):
            return created
        refusal = refused(made)
        if refusal is not None:
            raise refusal
        if attempts == 0:
            return created
        # Only the parent at first: its ancestors usually exist, and a create that fails
        # NodeExists is still a logged transaction.
        chain = container_path_ops(session.server_path(parent), session.client_path, acl=acl)
        parents = chain if parents else chain[-1:]
        attempts -= 1


async def delete_node(
    session: Session,
    path: str,
    generation: int | None,
    *,
    czxid: int | None = None,
    version: int | None = None,
    owned: Owned | None = None,
    retry: Retry = RETRY,
) -> bool:
    """Delete the node at ``path`` (a client path) if it is ours; returns once it is gone or
    is not ours: True if this delete's reply said it deleted it.

    A unique name (no ``czxid``, no ``owned``) is deleted blindly, again after a lost reply.
    Otherwise the node is read first (unless its ``version`` is given) and again after a
    lost reply or ``BadVersion``, and deleted, with the version read, only while it has our
    ``czxid`` and ``owned(data, stat)`` holds: a blind retry could delete the next holder's
    node. Raises ``SessionExpired`` (``generation`` is gone, and an ephemeral node with it),
    ``ClientClosed`` and the server's other errors."""
    server_path = session.server_path(path)
    guarded = czxid is not None or owned is not None
    check = guarded and version is None
    while True:
        if check:
            stat = await _read_stat(session, server_path, generation, owned, retry)
            if stat is None or (czxid is not None and stat.czxid != czxid):
                return False  # gone, or another holder's node now
            czxid, version = stat.czxid, stat.version
        try:
            op = delete_op(server_path, -1 if version is None else version)
            await session.call(op, generation=generation)
            return True
        except NoNodeError:
            return False
        except BadVersionError:
            if not guarded:
                raise
            check = True  # someone changed the node: is it still ours?
        except retry.on:
            check = guarded  # the outcome is unknown: resolve it before deleting again


async def _read_stat(
    session: Session, server_path: str, generation: int | None, owned: Owned | None, retry: Retry
) -> Stat | None:
    """The node's stat if it exists and ``owned`` (if given) says it is ours, else None."""
    if owned is None:
        return await retry.call(session, exists_op(server_path), generation=generation)
    try:
        data, stat = await retry.call(session, get_data_op(server_path), generation=generation)
    except NoNodeError:
        return None
    return stat if owned(data, stat) else None


async def carrying(session: Session, parent: str, guid: str, generation: int) -> list[str]:
    """The children of ``parent`` (client paths) whose names carry ``guid``: what a create of
    ours whose reply was lost may have made (GUIDs are 32 random hex digits: whatever the
    recipe's naming, a name carrying ours is ours)."""
    op = get_children_op(session.server_path(parent))
    try:
        children = await RETRY.call(session, op, generation=generation)
    except NoNodeError:
        return []
    return [join(parent, child) for child in children if guid in child]


__all__ = (
    "GONE_ALREADY",
    "Owned",
    "PARENT_ATTEMPTS",
    "RETRY",
    "RETRY_ANY_SESSION",
    "Retry",
    "carrying",
    "create_in",
    "delete_node",
    "refused",
)
