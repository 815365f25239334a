"""The watchers a session waits on, per (kind, server path), and the one place they are called."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from aiozklock._wire._protocol import FIRES, EventType, Op, WatchedEvent, Watcher, WatchKind

log = logging.getLogger(__name__)

_Registry = dict[WatchKind, dict[str, set[Watcher]]]


def _empty() -> _Registry:
    return {kind: {} for kind in WatchKind}


class WatchRegistry:
    """The watchers per (kind, server path), kept where the server keeps the watch, so that a
    reconnect can re-arm them all and a notification fires exactly the right ones."""

    __slots__ = ("_by_kind", "_client_path")

    def __init__(self, client_path: Callable[[str], str]) -> None:
        self._client_path = client_path  # server path -> the path watchers are told
        self._by_kind = _empty()

    def watching(self) -> bool:
        """Whether any watcher is registered."""
        return any(self._by_kind.values())

    def add(self, kind: WatchKind, path: str, watcher: Watcher) -> None:
        self._by_kind[kind].setdefault(path, set()).add(watcher)

    def remove(self, path: str, watcher: Watcher) -> None:
        """Forget ``watcher`` on the server path ``path``, whatever its kind."""
        for registry in self._by_kind.values():
            watchers = registry.get(path)
            if watchers is not None:
                watchers.discard(watcher)
                if not watchers:
                    del registry[path]

    def settle(self, op: Op[Any], failed: bool, result: object) -> None:
        """Move ``op``'s watcher to where the server actually keeps it, given its reply, or
        drop it if none was set."""
        if op.watcher is None or op.watch is None:
            return
        if failed:
            self.remove(op.path, op.watcher)
        elif op.watch is WatchKind.EXIST and result is not None:
            # exists() on an existing node leaves a data watch on the server. Moved only if
            # still registered: a caller gone meanwhile has removed it, for good.
            exist = self._by_kind[WatchKind.EXIST]
            waiting = exist.get(op.path)
            if waiting is not None and op.watcher in waiting:
                waiting.discard(op.watcher)
                if not waiting:
                    del exist[op.path]
                self.add(WatchKind.DATA, op.path, op.watcher)

    def count(self) -> int:
        return sum(len(cbs) for registry in self._by_kind.values() for cbs in registry.values())

    def rearm_paths(self) -> tuple[list[str], list[str], list[str]]:
        """The server paths of the data, exist and child watches, for SetWatches."""
        by_kind = self._by_kind
        return (
            list(by_kind[WatchKind.DATA]),
            list(by_kind[WatchKind.EXIST]),
            list(by_kind[WatchKind.CHILD]),
        )

    def fire(self, event_type: EventType, server_path: str) -> None:
        """A server notification: call (once each) and forget the watchers it fires."""
        fired: set[Watcher] = set()
        for kind in FIRES.get(event_type, ()):
            fired |= self._by_kind[kind].pop(server_path, set())
        _call(fired, WatchedEvent(event_type, self._client_path(server_path)))

    def fire_all_session_gone(self) -> None:
        """The session is gone: every watcher hears a SESSION event and is forgotten."""
        # Emptied first: a watcher that watches again registers for the next session.
        by_kind, self._by_kind = self._by_kind, _empty()
        for registry in by_kind.values():
            for path, watchers in registry.items():
                _call(watchers, WatchedEvent(EventType.SESSION, self._client_path(path)))


def _call(watchers: Iterable[Watcher], event: WatchedEvent) -> None:
    """Call every watcher with ``event``; one that raises is logged, the others still run."""
    for watcher in watchers:
        try:
            watcher(event)
        except Exception:
            log.exception("watcher %r raised", watcher)
