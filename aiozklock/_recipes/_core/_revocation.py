"""Revocable holdings: Curator's revocation protocol, written once for the queue recipes.

A revoke request is a data change of a contender's node to exactly ``__REVOKE__`` (Curator's
``Revoker.attemptRevoke``: ``setData(node, "__REVOKE__")``). A revocable contender watches
its own nodes' data from the moment they are created, as Curator's ``LockInternals`` does
before it waits: a ``getData`` with a watch, written as soon as the create's reply is in,
its reply not awaited (no round trip more; one request more per acquisition), and read
again with a new watch on every data change. Any other data (another writer's, such as a
count of local waiters) is ignored, and so is the deletion of the node (our own release).

On a request, a holder's holding is lost with the cause "revoked" (``Holding.mark_revoked``):
its bodies are cancelled by the loss path every loss takes, and the release still deletes
its nodes (the session is sound) before it raises ``LockRevoked``. A contender still
waiting gives up its place: its acquire ends with ``LockRevoked`` and its node is deleted
(Curator runs its listener for a waiter too: its watch is set before it waits).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence

import anyio

from aiozklock._exceptions import (
    AiozklockError,
    ConnectionLoss,
    LockRevoked,
    SessionExpired,
    shorten,
)
from aiozklock._recipes._core._holding import Holding
from aiozklock._wire._protocol import EventType, WatchedEvent, get_data_op
from aiozklock._wire._session import Session, SessionState, StateChange

log = logging.getLogger(__name__)

#: The bytes of a revoke request (Curator's ``LockInternals.REVOKE_MESSAGE``).
REVOKE = b"__REVOKE__"


class Revocation:
    """The revoke watch of one revocable recipe object: on the nodes of its current
    acquisition (``watch``), until it is released or abandoned (``forget``).

    ``waiting``: the cancel scope of an acquire in progress, which a request cancels (the
    recipe then raises ``LockRevoked``); ``requested``: a request has reached us."""

    __slots__ = (
        "_generation",
        "_holding",
        "_paths",
        "_remove",
        "_session",
        "_unread",
        "requested",
        "waiting",
    )

    def __init__(self, session: Session) -> None:
        self._session = session
        self._paths: tuple[str, ...] = ()  # the server paths of our nodes, watched
        self._generation = -1
        self._holding: Holding | None = None
        self._unread: set[str] = set()  # reads to send again once connected
        self._remove: Callable[[], None] | None = None  # the state listener's, while watching
        self.requested = False
        self.waiting: anyio.CancelScope | None = None

    def watch(self, server_paths: Sequence[str], generation: int) -> None:
        """Our nodes were created (a join) in session ``generation``: watch their data
        (the watch on the nodes of an earlier join of this acquisition is forgotten)."""
        self._unwatch()
        self._paths, self._generation = tuple(server_paths), generation
        self._remove = self._session.add_listener(self._on_state)
        for path in self._paths:
            self._read(path)

    async def take(
        self, take: Callable[[Callable[[Sequence[str], int], None]], Awaitable[Holding]], label: str
    ) -> Holding:
        """``take(watch)`` (an acquire, which tells ``watch`` of each join's nodes) under
        this policy: a request while it waits cancels it, and raises ``LockRevoked``
        (``label`` names the recipe object); one after the grant revokes the holding."""
        with anyio.CancelScope() as waiting:
            self.waiting = waiting
            holding = await take(self.watch)
        self.waiting = None
        if waiting.cancelled_caught:
            raise LockRevoked(
                f"{label}: a revoke request reached it while it waited: it gave up its "
                "place in the queue"
            )
        self.hold(holding)
        return holding

    def hold(self, holding: Holding) -> None:
        """Granted: a request from now on (or one that came during the grant) revokes
        ``holding``."""
        self._holding = holding
        if self.requested:
            self._revoke_holding(holding)

    def forget(self) -> None:
        """Released or abandoned: no node of ours is watched any more."""
        self._unwatch()
        self._holding = None
        self.requested = False
        self.waiting = None

    # ---------------------------------------------------------------- the watch

    def _unwatch(self) -> None:
        remove, self._remove = self._remove, None
        if remove is not None:
            remove()
        for path in self._paths:
            self._session.remove_watcher(path, self._wake)
        self._paths = ()
        self._unread.clear()

    def _read(self, path: str) -> None:
        """Read ``path``'s data with a watch, written soon, its reply not awaited; sent
        again once reconnected if it could not be written or its reply was lost."""
        session, generation = self._session, self._generation

        def done(result: object, error: AiozklockError | None) -> None:
            if path not in self._paths:
                return  # a reply for nodes we no longer watch (released meanwhile)
            if error is None and isinstance(result, tuple) and result[0] == REVOKE:
                self._requested(path)
            elif isinstance(error, ConnectionLoss):
                self._unread.add(path)  # its watch may not be set: read again
            # NoNode: our node is gone (released, or its session); nothing to watch.

        with contextlib.suppress(SessionExpired):  # the node went with its session
            op = get_data_op(path, self._wake)
            if session.send_soon((op,), generation=generation, on_done=done) is None:
                self._unread.add(path)

    def _wake(self, event: WatchedEvent) -> None:
        # A data change may be a request, or another writer's data: read it again (with a
        # new watch). A deletion is our release, or our session's end.
        if event.type is EventType.CHANGED:
            path = self._session.server_path(event.path)
            if path in self._paths:
                self._read(path)

    def _on_state(self, change: StateChange) -> None:
        """Once reconnected in our nodes' session, send the reads that were lost."""
        session = self._session
        if change.state is SessionState.CONNECTED and session.generation == self._generation:
            unread, self._unread = self._unread, set()
            for path in unread:
                self._read(path)

    # ---------------------------------------------------------------- a request

    def _requested(self, path: str) -> None:
        if self.requested:
            return
        self.requested = True
        log.info("revoke requested on %s", shorten(path))
        if self._holding is not None:
            self._revoke_holding(self._holding)
        elif self.waiting is not None:
            self.waiting.cancel()

    def _revoke_holding(self, holding: Holding) -> None:
        nodes = shorten(", ".join(holding.nodes))
        holding.mark_revoked(f"revoked: a revoke request was written to {nodes}")


__all__ = ("REVOKE", "Revocation")
