"""A user thread's task in a sync client's event loop (``Proxy``): it runs the thread's
calls one at a time, so that the async core's ownership per task is ownership per thread
(see ``_portal.py``, which makes and feeds it)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import weakref
from collections.abc import Callable
from contextvars import Context
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from aiozklock._exceptions import ClientClosed

if TYPE_CHECKING:
    from aiozklock._client import ZooKeeperClient

# The function, whether it is a coroutine function, and the call's number.
Job = tuple[Callable[["Proxy"], Any], bool, int]


class Host(Protocol):
    """What a proxy needs of the loop thread that feeds it (``_portal.Portal`` is one): the
    async client and its loop, whether the client is closing, and where a proxy whose
    thread ended is forgotten. A protocol, so that this lower module does not import the
    portal that makes its proxies."""

    @property
    def client(self) -> ZooKeeperClient: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def closing(self) -> bool: ...

    def forget(self, proxy: Proxy) -> None: ...


class Proxy:
    """One user thread's task in the loop (see the module docstring). ``client`` is the
    async client, ``task_id`` the task's id (what the core's per-task checks take).

    The hand-over: the thread numbers its calls (``seq``); the loop records the last one
    it received and the last outcome it delivered, and releases ``done``; the thread waits
    until ``delivered`` reaches its call. A release nobody waited for (its caller was
    interrupted) is consumed by the next wait and ignored: a signal arriving anywhere in
    a call cannot desynchronise the two threads.
    """

    __slots__ = (
        "__weakref__",
        "_jobs",
        "_portal",
        "_running",
        "_scope",
        "_wake",
        "cancel_upto",
        "client",
        "delivered",
        "done",
        "error",
        "finalizer",
        "name",
        "received",
        "seq",
        "task",
        "task_id",
        "thread",
        "value",
    )

    def __init__(self, portal: Host, thread: threading.Thread) -> None:
        self._portal = portal
        self.client: ZooKeeperClient = portal.client
        self.thread = thread  # the user thread it serves (forgotten once that thread ends)
        self.name = thread.name
        self.done = threading.Lock()  # released when an outcome is delivered
        self.done.acquire()
        self.seq = 0  # the thread's last call
        self.received = 0  # the last call the loop received
        self.delivered = 0  # the last call whose outcome is delivered
        self.cancel_upto = 0  # calls up to this one were given up by their caller
        self.value: Any = None
        self.error: BaseException | None = None
        self.task: asyncio.Task[None] | None = None
        self.task_id = 0
        self.finalizer: weakref.finalize[Any, Any] | None = None  # fires when the thread ends
        self._jobs: collections.deque[Job | None] = collections.deque()
        self._wake: asyncio.Future[None] | None = None
        self._scope: anyio.CancelScope | None = None  # the jobs', cancelled to interrupt one
        self._running = 0  # the call being run

    # ---------------------------------------------------------------- in the loop thread

    def push(self, job: Job | None) -> None:
        """Queue a job (None: the thread ended); the task is started by the first one (and
        again if it ended by an unexpected cancellation: the thread must not hang)."""
        idle = self.task is None or self.task.done()
        if job is None:
            if idle:
                self._portal.forget(self)
                return
        else:
            self.received = job[2]
            if self._portal.closing:
                self.deliver(job[2], None, ClientClosed("the ZooKeeper client was closed"))
                return
        self._jobs.append(job)
        if idle:
            # A context of its own: the first caller's context variables must not stick to
            # every later call of the thread (nor leak into other threads' tasks).
            self._wake = None
            self.task = self._portal.loop.create_task(
                self._serve(), name=f"aiozklock thread {self.name}", context=Context()
            )
            self.task_id = id(self.task)
        elif self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def interrupt(self, seq: int) -> None:
        """The caller of ``seq`` gave up waiting (a signal's exception): cancel the job if
        it runs (a queued one is skipped, see ``cancel_upto``), or answer for it if it
        never arrived (this callback comes after its hand-over, if there was one)."""
        if self.received < seq:
            self.deliver(seq, None, Interrupted())
        elif self._running == seq and self._scope is not None:
            self._scope.cancel()

    def deliver(self, seq: int, value: Any, error: BaseException | None) -> None:
        """Hand the outcome of call ``seq`` to its thread (once)."""
        if seq <= self.delivered:
            return
        self.value, self.error = value, error
        self.delivered = seq
        with contextlib.suppress(RuntimeError):  # released already: a wait consumes it
            self.done.release()

    async def _serve(self) -> None:
        jobs = self._jobs
        while True:
            # One scope for every job (not one each: a scope costs more than the hand-over),
            # replaced only once an interruption has cancelled it.
            with anyio.CancelScope() as self._scope:
                while True:
                    if not jobs:
                        self._wake = self._portal.loop.create_future()
                        await self._wake
                        self._wake = None
                    job = jobs.popleft()
                    if job is None:  # the thread ended: what it holds is the orphan sweep's
                        self._portal.forget(self)
                        return
                    await self._run(*job)
            self._wake = None  # cancelled with the scope (the caller gave up meanwhile)

    async def _run(self, func: Callable[[Proxy], Any], is_async: bool, seq: int) -> None:
        if seq <= self.cancel_upto:  # its caller gave up before it started
            self.deliver(seq, None, Interrupted())
            return
        self._running = seq
        try:
            value = (await func(self)) if is_async else func(self)
        except asyncio.CancelledError:  # close() cancels the proxies; an interruption, ours
            scope = self._scope
            if self._portal.closing:
                self.deliver(seq, None, ClientClosed("the ZooKeeper client was closed"))
            elif scope is not None and scope.cancel_called:
                self.deliver(seq, None, Interrupted())  # the caller gave up on it
            else:
                self.deliver(seq, None, RuntimeError("cancelled"))
            raise
        except BaseException as exc:
            self.deliver(seq, None, exc)
        else:
            self.deliver(seq, value, None)
        finally:
            self._running = 0


class Interrupted(Exception):
    """The outcome of a job whose caller gave up waiting (never raised to a user)."""


__all__ = ("Host", "Interrupted", "Job", "Proxy")
