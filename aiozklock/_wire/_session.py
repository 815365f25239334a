"""A ZooKeeper session on anyio streams.

One ``Session`` is one logical ZooKeeper session at a time, kept alive across connections:

* framing and xid matching, many requests in flight (pipelined in one write when asked);
  requests are written synchronously by the task that makes them (no lock, no task, no
  yield), so a round trip costs one write and one read;
* its own liveness clock: ``last_heard`` (any frame), pings after a sixth of the negotiated
  timeout idle, and two deadlines — SUSPENDED when nothing was heard for half the timeout
  (or at once on EOF/RST), LOST once the session can no longer be alive on the server;
* reconnect with the same id/password across the host list, authenticating (``auth=``) and
  re-arming *every* watch with SetWatches before anything else is sent, then telling every
  listener; credentials the server refuses close the session for good;
* no blind resend: a request whose connection died after it was written fails with
  ``ConnectionLoss`` (outcome unknown), as does one the server left unanswered while it
  answered a later one; requests not yet written simply wait for a connection;
* ``generation``: a number that changes whenever the session that owns our ephemeral nodes
  is gone, so that callers can bind a request to "the session my node lives in".

The byte stream of each connection is ``_connection``'s; the watchers, ``_watches``'.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import logging
import random
import ssl
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel

from aiozklock._acl import Credentials
from aiozklock._exceptions import (
    AiozklockError,
    AuthenticationFailed,
    ClientClosed,
    ConnectionLoss,
    SessionExpired,
    ZooKeeperUnavailable,
    error_for_code,
)
from aiozklock._wire import _protocol as proto
from aiozklock._wire._connection import (
    STREAM_ERRORS,
    Connection,
    HandshakeRejected,
    TLSRejected,
    describe_tls_failure,
    is_tls_rejection,
    open_connection,
    running_asyncio_loop,
)
from aiozklock._wire._diagnose import describe_failure, per_host
from aiozklock._wire._limits import DEFAULT_MAX_REQUEST_BYTES, FRAME_OVERHEAD, oversized
from aiozklock._wire._loop import LoopGuard
from aiozklock._wire._protocol import FIRES, EventType, Op, Watcher
from aiozklock._wire._watches import WatchRegistry

log = logging.getLogger(__name__)

T = TypeVar("T")

CLOSE_TIMEOUT = 1.0  # close() waits at most this long for the server to confirm
LOST_MARGIN = 0.1  # LOST this fraction of the timeout before the server may expire us
SILENCE = 1 / 2  # SUSPENDED after this fraction of the timeout without a frame
# An idle connection is pinged after this fraction: the reply then has a third of the timeout
# before silence is declared (as in Java's client), not just a sixth (a JVM pause).
PING_IDLE = 1 / 6


class SessionState(enum.Enum):
    """A client's session state (``zk.state``, ``StateChange.state``)."""

    CONNECTING = "CONNECTING"  # before the first session was established
    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"  # connection lost or silent; the session may still be alive
    LOST = "LOST"  # the session is gone; a new one is being established
    CLOSED = "CLOSED"


@dataclass(frozen=True, slots=True)
class StateChange:
    """One session state change, as listeners (``zk.add_listener``) see it."""

    state: SessionState
    previous: SessionState
    session_id: int  # the session this change is about: on LOST, the one that was lost
    generation: int  # changes whenever the session that owns our ephemeral nodes is gone
    at: float  # time.monotonic()
    reason: str


StateListener = Callable[[StateChange], None]


ReplyCallback = Callable[[Any, "AiozklockError | None"], None]


class _Pending:
    __slots__ = ("error", "event", "on_done", "op", "result", "xid")

    def __init__(
        self, xid: int, op: Op[Any], on_done: ReplyCallback | None, *, awaited: bool
    ) -> None:
        self.xid = xid
        self.op = op
        self.on_done = on_done  # a request sent without waiting: told instead of a waiter
        # Replies come in order: a pipeline's caller awaits only its last one.
        self.event = anyio.Event() if awaited else None
        self.result: Any = None
        self.error: AiozklockError | None = None

    def finish(self) -> None:
        """The reply, or the failure, is in: wake the waiter or call ``on_done``."""
        if self.on_done is None:
            if self.event is not None:
                self.event.set()
            return
        try:
            self.on_done(self.result, self.error)
        except Exception:
            log.exception("a reply callback raised")


class _Soon:
    """Requests queued by ``send_soon``: not written yet, so not numbered yet."""

    __slots__ = ("generation", "on_done", "ops")

    def __init__(self, ops: Sequence[Op[Any]], generation: int, on_done: ReplyCallback) -> None:
        self.ops = ops
        self.generation = generation
        self.on_done = on_done

    def fail(self, error_factory: Callable[[], AiozklockError]) -> None:
        """Never written: tell ``on_done`` that each request failed."""
        for _ in self.ops:
            try:
                self.on_done(None, error_factory())
            except Exception:
                log.exception("a reply callback raised")


