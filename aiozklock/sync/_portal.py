"""The event loop thread of a synchronous client, and one proxy task per user thread.

The async core owns a lock per *task*. A ``Portal`` runs an ordinary ``ZooKeeperClient`` in
an asyncio event loop on a daemon thread, and gives each user thread that calls it a
long-lived task there (its ``Proxy``), which runs that thread's calls one at a time. Every
call of a thread thus runs in one task, and the core's ownership per task is ownership per
thread: reentrant in the thread, ``NotLockOwner`` from another, guarded writes pass the
owner check. When the thread ends, its proxy task ends, and the core's orphan sweep
releases what it still held (and logs it), as for a task that ends holding a lock.

A call costs one ``call_soon_threadsafe`` in and one lock release out; the calling thread
blocks on a lock of its own (interruptible by signals: see ``Portal.call``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import selectors
import sys
import threading
import weakref
from collections.abc import Awaitable, Callable
from contextvars import Context
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from aiozklock._exceptions import ClientClosed, UsageError

if TYPE_CHECKING:
    from aiozklock._client import ZooKeeperClient

log = logging.getLogger(__name__)

T = TypeVar("T")

STOP_BOUND = 5.0  # close(): the loop thread ends within the client's own close bound

Job = tuple[Callable[["Proxy"], Any], bool]  # the function, and whether it is a coroutine's


class Proxy:
    """One user thread's task in the loop (see the module docstring). ``client`` is the
    async client, ``task_id`` the task's id (what the core's per-task checks take)."""

    __slots__ = (
        "__weakref__",
        "_jobs",
        "_portal",
        "_scope",
        "_wake",
        "client",
        "done",
        "error",
        "name",
        "pending",
        "task",
        "task_id",
        "value",
    )

    def __init__(self, portal: Portal, name: str) -> None:
        self._portal = portal
        self.client = portal.client
        self.name = name
        self.done = threading.Lock()  # held, but while an outcome waits for the thread
        self.done.acquire()
        self.pending = False  # a job submitted, its outcome not yet delivered
        self.value: Any = None
        self.error: BaseException | None = None
        self.task: asyncio.Task[None] | None = None
        self.task_id = 0
        self._jobs: collections.deque[Job | None] = collections.deque()
        self._wake: asyncio.Future[None] | None = None
        self._scope: anyio.CancelScope | None = None  # the jobs', cancelled to interrupt one

    # ---------------------------------------------------------------- in the loop thread

    def push(self, job: Job | None) -> None:
        """Queue a job (None: the thread ended); the task is started by the first one (and
        again if it ended by an unexpected cancellation: the thread must not hang)."""
        idle = self.task is None or self.task.done()
        if job is None and idle:
            self._portal.forget(self)
            return
        if job is not None and self._portal.closing:
            self.deliver(None, ClientClosed("the ZooKeeper client was closed"))
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

    def interrupt(self) -> None:
        """The caller gave up waiting (a signal's exception): cancel its running job (if
        it has ended meanwhile, only the wait for the next one is, which goes on)."""
        if self._scope is not None:
            self._scope.cancel()

    def deliver(self, value: Any, error: BaseException | None) -> None:
        """Hand the outcome to the waiting thread."""
        if self.pending:
            self.pending = False
            self.value, self.error = value, error
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

    async def _run(self, func: Callable[[Proxy], Any], is_async: bool) -> None:
        try:
            value = (await func(self)) if is_async else func(self)
        except asyncio.CancelledError:  # close() cancels the proxies; an interruption, ours
            scope = self._scope
            if self._portal.closing:
                self.deliver(None, ClientClosed("the ZooKeeper client was closed"))
            elif scope is not None and scope.cancel_called:
                self.deliver(None, Interrupted())  # the caller gave up on it
            else:
                self.deliver(None, RuntimeError("cancelled"))
            raise
        except BaseException as exc:
            self.deliver(None, exc)
        else:
            self.deliver(value, None)


class Interrupted(Exception):
    """The outcome of a job whose caller gave up waiting (never raised to a user)."""


class Portal:
    """The loop thread of one client epoch (see the module docstring).

    ``start()`` opens ``client`` in a new thread's event loop (raising what entering it
    raises); ``call()`` runs a job in the calling thread's proxy task; ``stop()`` closes the
    client and ends the thread; ``_fork.forsake()`` lets a forked child drop it unheard.
    """

    def __init__(self, client: ZooKeeperClient, name: str) -> None:
        self.client = client
        self.pid = os.getpid()
        self.closing = False  # set in the loop thread once close began: no job runs any more
        self._ended = False  # set once the loop thread ends: every later call fails
        self._selector = selectors.DefaultSelector()
        self.loop = asyncio.SelectorEventLoop(self._selector)
        self._stop = asyncio.Event()
        self._local = threading.local()  # each user thread's proxy
        self._proxies: set[Proxy] = set()
        self._proxies_lock = threading.Lock()
        self._opened = threading.Event()
        self._open_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._context = Context()  # the hand-over callbacks': no copy of the caller's per call
        self.thread_id = 0

    # ---------------------------------------------------------------- the user's side

    def start(self) -> None:
        """Start the loop thread and open the client in it; raises what opening raised."""
        self._thread.start()
        self._opened.wait()
        self.thread_id = self._thread.ident or 0
        if self._open_error is not None:
            self._thread.join(STOP_BOUND)
            raise self._open_error

    def call(
        self,
        func: Callable[[Proxy], Any],
        is_async: bool,
        undo: Callable[[Proxy], Awaitable[object]] | None = None,
    ) -> Any:
        """Run ``func(proxy)`` (awaited if ``is_async``) in the calling thread's task and
        return its result, or raise its exception, in the calling thread.

        If the wait is interrupted (a signal handler's exception: KeyboardInterrupt, a
        Celery time limit), the job is cancelled and waited for; if it had succeeded all
        the same, ``undo`` runs (an acquire is released), then the interruption is raised.
        """
        refuse_blocking(self.thread_id)
        proxy = self._proxy()
        # pending first, then the check: the loop thread sets _ended first, then fails the
        # pending ones; either order of the two threads leaves no caller waiting forever.
        proxy.pending = True
        if self._ended:
            proxy.pending = False
            raise ClientClosed("the ZooKeeper client was closed")
        try:
            self.loop.call_soon_threadsafe(proxy.push, (func, is_async), context=self._context)
        except RuntimeError:  # the loop is closed
            proxy.pending = False
            raise ClientClosed("the ZooKeeper client was closed") from None
        try:
            proxy.done.acquire()
        except BaseException:
            self._abandon(proxy, undo)
            raise
        error = proxy.error
        if error is not None:
            proxy.error = None
            raise error
        value, proxy.value = proxy.value, None
        return value

    def _abandon(self, proxy: Proxy, undo: Callable[[Proxy], Awaitable[object]] | None) -> None:
        """The caller was interrupted while waiting: cancel its job, wait for its end
        (bounded by the core's own cleanup bounds), and undo what it did all the same."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(proxy.interrupt)
        while True:
            try:
                proxy.done.acquire()
                break
            except BaseException:  # a second signal: the job still has to end first
                continue
        succeeded = proxy.error is None
        proxy.value = proxy.error = None
        if succeeded and undo is not None:
            with contextlib.suppress(Exception):
                self.call(undo, True)

    def _proxy(self) -> Proxy:
        proxy: Proxy | None = getattr(self._local, "proxy", None)
        if proxy is None:
            proxy = Proxy(self, threading.current_thread().name)
            with self._proxies_lock:
                self._proxies.add(proxy)
            self._local.proxy = proxy
            # The local's value dies with the thread: the ticket's finalizer then ends the
            # thread's task (no polling of threads).
            ticket = _Ticket()
            self._local.ticket = ticket
            finalizer = weakref.finalize(ticket, self._thread_ended, proxy)
            finalizer.atexit = False
        return proxy

    def proxy_if_any(self) -> Proxy | None:
        """The calling thread's proxy, if it has one (nothing is created)."""
        proxy: Proxy | None = getattr(self._local, "proxy", None)
        return proxy

    def _thread_ended(self, proxy: Proxy) -> None:
        if os.getpid() != self.pid:  # a forked child: the loop is the parent's
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed already
            self.loop.call_soon_threadsafe(proxy.push, None)

    def stop_soon(self) -> None:
        """Have the client closed and the loop thread ended, without waiting."""
        if os.getpid() == self.pid:  # in a forked child, the loop is the parent's
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self.loop.call_soon_threadsafe(self._stop.set)

    def stop(self) -> None:
        """Close the client (bounded) and end the loop thread. Idempotent."""
        self.stop_soon()
        if self._thread.ident is not None and self._thread is not threading.current_thread():
            self._thread.join(STOP_BOUND)

    # ---------------------------------------------------------------- the loop thread

    def forget(self, proxy: Proxy) -> None:
        """Forget the proxy of a thread that ended."""
        with self._proxies_lock:
            self._proxies.discard(proxy)

    def _run(self) -> None:
        loop = self.loop
        try:
            loop.run_until_complete(self._main())
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())  # name resolution's
        except BaseException:  # the daemon thread's end: nothing may escape it
            log.exception("aiozklock: the sync client's event loop failed")
        finally:
            self._ended = True
            with self._proxies_lock:
                proxies = list(self._proxies)
            for proxy in proxies:  # calls that came too late to run
                proxy.deliver(None, ClientClosed("the ZooKeeper client was closed"))
            self._opened.set()
            loop.close()

    async def _main(self) -> None:
        client = self.client
        try:
            await client.__aenter__()
        except BaseException as exc:
            self._open_error = exc
            return
        finally:
            self._opened.set()
        try:
            await self._stop.wait()
        finally:
            await self._close(client)

    async def _close(self, client: ZooKeeperClient) -> None:
        self.closing = True
        await client.close()  # fails every request; a waiter behind a local holder waits on
        with self._proxies_lock:
            tasks = [proxy.task for proxy in self._proxies if proxy.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_BOUND)
        with contextlib.suppress(Exception):  # its failure was logged when it happened
            await client.__aexit__(None, None, None)

    # ---------------------------------------------------------------- a forked child

    def descriptors(self) -> list[int]:
        """The descriptors of the loop, for a forked child to let go of: those its
        selector watches (the self-pipe's read end, the connection), the selector's own,
        and the self-pipe's write end (asyncio's private ``_csock``, if it has one)."""
        fds = [key.fd for key in self._selector.get_map().values()]
        fds.append(self._selector.fileno())
        csock = getattr(self.loop, "_csock", None)
        if csock is not None:
            fds.append(csock.fileno())
        return fds


