"""``top``'s watches: a children watch on every node under the prefix, and an exists watch
on the prefix while it is missing, kept armed as the tree changes: the view is read again
when, and only when, the tree's shape changed. No polling.

Every node gets its children watch from the listing that reads it (``getChildren`` with a
watch): a lock's node appearing or going fires its parent's, a path created under a watched
parent is listed (and watched) in its turn. A watch that fires is re-armed by listing that
node again, which is also what tells whether anything changed: a child set equal to the
last one read changes nothing. That is how the doctor's clock probe, a create and a delete
in one ``multi`` under the prefix (``_doctor/_scan.server_clock``), fires the prefix's
watch without causing another reading (or else every reading would cause the next).

A contender's node (a name that ``is_lock_node``: ephemeral, so it has no children) gets an
exists watch instead of a children watch, at the same cost: it fires when the node's data
changes, which is how a lock publishes its local waiters (``_core/_local_waiters.py``), and
the view is read again then. A lock-delay record (a ``lockdelay`` child of a lock,
``_core/_delay_record.py``) gets an exists watch besides its children watch (one request
more, on the paths that have one): its data changes when a waiter records that the holder
vanished, which tells until when the delay runs. Other data changes are not watched: a
lease's renewal only moves its expiry.

A reconnect to the same session re-arms every watch by itself (SetWatches), and the server
then fires those whose nodes changed meanwhile. A lost session forgets them (each hears a
``SESSION`` event): the whole tree is then listed again, with watches, in the new session.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NoReturn

import anyio

from aiozklock._doctor._scan import SYSTEM, pipelined
from aiozklock._exceptions import NoAuthError, NoNodeError, SessionExpired
from aiozklock._recipes._core._delay_record import RECORD
from aiozklock._recipes._core._names import is_lock_node
from aiozklock._wire._protocol import EventType, Op, WatchedEvent, exists_op, get_children_op
from aiozklock._wire._session import Session
from aiozklock._wire._validation import join


class TreeWatch:
    """Watches the tree under ``prefix`` in ``session``; calls ``on_change()`` whenever its
    shape changed (a node added or removed anywhere under it, the prefix created or
    deleted, the session lost), after the first listing too."""

    def __init__(self, session: Session, prefix: str, on_change: Callable[[], object]) -> None:
        self._session = session
        self._prefix = prefix
        self._on_change = on_change
        self._children: dict[str, frozenset[str]] = {}  # each node read: its children
        self._fired: set[str] = set()  # the paths whose watch fired, not yet read again
        self._rebuild = True  # list the whole tree again (at first, and after a lost session)
        self._data_changed = False  # a contender's or record's data changed since the last read
        self._wake = anyio.Event()
        self._wake.set()
        self._watcher = self._heard  # one object: the session keeps one per (kind, path)

    @property
    def watched(self) -> int:
        """How many nodes have a children watch (as of the last listing)."""
        return len(self._children)

    def _heard(self, event: WatchedEvent) -> None:
        # Called by the session, synchronously: note it, the task does the reading.
        if event.type is EventType.SESSION:
            self._rebuild = True
        else:
            self._data_changed |= event.type is EventType.CHANGED
            self._fired.add(event.path)
        self._wake.set()

    async def run(self) -> NoReturn:
        """Keep the watches armed until cancelled. Raises what the session raises, but for
        lost connections (the reads are asked again once connected)."""
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            try:
                changed = await self._settle()
            except SessionExpired:  # a reply of a session lost meanwhile: list all again
                self._rebuild = True
                self._wake.set()
                continue
            if changed:
                self._on_change()

    async def _settle(self) -> bool:
        """Read again what the fired watches point at; whether the tree changed."""
        if self._rebuild:
            self._rebuild = False
            self._fired.clear()
            self._children.clear()
            await self._read([self._prefix])
            return True
        fired, self._fired = self._fired, set()
        data_changed, self._data_changed = self._data_changed, False
        # A node no longer known went with its parent (already forgotten); the prefix is
        # always read: its exists watch fires when it is created.
        paths = [p for p in fired if p in self._children or p == self._prefix]
        return await self._read(paths) or data_changed

    async def _read(self, paths: Iterable[str]) -> bool:
        """List ``paths`` with watches, and every child that is new to us, level by level;
        whether any listing differed from the last one."""
        changed = False
        level = sorted(paths)
        while level:
            records = [self._record_watch(p) for p in level if self._is_record(p)]
            replies = await pipelined(self._session, [*(self._op(p) for p in level), *records])
            for extra in replies[len(level) :]:  # the records' exists watches
                if isinstance(extra, BaseException) and not isinstance(extra, NoAuthError):
                    raise extra
            following: list[str] = []
            for path, reply in zip(level, replies[: len(level)], strict=True):
                if reply is None or isinstance(reply, NoNodeError | NoAuthError):
                    changed |= self._forget(path)  # gone, or not ours to read
                    if path == self._prefix:
                        await self._await_prefix()
                    continue
                if isinstance(reply, BaseException):
                    raise reply
                new = frozenset(reply) if isinstance(reply, list) else frozenset()
                old = self._children.get(path)
                self._children[path] = new
                changed |= new != old
                for name in (old or frozenset()) - new:
                    self._forget(join(path, name))
                following += [join(path, name) for name in sorted(new - (old or frozenset()))]
            level = [p for p in following if self._session.server_path(p) != SYSTEM]
        return changed

    def _op(self, path: str) -> Op[Any]:
        """The watch to arm on ``path``: an exists watch on a contender's node (its data
        changes are heard; it has no children), a children watch on any other."""
        server_path = self._session.server_path(path)
        if path != self._prefix and is_lock_node(path.rpartition("/")[2]):
            return exists_op(server_path, self._watcher)
        return get_children_op(server_path, self._watcher)

    def _is_record(self, path: str) -> bool:
        return path != self._prefix and path.rpartition("/")[2] == RECORD

    def _record_watch(self, path: str) -> Op[Any]:
        """An exists watch on a lock-delay record: its data changes are heard."""
        return exists_op(self._session.server_path(path), self._watcher)

    async def _await_prefix(self) -> None:
        """An exists watch on the missing prefix, to hear of its creation; if it was
        created meanwhile (the exists finds it), it is read again."""
        op = exists_op(self._session.server_path(self._prefix), self._watcher)
        (stat,) = await pipelined(self._session, [op])
        if isinstance(stat, BaseException):
            raise stat
        if stat is not None:
            self._fired.add(self._prefix)
            self._wake.set()

    def _forget(self, path: str) -> bool:
        """Forget ``path`` and everything under it; whether it was known."""
        known = path in self._children
        stack = [path]
        while stack:
            node = stack.pop()
            children = self._children.pop(node, frozenset())
            stack += [join(node, name) for name in children]
        return known


__all__ = ("TreeWatch",)
