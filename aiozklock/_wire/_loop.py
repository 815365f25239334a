"""The event loop a session belongs to, and a clear error when it is used from another.

A session's sockets, futures and tasks live in one event loop. Used from another loop or
thread, a request would be written from the wrong thread and its reply awaited where it can
never arrive: a hang that ignores every timeout, with a node left on the server. So every
entry point checks first, before anything is sent.

Also ``Detached``: a task that belongs to an object (the client's session loop), not to the
task that started it.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import anyio

from aiozklock._exceptions import UsageError
from aiozklock._wire._connection import running_asyncio_loop

log = logging.getLogger(__name__)

T = TypeVar("T")


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

    __slots__ = ("_loop", "_thread", "_thread_name", "_trio_token")

    def __init__(self) -> None:
        self._loop = _running_loop()
        self._thread = threading.get_ident()
        self._thread_name = threading.current_thread().name
        # Owned by a trio run (not asyncio's): its token is looked up directly, without the
        # RuntimeError asyncio.get_running_loop() raises first (four times a lock cycle).
        self._trio_token: Callable[[], object] | None = None
        if self._loop is not None and not isinstance(self._loop, asyncio.AbstractEventLoop):
            self._trio_token = sys.modules["trio"].lowlevel.current_trio_token

    def check(self) -> None:
        """Raise ``UsageError`` unless called in the owning thread's owning event loop."""
        if threading.get_ident() == self._thread:
            # Every request's path: asyncio's loop without a Python call, then the full check.
            loop = asyncio._get_running_loop()
            if loop is not None:
                if loop is self._loop:
                    return
            elif self._trio_token is not None:
                try:
                    if self._trio_token() is self._loop:
                        return
                except RuntimeError:  # no trio run either
                    pass
            elif _running_loop() is self._loop:
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


class Detached(Generic[T]):
    """A task owned by an object, started at once in the running event loop, outliving the
    task that started it: no cancel scope of that task is entered, so the object can be
    closed from any task (pytest-asyncio runs a fixture's setup and teardown in two).

    ``func(started)`` runs in it, with a copy of the caller's context variables; it calls
    ``started(value)`` once ready (``wait_started()`` returns the value). An exception it
    raises is logged and kept in ``failure``, never raised into the event loop (trio would
    crash the whole run for a system task's exception). Cancelled by ``stop()``, or by the
    end of the event loop.
    """

    def __init__(
        self, func: Callable[[Callable[[T], None]], Awaitable[None]], *, name: str
    ) -> None:
        self.name = name
        self.failure: Exception | None = None
        self._func = func
        self._scope = anyio.CancelScope()
        self._value: list[T] = []  # the started() value, once given
        self._settled = anyio.Event()  # started() called, or the task ended
        self._done = anyio.Event()
        context = contextvars.copy_context()
        loop = running_asyncio_loop()
        # Kept: asyncio holds only a weak reference to its tasks.
        self._task: object
        if loop is not None:
            self._task = loop.create_task(self._run(), name=name, context=context)
        else:  # trio (anyio's only other backend); cancelled when the run ends
            import trio

            self._task = trio.lowlevel.spawn_system_task(self._run, name=name, context=context)

    async def _run(self) -> None:
        try:
            with self._scope:
                await self._func(self._started)
        except Exception as exc:
            self.failure = exc
            log.error("%s failed", self.name, exc_info=exc)
        finally:
            self._done.set()
            self._settled.set()

    def _started(self, value: T) -> None:
        self._value.append(value)
        self._settled.set()

    async def wait_started(self) -> T:
        """The value ``func`` passed to ``started``. Raises ``func``'s exception, or
        ``RuntimeError`` if it ended (or was cancelled) before it started."""
        await self._settled.wait()
        if self._value:
            return self._value[0]
        if self.failure is not None:
            raise self.failure
        raise RuntimeError(f"{self.name} ended before it started")

    async def stop(self, bound: float) -> None:
        """Cancel the task and wait until it ends, at most ``bound`` seconds (shielded: a
        cancelled caller still waits; one that does not end in time is logged and left to
        the end of the event loop). Idempotent; raises nothing."""
        self._scope.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(bound):
            await self._done.wait()
        if not self._done.is_set():
            log.warning("%s did not end within %g s of being cancelled", self.name, bound)


__all__ = ("Detached", "LoopGuard")
