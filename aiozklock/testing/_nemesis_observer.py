"""The nemesis's observer: an independent client, straight to the servers, that records when
the server released each lock node, and finds the nodes left over at the end."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import anyio

import aiozklock
from aiozklock._exceptions import ConnectionLoss, NoNodeError, SessionExpired
from aiozklock._wire._protocol import EventType, WatchedEvent, exists_op, get_children_op
from aiozklock.testing._internals import session_of

from ._history import History


class _Observer:
    """An independent client, straight to the servers: the server-side release time of every
    lock node it sees under the lock paths (an exists-watch per node, keyed
    ``{node path}#{czxid}`` as the workers name their nodes: a fixed node name is reused), and
    the lock paths' children at the end."""

    def __init__(
        self, zk: aiozklock.ZooKeeperClient, paths: Sequence[str], history: History
    ) -> None:
        self.zk = zk
        self.paths = tuple(paths)
        self.history = history
        self.watched: set[str] = set()  # node paths with a live exists-watch
        self.owners: dict[str, int] = {}  # node path -> ephemeral owner (0: persistent)
        self.czxids: dict[str, int] = {}  # node path -> its czxid (the last one seen)
        self.reconnected_at = -math.inf
        self._suspended = False
        self._rewatch, self._rewatch_receive = anyio.create_memory_object_stream[str](math.inf)
        zk.add_listener(self._on_state)

    def _on_state(self, change: aiozklock.StateChange) -> None:
        if change.state is aiozklock.SessionState.CONNECTED and self._suspended:
            self.reconnected_at = change.at
        self._suspended = change.state is not aiozklock.SessionState.CONNECTED

    def _precise(self, now: float) -> bool:
        # An event delivered right after a reconnect may have happened while we were away.
        return not self._suspended and now - self.reconnected_at > 0.25

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._rewatch_loop)
            for path in self.paths:
                tg.start_soon(self._list_loop, path)

    async def _rewatch_loop(self) -> None:
        # A data change on a node (some client writing to it) consumes the watch.
        async with self._rewatch_receive:
            async for node in self._rewatch_receive:
                await self._watch_node(node)

    async def _list_loop(self, path: str) -> None:
        session = session_of(self.zk)
        server_path = session.server_path(path)
        while True:
            changed = anyio.Event()

            def wake(_: WatchedEvent, changed: anyio.Event = changed) -> None:
                changed.set()

            try:
                children = await session.call(get_children_op(server_path, wake))
            except NoNodeError:
                # Not created yet, or reaped (it is a container): wait for it.
                try:
                    if await session.call(exists_op(server_path, wake)) is None:
                        await changed.wait()
                except (ConnectionLoss, SessionExpired):
                    pass
                continue
            except (ConnectionLoss, SessionExpired):
                continue
            for name in children:
                node = f"{path}/{name}"
                if node not in self.watched:
                    self.watched.add(node)
                    await self._watch_node(node)
            await changed.wait()

    async def _watch_node(self, node: str) -> None:
        session = session_of(self.zk)
        node_path = session.server_path(node)
        # The key needs the czxid from the reply; an event may be handled before we resume.
        key: list[str] = []
        early: list[tuple[float, bool]] = []

        def deleted(now: float, precise: bool) -> None:
            if key:
                self.history.record_deletion(key[0], now, precise=precise)
            else:
                early.append((now, precise))

        def on_event(event: WatchedEvent) -> None:
            now = time.monotonic()
            if event.type is EventType.DELETED:
                self.watched.discard(node)  # a fixed name may be created again
                deleted(now, self._precise(now))
            elif event.type is EventType.CHANGED:
                self._rewatch.send_nowait(node)
            elif event.type is EventType.SESSION:
                deleted(now, False)

        while True:
            try:
                stat = await session.call(exists_op(node_path, on_event))
            except ConnectionLoss:
                continue
            except SessionExpired:
                return
            if stat is None:  # gone before we looked: when, and which one, is unknown
                session.remove_watcher(node_path, on_event)
                self.watched.discard(node)
            else:
                self.owners[node] = stat.ephemeral_owner
                self.czxids[node] = stat.czxid
                key.append(f"{node}#{stat.czxid}")
                for now, precise in early:
                    self.history.record_deletion(key[0], now, precise=precise)
            return

    async def leftovers(self, bound: float) -> list[str]:
        """The lock paths' children (full paths), waiting up to ``bound`` s for them to go."""
        deadline = time.monotonic() + bound
        found: list[str] = []
        for path in self.paths:
            found += await self._leftovers(path, deadline)
        return found

    async def _leftovers(self, path: str, deadline: float) -> list[str]:
        session = session_of(self.zk)
        server_path = session.server_path(path)
        while True:
            changed = anyio.Event()

            def wake(_: WatchedEvent, changed: anyio.Event = changed) -> None:
                changed.set()

            try:
                children = await session.call(get_children_op(server_path, wake))
            except NoNodeError:
                return []
            except (ConnectionLoss, SessionExpired):
                continue
            if not children:
                session.remove_watcher(server_path, wake)
                return []
            with anyio.move_on_after(deadline - time.monotonic()):
                await changed.wait()
            if not changed.is_set():
                session.remove_watcher(server_path, wake)
                return sorted(f"{path}/{name}" for name in children)
