"""Waiting for a wake-up (a watch or a session state change) within an acquire's deadline.

``Wakeup`` is the one way a recipe waits for a change on the server: its event exists, and
the session state listener and every watch it arms point at it, before the read that arms
the watch, so a change between that read and the wait cannot be missed (pitfall 6).
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

import anyio

from aiozklock._exceptions import LockTimeout, NoNodeError
from aiozklock._recipes._core._retry import RETRY, Retry
from aiozklock._wire._now import uptime
from aiozklock._wire._protocol import (
    EventType,
    Stat,
    WatchedEvent,
    Watcher,
    get_children_op,
    get_data_op,
)
from aiozklock._wire._session import Session


async def wait_woken(woken: anyio.Event, deadline: float | None, message: str) -> None:
    """Wait until ``woken`` is set, or raise ``LockTimeout(message)`` at ``deadline``."""
    if deadline is None:
        await woken.wait()
        return
    with anyio.move_on_after(deadline - uptime()):
        await woken.wait()
    if not woken.is_set():
        raise LockTimeout(message)


class Wakeup:
    """One wait for a change: the watches armed by its reads and the session's state changes
    set ``event``; ``deleted`` tells a watched node's deletion. Use it as a context manager
    (leaving it forgets the listener and the watches) or ``close()`` it."""

    def __init__(self, session: Session) -> None:
        self.event = anyio.Event()
        self.deleted = False
        self._session = session
        self._paths: list[str] = []
        self._remove_listener = session.add_listener(self._wake)

    def _wake(self, event: object) -> None:
        if isinstance(event, WatchedEvent) and event.type is EventType.DELETED:
            self.deleted = True
        self.event.set()

    def watch(self, server_path: str) -> Watcher:
        """The watcher to arm on ``server_path`` (forgotten on ``close()``)."""
        self._paths.append(server_path)
        return self._wake

    async def get_data(
        self,
        server_path: str,
        *,
        generation: int | None = None,
        deadline: float | None = None,
        retry: Retry = RETRY,
    ) -> tuple[bytes, Stat] | None:
        """Read ``server_path`` with a data watch (a lost reply read again); None if it
        does not exist (then no watch is set)."""
        op = get_data_op(server_path, self.watch(server_path))
        try:
            return await retry.call(self._session, op, generation=generation, wait_until=deadline)
        except NoNodeError:
            return None

    async def get_children(
        self, server_path: str, *, generation: int | None = None, deadline: float | None = None
    ) -> list[str] | None:
        """List ``server_path`` with a child watch (a lost reply listed again); None if it
        does not exist."""
        op = get_children_op(server_path, self.watch(server_path))
        try:
            return await RETRY.call(self._session, op, generation=generation, wait_until=deadline)
        except NoNodeError:
            return None

    async def wait(self, deadline: float | None, message: str) -> None:
        """Wait for the wake-up; ``LockTimeout(message)`` at ``deadline``."""
        await wait_woken(self.event, deadline, message)

    def close(self) -> None:
        """Forget the state listener and the watches (the server's fire unheard)."""
        self._remove_listener()
        for path in self._paths:
            self._session.remove_watcher(path, self._wake)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


__all__ = ("Wakeup", "wait_woken")
