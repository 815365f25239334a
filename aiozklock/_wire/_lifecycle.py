"""The socket shell's lower half: keeps a ``SessionCore`` connected.

It connects (``connect_first``), serves each connection (``run``: reads feed
``SessionCore.receive``, the backlog and the requests queued for soon are flushed), runs the
liveness clock (``_monitor`` performs each decision of ``SessionCore.tick`` and sleeps until
the next), reconnects across the host list (closing first a session we let go of), and
tells listeners about every state change. The request API and ``close`` are ``Session``'s.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import ssl
import time
from collections.abc import Callable, Sequence
from functools import partial

import anyio

from aiozklock._acl import Credentials
from aiozklock._exceptions import AuthenticationFailed, ClientClosed, ConnectionLoss
from aiozklock._wire import _framing as framing
from aiozklock._wire._clock import Tick
from aiozklock._wire._connection import (
    STREAM_ERRORS,
    Connection,
    HandshakeRejected,
    TLSRejected,
    open_connection,
    running_asyncio_loop,
)
from aiozklock._wire._core import SessionCore, SessionState, StateChange, StateListener
from aiozklock._wire._diagnose import describe_failure
from aiozklock._wire._handshake import ExpiredAnswer, close_stale_session, explained, handshake
from aiozklock._wire._now import uptime
from aiozklock._wire._probe import unproven_reason, write_probe
from aiozklock._wire._requests import Waker

# The session logs on one logger, whichever of its modules speaks (docs/observability.md).
log = logging.getLogger("aiozklock._wire._session")

CLOSE_TIMEOUT = 1.0  # close() waits at most this long for the server to confirm


class _CallSoon:
    """Flushes the requests queued for soon from an asyncio ``call_soon`` callback: one
    handle, cancelled when everything queued is taken back."""

    __slots__ = ("_flush", "_handle", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, flush: Callable[[], None]) -> None:
        self._loop = loop
        self._flush = flush
        self._handle: asyncio.Handle | None = None

    def schedule(self) -> None:
        if self._handle is None:
            self._handle = self._loop.call_soon(self._run)

    def cancel(self) -> None:
        handle = self._handle
        if handle is not None:
            handle.cancel()
            self._handle = None

    def _run(self) -> None:
        self._handle = None
        self._flush()


class FutureWaker(asyncio.Future[None]):
    """asyncio's reply waiter: a bare future, awaited directly (an ``asyncio.Event`` makes
    a future and a coroutine more per request). A cancelled caller cancels it: ``set()``
    then does nothing."""

    __slots__ = ()

    def set(self) -> None:
        if not self.done():
            self.set_result(None)

    def wait(self) -> asyncio.Future[None]:
        return self


class _FlushTask:
    """Flushes the requests queued for soon from a task of the connection, woken by an event.
    Used where there is no cheap ``call_soon`` (trio: ``TrioToken.run_sync_soon`` writes to
    a wake-up socket on every call, and would turn a raised exception into
    ``TrioInternalError``). The task runs after the tasks already scheduled, as a
    ``call_soon`` callback does: queued requests are written alike on both."""

    __slots__ = ("_flush", "_ready")

    def __init__(self, flush: Callable[[], None]) -> None:
        self._flush = flush
        self._ready = anyio.Event()

    def schedule(self) -> None:
        self._ready.set()

    def cancel(self) -> None:
        pass  # the task finds nothing to write

    async def run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready = anyio.Event()
            self._flush()


class SessionLifecycle(SessionCore):
    """A ``SessionCore`` kept connected over anyio streams (not public API)."""

    def __init__(
        self,
        hosts: Sequence[tuple[str, int]],
        host_index: int,
        *,
        chroot: str,
        session_timeout: float,
        connect_timeout: float,
        auth: Credentials,
        tls: ssl.SSLContext | None,
        max_request_bytes: int,
    ) -> None:
        # What writes the requests queued for soon: a callback on asyncio, else a task.
        loop = running_asyncio_loop()
        scheduler: _CallSoon | _FlushTask
        self._flush_task: _FlushTask | None
        # A reply's waiter is the backend's own event: anyio's Event adds its backend lookup
        # to every request (anyio's cancel scopes cancel a wait on either alike).
        new_waker: Callable[[], Waker]
        if loop is None:
            import trio

            scheduler = self._flush_task = _FlushTask(self._write_soon)
            new_waker = trio.Event
        else:
            scheduler, self._flush_task = _CallSoon(loop, self._write_soon), None
            new_waker = partial(FutureWaker, loop=loop)
        super().__init__(
            chroot=chroot,
            session_timeout=session_timeout,
            max_request_bytes=max_request_bytes,
            now=uptime(),
            new_waker=new_waker,
            scheduler=scheduler,
        )
        self._hosts = list(hosts)
        self._host_index = host_index
        self._auth = auth  # sent on every connection, before anything else
        self._auth_failure: str | None = None  # why the server refused them (final)
        self._tls = tls
        self._connect_timeout = connect_timeout
        self._conn: Connection | None = None
        self._conn_scope: anyio.CancelScope | None = None
        self._run_scope: anyio.CancelScope | None = None
        self._state_event = anyio.Event()
        # By a token of each registration: removed in O(1) (a listener per held lock, per
        # waiter: thousands), told in the order they came.
        self._listeners: dict[object, StateListener] = {}
        # Told when a holding's proof ran out while suspended (``Tick.HORIZON``): the session
        # is kept, the holdings are not.
        self._horizon_listeners: list[Callable[[str], None]] = []
        self._closing = False
        self._finished = anyio.Event()
        self._drop_reason = "connection closed"
        # When the clock's task wakes, on time.monotonic() (it sleeps: ``_monitor``).
        self._monitor_wakes = -math.inf

    # ---------------------------------------------------------------- state

    def _set_state(
        self, state: SessionState, reason: str, *, session_id: int | None = None
    ) -> None:
        if state is self.state or self.state is SessionState.CLOSED:
            return  # CLOSED is final
        if session_id is None:
            session_id = self.session_id
        # ``at`` is a timestamp for listeners, never a deadline: time.monotonic() (its doc).
        at = time.monotonic()
        change = StateChange(state, self.state, session_id, self.generation, at, reason)
        self.state = state
        log.info(
            "session 0x%x: %s -> %s (%s)", session_id, change.previous.value, state.value, reason
        )
        self._wake_monitor()
        for listener in list(self._listeners.values()):
            try:
                listener(change)
            except Exception:
                log.exception("state listener %r raised", listener)

    def _wake_monitor(self) -> None:
        """Run the liveness clock again now (a probe's answer moves its next deadline)."""
        event, self._state_event = self._state_event, anyio.Event()
        event.set()

    def _drop_connection(self, reason: str) -> None:
        """Abandon the current connection (callable from any task, synchronously)."""
        if self._conn_scope is not None and not self._conn_scope.cancel_called:
            log.info("session 0x%x: dropping connection: %s", self.session_id, reason)
            self._drop_reason = reason
            self._conn_scope.cancel()

    def _horizon_passed(self, now: float) -> None:
        """Suspended past ``valid_until`` with holdings: they are given up, the session kept
        (waiters keep their place; it may still live, ZooKeeper keeps it up to its timeout
        at the leader, and a failover restarts that)."""
        reason = (
            f"the session was last proven alive {now - self.valid_until:.3f} s past its "
            f"horizon: no answer proving it since {now - self._clock.last_acked_send:.3f} s "
            "(the session is kept)"
        )
        log.warning("session 0x%x: holdings given up: %s", self.session_id, reason)
        for listener in list(self._horizon_listeners):
            try:
                listener(reason)
            except Exception:
                log.exception("horizon listener %r raised", listener)
        self._wake_monitor()

    def _session_gone(self, reason: str) -> None:
        """A server said the session that owns our ephemerals expired: LOST, new generation."""
        lost_id = self.forget_session(reason)
        # Listeners are told which session was lost, not the placeholder 0.
        self._set_state(SessionState.LOST, reason, session_id=lost_id)
        self._watches.fire_all_session_gone()

    # ---------------------------------------------------------------- writing

    def _write(self, conn: Connection, data: bytes) -> None:
        if not data:
            return
        try:
            conn.write(data)
        except OSError as exc:
            # The pendings fail with ConnectionLoss when the connection is torn down.
            self._drop_connection(f"write failed: {exc!r}")
            return
        wake = self.wake_bytes()  # a reply nobody awaits before an awaited one: one wake-up
        if wake != conn.wake_bytes:
            conn.wake_after(wake)

    def _write_soon(self) -> None:
        """Write what was queued for soon (the tasks that ran meanwhile are done)."""
        conn = self._conn
        if conn is not None:
            self._write(conn, self.frame_queued(uptime()))

    def _on_data(self, data: bytes) -> None:
        drop = self.receive(data, uptime())
        if drop is not None:
            self._drop_connection(drop)
            return
        conn = self._conn
        if conn is not None:
            wake = self.wake_bytes()
            if wake != conn.wake_bytes:
                conn.wake_after(wake)

    async def _monitor(self) -> None:
        """The liveness clock (``SessionCore.tick``): performs its decisions, sleeps until
        its next deadline or the next state change."""
        while True:
            now = uptime()
            conn = self._conn
            connected = self.state is SessionState.CONNECTED and conn is not None
            decision, next_at = self.tick(now, connected)
            if decision is Tick.PING and conn is not None:
                self._write(conn, framing.PING_FRAME)
            elif decision is Tick.PROBE and conn is not None:
                self._write(conn, write_probe(self, now, self._wake_monitor))
            elif decision is Tick.SILENT:
                self._drop_connection(
                    f"nothing heard for {now - self.last_heard:.3f} s in answer to our requests "
                    "(half the session timeout)"
                )
            elif decision is Tick.UNPROVEN:
                self._drop_connection(unproven_reason(self, now))
            elif decision is Tick.HORIZON:
                self._horizon_passed(now)
            event = self._state_event
            # The loop's timers run on CLOCK_MONOTONIC: a relative sleep, taken now. One
            # across a suspend wakes late by it, so the decision above re-reads uptime().
            delay = max(next_at - uptime(), 0.001)
            self._monitor_wakes = time.monotonic() + delay
            with anyio.move_on_after(delay):
                await event.wait()

    def _monitor_runs_by(self, instant: float, now: float) -> bool:
        """Whether the liveness clock's task, asleep, runs again after ``now`` and by
        ``instant`` (``uptime()``) without being woken. Its sleep counts CLOCK_MONOTONIC:
        a suspend since it fell asleep delays it by as much, in ``uptime()``."""
        wakes = now + (self._monitor_wakes - time.monotonic())
        return now < wakes <= instant

    # ---------------------------------------------------------------- connection loop

    async def run(self) -> None:
        """Serve connections until ``close()``; call after ``connect_first()``."""
        try:
            with anyio.CancelScope() as self._run_scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._monitor)
                    while not self._closing:
                        conn = self._conn
                        assert conn is not None
                        await self._serve(conn)
                        if self._closing:
                            break
                        if not await self._reconnect():
                            break
                    tg.cancel_scope.cancel()
        finally:
            self._finished.set()
            if not self._closing:
                # Cancelled from outside (a scope around the whole client): nothing serves
                # requests any more, so nothing may wait for a reply (a holder's shielded
                # release would wait forever). close() still ends the session on the server.
                self.fail_all(lambda: ClientClosed("the ZooKeeper session was cancelled"))
                self._set_state(SessionState.CLOSED, "the session's task was cancelled")

    async def _serve(self, conn: Connection) -> None:
        self._drop_reason = "connection closed"
        self.connection_started()
        with anyio.CancelScope() as self._conn_scope:
            self._set_state(SessionState.CONNECTED, f"connected to {self._current_host()}")
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(conn.flush_forever, self.timeout / 2)
                    if self._flush_task is not None:
                        tg.start_soon(self._flush_task.run)
                    await conn.read_forever(self._on_data)
            except* TimeoutError:  # before OSError, its base class
                self._drop_reason = "write blocked for half the session timeout"
            except* STREAM_ERRORS as group:
                self._drop_reason = f"connection error: {group.exceptions[0]!r}"
            except* Exception:
                log.exception("session 0x%x: protocol error", self.session_id)
                self._drop_reason = "protocol error"
        self._conn_scope = None
        self._conn = None
        # Before the first yield: nobody may see CONNECTED without a connection (``_submit``
        # would spin without yielding: no connection to write to, yet "connected").
        self.fail_all(lambda: ConnectionLoss(f"connection lost: {self._drop_reason}"))
        if not self._closing:
            self._set_state(SessionState.SUSPENDED, self._drop_reason)
        with anyio.CancelScope(shield=True):
            await conn.aclose()

    async def _reconnect(self) -> bool:
        """Reconnect (same session if still alive, else a new one). False when closing."""
        delay = 0.0
        while not self._closing:
            try:
                bound = self.reconnect_bound(len(self._hosts), self._connect_timeout)
                self._conn = await self._open(bound)
                return True
            except AuthenticationFailed as exc:  # an OSError: before STREAM_ERRORS
                await self._give_up_refused(exc)
                return False
            except TLSRejected as exc:
                # Kept trying: certificates may be fixed while the session lives.
                log.warning(
                    "reconnect to %s failed: %s (caused by %r)",
                    self._current_host(),
                    exc,
                    exc.__cause__,
                )
            except (TimeoutError, HandshakeRejected, *STREAM_ERRORS) as exc:
                log.debug("reconnect to %s failed: %s", self._current_host(), describe_failure(exc))
            # The first retry is immediate (e.g. a new session right after an expiry answer).
            await anyio.sleep(delay * (0.5 + random.random() / 2))
            delay = min(max(delay * 2, 0.02), self.reconnect_cap())
        return False

    def _current_host(self) -> str:
        host, port = self._hosts[self._host_index]
        return f"{host}:{port}"

    async def _open(self, bound: float) -> Connection:
        """Connect to the next host and complete a handshake within ``bound`` seconds,
        closing first a session we let go of. Raises ``TimeoutError`` saying how far it
        got, or what ``handshake`` raises."""
        self._host_index = (self._host_index + 1) % len(self._hosts)
        host, port = self._hosts[self._host_index]
        conn: Connection | None = None
        try:
            with anyio.fail_after(bound), explained(self._tls):
                if self.stale_id is not None:
                    await close_stale_session(self, host, port, self._tls)
                conn = await open_connection(host, port, self._tls)
                answer, _, sent_at = await handshake(conn, self, self._auth)
        except BaseException as exc:
            if isinstance(exc, ExpiredAnswer):
                self._session_gone("session expired (server answer at reconnect)")
            if conn is not None:
                self._clock.sent_at.clear()
                await conn.aclose()
            if isinstance(exc, TimeoutError):
                if conn is None:
                    raise TimeoutError(f"no connection within {bound:g} s") from None
                raise TimeoutError(f"no answer to the handshake within {bound:g} s") from None
            raise
        self.attached(answer, sent_at, uptime())
        return conn

    async def _give_up_refused(self, error: AuthenticationFailed) -> None:
        """The credentials were refused: final. Close the session (holders are told,
        everything waiting fails with ``error``) and its server side, bounded."""
        self._auth_failure = str(error)
        self._closing = True
        self.fail_all(lambda: AuthenticationFailed(str(error)))
        self._set_state(SessionState.CLOSED, f"authentication failed: {error}")
        self._watches.fire_all_session_gone()
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT):
            await self._close_session_elsewhere()
        self.stale_closed()

    async def _close_session_elsewhere(self) -> None:
        """Close the stale session, trying every host until one confirms."""
        session_id = self.stale_id
        while self.stale_id is not None:
            for host, port in self._hosts:
                try:
                    with explained(self._tls):
                        await close_stale_session(self, host, port, self._tls)
                    return
                except (HandshakeRejected, TLSRejected, *STREAM_ERRORS) as exc:
                    # E.g. a re-attach still in the network took the session from us.
                    log.info("closing session 0x%x via %s:%d: %r", session_id, host, port, exc)
            await anyio.sleep(0.05)
