"""Leader election with a leadership scope.

The recipe is the fair mutex's queue (``_core/_queue.py`` with ``_decision.decide``): each
candidate queues an ``EPHEMERAL_SEQUENTIAL`` node under the election path, and the first node
leads. Campaigning is acquiring, resigning is releasing, and the body of
``async with election:`` is the leadership scope: it is cancelled as soon as leadership can
no longer be trusted (the client's loss policy), and ``LeadershipLost`` is raised when it
exits. A successor waits on its predecessor only, and when that was the only node ahead, the
server's deletion notification alone makes it leader (no listing).

Observers (``leader()``, ``watch_leader()``) need not campaign. ``watch_leader()`` watches
the head node only (a data watch), and lists the queue again only when that node is deleted;
so the followers of a stable leader send nothing, and joining or leaving candidates behind the
head wake no observer. While the head waits out a lock-delay (a leader vanished without
resigning), nobody leads: both say None (the record is read only where it is listed), and
``watch_leader()`` looks again when the delay ends.

Identifiers: the node data is the queue's ``Identity`` JSON. A candidate created without an
``identifier`` is named ``"<hostname>:<pid>"``. Reading other nodes, the identifier is the
JSON ``identifier``, else ``"<host>:<pid>"`` from the JSON, else the data as UTF-8 text (a
Curator participant id), else the node name.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import AsyncGenerator, Sequence

import anyio

from aiozklock._acl import ACL
from aiozklock._exceptions import (
    ConnectionLoss,
    LeadershipLost,
    NoNodeError,
    SessionExpired,
    short_repr,
)
from aiozklock._recipes._core._contenders import Contender, read_contenders, read_delay
from aiozklock._recipes._core._delay_record import RECORD
from aiozklock._recipes._core._holding import HoldingMonitor
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._names import KAZOO_MARKER, LATCH_MARKER, queue_order
from aiozklock._recipes._core._options import RecipeOptions
from aiozklock._recipes._core._peers import Layout
from aiozklock._recipes._core._queued import QueuedPrimitive
from aiozklock._recipes._decision import decide
from aiozklock._wire._now import uptime
from aiozklock._wire._protocol import (
    EventType,
    WatchedEvent,
    exists_op,
    get_children_op,
    get_data_op,
)
from aiozklock._wire._session import Session, SessionState, StateChange
from aiozklock._wire._validation import join, validate_identifier, validate_recipe_path

_RETRY = (ConnectionLoss, SessionExpired)  # a read is safe to repeat in the next connection


def default_identifier() -> str:
    """The identifier of a candidate created without one: ``"<hostname>:<pid>"``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def identifier_of(name: str, data: bytes) -> str:
    """A candidate's identifier from its node's name and data (see the module docstring)."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return name
    try:
        identity = json.loads(text)
    except ValueError:
        return text or name
    if not isinstance(identity, dict):
        return text  # e.g. a Curator id that happens to be valid JSON, such as "42"
    identifier = identity.get("identifier")
    if isinstance(identifier, str):
        return identifier
    host, pid = identity.get("host"), identity.get("pid")
    if host is not None and pid is not None:
        return f"{host}:{pid}"
    return name


class Election(QueuedPrimitive):
    """A leader election on ZooKeeper. Create it with ``zk.election(path)``.

    ``async with election:`` campaigns (waits in FIFO order across processes), then runs the
    body as leader, and resigns when the body exits. The body is cancelled when leadership
    can no longer be trusted, and ``LeadershipLost`` is then raised at exit. ``acquire()``
    (campaign; ``timeout=`` bounds the wait, ``LockTimeout`` after it), ``try_acquire()``
    (campaign without waiting), ``release()``/``resign()`` (resign) work as for ``Lock``.
    Bad arguments raise ``InvalidArgument`` here, before any request.
    """

    path: str
    """The election's path."""
    identifier: str
    """The identifier its node carries: ``identifier=``, else ``"<hostname>:<pid>"``."""

    _lost_error = LeadershipLost

    def __init__(
        self,
        session: Session,
        path: str,
        *,
        options: RecipeOptions,
        monitor: HoldingMonitor,
        janitor: Janitor,
        acl: tuple[ACL, ...],
    ) -> None:
        self.path = validate_recipe_path(path, what="election path")
        identifier = validate_identifier(options.identifier)
        self.identifier = default_identifier() if identifier is None else identifier
        super().__init__(
            session,
            monitor,
            janitor,
            (self.path,),
            decide,
            f"election {self.path}",
            options.checked(self.identifier),
            acl,
            layout=Layout(options.compat, LATCH_MARKER, KAZOO_MARKER, "zk.election()"),
        )

    async def resign(self) -> None:
        """Alias of ``release()``: give up leadership held by the current task (our node is
        deleted). Raises ``NotLockOwner`` if the current task does not lead, and
        ``LeadershipLost`` if leadership was lost meanwhile."""
        await self.release()

    @property
    def is_leader(self) -> bool:
        """True if this object leads, leadership was not lost, and it is still within
        ``valid_until``; unlike ``is_held``, true for any task of this process. Never raises."""
        holding = self._holding
        if holding is None or holding.lost:
            return False
        return uptime() < self._valid_until(holding)

    async def leader(self) -> str | None:
        """The current leader's identifier, or None if there is no candidate (or no path), or
        while the first candidate waits out a lock-delay (it leads once the delay ends).

        Reads the queue (and the lock-delay record, if listed), then the first node's data;
        if that node is gone meanwhile, the next one's. Connection losses are retried.
        Raises ``ClientClosed`` once closed.
        """
        while True:
            try:
                children = await self._queue.list_children(self.path, None, None)
            except NoNodeError:
                return None
            except SessionExpired:
                continue  # a read: ask again in the new session
            queue = queue_order(children)
            if not queue:
                return None
            if RECORD in children:
                try:
                    if await read_delay(self._session, self.path, queue) is not None:
                        return None  # the head waits out a lock-delay: nobody leads yet
                except _RETRY:
                    continue
            for name in queue:
                try:
                    data = await self._read(name)
                except NoNodeError:
                    continue  # it resigned after the listing: the next one leads
                return identifier_of(name, data)
            # Every listed candidate left meanwhile: list again.

    async def _read(self, name: str) -> bytes:
        session = self._session
        op = get_data_op(session.server_path(join(self.path, name)))
        while True:
            try:
                data, _ = await session.call(op)
                return data
            except _RETRY:
                continue

    async def contenders(self) -> list[Contender]:
        """The candidates as ZooKeeper has them, leader first, each with its identity.
        Raises ``ClientClosed`` once closed."""
        return await read_contenders(self._session, self._queue, self.path)

    async def watch_leader(self) -> AsyncGenerator[str | None, None]:
        """``async for leader in election.watch_leader():`` the leader's identifier now, then
        each time it changes; ``None`` while there is no candidate.

        Values are coalesced: a consumer that is slow gets the latest one, and the same value
        never twice in a row. It waits on one watch (the leader's node; the election path's
        children or existence when there is no leader), never polls, and reads everything
        again after a reconnect; while disconnected, the last value stands. Works without
        campaigning. Stop it with ``break`` inside ``contextlib.aclosing(...)`` (or by
        cancellation) for its watches to be removed at once. Raises ``ClientClosed`` once
        the client is closed.
        """
        follower = _Follower(self._session, self.path)
        remove_listener = self._session.add_listener(follower.on_state)
        try:
            last: object = _NOTHING
            while True:
                leader = await follower.sync()
                if leader != last:
                    last = leader
                    yield leader
                await follower.changed()
        finally:
            remove_listener()
            follower.disarm()

    def __repr__(self) -> str:
        state = "leading" if self._holding is not None else "not leading"
        return (
            f"<aiozklock.Election {short_repr(self.path)} {state} "
            f"identifier={short_repr(self.identifier)}>"
        )


