"""The event loop a session belongs to, and a clear error when it is used from another.

A session's sockets, futures and tasks live in one event loop. Used from another loop or
thread, a request would be written from the wrong thread and its reply awaited where it can
never arrive: a hang that ignores every timeout, with a node left on the server. So every
entry point checks first, before anything is sent.
"""

from __future__ import annotations

import asyncio
import sys
import threading

from aiozklock._exceptions import UsageError


def _running_loop() -> object | None:
    """This thread's running asyncio loop or trio run, or None."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    trio = sys.modules.get("trio")  # not imported: no trio run can be active
    try:
        return None if trio is None else trio.lowlevel.current_trio_token()
    except RuntimeError:
        return None


class LoopGuard:
    """Remembers the thread and event loop it was made in; ``check()`` refuses any other."""

    __slots__ = ("_loop", "_thread", "_thread_name")

    def __init__(self) -> None:
        self._loop = _running_loop()
        self._thread = threading.get_ident()
        self._thread_name = threading.current_thread().name

    def check(self) -> None:
        """Raise ``UsageError`` unless called in the owning thread's owning event loop."""
        if threading.get_ident() == self._thread and _running_loop() is self._loop:
            return
        raise UsageError(self._misuse())

    def _misuse(self) -> str:
        here = threading.current_thread().name
        where = (
            f"thread {here!r}"
            if threading.get_ident() != self._thread
            else f"another event loop in thread {here!r}"
        )
        return (
            f"this aiozklock client belongs to the event loop of thread "
            f"{self._thread_name!r}, and was used from {where}: nothing was sent. Open one "
            "client per event loop, or run the call in the owning loop "
            "(anyio.from_thread.run(...) from a worker thread it started, or "
            "asyncio.run_coroutine_threadsafe(...))"
        )


__all__ = ("LoopGuard",)
