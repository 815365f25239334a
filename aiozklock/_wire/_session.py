"""A ZooKeeper session on anyio streams: the request API over the socket shell.

One ``Session`` is one logical ZooKeeper session at a time, kept alive across connections.
It is built in three layers, each in its own module:

* ``SessionCore`` (``_core``), without I/O: framing and xid matching (``_requests``: a request
  the server left unanswered while it answered a later one fails with ``ConnectionLoss``),
  the liveness clock (``_clock``: only an answer proves; pings after a sixth of the timeout
  idle, SUSPENDED after half of it without an answer, every holding given up at
  ``valid_until``, probes through the leader while something is held; LOST only when a
  server says the session expired), the requests queued for soon (``_outgoing``), which
  session to present at a reconnect and which stale one to close;
* ``SessionLifecycle`` (``_lifecycle``), the socket shell: connects, serves each connection
  (feeding the bytes read to the core), reconnects across the host list (authenticating and
  re-arming every watch with SetWatches before anything else is sent: ``_handshake``), runs
  the clock's decisions, and tells every listener about state changes;
* ``Session`` (here): the request API (``call``, ``pipeline``, ``send``, ``send_soon``) and
  ``close``.

Requests are written synchronously by the task that makes them (no lock, no task, no yield),
so a round trip costs one write and one read; no blind resend: a request whose connection
died after it was written fails with ``ConnectionLoss`` (outcome unknown); requests not yet
written simply wait for a connection. ``generation`` changes whenever the session that owns
our ephemeral nodes is gone, so that callers can bind a request to "the session my node
lives in".
"""

from __future__ import annotations

import contextlib
import random
import ssl
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import anyio
import anyio.lowlevel

from aiozklock._acl import Credentials
from aiozklock._exceptions import (
    AiozklockError,
    AuthenticationFailed,
    ClientClosed,
    SessionExpired,
    ZooKeeperUnavailable,
)
from aiozklock._wire._connection import STREAM_ERRORS, HandshakeRejected, TLSRejected
from aiozklock._wire._core import SessionState, StateChange, StateListener
from aiozklock._wire._diagnose import describe_failure, per_host
from aiozklock._wire._leader import PROBE_WAIT, config_op
from aiozklock._wire._lifecycle import CLOSE_TIMEOUT, SessionLifecycle
from aiozklock._wire._limits import DEFAULT_MAX_REQUEST_BYTES
from aiozklock._wire._loop import LoopGuard
from aiozklock._wire._now import uptime
from aiozklock._wire._ops import close_op
from aiozklock._wire._probe import server_kind
from aiozklock._wire._records import Op, Watcher
from aiozklock._wire._requests import Pending, ReplyCallback
from aiozklock._wire._server_conf import check_server_conf
from aiozklock._wire._tasks import Tasks

T = TypeVar("T")

__all__ = ("ReplyCallback", "Session", "SessionState", "StateChange", "StateListener")