_NOTHING = object()


class _Follower:
    """The state of one ``watch_leader()``: the one watch it has armed, and whether the
    queue must be listed again before the leader is read."""

    def __init__(self, session: Session, path: str) -> None:
        self._session = session
        self._path = path
        self._changed = anyio.Event()
        self._relist = True
        self._queue: Sequence[str] = ()  # the last listing, leader first
        self._armed: str | None = None  # the server path our watcher is on
        self._recorded = False  # the last listing had a lock-delay record
        self._until: float | None = None  # Unix time a running lock-delay ends (look again)

    def _wake(self, event: WatchedEvent) -> None:
        # A data change of the leader's node only needs its data read again.
        if event.type is not EventType.CHANGED:
            self._relist = True
        self._changed.set()

    def on_state(self, change: StateChange) -> None:
        """Session listener: read everything again once connected (watches may have fired
        unseen), and wake up to fail once closed."""
        if change.state in (SessionState.CONNECTED, SessionState.CLOSED):
            self._relist = True
            self._changed.set()

    async def changed(self) -> None:
        """Wait until something may have changed (or a running lock-delay ends)."""
        until, self._until = self._until, None
        if until is None:
            await self._changed.wait()
            return
        with anyio.move_on_after(max(0.0, until - time.time())):
            await self._changed.wait()
        self._relist = True

    def disarm(self) -> None:
        """Forget our watcher (the server's one-shot watch then fires unheard, if ever)."""
        if self._armed is not None:
            self._session.remove_watcher(self._armed, self._wake)
            self._armed = None

    async def sync(self) -> str | None:
        """The leader now, with a watch armed that fires when it may change."""
        self._changed = anyio.Event()  # before any read: no change can go unseen
        while True:
            self.disarm()
            try:
                if self._relist:
                    if not await self._list():
                        return None
                    self._relist = False
                if self._recorded and self._queue and await self._delayed():
                    return None
                for name in self._queue:
                    leader = await self._watch_head(name)
                    if leader is not None:
                        return leader
            except _RETRY:
                pass
            self._relist = True  # every listed candidate left meanwhile, or reconnected

    async def _list(self) -> bool:
        """List the queue: True if there are candidates (no watch armed), False if there is
        none (a watch is armed that fires on the first one)."""
        session = self._session
        server_path = session.server_path(self._path)
        try:
            children = await session.call(get_children_op(server_path))
            self._recorded = RECORD in children
            self._queue = queue_order(children)
            if not self._queue:
                # List again with a child watch: a candidate may have come meanwhile.
                self._armed = server_path
                children = await session.call(get_children_op(server_path, self._wake))
                self._recorded = RECORD in children
                self._queue = queue_order(children)
        except NoNodeError:
            self._armed = server_path
            if await session.call(exists_op(server_path, self._wake)) is None:
                return False  # the path's creation fires the watch
            self._queue = ()  # created meanwhile: sync lists it again
            return True
        if self._queue:
            self.disarm()
            return True
        return False

    async def _delayed(self) -> bool:
        """Whether the head waits out a lock-delay: then nobody leads until it ends (looked
        at again then) or the head leaves (its data watch armed)."""
        delay = await read_delay(self._session, self._path, self._queue)
        if delay is None:
            return False
        now = time.time()
        ends = now + delay.delay_ms / 1000 if delay.until_ms is None else delay.until_ms / 1000
        self._until = max(ends, now)
        if await self._watch_head(self._queue[0]) is None:
            self._relist = True  # gone meanwhile: look again at once
            self._until = now
        return True

    async def _watch_head(self, name: str) -> str | None:
        """Read ``name``'s identifier with a data watch on it; None if it is gone."""
        session = self._session
        server_path = session.server_path(join(self._path, name))
        self._armed = server_path
        try:
            data, _ = await session.call(get_data_op(server_path, self._wake))
        except NoNodeError:
            self._armed = None  # a failed read leaves no watch (the session forgot it)
            return None
        return identifier_of(name, data)


__all__ = ("Election", "default_identifier", "identifier_of")