class _Ticket:
    """What a thread's local keeps, to learn when the thread ends."""

    __slots__ = ("__weakref__",)


def refuse_blocking(loop_thread: int) -> None:
    """Raise ``UsageError`` if the calling thread must not block: it is the client's own
    loop thread (an ``on_lost`` callback, a session listener), or it runs an event loop."""
    if threading.get_ident() == loop_thread:
        raise UsageError(
            "aiozklock.sync was called from its own event loop thread (an on_lost callback "
            "or a session listener): they run in the loop and must not block. Set a flag "
            "or an event there, and act on it in your own thread"
        )
    if asyncio._get_running_loop() is not None or _in_trio():
        raise UsageError(
            "aiozklock.sync blocks the calling thread, and this thread runs an event loop "
            "(asyncio or trio), which it would stall: use the async API "
            "(async with aiozklock.connect(...) as zk), or call the synchronous one from a "
            "worker thread (anyio.to_thread.run_sync, asyncio.to_thread)"
        )


def _in_trio() -> bool:
    # trio.run() names itself in sniffio's thread-local for the thread that runs it: a
    # lookup, where asking trio (current_trio_token()) would raise outside of a run.
    sniffio = sys.modules.get("sniffio")
    return sniffio is not None and getattr(sniffio.thread_local, "name", None) == "trio"


__all__ = ("Portal", "Proxy", "refuse_blocking")
