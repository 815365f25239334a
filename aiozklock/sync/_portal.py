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
import contextlib
import logging
import os
import selectors
import sys
import threading
import weakref
from collections.abc import Awaitable, Callable
from contextvars import Context
from typing import TYPE_CHECKING, Any

from aiozklock._exceptions import ClientClosed, UsageError
from aiozklock.sync._proxy import Proxy

if TYPE_CHECKING:
    from aiozklock._client import ZooKeeperClient

log = logging.getLogger(__name__)

STOP_BOUND = 5.0  # close(): the loop thread ends within the client's own close bound


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
        # The interpreter's exit (``stop_at_exit``): asked by the exiting thread, decided in
        # the loop (``_main``); ``kept``: the live threads that hold, if the session stays.
        self._exiting = False
        self._decided = threading.Event()
        self.kept: list[tuple[str, list[str]]] = []

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

        If the call is interrupted (a signal handler's exception: KeyboardInterrupt, a
        Celery time limit), the job is cancelled and waited for; if it had succeeded all
        the same, ``undo`` runs (an acquire is released), then the interruption is raised.
        """
        refuse_blocking(self.thread_id)
        proxy = self._proxy()
        seq = proxy.seq = proxy.seq + 1
        try:
            # seq first, then the check: the loop thread sets _ended first, then answers
            # every call it has not answered; either order leaves no caller waiting.
            if self._ended:
                raise ClientClosed("the ZooKeeper client was closed")
            try:
                job = (func, is_async, seq)
                self.loop.call_soon_threadsafe(proxy.push, job, context=self._context)
            except RuntimeError:  # the loop is closed
                raise ClientClosed("the ZooKeeper client was closed") from None
            while proxy.delivered < seq:
                proxy.done.acquire()
        except BaseException:
            self._abandon(proxy, seq, undo)
            raise
        value, error = proxy.value, proxy.error
        proxy.value = proxy.error = None
        if error is not None:
            raise error
        return value

    def _abandon(
        self, proxy: Proxy, seq: int, undo: Callable[[Proxy], Awaitable[object]] | None
    ) -> None:
        """Call ``seq`` failed or was interrupted before its outcome came: have the loop
        cancel it, or answer for it, wait for that (bounded by the core's own cleanup
        bounds), and undo what it did if it succeeded all the same."""
        if proxy.delivered < seq:
            proxy.cancel_upto = seq
            try:
                self.loop.call_soon_threadsafe(proxy.interrupt, seq, context=self._context)
            except RuntimeError:  # the loop is gone: nothing of it runs any more
                return
            while proxy.delivered < seq and not self._ended:
                with contextlib.suppress(BaseException):  # a second signal: wait on
                    proxy.done.acquire()
        succeeded = proxy.delivered >= seq and proxy.error is None
        proxy.value = proxy.error = None
        if succeeded and undo is not None:
            with contextlib.suppress(Exception):
                self.call(undo, True)

    def _proxy(self) -> Proxy:
        proxy: Proxy | None = getattr(self._local, "proxy", None)
        if proxy is None:
            proxy = Proxy(self, threading.current_thread())
            with self._proxies_lock:
                self._proxies.add(proxy)
            self._local.proxy = proxy
            # The local's value dies with the thread: the ticket's finalizer then ends the
            # thread's task (no polling of threads).
            ticket = _Ticket()
            self._local.ticket = ticket
            proxy.finalizer = weakref.finalize(ticket, self._thread_ended, proxy)
            proxy.finalizer.atexit = False
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

    def stop_at_exit(self) -> list[tuple[str, list[str]]]:
        """At the interpreter's exit: close the client and end the loop thread (as
        ``stop()``), unless threads that are still alive hold through it. Those run on
        until the interpreter stops them, so the session must outlive them: it is left
        open (the loop thread serves it until the process ends, and the server expires it
        a session timeout later). Returns each such thread's name and what it holds;
        empty if the client was closed."""
        self._decided.clear()  # before the check: a loop that ends after it sets it again
        if os.getpid() != self.pid or self._ended:
            return []
        self._exiting = True  # read by the loop once it sees the stop (after this write)
        self.stop_soon()
        if not self._decided.wait(STOP_BOUND):  # the loop does not run: nothing can close
            return []
        if not self.kept:
            self._thread.join(STOP_BOUND)
        return self.kept

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
            self._decided.set()
            with self._proxies_lock:
                proxies = list(self._proxies)
            for proxy in proxies:  # calls that came too late to run
                proxy.deliver(proxy.seq, None, ClientClosed("the ZooKeeper client was closed"))
                if proxy.finalizer is not None:  # it would keep this portal alive
                    proxy.finalizer.detach()
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
            while await self._kept_at_exit():
                pass
        finally:
            await self._close(client)

    async def _kept_at_exit(self) -> bool:
        """Wait for a stop; False to close now. At the interpreter's exit, True while threads
        still alive hold (``stop_at_exit``): then only a later ``stop()`` closes. Nothing
        is awaited between this decision and the start of the close, so no holding can be
        granted in between; and once the close starts, none can be."""
        await self._stop.wait()
        if not self._exiting:
            return False
        self._exiting = False
        self.kept = self._live_holders()
        self._decided.set()
        if self.kept:
            self._stop = asyncio.Event()
        return bool(self.kept)

    def _live_holders(self) -> list[tuple[str, list[str]]]:
        """The user threads still alive that hold something through the client (lost or
        not: a loss told to a running thread stops nothing), and what each holds."""
        with self._proxies_lock:
            proxies = list(self._proxies)
        found = []
        for proxy in proxies:
            if proxy.task is not None and proxy.thread.is_alive():
                held = self.client._holds(proxy.task_id)
                if held:
                    found.append((proxy.name, held))
        return found

    async def _close(self, client: ZooKeeperClient) -> None:
        self.closing = True
        self._decided.set()  # an exit that came during another stop: nothing is kept
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


__all__ = ("Portal", "refuse_blocking")
