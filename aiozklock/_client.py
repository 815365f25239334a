"""The client: ``connect()`` and its lifecycle; its recipe factories are in ``_factories``,
its znode methods in ``_znodes``."""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar, Unpack

import anyio
import anyio.abc

from aiozklock._doctor._defaults import HOLD_WARNING, LEFTOVER_AGE, QUEUE_WARNING
from aiozklock._exceptions import ClientClosed
from aiozklock._factories import RecipeFactories
from aiozklock._recipes._core._holding import LossMonitor, LossPolicy
from aiozklock._recipes._core._janitor import Janitor, Spawn
from aiozklock._recipes._core._order import LockOrder, Mode
from aiozklock._recipes._core._registry import Recipes
from aiozklock._recipes._semaphore import Semaphore
from aiozklock._recipes._semaphore_compat import CompatSemaphore
from aiozklock._settings import ConnectionSettings, ConnectOptions
from aiozklock._wire._loop import Detached
from aiozklock._wire._session import Session, SessionState, StateListener
from aiozklock._wire._validation import parse_hosts
from aiozklock._znodes import Znodes

if TYPE_CHECKING:
    from aiozklock._doctor._model import Diagnosis

log = logging.getLogger(__name__)

T = TypeVar("T")


ORPHAN_SWEEP = 1.0  # seconds between checks for holders whose task ended without releasing
BACKGROUND_STOP = 1.0  # close() waits at most this long for the cancelled background task