class Session(SessionLifecycle):
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
        super().__init__(
            hosts,
            random.randrange(len(hosts)),
            chroot=chroot,
            session_timeout=session_timeout,
            connect_timeout=connect_timeout,
            auth=auth,
            tls=tls,
            max_request_bytes=max_request_bytes,
        )
        self.check_loop = LoopGuard().check  # raises UsageError outside the owning loop
        self.tasks = Tasks()  # the backend's task lookup and checkpoints, chosen once

    # ---------------------------------------------------------------- public surface

    def add_listener(self, listener: StateListener) -> Callable[[], None]:
        """Call ``listener`` on every state change (synchronously, in the session's task)."""
        token = object()
        self._listeners[token] = listener

        def remove() -> None:
            self._listeners.pop(token, None)

        return remove

    def add_horizon_listener(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener(reason)`` when a holding's proof runs out while no connection
        serves the session (``_clock``'s horizon): the holdings must be given up, the
        session is kept. Returns a callable that removes it."""
        self._horizon_listeners.append(listener)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._horizon_listeners.remove(listener)

        return remove

    def demand_proof(self, count: int) -> None:
        """``count`` holdings need the session proven from now on (0: none): on an
        ensemble, probes through the leader run only while some do (``_leader``)."""
        leader = self.leader
        if count != leader.demand:
            rose = not leader.demand
            now = uptime()
            leader.demanded(count, now)
            if not rose:
                return
            clock = self._clock
            if self._monitor_runs_by(clock.due_with_demand(now), now):
                # Its next tick, planned already, decides as one now would (every cycle of
                # a lock taken in a loop): only the proof's freshness is recorded now.
                clock.fresh(now)
            else:
                self._wake_monitor()  # a stale proof gets a probe at once

    @property
    def beyond_horizon(self) -> bool:
        """No connection serves the session and ``valid_until`` is past: a holding taken
        now cannot be proven before it is given up."""
        return self.state is not SessionState.CONNECTED and uptime() >= self.valid_until

    async def wait_proven(self, given_up: Callable[[], bool], until: float | None = None) -> bool:
        """Wait until ``valid_until`` is far enough ahead for a body to start (``_clock``'s
        ``fresh``), or ``given_up()`` says the holding waiting for it was lost: True; False
        if ``until`` (an ``uptime()`` deadline) came first. A session that was idle gets one
        probe through the leader for it (``_leader``)."""
        clock = self._clock
        while not given_up() and not clock.fresh(now := uptime()):
            if self.state is SessionState.CLOSED:
                return True  # the holding is lost with the session
            if until is not None and now >= until:
                return False
            wait = self.timeout * PROBE_WAIT
            if until is not None:
                wait = min(wait, until - now)
            event = self._state_event  # set by state changes, probe answers and horizons
            with anyio.move_on_after(wait):
                await event.wait()
        return True

    async def call(
        self, op: Op[T], *, generation: int | None = None, wait_until: float | None = None
    ) -> T:
        """Send one request and return its parsed reply (or raise its error). Raises
        ``InvalidArgument``, sending nothing, if it is longer than ``max_request_bytes``."""
        self.check_loop()
        if len(op.body) > self._max_body:
            self._refuse_oversized((op,))
        # Requests are written without yielding: a caller cancelled already sends nothing.
        await self.tasks.checkpoint_if_cancelled()
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
        limit = self._max_body
        for op in ops:  # the check inline: this is every acquire's path
            if len(op.body) > limit:
                self._refuse_oversized(ops)
        await self.tasks.checkpoint_if_cancelled()
        # Connected (nearly always): written at once, without _submit's coroutine.
        pendings = self._send_now(ops, generation)
        if pendings is None:
            pendings = await self._submit(ops, generation, wait_until)
        last = pendings[-1].event
        assert last is not None  # sent to be awaited
        try:  # _await_replies, inline: every acquire waits here
            await last.wait()
        except BaseException:
            self.forget(pendings)
            raise
        return [p.error if p.error is not None else p.result for p in pendings]

    async def learn_server(self) -> None:
        """Read ``/zookeeper/config`` once: a standalone server proves the session with every
        answer; an ensemble is probed through its leader (``_leader``). Bounded by
        ``connect_timeout``; any failure but cancellation means an ensemble (the safe side)."""
        try:
            data: bytes | None = (
                await self.call(config_op(), wait_until=uptime() + self._connect_timeout)
            )[0]
        except (AiozklockError, TimeoutError):
            data = None
        server_kind(self.leader, data)

    async def check_server_conf(self) -> None:
        """On an ensemble, read its ``tickTime`` once (``_server_conf``): a WARNING where it
        cannot be read; ``InvalidArgument`` if the timeout is too short for any proof
        through the leader. Bounded."""
        if self.leader.direct is False:
            host, port = self._hosts[self._host_index]
            bound = min(self._connect_timeout, 1.0)
            await check_server_conf(host, port, self._tls, self.leader, self.timeout, bound)

    async def wait_connected(
        self, generation: int | None = None, until: float | None = None
    ) -> None:
        """Wait until CONNECTED (in ``generation`` if given).

        Raises ``ClientClosed`` once closed, ``SessionExpired`` when ``generation`` is gone,
        and ``TimeoutError`` at ``until`` (an ``uptime()`` deadline, ``_now``).
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
                with anyio.move_on_after(until - uptime()):
                    await event.wait()
                if not event.is_set():
                    raise TimeoutError("not connected to ZooKeeper in time")

    # ---------------------------------------------------------------- requests

    async def _submit(
        self, ops: Sequence[Op[Any]], generation: int | None, wait_until: float | None
    ) -> list[Pending]:
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
        and queued ones keep their order, less any taken back (``_outgoing``).

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
        return self.queue_soon(ops, generation, on_done)

    def _send_now(
        self,
        ops: Sequence[Op[Any]],
        generation: int | None,
        *,
        closing: bool = False,
        on_done: ReplyCallback | None = None,
    ) -> list[Pending] | None:
        """Write ``ops`` now if connected (None if not), after what ``send_soon`` queued.
        Synchronous: nothing can change the connection or the generation between the
        checks and the write."""
        conn = self._conn
        if conn is None or (self.state is not SessionState.CONNECTED and not closing):
            return None
        pendings, data = self.frame_now(ops, generation, on_done, uptime())
        self._write(conn, data)
        return pendings

    async def _await_replies(self, pendings: Sequence[Pending]) -> None:
        last = pendings[-1].event
        assert last is not None  # sent to be awaited
        try:
            # Replies come in request order (one the server skipped fails when a later one
            # is answered), and a dropped connection fails every pending at once: when the
            # last one is answered, all are.
            await last.wait()
        except BaseException:
            # Cancelled: forget what is still in flight; late replies are then skipped.
            self.forget(pendings)
            raise

    def remove_watcher(self, path: str, watcher: Watcher) -> None:
        """Forget ``watcher`` on the server path ``path`` (the server's watch fires unheard)."""
        self._watches.remove(path, watcher)

    # ---------------------------------------------------------------- connection

    async def connect_first(self) -> None:
        """Establish the first session, within ``connect_timeout``. Raises
        ``ZooKeeperUnavailable`` saying, for each host, why it could not be used (the last
        failure of each: refused, timed out, not ZooKeeper...)."""
        deadline = uptime() + self._connect_timeout
        attempt = max(self._connect_timeout / len(self._hosts), min(1.0, self._connect_timeout))
        failures: dict[tuple[str, int], str] = {}  # the last one of each host
        tls_rejected: set[int] = set()  # indexes of the hosts that failed TLS for good
        delay = 0.05
        while True:
            remaining = deadline - uptime()
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
                await anyio.sleep(min(delay, max(deadline - uptime(), 0)))
                delay = min(delay * 2, 0.5)
                continue
            return

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
        self.fail_all(lambda: ClientClosed("the ZooKeeper client was closed"))
        self._set_state(SessionState.CLOSED, "closed by the client")
        self._watches.fire_all_session_gone()
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(CLOSE_TIMEOUT):
                closed_on_server = False
                pendings = None
                if connected:
                    pendings = self._send_now((close_op(),), None, closing=True)
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
                    self.mark_stale(self.session_id, self._password)
                    await self._close_session_elsewhere()
            self._stop_connection_loop()
            conn, self._conn = self._conn, None
            if conn is not None:
                await conn.aclose()

    def disown(self) -> None:
        """In a forked child: let go of the parent's connection without sending anything
        (``Connection.forget``). Nothing of this session may be used afterwards; the child
        opens a session of its own."""
        if self._conn is not None:
            self._conn.forget()

    def _stop_connection_loop(self) -> None:
        if self._conn_scope is not None:
            self._conn_scope.cancel()
        if self._run_scope is not None:
            self._run_scope.cancel()