class Session:
    """The wire-level session. Created and run by the client; not public API."""

    def __init__(
        self,
        hosts: Sequence[tuple[str, int]],
        *,
        chroot: str = "",
        session_timeout: float,
        connect_timeout: float,
        auth: Credentials = (),
        tls: ssl.SSLContext | None = None,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    ) -> None:
        self._hosts = list(hosts)
        # The servers' jute.maxbuffer: a longer frame is refused here, before it is sent.
        self.max_request_bytes = max_request_bytes
        self._max_body = max_request_bytes - FRAME_OVERHEAD
        self._auth = auth  # sent on every connection, before anything else
        self._auth_failure: str | None = None  # why the server refused them (final)
        self._tls = tls
        self._host_index = random.randrange(len(self._hosts))
        self.chroot = chroot
        self._requested_timeout_ms = int(session_timeout * 1000)
        self._connect_timeout = connect_timeout
        # Negotiated timeout in seconds (the server may clamp what we asked for).
        self.timeout = session_timeout
        self.session_id = 0
        self._password = bytes(16)
        self.generation = 0
        self.state = SessionState.CONNECTING
        self.last_zxid = 0
        now = time.monotonic()
        self.last_heard = now  # any frame from the server
        self.last_sent = now
        self.last_acked_send = now  # send time of the newest request answered
        self._sent_at: collections.deque[float] = collections.deque()  # per reply, FIFO
        self._pending: dict[int, _Pending] = {}
        self._written: collections.deque[_Pending] = collections.deque()  # in wire order
        self._soon: list[_Soon] = []  # written just before the loop next waits
        # What writes them: a callback on asyncio (cancelled if taken back), else a task.
        self._asyncio = running_asyncio_loop()
        self._soon_handle: asyncio.Handle | None = None
        self._soon_ready = anyio.Event()
        self._xid = 0
        self._conn: Connection | None = None
        self._read_buffer = bytearray()  # the current connection's incomplete frame
        self._conn_scope: anyio.CancelScope | None = None
        self._run_scope: anyio.CancelScope | None = None
        self._state_event = anyio.Event()
        self._listeners: list[StateListener] = []
        self._watches = WatchRegistry(self.client_path)
        self.check_loop = LoopGuard().check  # raises UsageError outside the owning loop
        self._closing = False
        self._finished = anyio.Event()
        # A session we gave up on by our own clock while the server may still keep it (or
        # revive it after a restart): closed explicitly once we can, so its nodes go at once.
        self._stale_session: tuple[int, bytes] | None = None
        self._stale_answered_at: float | None = None  # a server first answered for it

    # ---------------------------------------------------------------- public surface

    def add_listener(self, listener: StateListener) -> Callable[[], None]:
        """Call ``listener`` on every state change (synchronously, in the session's task)."""
        self._listeners.append(listener)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return remove

    @property
    def password(self) -> bytes:
        """The session password (with ``session_id``, what re-attaches to the session)."""
        return self._password

    @property
    def valid_until(self) -> float:
        """The ``time.monotonic()`` instant before which the server cannot have expired this
        session: it heard our newest answered request no earlier than we sent it, and expires
        a session ``timeout`` after it last heard from it (less our safety margin)."""
        return self.last_acked_send + self.timeout * (1 - LOST_MARGIN)

    def watcher_count(self) -> int:
        return self._watches.count()

    def server_path(self, path: str) -> str:
        if not self.chroot:
            return path
        return self.chroot if path == "/" else self.chroot + path

    def client_path(self, server_path: str) -> str:
        if self.chroot and server_path.startswith(self.chroot):
            return server_path[len(self.chroot) :] or "/"
        return server_path

    def fits(self, op: Op[Any]) -> bool:
        """Whether ``op`` may be sent: its frame is at most ``max_request_bytes``."""
        return len(op.body) <= self._max_body

    def _refuse_oversized(self, ops: Sequence[Op[Any]]) -> None:
        """Raise ``InvalidArgument`` if any of ``ops`` is too large to send. Checked before
        anything of ``ops`` is numbered, registered or written: a refused request leaves no
        trace, and the server never sees the frame it would drop the connection for."""
        limit = self._max_body
        for op in ops:
            if len(op.body) > limit:
                raise oversized(op, self.max_request_bytes, self.client_path(op.path))

    async def call(
        self, op: Op[T], *, generation: int | None = None, wait_until: float | None = None
    ) -> T:
        """Send one request and return its parsed reply (or raise its error). Raises
        ``InvalidArgument``, sending nothing, if it is longer than ``max_request_bytes``."""
        self.check_loop()
        if len(op.body) > self._max_body:
            self._refuse_oversized((op,))
        # Requests are written without yielding: a caller cancelled already sends nothing.
        await anyio.lowlevel.checkpoint_if_cancelled()
        (pending,) = await self._submit((op,), generation, wait_until)
        await self._await_replies((pending,))
        if pending.error is not None:
            raise pending.error
        result: T = pending.result
        return result

    async def pipeline(
        self,
        ops: Sequence[Op[Any]],
        *,
        generation: int | None = None,
        wait_until: float | None = None,
    ) -> list[Any]:
        """Send several requests in one write; return each reply or its exception, in order.

        ZooKeeper executes a session's requests in order, so the replies describe the state
        after each request in turn. Raises ``InvalidArgument``, sending none, if one of them
        is longer than ``max_request_bytes``.
        """
        self.check_loop()
        if not ops:
            return []
        self._refuse_oversized(ops)
        await anyio.lowlevel.checkpoint_if_cancelled()
        pendings = await self._submit(ops, generation, wait_until)
        await self._await_replies(pendings)
        return [p.error if p.error is not None else p.result for p in pendings]

    async def wait_connected(
        self, generation: int | None = None, until: float | None = None
    ) -> None:
        """Wait until CONNECTED (in ``generation`` if given).

        Raises ``ClientClosed`` once closed, ``SessionExpired`` when ``generation`` is gone,
        and ``TimeoutError`` at ``until`` (a ``time.monotonic()`` deadline).
        """
        while True:
            if self._auth_failure is not None:
                raise AuthenticationFailed(self._auth_failure)
            if self.state is SessionState.CLOSED or self._closing:
                raise ClientClosed("the ZooKeeper client is closed")
            if generation is not None and generation != self.generation:
                raise SessionExpired(f"session generation {generation} is gone")
            if self.state is SessionState.CONNECTED and self._conn is not None:
                return
            event = self._state_event
            if until is None:
                await event.wait()
            else:
                with anyio.move_on_after(until - time.monotonic()):
                    await event.wait()
                if not event.is_set():
                    raise TimeoutError("not connected to ZooKeeper in time")

    # ---------------------------------------------------------------- requests

    async def _submit(
        self, ops: Sequence[Op[Any]], generation: int | None, wait_until: float | None
    ) -> list[_Pending]:
        while True:
            pendings = self._send_now(ops, generation)
            if pendings is not None:
                return pendings
            await self.wait_connected(generation, wait_until)

    def send(self, ops: Sequence[Op[Any]], *, generation: int, on_done: ReplyCallback) -> bool:
        """Write ``ops`` now and return without waiting for their replies; False (nothing
        sent) if not connected now. ZooKeeper runs a session's requests in order, so every
        later request of this session is ordered after them.

        ``on_done(result, error)`` is called for each reply, or with the failure
        (``ConnectionLoss``, ``SessionExpired``, ``ClientClosed``), synchronously by the
        session: it must neither block nor raise. Raises ``SessionExpired`` if
        ``generation`` is gone, ``UsageError`` outside the session's event loop,
        ``InvalidArgument`` (nothing sent) if a request is longer than ``max_request_bytes``.
        """
        self.check_loop()
        self._refuse_oversized(ops)
        return self._send_now(ops, generation, on_done=on_done) is not None

    def send_soon(
        self, ops: Sequence[Op[Any]], *, generation: int, on_done: ReplyCallback
    ) -> Callable[[], bool] | None:
        """Like ``send``, but written just before the event loop next waits (or with this
        session's next request, in the same write): a request made meanwhile follows it,
        and queued ones keep their order, less any taken back.

        Returns ``take_back()``, which unsends ``ops`` if they are not written yet (True:
        then ``on_done`` is never called); None (nothing queued) if not connected now.
        Raises ``SessionExpired`` if ``generation`` is gone, ``UsageError`` outside the
        session's event loop, ``InvalidArgument`` (nothing queued) if a request is longer
        than ``max_request_bytes``.
        """
        self.check_loop()
        self._refuse_oversized(ops)
        if self._conn is None or self.state is not SessionState.CONNECTED:
            return None
        if generation != self.generation:
            raise SessionExpired(f"session generation {generation} is gone")
        soon = _Soon(ops, generation, on_done)
        self._soon.append(soon)
        if self._asyncio is None:
            self._soon_ready.set()
        elif self._soon_handle is None:
            self._soon_handle = self._asyncio.call_soon(self._write_soon)

        def take_back() -> bool:
            if soon not in self._soon:
                return False
            self._soon.remove(soon)
            if not self._soon and self._soon_handle is not None:
                self._soon_handle.cancel()
                self._soon_handle = None
            return True

        return take_back

    def _send_now(
        self,
        ops: Sequence[Op[Any]],
        generation: int | None,
        *,
        closing: bool = False,
        on_done: ReplyCallback | None = None,
    ) -> list[_Pending] | None:
        """Write ``ops`` now if connected (None if not), after what ``send_soon`` queued.
        Synchronous: nothing can change the connection or the generation between the
        checks and the write."""
        conn = self._conn
        if conn is None or (self.state is not SessionState.CONNECTED and not closing):
            return None
        if generation is not None and generation != self.generation:
            raise SessionExpired(f"session generation {generation} is gone")
        frames: list[bytes] = []
        now = time.monotonic()
        if self._soon:
            self._frame_soon(frames, now)
        pendings = self._frame(ops, on_done, frames, now)
        self._write(conn, frames, now)
        return pendings

    def _frame(
        self,
        ops: Sequence[Op[Any]],
        on_done: ReplyCallback | None,
        frames: list[bytes],
        now: float,
    ) -> list[_Pending]:
        """Number ``ops``, expect their replies, and add their frames to ``frames``."""
        pendings = []
        last = ops[-1] if on_done is None else None
        for op in ops:
            self._xid = xid = (self._xid + 1) & 0x7FFFFFFF or 1
            pending = _Pending(xid, op, on_done, awaited=op is last)
            self._pending[xid] = pending
            self._written.append(pending)
            pendings.append(pending)
            if op.watcher is not None and op.watch is not None:
                self._watches.add(op.watch, op.path, op.watcher)
            frames.append(proto.frame(xid, op.body))
            self._sent_at.append(now)
        return pendings

    def _frame_soon(self, frames: list[bytes], now: float) -> None:
        """Frame what ``send_soon`` queued. All of it is of the current generation: a new one
        comes only after ``_fail_pending`` has emptied the queue."""
        queued, self._soon = self._soon, []
        for soon in queued:
            self._frame(soon.ops, soon.on_done, frames, now)

    def _write(self, conn: Connection, frames: list[bytes], now: float) -> None:
        if not frames:
            return
        try:
            conn.write(b"".join(frames) if len(frames) > 1 else frames[0])
        except OSError as exc:
            # The pendings fail with ConnectionLoss when the connection is torn down.
            self._drop_connection(f"write failed: {exc!r}")
        self.last_sent = now

    def _write_soon(self) -> None:
        """Write what ``send_soon`` queued (the tasks that ran meanwhile are done)."""
        self._soon_handle = None
        conn = self._conn
        if self._soon and conn is not None:
            frames: list[bytes] = []
            now = time.monotonic()
            self._frame_soon(frames, now)
            self._write(conn, frames, now)

    async def _write_soon_forever(self) -> None:
        """``_write_soon`` whenever ``send_soon`` asks (where there is no ``call_soon``)."""
        while True:
            await self._soon_ready.wait()
            self._soon_ready = anyio.Event()
            self._write_soon()

    async def _await_replies(self, pendings: Sequence[_Pending]) -> None:
        last = pendings[-1].event
        assert last is not None  # sent to be awaited
        try:
            # Replies come in request order (one the server skipped fails when a later one
            # is answered), and a dropped connection fails every pending at once: when the
            # last one is answered, all are.
            await last.wait()
        except BaseException:
            # Cancelled: forget what is still in flight; late replies are then skipped.
            for pending in pendings:
                if self._pending.get(pending.xid) is pending:
                    self._forget(pending)
            raise

    def _forget(self, pending: _Pending) -> None:
        self._pending.pop(pending.xid, None)
        op = pending.op
        if op.watcher is not None and op.watch is not None:
            self.remove_watcher(op.path, op.watcher)

    def remove_watcher(self, path: str, watcher: Watcher) -> None:
        """Forget ``watcher`` on the server path ``path`` (the server's watch fires unheard)."""
        self._watches.remove(path, watcher)

    # ---------------------------------------------------------------- state

    def _set_state(
        self, state: SessionState, reason: str, *, session_id: int | None = None
    ) -> None:
        if state is self.state or self.state is SessionState.CLOSED:
            return  # CLOSED is final
        if session_id is None:
            session_id = self.session_id
        change = StateChange(
            state, self.state, session_id, self.generation, time.monotonic(), reason
        )
        self.state = state
        log.info(
            "session 0x%x: %s -> %s (%s)",
            session_id,
            change.previous.value,
            state.value,
            reason,
        )
        event, self._state_event = self._state_event, anyio.Event()
        event.set()
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:
                log.exception("state listener %r raised", listener)

    _drop_reason = "connection closed"

    def _drop_connection(self, reason: str) -> None:
        """Abandon the current connection (callable from any task, synchronously)."""
        if self._conn_scope is not None and not self._conn_scope.cancel_called:
            log.info("session 0x%x: dropping connection: %s", self.session_id, reason)
            self._drop_reason = reason
            self._conn_scope.cancel()

    def _fail_pending(self, error_factory: Callable[[], AiozklockError]) -> None:
        queued, self._soon = self._soon, []
        for soon in queued:
            soon.fail(error_factory)
        pendings = list(self._pending.values())
        self._pending.clear()
        self._written.clear()
        self._sent_at.clear()
        for pending in pendings:
            pending.error = error_factory()
            self._watches.settle(pending.op, pending.error is not None, pending.result)
            pending.finish()

    def _session_gone(self, reason: str, *, stale: bool) -> None:
        """The session that owns our ephemerals is gone (or given up): LOST, new generation."""
        if stale and self.session_id:
            self._mark_stale(self.session_id, self._password)
        self._fail_pending(lambda: SessionExpired(reason))
        lost_id, self.session_id = self.session_id, 0
        self._password = bytes(16)
        self.generation += 1
        # Listeners are told which session was lost, not the placeholder 0.
        self._set_state(SessionState.LOST, reason, session_id=lost_id)
        self._watches.fire_all_session_gone()

    # ---------------------------------------------------------------- connection loop

    async def connect_first(self) -> None:
        """Establish the first session, within ``connect_timeout``. Raises
        ``ZooKeeperUnavailable`` saying, for each host, why it could not be used (the last
        failure of each: refused, timed out, not ZooKeeper...)."""
        deadline = time.monotonic() + self._connect_timeout
        attempt = max(self._connect_timeout / len(self._hosts), min(1.0, self._connect_timeout))
        failures: dict[tuple[str, int], str] = {}  # the last one of each host
        tls_rejected: set[int] = set()  # indexes of the hosts that failed TLS for good
        delay = 0.05
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ZooKeeperUnavailable(
                    f"no ZooKeeper server answered within {self._connect_timeout:g} s: "
                    + per_host(self._hosts, failures)
                )
            try:
                self._conn = await self._open(min(attempt, remaining))
            except AuthenticationFailed as exc:  # an OSError: before STREAM_ERRORS
                await self._give_up_refused(exc)
                raise
            except TLSRejected as exc:
                failures[self._hosts[self._host_index]] = str(exc)
                # The same answer again is certain: once every host gave it, fail now.
                tls_rejected.add(self._host_index)
                if len(tls_rejected) == len(self._hosts):
                    raise ZooKeeperUnavailable(
                        "TLS failed with every server: " + per_host(self._hosts, failures)
                    ) from exc.__cause__
                continue
            except (TimeoutError, HandshakeRejected, *STREAM_ERRORS) as exc:
                failures[self._hosts[self._host_index]] = describe_failure(exc)
                await anyio.sleep(min(delay, max(deadline - time.monotonic(), 0)))
                delay = min(delay * 2, 0.5)
                continue
            return

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
                self._fail_pending(lambda: ClientClosed("the ZooKeeper session was cancelled"))
                self._set_state(SessionState.CLOSED, "the session's task was cancelled")

    async def _serve(self, conn: Connection) -> None:
        self._drop_reason = "connection closed"
        self._read_buffer = bytearray()
        with anyio.CancelScope() as self._conn_scope:
            self._set_state(SessionState.CONNECTED, f"connected to {self._current_host()}")
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(conn.flush_forever, self.timeout / 2)
                    if self._asyncio is None:
                        tg.start_soon(self._write_soon_forever)
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
        self._fail_pending(lambda: ConnectionLoss(f"connection lost: {self._drop_reason}"))
        if not self._closing:
            self._set_state(SessionState.SUSPENDED, self._drop_reason)
        with anyio.CancelScope(shield=True):
            await conn.aclose()

    async def _reconnect(self) -> bool:
        """Reconnect (same session if still alive, else a new one). False when closing."""
        delay = 0.0
        while not self._closing:
            # Short attempts: a server that accepts but does not answer (frozen, or just
            # restarted) must not eat the session's remaining life.
            attempt = min(
                max(self.timeout / (2 * (len(self._hosts) + 1)), 0.25), self._connect_timeout
            )
            try:
                self._conn = await self._open(attempt)
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
            delay = min(max(delay * 2, 0.02), 0.5)
        return False

    def _current_host(self) -> str:
        host, port = self._hosts[self._host_index]
        return f"{host}:{port}"

    async def _open(self, bound: float) -> Connection:
        """Connect to the next host and complete a handshake within ``bound`` seconds.
        Raises ``TimeoutError`` saying how far it got, or what ``_handshake`` raises."""
        self._host_index = (self._host_index + 1) % len(self._hosts)
        host, port = self._hosts[self._host_index]
        conn: Connection | None = None
        try:
            with anyio.fail_after(bound), self._explained():
                if self._stale_session is not None:
                    await self._close_stale_session(host, port)
                conn = await open_connection(host, port, self._tls)
                handshake, session_id, sent_at = await self._handshake(conn)
        except BaseException as exc:
            if conn is not None:
                self._sent_at.clear()
                await conn.aclose()
            if isinstance(exc, TimeoutError):
                if conn is None:
                    raise TimeoutError(f"no connection within {bound:g} s") from None
                raise TimeoutError(f"no answer to the handshake within {bound:g} s") from None
            raise
        self.session_id = handshake.session_id
        self._password = handshake.password
        self.timeout = handshake.timeout_ms / 1000
        self.last_heard = time.monotonic()
        # The server refreshed the session when it read our ConnectRequest, no earlier than we
        # sent it: the safe base for our own expiry deadline.
        self.last_sent = self.last_acked_send = sent_at
        if not session_id:
            log.info("new session 0x%x, timeout %.3f s", self.session_id, self.timeout)
            if handshake.timeout_ms != self._requested_timeout_ms:
                # Loss detection and re-grants run on the server's value, not the one asked.
                log.warning(
                    "session 0x%x: session_timeout %g s was clamped by the server to %g s",
                    self.session_id,
                    self._requested_timeout_ms / 1000,
                    self.timeout,
                )
        return conn

    async def _handshake(self, conn: Connection) -> tuple[proto.Handshake, int, float]:
        """Attach our session (or ask for a new one), authenticate, re-arm the watches.
        Returns the answer, the session id we asked for and when we asked; raises
        ``HandshakeRejected`` (also when the session expired, or our own clock gave it up
        meanwhile), ``AuthenticationFailed`` or a stream error."""
        session_id, password = self.session_id, self._password
        sent_at = time.monotonic()
        conn.write(
            proto.connect_frame(self.last_zxid, self._requested_timeout_ms, session_id, password)
        )
        await conn.drain()
        handshake = _parse_handshake(await conn.read_frame())
        if handshake.expired:
            if session_id:
                self._session_gone("session expired (server answer at reconnect)", stale=False)
            raise HandshakeRejected("session expired")
        await self._authenticate(conn, handshake)
        if session_id:
            # Same session: re-arm every watch before any other request.
            self._sent_at.clear()
            await self._rearm_watches(conn)
        if session_id != self.session_id:
            # Our own clock gave the session up while we were reconnecting.
            raise HandshakeRejected("session given up during the handshake")
        return handshake, session_id, sent_at

    async def _authenticate(self, conn: Connection, handshake: proto.Handshake) -> None:
        """Send each credential and wait for its answer, before any other request. The
        server answers AuthFailed and closes the connection if it refuses one: then the
        session it attached is marked stale (to be closed) and ``AuthenticationFailed``
        raised."""
        for scheme, credential in self._auth:
            conn.write(proto.auth_frame(scheme, credential))
            await conn.drain()
            reply = await conn.read_frame()
            xid, _, err = proto.REPLY_HEADER.unpack_from(reply, 0)
            if xid != proto.AUTH_XID:
                raise HandshakeRejected(f"unexpected reply (xid {xid}) to authentication")
            if err:
                self._mark_stale(handshake.session_id, handshake.password)
                who = credential.split(b":", 1)[0].decode(errors="replace")
                user = f" for user {who!r}" if scheme == "digest" else ""
                raise AuthenticationFailed(
                    f"ZooKeeper refused the {scheme!r} credentials{user} (code {err}); "
                    "the client does not retry with them"
                )

    async def _give_up_refused(self, error: AuthenticationFailed) -> None:
        """The credentials were refused: final. Close the session (holders are told,
        everything waiting fails with ``error``) and its server side, bounded."""
        self._auth_failure = str(error)
        self._closing = True
        self._fail_pending(lambda: AuthenticationFailed(str(error)))
        self._set_state(SessionState.CLOSED, f"authentication failed: {error}")
        self._watches.fire_all_session_gone()
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT):
            await self._close_session_elsewhere()
        self._stale_session = None

    @contextlib.contextmanager
    def _explained(self) -> Iterator[None]:
        """Turn an end of stream before the handshake's answer into ``HandshakeRejected``,
        and a TLS failure that retrying cannot cure into ``TLSRejected``, saying what the
        likely cause is."""
        try:
            yield
        except anyio.EndOfStream:
            if self._tls is None:
                hint = "if it is a TLS port (secureClientPort), connect with ssl="
            else:
                hint = "does it require a client certificate (ssl.clientAuth=need)?"
            raise HandshakeRejected(
                "closed the connection without answering (a server that lags behind the "
                f"transactions we have seen does so; {hint})"
            ) from None
        except ssl.SSLError as exc:
            if not is_tls_rejection(exc):
                raise
            reason = describe_tls_failure(exc)
            raise TLSRejected(reason) from exc

    async def _rearm_watches(self, conn: Connection) -> None:
        frames = proto.set_watches_frames(
            self.last_zxid, *self._watches.rearm_paths(), self.max_request_bytes
        )
        if frames:
            self._sent_at.extend(time.monotonic() for _ in frames)
            conn.write(b"".join(frames))
            await conn.drain()

    def _mark_stale(self, session_id: int, password: bytes) -> None:
        """Close this session, no longer ours, at the next connection (``_open``)."""
        self._stale_session = (session_id, password)
        self._stale_answered_at = None

    async def _close_stale_session(self, host: str, port: int) -> None:
        """Close ``_stale_session`` through ``host``, however long ago we gave it up: a
        server keeps a session a timeout after it last heard from it, and one restarted with
        its data revives the sessions it had and re-arms their expiry, however long it was
        down. An "expired" answer leaves nothing to close. Raises what a handshake raises.

        Bounded: once servers have answered for it for a whole session timeout without the
        close going through, the session is left to the server's expiry (logged)."""
        assert self._stale_session is not None
        session_id, password = self._stale_session
        answered_at = self._stale_answered_at
        if answered_at is not None and time.monotonic() - answered_at > self.timeout:
            log.warning(
                "could not close session 0x%x that our clock gave up; its nodes stay until "
                "the server expires it",
                session_id,
            )
            self._stale_session = None
            return
        conn = await open_connection(host, port, self._tls)
        try:
            conn.write(
                proto.connect_frame(
                    self.last_zxid, self._requested_timeout_ms, session_id, password
                )
            )
            await conn.drain()
            handshake = _parse_handshake(await conn.read_frame())
            if not handshake.expired:
                self._stale_answered_at = answered_at or time.monotonic()
                conn.write(proto.frame(1, proto.close_op().body))
                await conn.drain()
                await conn.read_frame()
                log.info("closed session 0x%x that our clock had given up", session_id)
            self._stale_session = None
        finally:
            await conn.aclose()

    def _on_data(self, data: bytes) -> None:
        self.last_heard = time.monotonic()
        buffer = self._read_buffer
        buffer += data
        length = proto.LENGTH
        start = 0
        available = len(buffer)
        while available - start >= 4:
            (size,) = length.unpack_from(buffer, start)
            end = start + 4 + size
            if end > available:
                break
            self._on_frame(bytes(buffer[start + 4 : end]))
            start = end
        if start:
            del buffer[:start]

    def _on_frame(self, data: bytes) -> None:
        xid, zxid, err = proto.REPLY_HEADER.unpack_from(data, 0)
        if zxid > self.last_zxid:
            self.last_zxid = zxid
        if xid == proto.WATCH_XID:
            event = proto.parse_watch_event(data, proto.REPLY_HEADER_SIZE)
            if event.type in FIRES:
                self._watches.fire(EventType(event.type), event.path)
            return
        # Replies come in request order: the oldest send time belongs to this reply.
        if self._sent_at:
            sent_at = self._sent_at.popleft()
            if sent_at > self.last_acked_send:
                self.last_acked_send = sent_at
        if xid in proto.SPECIAL_XIDS:
            if err:
                log.warning("reply with xid %d carried error %d", xid, err)
            return
        pending = self._pending.pop(xid, None)
        if pending is None:
            return  # the caller was cancelled; the reply is not wanted
        self._fail_skipped(pending)
        op = pending.op
        if err == 0:
            try:
                pending.result = op.parse(data, proto.REPLY_HEADER_SIZE)
            except Exception as exc:
                pending.error = ConnectionLoss(f"unreadable reply: {exc!r}")
                pending.finish()
                raise
        elif err == proto.NO_NODE and op.absent_ok:
            pending.result = None
        else:
            pending.error = error_for_code(err, self.client_path(op.path) if op.path else None)
        self._watches.settle(op, pending.error is not None, pending.result)
        pending.finish()
        if err == -112:  # the server says our session expired
            self._drop_connection("server reports session expired")

    def _fail_skipped(self, answered: _Pending) -> None:
        """Fail the requests written before ``answered`` that are still unanswered: the
        server answers in order, so it dropped them. ZooKeeper does so with a write of a
        session that moved to another server, and may still answer the reads after it before
        it closes the connection. Their outcome is unknown: ``ConnectionLoss``."""
        written, pending_by_xid = self._written, self._pending
        while written:
            pending = written.popleft()
            if pending is answered:
                return
            if pending_by_xid.get(pending.xid) is not pending:
                continue  # forgotten: its caller was cancelled
            del pending_by_xid[pending.xid]
            pending.error = ConnectionLoss("no reply: the server answered a later request")
            self._watches.settle(pending.op, True, None)
            pending.finish()

    async def _monitor(self) -> None:
        """The liveness clock: pings, SUSPENDED on silence, LOST by our own deadline."""
        while True:
            now = time.monotonic()
            timeout = self.timeout
            next_at = now + timeout
            if self.state is SessionState.CONNECTED and self._conn is not None:
                silence_deadline = self.last_heard + timeout * SILENCE
                if now >= silence_deadline:
                    self._drop_connection(
                        f"nothing heard for {now - self.last_heard:.3f} s"
                        " (half the session timeout)"
                    )
                else:
                    if now - self.last_sent >= timeout * PING_IDLE:
                        self._send_ping()
                    next_at = min(silence_deadline, self.last_sent + timeout * PING_IDLE)
            elif self.state is SessionState.SUSPENDED:
                # The server expires the session `timeout` after it last heard from us, and it
                # heard our newest answered request no earlier than we sent it. The margin
                # absorbs our own scheduling delays before holders are told.
                lost_at = self.valid_until
                if now >= lost_at:
                    self._session_gone(
                        "no reply within the session timeout (our clock)", stale=True
                    )
                else:
                    next_at = lost_at
            event = self._state_event
            with anyio.move_on_after(max(next_at - time.monotonic(), 0.001)):
                await event.wait()

    def _send_ping(self) -> None:
        conn = self._conn
        if conn is None or self.state is not SessionState.CONNECTED:
            return
        self._sent_at.append(time.monotonic())
        try:
            conn.write(proto.PING_FRAME)
        except OSError as exc:
            self._drop_connection(f"write failed: {exc!r}")
        self.last_sent = time.monotonic()

    # ---------------------------------------------------------------- close

    async def close(self) -> None:
        """Close the session on the server and fail everything still waiting.

        Waiters and holders learn at once; the server round trips that follow are bounded
        by ``CLOSE_TIMEOUT`` in all.
        """
        if self._closing:
            return
        # Set first: the server closes the connection after answering, and that EOF must not
        # be taken for a failure to reconnect from.
        self._closing = True
        connected = self.state is SessionState.CONNECTED
        self._fail_pending(lambda: ClientClosed("the ZooKeeper client was closed"))
        self._set_state(SessionState.CLOSED, "closed by the client")
        self._watches.fire_all_session_gone()
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(CLOSE_TIMEOUT):
                closed_on_server = False
                pendings = None
                if connected:
                    pendings = self._send_now((proto.close_op(),), None, closing=True)
                if pendings is not None:
                    try:
                        # Half the bound: if the connection dies meanwhile, the re-attach
                        # below still has time.
                        with anyio.move_on_after(CLOSE_TIMEOUT / 2):
                            await self._await_replies(pendings)
                            closed_on_server = pendings[0].error is None
                    except AiozklockError:
                        pass
                # Stop the connection loop first: a reconnect in flight would re-attach the
                # session, and the server drops the other connection when that happens.
                self._stop_connection_loop()
                await self._finished.wait()
                if not closed_on_server and self.session_id:
                    # Re-attach just to close: otherwise the session's nodes (a lost lock's
                    # node among them) stay until the server expires it.
                    self._mark_stale(self.session_id, self._password)
                    await self._close_session_elsewhere()
            self._stop_connection_loop()
            conn, self._conn = self._conn, None
            if conn is not None:
                await conn.aclose()

    def _stop_connection_loop(self) -> None:
        if self._conn_scope is not None:
            self._conn_scope.cancel()
        if self._run_scope is not None:
            self._run_scope.cancel()

    async def _close_session_elsewhere(self) -> None:
        """Close ``_stale_session``, trying every host until one confirms."""
        assert self._stale_session is not None
        session_id = self._stale_session[0]
        while self._stale_session is not None:
            for host, port in self._hosts:
                try:
                    with self._explained():
                        await self._close_stale_session(host, port)
                    return
                except (HandshakeRejected, TLSRejected, *STREAM_ERRORS) as exc:
                    # E.g. a re-attach still in the network took the session from us.
                    log.info("closing session 0x%x via %s:%d: %r", session_id, host, port, exc)
            await anyio.sleep(0.05)


def _parse_handshake(frame: bytes) -> proto.Handshake:
    try:
        return proto.parse_connect_response(frame)
    except Exception as exc:  # a short or garbled answer: not a ZooKeeper server we can use
        raise HandshakeRejected(f"unreadable handshake answer: {exc!r}") from None
