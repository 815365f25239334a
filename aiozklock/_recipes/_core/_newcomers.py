"""A holder told of a peer that came after its grant and cannot order its nodes (kazoo's
Lock beside our default layout: it ignores our node and holds at once).

``_peers.py`` refuses such a peer before we hold: an acquisition checks every listing it
decides on. After the grant only a listing can show a newcomer, and listing for it would
cost every holding requests. What costs nothing more on a path without foreign nodes:

* the listings an acquisition's join makes anyway (the getChildren pipelined with our create,
  the one after a followed hint or a failed proof) carry a child watch: the same request,
  its watch flag set;
* a holding granted on such a listing keeps that watch (``NewcomerWatch``): on the first
  change of the children after the listing, one getChildren with a new watch is written
  (its reply not awaited), and checked as an acquisition's listing is (``Layout.check``);
* a listing a holder makes for its own ends (a read lock admitting a local reader) is
  checked too (``lose_to_newcomer``).

A peer that cannot order our nodes ends the holding as any loss does: marked lost with the
``LayoutConflict`` as the ``LockLost``'s ``__cause__``, bodies cancelled, nodes given to the
janitor (deleted at once: the session is sound).

Cost on a path without foreign nodes: the same requests, plus one notification per watched
listing (sent by the server, no request: our own release's delete fires it at the latest),
and, while a watched holding holds, one getChildren per change of the children (contenders
arriving behind an uncontended holder). A join that follows a contended grant (a hand-off,
or nodes behind us) lists without the watch: it most likely waits, and its watch would only
fire unheard, a notification per grant. Not watched, so a peer arriving then is not told to
the holder (the next acquisition that lists the path refuses; a re-acquire's proof fails on
the peer's create): holdings granted without a listing (a direct hand-off,
``_queue_wait.py``; a join proven alone, ``_alone.py``; a downgrade's read node), after a
wait's listing, after a contended grant, and with lock-delay (its record's writes would fire
the watch: a listing per grant).

A notification is counted only after its listing's reply: the session parses replies and
reads notifications in the order the server sent them, and a notification sent before the
listing's reply is about a change that listing shows (an older watch of ours firing, such
as the one our last release's delete fired).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from aiozklock._exceptions import (
    AiozklockError,
    ConnectionLoss,
    LayoutConflict,
    SessionExpired,
    shorten,
)
from aiozklock._recipes._core._holding import Holding
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._peers import Layout
from aiozklock._wire._protocol import EventType, Op, WatchedEvent, get_children_op
from aiozklock._wire._session import Session, SessionState, StateChange

# The logger documented for "a held lock was lost, and why" (docs/observability.md).
log = logging.getLogger("aiozklock._recipes._core._holding")


def lose_to_newcomer(holding: Holding, conflict: LayoutConflict, janitor: Janitor) -> None:
    """A peer that cannot order our nodes holds beside ``holding``: lost (bodies
    cancelled, ``conflict`` as the holders' ``LockLost.__cause__``), its nodes deleted by
    ``janitor`` (the session is sound: nothing else would delete them)."""
    reason = f"a peer that cannot order our nodes came after our grant ({conflict})"
    if holding.mark_lost(reason, "layout", conflict):
        log.warning("lock node(s) %s lost: %s", shorten(", ".join(holding.nodes)), reason)
        for node in holding.nodes:
            janitor.delete(node, holding.generation)


_LISTED, _FIRED, _UNLISTED = 1, 2, 3  # a member's state in ``NewcomerWatch._states``


class NewcomerWatch:
    """The child watch of one queue recipe object's listings, kept by a holding granted on
    them (see the module docstring). ``members``: the object's paths; ``layout``, ``label``
    and ``janitor``: its queue's."""

    __slots__ = (
        "_armed",
        "_guid",
        "_holding",
        "_janitor",
        "_label",
        "_layout",
        "_members",
        "_remove",
        "_session",
        "_states",
    )

    def __init__(
        self,
        session: Session,
        members: Sequence[str],
        layout: Layout,
        label: str,
        janitor: Janitor,
    ) -> None:
        self._session = session
        self._members = {session.server_path(m): m for m in members}  # server path -> member
        self._layout = layout
        self._label = label
        self._janitor = janitor
        # Each member's server path -> _LISTED (a watched listing's reply came, no
        # notification since), _FIRED (one came after it) or _UNLISTED (a holder's listing to
        # send once reconnected). One dict, not a set per state: it lives as long as the
        # lock object, for every lock a process holds.
        self._states: dict[str, int] = {}
        self._holding: Holding | None = None
        self._guid = ""
        # The state listener, only while a listing is owed (_UNLISTED): a held lock keeps
        # none otherwise (a closure and a registration less per held lock).
        self._remove: Callable[[], None] | None = None
        # A watched listing was made since the last forget: only then is there anything to
        # forget (a join proven alone, or followed, lists nothing: every uncontended cycle).
        self._armed = False

    def listing_op(self, server_path: str) -> Op[list[str]]:
        """A getChildren of ``server_path`` with our watch, counted as set once its reply
        is parsed (in stream order with the notifications: see the module docstring)."""
        self._armed = True
        if self._states.get(server_path) != _UNLISTED:
            self._states.pop(server_path, None)
        op = get_children_op(server_path, self._wake)
        parse = op.parse

        def parsed(buf: bytes, offset: int) -> list[str]:
            children = parse(buf, offset)
            self._states[server_path] = _LISTED
            return children

        op.parse = parsed
        return op

    def hold(self, holding: Holding, watched: bool, guid: str) -> None:
        """Granted ``holding`` on watched listings (``watched``), of our nodes named with
        ``guid``: from now on a change of the children is listed and checked (at once if
        one came since those listings). Not watched: nothing is done."""
        if not watched:
            return
        self._holding, self._guid = holding, guid
        for server_path in [p for p, state in self._states.items() if state == _FIRED]:
            self._relist(server_path)

    def forget(self) -> None:
        """Released, lost or abandoned: no holding is watched; our watchers are forgotten
        (the server's watches fire unheard)."""
        if not self._armed:
            return  # nothing was watched since the last forget (hold needs a listing)
        self._armed = False
        self._holding = None
        remove, self._remove = self._remove, None
        if remove is not None:
            remove()
        for server_path in self._members:
            self._session.remove_watcher(server_path, self._wake)
        self._states.clear()

    # ---------------------------------------------------------------- while holding

    def _wake(self, event: WatchedEvent) -> None:
        if event.type is EventType.SESSION:
            return  # the session is gone: the loss policy tells the holder
        server_path = self._session.server_path(event.path)
        if self._states.get(server_path) != _LISTED:
            return  # about a change the listing in flight shows
        self._states[server_path] = _FIRED
        if self._holding is not None:
            self._relist(server_path)

    def _relist(self, server_path: str) -> None:
        """List ``server_path`` with a new watch, its reply checked; not awaited."""
        holding = self._holding
        assert holding is not None

        def done(result: Any, error: AiozklockError | None) -> None:
            if holding is not self._holding:
                return  # released meanwhile
            if isinstance(error, ConnectionLoss):
                self._owe(server_path)  # its watch may not be set: again
            elif error is None:
                self._check(holding, server_path, result)
            # NoNode: the path, and our node in it, is gone: the session's loss, or ours.

        try:
            sent = self._session.send_soon(
                (self.listing_op(server_path),), generation=holding.generation, on_done=done
            )
        except SessionExpired:
            return  # the holding is lost with its session
        if sent is None:
            self._owe(server_path)

    def _owe(self, server_path: str) -> None:
        """The holder's listing of ``server_path`` was not sent, or lost its reply: sent
        again once reconnected in the holding's session (a connection's requests fail
        before the session is connected again: the listener is there in time)."""
        self._states[server_path] = _UNLISTED
        if self._remove is None:
            self._remove = self._session.add_listener(self._on_state)

    def _check(self, holding: Holding, server_path: str, children: list[str]) -> None:
        member = self._members[server_path]
        try:
            self._layout.check(member, children, self._guid, self._label, held=True)
        except LayoutConflict as conflict:
            lose_to_newcomer(holding, conflict, self._janitor)

    def _on_state(self, change: StateChange) -> None:
        """Once reconnected in the holding's session, send the listings that were lost."""
        holding = self._holding
        if (
            holding is not None
            and change.state is SessionState.CONNECTED
            and self._session.generation == holding.generation
        ):
            self._send_owed()

    def _send_owed(self) -> None:
        remove, self._remove = self._remove, None
        if remove is not None:
            remove()  # registered again if a listing is owed once more
        unlisted = [p for p, state in self._states.items() if state == _UNLISTED]
        for server_path in unlisted:
            del self._states[server_path]
        for server_path in unlisted:
            self._relist(server_path)


__all__ = ("NewcomerWatch", "lose_to_newcomer")