class ZooKeeperClient(RecipeFactories, Znodes):
    """A connection to a ZooKeeper ensemble. Use ``async with aiozklock.connect(...) as zk:``.

    The constructor takes ``connect()``'s arguments and validates them the same way (it
    raises ``InvalidArgument``); it sends nothing. The connection is made by ``async with``.
    """

    def __init__(self, hosts: str, **options: Unpack[ConnectOptions]) -> None:
        self._hosts, self.chroot = parse_hosts(hosts)
        settings = ConnectionSettings(**options)
        self._settings = settings
        self.hosts = hosts
        self.session_timeout = settings.session_timeout
        self.connect_timeout = settings.connect_timeout
        self.loss_policy: LossPolicy = settings.loss_policy
        self.max_request_bytes = settings.max_request_bytes
        self.default_acl = settings.acl
        self._auth = settings.credentials
        self._tls = settings.tls
        self._telemetry = settings.telemetry
        self._session: Session | None = None
        self._worker: Detached[anyio.abc.TaskGroup] | None = None  # runs _background
        self._janitor: Janitor | None = None
        self._spawn: Spawn | None = None  # background jobs (lease keepers)
        self._loss_monitor: LossMonitor | None = None
        #: The lock-order check's mode (``connect(check_lock_order=)``): None when off.
        self.check_lock_order: Mode | None = settings.lock_order
        mode, templates = settings.lock_order, settings.lock_templates
        order = None if mode is None else LockOrder(mode, templates)
        self._recipes = Recipes(settings.telemetry, order)
        # One semaphore layout and limit per path: the live objects, by path.
        self._semaphores: weakref.WeakValueDictionary[str, Semaphore | CompatSemaphore] = (
            weakref.WeakValueDictionary()
        )
        self._closed = False

    # ---------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> ZooKeeperClient:
        """Establish the session; returns the client. Raises ``ZooKeeperUnavailable`` if no
        server answers within ``connect_timeout``, ``AuthenticationFailed`` (one) if the
        server refuses the ``auth`` credentials, ``RuntimeError`` if entered twice."""
        if self._session is not None or self._closed:
            raise RuntimeError("a ZooKeeperClient can be entered only once")
        session = Session(
            self._hosts,
            chroot=self.chroot,
            session_timeout=self.session_timeout,
            connect_timeout=self.connect_timeout,
            auth=self._auth,
            tls=self._tls,
            max_request_bytes=self.max_request_bytes,
        )
        if self._telemetry is not None:
            session.add_listener(self._telemetry.session_changed)
        await session.connect_first()
        self._session = session
        try:
            self._worker = Detached(
                functools.partial(self._background, session), name="aiozklock session"
            )
            jobs = await self._worker.wait_started()
            self._janitor = Janitor(session, jobs.start_soon)
            self._spawn = jobs.start_soon
            self._loss_monitor = LossMonitor(session, self.loss_policy, self._janitor)
            await session.wait_connected()
            await session.learn_server()
            await session.check_server_conf()  # said before connect() returns
        except BaseException:
            await self.close()
            raise
        return self

    async def _background(
        self, session: Session, started: Callable[[anyio.abc.TaskGroup], None]
    ) -> None:
        # The session loop and the janitor's jobs run in a task the client owns, not in the
        # task that entered it: close() cancels them from any task, and no cancel scope stays
        # open between __aenter__ and __aexit__ (a host may run those in different tasks).
        async with anyio.create_task_group() as jobs:
            started(jobs)
            jobs.start_soon(self._sweep_orphans, name="aiozklock orphan sweep")
            await session.run()
            jobs.cancel_scope.cancel()  # janitor jobs: their session is gone

    async def _sweep_orphans(self) -> None:
        while True:
            await anyio.sleep(ORPHAN_SWEEP)
            try:
                await self._recipes.reap_orphans()
            except Exception:  # keep sweeping; the failure is the janitor's to retry
                log.exception("aiozklock: releasing a lock whose task ended failed")

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the client (see ``close()``); the body's exception, if any, leaves unchanged.

        If the background task (the session loop, the janitor's jobs) failed, which ended
        the session, its exception is raised here when the body raised nothing (it was
        logged when it happened)."""
        await self.close()
        failure = self._worker.failure if self._worker is not None else None
        if failure is not None and exc is None:
            raise failure

    async def close(self) -> None:
        """Close the session (its ephemeral nodes go at once) and fail everything pending.

        Bounded: returns within about a second even if the server does not answer, and
        finishes even if the calling task is cancelled. Idempotent; raises nothing. Locks
        still held are lost (their ``async with`` bodies are cancelled).
        """
        if self._closed:
            return
        self._closed = True
        if self._session is not None:
            await self._session.close()
        if self._worker is not None:
            await self._worker.stop(BACKGROUND_STOP)

    def _holds(self, task_id: int) -> list[str]:
        """Internal API, for the faces (not for applications): the labels of what the task
        ``task_id`` holds through this client (lost or not), for a host that must not end
        the session under a holder still running (the sync face, at the interpreter's
        exit). Call it in the client's event loop."""
        return self._recipes.holds(task_id)

    def _disown_session(self) -> None:
        """Internal API, for the sync face (not for applications): in a forked child, let go
        of the parent's connection without sending anything (``Session.disown``). Nothing
        of this client may be used afterwards; the child makes a client of its own."""
        if self._session is not None:
            self._session.disown()

    def _live_session(self) -> Session:
        if self._session is None:
            raise ClientClosed("the client is not connected: use 'async with aiozklock.connect()'")
        if self._closed:
            raise ClientClosed("the ZooKeeper client is closed")
        self._session.check_loop()
        return self._session

    @property
    def state(self) -> SessionState:
        """The session's state now: ``CONNECTING`` before the first session, then
        ``CONNECTED``, ``SUSPENDED`` (disconnected, the session may live), ``LOST`` (a
        server said the session expired; a new one is being established), and ``CLOSED``
        (final). Raises nothing."""
        return self._session.state if self._session is not None else SessionState.CONNECTING

    @property
    def session_id(self) -> int:
        """The current ZooKeeper session id; 0 before the first session and while a lost
        session is being replaced (listeners see the lost id in ``StateChange.session_id``).
        Raises nothing."""
        return self._session.session_id if self._session is not None else 0

    @property
    def session_password(self) -> bytes:
        """With ``session_id``, what re-attaches to the session (e.g. ``expire_session``);
        empty before the first session. Raises nothing."""
        return self._session.password if self._session is not None else b""

    @property
    def negotiated_timeout(self) -> float:
        """The session timeout the server granted, in seconds (it may clamp the request; a
        clamp is logged as a WARNING); the requested one before connecting. Raises nothing."""
        return self._session.timeout if self._session is not None else self.session_timeout

    def add_listener(self, listener: StateListener) -> Callable[[], None]:
        """Call ``listener(change)`` on every session state change; returns a callable that
        removes it. The listener runs synchronously in the session's task: it must not block
        (exceptions it raises are logged). Raises ``ClientClosed`` if the client is not
        connected."""
        return self._live_session().add_listener(listener)

    async def diagnose(
        self,
        prefix: str = "/",
        *,
        hold_warning: float = HOLD_WARNING,
        queue_warning: int = QUEUE_WARNING,
        leftover_age: float = LEFTOVER_AGE,
    ) -> Diagnosis:
        """What is wrong under ``prefix``: the ``Diagnosis`` (``healthy``, ``findings``,
        ``queues``), the same as ``aiozklock doctor PREFIX``.

        It reports deadlocks (sessions, or tasks of one process, waiting for each other in
        a cycle, across every recipe whose nodes queue, Curator's and kazoo's too), unsafe
        mixes of layouts on one path (naming the ``compat=`` that fixes them), holders
        older than ``hold_warning`` seconds, queues of ``queue_warning`` waiters or more
        (waiting nodes plus the tasks queued behind every node in its process),
        TTL leases past their TTL not yet deleted, and persistent parents empty for
        ``leftover_age`` seconds. Ages are by the server's clock (see the troubleshooting
        page of the docs for each finding and what to do).

        Read-only but for one write that leaves nothing: to read the server's clock, one
        ``multi`` creates, sets and deletes an ephemeral probe node under ``prefix`` (only
        when something there has an age). The tree is read in pipelined batches.

        Raises ``InvalidArgument`` (nothing sent) for a prefix that is not an absolute path,
        a ``hold_warning`` or ``leftover_age`` that is not a positive number of seconds, a
        ``queue_warning`` that is not an int >= 1; ``ClientClosed`` if the client is not
        connected; ``ZooKeeperUnavailable`` if ZooKeeper is lost meanwhile.
        """
        from aiozklock._doctor._diagnose import diagnose, options  # loaded when first used

        given = options(prefix, hold_warning, queue_warning, leftover_age)
        return await diagnose(self._live_session(), given)

    async def revoke(self, path: str, *, wait: float | None = 10.0) -> tuple[str, ...]:
        """Ask the holders of the lock at ``path`` to let go, and wait until they did.

        Finds the holder's node (as ``aiozklock contenders`` reads the path: our layout,
        Curator's and kazoo's; on a read/write path, every reader that holds), sets its data
        to ``__REVOKE__`` (Curator's ``Revoker.attemptRevoke``), and waits up to ``wait``
        seconds (None: no bound; 0: not at all) for the node to be deleted (a watch, no
        polling). A holder that opted in (``zk.lock(path, revocable=True)``, a revocable
        write lock or multi-lock, Curator's ``makeRevocable``) lets go; others ignore it.
        Returns every holder's node, as paths, once all are gone (``wait=0``: once all were
        asked). One round trip for the requests and their watches, after the reads.

        Never returns while a holder it found still holds: with several holders (readers),
        each one that may let go is asked and waited for, and if any still holds,
        ``NotRevoked`` names it (``held``), with those asked (``asked``; the others let go).

        Raises ``InvalidArgument`` (nothing sent) for a bad path or ``wait``;
        ``NotRevoked`` with its ``reason``: ``"no holder"``, ``"not revocable"`` (a holder's
        node says it did not opt in: it is not written to), ``"timeout"`` (every holder was
        asked and one is not gone within ``wait``: it may not be revocable);
        ``ClientClosed`` if the client is not connected; ``NoAuthError`` if a node's ACL
        forbids the write.
        """
        from aiozklock._revoke import arguments, revoke  # loaded when first used

        path, wait = arguments(path, wait)
        return await revoke(self, self._live_session(), path, wait)


def session_of(client: ZooKeeperClient) -> Session:
    """The wire session of a connected client: for tests that count watchers, read the
    session password or timeout, or send raw requests (``aiozklock.testing.session_of``),
    and the internal API of the integrations built on the client (the doctor's gauges,
    the fencing floor, ``top``), so that none reads the client's private state. Raises
    ``ClientClosed`` if the client is not connected, ``UsageError`` outside its event
    loop."""
    return client._live_session()


def connect(hosts: str, **options: Unpack[ConnectOptions]) -> ZooKeeperClient:
    """Connect to ZooKeeper: ``async with aiozklock.connect("zk1:2181,zk2:2181/app") as zk:``.

    Returns a ``ZooKeeperClient``; nothing is sent until ``async with`` enters it. The
    keyword options below are one type, ``ConnectOptions``, for code that passes them on.

    - ``hosts``: ``"host[:port],host[:port],..."`` (port 2181 by default; IPv6 as
      ``[::1]:2181``), optionally followed by a chroot, e.g. ``"zk1,zk2/app"``: every path
      is then relative to ``/app`` on the server. The chroot need not exist: recipes create
      it (as a container) on first use, ``ensure_path("/")`` creates it explicitly, and a
      ``NoNodeError`` caused by its absence says so.
    - ``session_timeout``: seconds without hearing from us after which the server expires
      the session (and deletes its lock nodes). The server clamps it to its
      ``[minSessionTimeout, maxSessionTimeout]``, by default ``[2, 20] times tickTime`` (4 to
      40 s with the usual 2 s tick); a clamp is logged as a WARNING, and
      ``negotiated_timeout`` tells the granted value. Default 10 s; when idle, the client
      pings every sixth of it.
    - ``connect_timeout``: seconds to establish the first session, over all hosts; default
      10 s.
    - ``loss_policy``: when a holder is told it lost its lock (its ``async with`` body is
      cancelled, ``LockLost`` raised): ``"suspended"`` (default, safest) as soon as the
      connection is lost or without an answer for half the session timeout, before the
      server can expire the session and grant the lock to another; ``"expired"`` once a
      server says the session expired or, at the latest, at the holding's ``valid_until``
      while no server answers, keeping the lock through short disconnections at the price
      of a thin margin before a re-grant. With either, a holding ends at ``valid_until``.
    - ``telemetry``: where to report metrics and traces, e.g.
      ``aiozklock.otel.Telemetry(meter_provider=..., tracer_provider=...)`` (the ``otel``
      extra); None (the default) reports nothing and costs nothing.
    - ``auth``: credentials, ``[("digest", "user:password")]`` (str or bytes), sent on every
      connection before any other request. Refused ones are final: entering raises
      ``AuthenticationFailed``; on a later reconnect the client closes (holders lose their
      locks, requests raise ``AuthenticationFailed``) instead of retrying.
    - ``default_acl``: the ACL of every node created without an explicit ``acl=`` (recipe
      nodes and their containers, ``create``, ``ensure_path``); default ``OPEN_ACL_UNSAFE``
      (anyone may do anything). ``CREATOR_ALL_ACL`` and ``CREATOR_ALL_WORLD_READ_ACL``
      need ``auth``.
    - ``ssl``: TLS to the servers' ``secureClientPort``: an ``ssl.SSLContext`` (e.g.
      ``ssl.create_default_context(cafile="ca.pem")``, plus ``load_cert_chain()`` for a
      client certificate when the servers require one), or ``True`` for
      ``ssl.create_default_context()``. The certificate must be valid for the host name (or
      IP address) of the connect string entry being tried, unless the context's
      ``check_hostname`` is off. None (the default) is plain TCP.
    - ``max_request_bytes``: the servers' ``jute.maxbuffer`` (default 1048575, ZooKeeper's
      0xfffff; between 128 KiB and 2^31 - 1). ZooKeeper drops the connection, and with it
      every lock of the session, on a longer request: every request is checked before it
      is sent, and a longer one fails alone with ``InvalidArgument``. Set it to the
      servers' value if they run with another one.
    - ``check_lock_order``: check, in this process, the order in which each task takes
      locks (see "Lock order" in the docs): ``"warn"`` (or ``True``) warns
      (``LockOrderWarning``, once per pair) the first time two lock classes are taken in
      both orders, or two locks of one class are nested; ``"raise"`` raises
      ``LockOrderViolation`` from such an acquisition instead, before any request.
      ``False``: off. None (the default): the environment variable
      ``AIOZKLOCK_CHECK_LOCK_ORDER`` (``warn``, ``raise`` or ``off``) decides, off if unset.
      Off, it costs nothing.
    - ``lock_classes``: path templates that name lock classes for the check, e.g.
      ``["/locks/orders/{id}"]`` (a ``{name}`` component matches any one component). A
      path that none matches is its own class, with every component that is all digits,
      a UUID or 16 or more hex digits taken as ``{}``.

    Arguments are validated at once (``InvalidArgument``, a ``ValueError``). Entering raises
    ``ZooKeeperUnavailable`` if no server answers within ``connect_timeout``; with ``ssl``,
    at once (before ``connect_timeout``) once every host failed TLS in a way that retrying
    cannot cure, its ``__cause__`` the ``ssl.SSLError``: ``ssl.SSLCertVerificationError``
    for an untrusted or expired certificate or a host name mismatch, an alert (e.g.
    ``TLSV13_ALERT_CERTIFICATE_REQUIRED``) when the server wants a client certificate. A
    TLS client on a plain port, or a plain client on a TLS port, sees the server close the
    connection: it retries until ``connect_timeout``, and the message says so.
    """
    return ZooKeeperClient(hosts, **options)
