"""The client: ``connect()``, its lifecycle, and one factory per recipe."""

from __future__ import annotations

import contextlib
import functools
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterable, Sequence
from ssl import SSLContext
from types import TracebackType
from typing import Any, Literal, Protocol, Self, TypeVar, overload

import anyio
import anyio.abc

from aiozklock._acl import ACL, OPEN_ACL_UNSAFE, validate_acl, validate_auth
from aiozklock._exceptions import (
    ClientClosed,
    ConnectionLoss,
    InvalidArgument,
    NodeExistsError,
    NoNodeError,
    UsageError,
)
from aiozklock._recipes._core._holding import LOSS_POLICIES, LossMonitor, LossPolicy
from aiozklock._recipes._core._janitor import Janitor, Spawn
from aiozklock._recipes._core._names import Compat, validate_compat
from aiozklock._recipes._core._observe import Observer
from aiozklock._recipes._core._registry import Recipes, Registered
from aiozklock._recipes._election import Election
from aiozklock._recipes._lease import LeaseLock
from aiozklock._recipes._lock import Lock
from aiozklock._recipes._multilock import MultiLock
from aiozklock._recipes._nonfair import NonFairLock
from aiozklock._recipes._rwlock import ReadLock, ReadWriteLock, WriteLock
from aiozklock._recipes._semaphore import Semaphore
from aiozklock._recipes._semaphore_compat import CompatSemaphore
from aiozklock._wire._limits import (
    DEFAULT_MAX_REQUEST_BYTES,
    check_auth_size,
    validate_max_request_bytes,
)
from aiozklock._wire._loop import Detached
from aiozklock._wire._protocol import (
    CreateMode,
    Stat,
    container_path_ops,
    create_op,
    delete_op,
    encode_acl,
    exists_op,
    get_acl_op,
    get_children_op,
    get_data_op,
)
from aiozklock._wire._session import Session, SessionState, StateListener
from aiozklock._wire._validation import (
    parse_hosts,
    positive_seconds,
    tls_context,
    validate_data,
    validate_flag,
    validate_path,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


class _Recipe(Registered, Protocol):
    """A recipe class the client's factories make (through ``_FactoryMade._construct``)."""

    @classmethod
    def _construct(cls, *args: Any, **kwargs: Any) -> Self: ...


R = TypeVar("R", bound=_Recipe)

ORPHAN_SWEEP = 1.0  # seconds between checks for holders whose task ended without releasing
BACKGROUND_STOP = 1.0  # close() waits at most this long for the cancelled background task


class ZooKeeperClient:
    """A connection to a ZooKeeper ensemble. Use ``async with aiozklock.connect(...) as zk:``.

    The constructor takes ``connect()``'s arguments and validates them the same way (it
    raises ``InvalidArgument``); it sends nothing. The connection is made by ``async with``.
    """

    def __init__(
        self,
        hosts: str,
        *,
        session_timeout: float = 10.0,
        connect_timeout: float = 10.0,
        loss_policy: LossPolicy = "suspended",
        telemetry: Observer | None = None,
        auth: Sequence[tuple[str, str | bytes]] = (),
        default_acl: Sequence[ACL] = OPEN_ACL_UNSAFE,
        ssl: SSLContext | bool | None = None,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    ) -> None:
        self._hosts, self.chroot = parse_hosts(hosts)
        self.max_request_bytes = validate_max_request_bytes(max_request_bytes)
        self._auth = validate_auth(auth)
        check_auth_size(self._auth, self.max_request_bytes)
        self._tls = tls_context(ssl)
        self.default_acl = self._usable_acl(default_acl, "default_acl")
        self.hosts = hosts
        self.session_timeout = positive_seconds("session_timeout", session_timeout)
        self.connect_timeout = positive_seconds("connect_timeout", connect_timeout)
        if loss_policy not in LOSS_POLICIES:
            raise InvalidArgument(
                f"loss_policy must be one of {LOSS_POLICIES}, not {loss_policy!r}"
            )
        self.loss_policy: LossPolicy = loss_policy
        if telemetry is not None and not isinstance(telemetry, Observer):
            raise InvalidArgument(
                "telemetry must be an aiozklock.otel.Telemetry (or have its methods "
                f"recipe() and session_changed()), not {telemetry!r}"
            )
        self._telemetry = telemetry
        self._session: Session | None = None
        self._worker: Detached[anyio.abc.TaskGroup] | None = None  # runs _background
        self._janitor: Janitor | None = None
        self._spawn: Spawn | None = None  # background jobs (lease keepers)
        self._policy: LossMonitor | None = None
        self._recipes = Recipes(telemetry)
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
            self._policy = LossMonitor(session, self.loss_policy, self._janitor)
            await session.wait_connected()
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
        ``CONNECTED``, ``SUSPENDED`` (disconnected, the session may live), ``LOST`` (a new
        session is being established), and ``CLOSED`` (final). Raises nothing."""
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

    # ---------------------------------------------------------------- recipes
    # Every factory takes ``acl``: what the recipe's nodes, and the containers it creates for
    # them (the path, and its missing ancestors), are created with; ``default_acl`` if None.

    def _made(
        self, cls: type[R], key: Hashable, acl: Sequence[ACL] | None, *args: Any, **kwargs: Any
    ) -> R:
        """This client's object of recipe ``cls`` for ``key`` (its factory's arguments),
        constructed from ``args``, ``kwargs`` and what every recipe gets from the client
        (the live session, the loss policy, the janitor, the ACL: ``acl`` validated, or
        ``default_acl``) if there is none."""
        session = self._live_session()
        policy, janitor, entries = self._policy, self._janitor, self._acl(acl)
        assert policy is not None
        assert janitor is not None

        def make() -> R:
            return cls._construct(
                session, *args, registry=policy, janitor=janitor, acl=entries, **kwargs
            )

        return self._recipes.get(cls, key, make, entries)

    def _acl(self, acl: Sequence[ACL] | None) -> tuple[ACL, ...]:
        return self.default_acl if acl is None else self._usable_acl(acl, "acl")

    def _usable_acl(self, acl: object, what: str) -> tuple[ACL, ...]:
        """``acl`` validated; an ``"auth"`` entry (the creator's identities) also needs an
        identity: credentials, or a TLS client certificate (the server would refuse every
        create with InvalidACL)."""
        entries = validate_acl(acl, what=what)
        if not self._auth and self._tls is None and any(e.scheme == "auth" for e in entries):
            raise InvalidArgument(
                f"{what} grants the creator ('auth' scheme), but this client has no identity: "
                "pass auth=[('digest', 'user:password')] (or ssl= with a client certificate)"
            )
        return entries

    @overload
    def lock(
        self,
        path: str,
        *,
        identifier: str | None = None,
        fair: Literal[True] = True,
        acl: Sequence[ACL] | None = None,
        compat: Compat = "curator",
    ) -> Lock: ...

    @overload
    def lock(
        self,
        path: str,
        *,
        identifier: str | None = None,
        fair: Literal[False],
        acl: Sequence[ACL] | None = None,
        compat: Compat = "curator",
    ) -> NonFairLock: ...

    @overload
    def lock(
        self,
        path: str,
        *,
        identifier: str | None = None,
        fair: bool,
        acl: Sequence[ACL] | None = None,
        compat: Compat = "curator",
    ) -> Lock | NonFairLock: ...

    def lock(
        self,
        path: str,
        *,
        identifier: str | None = None,
        fair: bool = True,
        acl: Sequence[ACL] | None = None,
        compat: Compat = "curator",
    ) -> Lock | NonFairLock:
        """A reentrant, loss-aware lock on ``path`` (validated now, before any traffic).

        ``fair=True`` (the default): a ``Lock``, FIFO across processes. ``fair=False``: a
        ``NonFairLock`` on one fixed node, cheaper when uncontended, a herd when contended.
        The same arguments give the same object: one per path and identifier in this
        client, so that reentrancy holds per task across call sites, and this process's
        tasks queue on it locally with one node on the server at a time (each local holder
        takes a new place at the back of the server's queue: no process starves another).
        A different ``identifier`` is a different contender, as another process would be.
        ``acl``: what its nodes and containers are created with (``default_acl`` if None);
        not part of the identity. ``compat``: whose node names to write, for peers on the
        same path: ``"curator"`` (the default; Curator's ``InterProcessMutex`` orders them)
        or ``"kazoo"`` (kazoo's ``Lock``); either way every library's nodes are read. The
        non-fair lock has no counterpart in either.

        Raises ``InvalidArgument`` for a bad path, identifier, acl, compat (or a kazoo one
        with ``fair=False``) or a non-bool ``fair``,
        ``UsageError`` if this client's object for the path has another ``acl``, or when
        called outside the event loop the client was opened in, ``ClientClosed`` if the
        client is not connected.
        """
        compat = validate_compat(compat)
        if validate_flag("fair", fair):
            key = (path, identifier, compat)
            return self._made(Lock, key, acl, path, identifier=identifier, compat=compat)
        if compat != "curator":
            raise InvalidArgument("the non-fair lock has no kazoo counterpart: compat='curator'")
        return self._made(NonFairLock, (path, identifier), acl, path, identifier=identifier)

    def multi_lock(
        self,
        paths: Iterable[str],
        *,
        identifier: str | None = None,
        acl: Sequence[ACL] | None = None,
        compat: Compat = "curator",
    ) -> MultiLock:
        """All-or-nothing lock of several paths, deadlock-free; returns a ``MultiLock``.
        ``compat``: as for ``lock()``, on each path.

        Validated now: bad or empty paths, identifier, acl or compat raise ``InvalidArgument``
        (duplicates are dropped); ``UsageError`` if this client's object for the paths has
        another ``acl``; ``ClientClosed`` if the client is not connected.
        """
        members = paths if isinstance(paths, str) else tuple(paths)
        compat = validate_compat(compat)
        key = (members, identifier, compat)
        return self._made(MultiLock, key, acl, members, identifier=identifier, compat=compat)

    def election(
        self,
        path: str,
        *,
        identifier: str | None = None,
        acl: Sequence[ACL] | None = None,
        compat: Compat = "curator",
    ) -> Election:
        """A leader election on ``path``; returns an ``Election``: ``async with
        zk.election(path):`` runs its body as leader. ``compat``: whose node names to
        write: ``"curator"`` (Curator's ``LeaderLatch`` orders them) or ``"kazoo"``
        (kazoo's ``Election``). Validated now: a bad path, identifier, acl or compat raises
        ``InvalidArgument``; ``UsageError`` if this client's object for the path has
        another ``acl``; ``ClientClosed`` if the client is not connected."""
        compat = validate_compat(compat)
        key = (path, identifier, compat)
        return self._made(Election, key, acl, path, identifier=identifier, compat=compat)

    def rw_lock(
        self,
        path: str,
        *,
        identifier: str | None = None,
        acl: Sequence[ACL] | None = None,
        compat: Compat = "curator",
    ) -> ReadWriteLock:
        """A read/write lock on ``path``; returns a ``ReadWriteLock`` (its ``read_lock`` and
        ``write_lock`` are this client's objects for the path and identifier, as for
        ``lock()``; this client's tasks hold the read lock together, on one node: see
        ``ReadLock``). ``compat``: whose node names to write: ``"curator"`` (Curator's
        ``InterProcessReadWriteLock``'s) or ``"kazoo"`` (kazoo's ``ReadLock`` and
        ``WriteLock`` read them as their own). Validated now: a bad path, identifier, acl or
        compat raises ``InvalidArgument``; ``UsageError`` if this client's object for the
        path has another ``acl``; ``ClientClosed`` if the client is not connected."""
        compat = validate_compat(compat)
        key = (path, identifier, compat)
        write = self._made(WriteLock, key, acl, path, identifier=identifier, compat=compat)
        janitor = self._janitor
        assert janitor is not None
        read = self._recipes.get(
            ReadLock, key, lambda: ReadLock._construct(write, janitor), write.acl
        )
        return ReadWriteLock._construct(read, write)

    def lease_lock(
        self,
        path: str,
        ttl: float,
        *,
        holder_id: str | None = None,
        identifier: str | None = None,
        renew: bool = True,
        acl: Sequence[ACL] | None = None,
    ) -> LeaseLock:
        """A lock held as a TTL lease on ``{path}/lease``, not bound to this session: it
        survives disconnections and restarts (re-attach with the same ``holder_id``) and
        expires ``ttl`` seconds after its last renewal (see ``LeaseLock``). Renewed every
        ttl/3 in the background while held if ``renew``. Arguments are validated now
        (``InvalidArgument``; ``UsageError`` if this client's object for them has another
        ``acl``; ``ClientClosed`` if the client is not connected); servers without TTL nodes
        raise ``TTLNotSupported`` on acquire. Returns a ``LeaseLock``.
        """
        session = self._live_session()
        assert self._janitor is not None
        assert self._spawn is not None
        janitor, spawn, entries = self._janitor, self._spawn, self._acl(acl)
        return self._recipes.get(
            LeaseLock,
            (path, ttl, holder_id, identifier, renew),
            lambda: LeaseLock._construct(
                session,
                path,
                ttl,
                holder_id=holder_id,
                identifier=identifier,
                renew=renew,
                janitor=janitor,
                spawn=spawn,
                acl=entries,
            ),
            entries,
        )

    def semaphore(
        self,
        path: str,
        max_leases: int,
        *,
        identifier: str | None = None,
        acl: Sequence[ACL] | None = None,
        compat: Compat | None = None,
    ) -> Semaphore:
        """A counting semaphore on ``path``: at most ``max_leases`` holders at once, across
        every process; returns a ``Semaphore`` (``async with zk.semaphore(p, 5):`` holds a
        lease). Every client of the path must use the same ``max_leases``: it is stored in
        the path's data, and acquiring with another raises ``MaxLeasesMismatch``. One object
        per path, ``max_leases``, identifier and compat in this client (each task holds its
        own lease).

        ``compat``: None (the default) is our FIFO queue of leases, which no other library
        reads. ``"kazoo"`` takes leases with kazoo's ``Semaphore`` algorithm and layout
        (lock ``<path>-__lock__``, leases ``<path>/<32hex>``, the limit in ``<path>``'s
        data) and ``"curator"`` with Curator's ``InterProcessSemaphoreV2`` (mutex
        ``<path>/locks``, leases ``<path>/leases``; Curator stores no limit, so nothing
        checks that the peers agree on it): such peers on the same path then never hold
        more than ``max_leases`` in total with ours. Not FIFO: the lease goes to whoever
        holds the peer's mutex.

        Validated now: a bad path, ``max_leases`` (an int, at least 1), identifier, acl or
        compat raises ``InvalidArgument``; ``UsageError`` if this client's object for them
        has another ``acl``, or if this client already has a semaphore on ``path`` with
        another ``max_leases`` or layout (they would not count each other's leases);
        ``ClientClosed`` if the client is not connected."""
        checked = None if compat is None else validate_compat(compat)
        sem: Semaphore | CompatSemaphore
        key: tuple[object, ...]
        if checked is None:
            key = (path, max_leases, identifier)
            sem = self._made(Semaphore, key, acl, path, max_leases, identifier=identifier)
        else:
            key = (path, max_leases, identifier, checked)
            sem = self._made(
                CompatSemaphore, key, acl, path, max_leases, identifier=identifier, compat=checked
            )
        other = self._semaphores.setdefault(sem.path, sem)
        if (getattr(other, "compat", None), other.max_leases) != (checked, sem.max_leases):
            raise UsageError(
                f"this client has a semaphore on {path} with max_leases={other.max_leases}"
                f" and compat={getattr(other, 'compat', None)!r}: another one with "
                f"max_leases={sem.max_leases} and compat={checked!r} would not count its "
                "leases (one layout and one limit per path)"
            )
        return sem

    # ---------------------------------------------------------------- znodes (small API)
    # Paths are relative to the chroot. Every method validates its arguments before any
    # traffic (``InvalidArgument``) and raises ``ClientClosed`` if the client is not
    # connected. Reads are repeated after a ``ConnectionLoss``; writes are not (their outcome
    # is unknown: the ``ConnectionLoss`` is raised). A ``NoNodeError`` caused by a chroot
    # that does not exist says so.

    async def exists(self, path: str) -> Stat | None:
        """The node's ``Stat``, or None if it does not exist. Raises ``InvalidArgument`` for
        a bad path, ``ClientClosed`` if the client is not connected, ``UsageError`` outside
        its event loop (connection losses are retried)."""
        session = self._live_session()
        op = exists_op(session.server_path(validate_path(path)))
        return await self._read(lambda: session.call(op))

    async def get_children(self, path: str, *, missing_ok: bool = False) -> list[str]:
        """The names of the node's children (not full paths), in no particular order.

        Raises ``NoNodeError`` if the node does not exist, unless ``missing_ok``: then
        returns ``[]``. Recipes' parent nodes are containers, which the server deletes some
        time after their last child goes: listing one may find it gone.
        """
        session = self._live_session()
        op = get_children_op(session.server_path(validate_path(path)))
        if validate_flag("missing_ok", missing_ok):
            with contextlib.suppress(NoNodeError):
                return await self._read(lambda: session.call(op))
            return []
        async with self._naming_chroot(session):
            return await self._read(lambda: session.call(op))

    async def get_data(self, path: str) -> tuple[bytes, Stat]:
        """The node's data and ``Stat``; raises ``NoNodeError`` if it does not exist."""
        session = self._live_session()
        op = get_data_op(session.server_path(validate_path(path)))
        async with self._naming_chroot(session):
            return await self._read(lambda: session.call(op))

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        acl: Sequence[ACL] | None = None,
    ) -> str:
        """Create a node with ``acl`` (``default_acl`` if None); returns its path (with the
        sequence suffix if ``sequential``).

        An ephemeral node goes with the session. Raises ``NodeExistsError`` if it exists,
        ``NoNodeError`` if its parent does not (see ``ensure_path``), ``NoAuthError`` if
        the parent's ACL does not let this session create, ``InvalidACLError`` if the server
        refuses ``acl``, ``InvalidArgument`` (nothing sent) for a bad path or acl, or if the
        request (path, data and acl) is longer than ``max_request_bytes``.
        """
        session = self._live_session()
        mode = CreateMode.PERSISTENT
        if ephemeral:
            mode |= CreateMode.EPHEMERAL
        if sequential:
            mode |= CreateMode.SEQUENTIAL
        op = create_op(
            session.server_path(validate_path(path)),
            validate_data(data),
            mode,
            session.client_path,
            acl=encode_acl(self._acl(acl)),
        )
        async with self._naming_chroot(session):
            return (await session.call(op)).path

    async def delete(self, path: str) -> None:
        """Delete a node (any version). Raises ``NoNodeError`` if it does not exist and
        ``NotEmptyError`` (a ``ZooKeeperError``) if it has children, ``NoAuthError`` if the
        parent's ACL does not let this session delete."""
        session = self._live_session()
        async with self._naming_chroot(session):
            await session.call(delete_op(session.server_path(validate_path(path))))

    async def ensure_path(self, path: str, *, acl: Sequence[ACL] | None = None) -> None:
        """Create ``path`` and its ancestors (chroot included) as containers with ``acl``
        (``default_acl`` if None), in one round trip; existing ones are left alone. Returns
        nothing. Raises ``InvalidArgument`` for a bad path or acl, ``ClientClosed`` if the
        client is not connected, ``UsageError`` outside its event loop, ``NoAuthError`` if
        an ACL refuses a create, ``ConnectionLoss`` or ``SessionExpired`` if the connection
        or the session is lost meanwhile (calling it again is safe)."""
        session = self._live_session()
        ops = container_path_ops(
            session.server_path(validate_path(path)),
            session.client_path,
            acl=encode_acl(self._acl(acl)),
        )
        for result in await session.pipeline(ops):
            if isinstance(result, BaseException) and not isinstance(result, NodeExistsError):
                raise result

    async def get_acl(self, path: str) -> tuple[list[ACL], Stat]:
        """The node's ACL and ``Stat``. Raises ``NoNodeError`` if it does not exist,
        ``NoAuthError`` unless its ACL grants this session ``READ`` or ``ADMIN`` (without
        ``ADMIN``, digest ids come back with ``x`` for the hash)."""
        session = self._live_session()
        op = get_acl_op(session.server_path(validate_path(path)))
        async with self._naming_chroot(session):
            return await self._read(lambda: session.call(op))

    @staticmethod
    async def _read(call: Callable[[], Awaitable[T]]) -> T:
        while True:
            try:
                return await call()
            except ConnectionLoss:
                continue  # reads are idempotent: repeat after the reconnect

    @contextlib.asynccontextmanager
    async def _naming_chroot(self, session: Session) -> AsyncIterator[None]:
        # A missing chroot makes every path missing: say so, rather than blame the path.
        try:
            yield
        except NoNodeError as exc:
            chroot = session.chroot
            if chroot and await self._read(lambda: session.call(exists_op(chroot))) is None:
                exc.args = (
                    f"{exc.args[0]} (in chroot {chroot}, which does not exist: create it with "
                    "ensure_path('/'); recipes create it as a container on first use)",
                )
            raise


def connect(
    hosts: str,
    *,
    session_timeout: float = 10.0,
    connect_timeout: float = 10.0,
    loss_policy: LossPolicy = "suspended",
    telemetry: Observer | None = None,
    auth: Sequence[tuple[str, str | bytes]] = (),
    default_acl: Sequence[ACL] = OPEN_ACL_UNSAFE,
    ssl: SSLContext | bool | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
) -> ZooKeeperClient:
    """Connect to ZooKeeper: ``async with aiozklock.connect("zk1:2181,zk2:2181/app") as zk:``.

    Returns a ``ZooKeeperClient``; nothing is sent until ``async with`` enters it.

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
      connection is lost or silent for half the session timeout, before the server can
      expire the session and grant the lock to another; ``"expired"`` only once the
      session is lost, keeping the lock through short disconnections at the price of a
      thin margin before a re-grant.
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

    Arguments are validated at once (``InvalidArgument``, a ``ValueError``). Entering raises
    ``ZooKeeperUnavailable`` if no server answers within ``connect_timeout``; with ``ssl``,
    at once (before ``connect_timeout``) once every host failed TLS in a way that retrying
    cannot cure, its ``__cause__`` the ``ssl.SSLError``: ``ssl.SSLCertVerificationError``
    for an untrusted or expired certificate or a host name mismatch, an alert (e.g.
    ``TLSV13_ALERT_CERTIFICATE_REQUIRED``) when the server wants a client certificate. A
    TLS client on a plain port, or a plain client on a TLS port, sees the server close the
    connection: it retries until ``connect_timeout``, and the message says so.
    """
    return ZooKeeperClient(
        hosts,
        session_timeout=session_timeout,
        connect_timeout=connect_timeout,
        loss_policy=loss_policy,
        telemetry=telemetry,
        auth=auth,
        default_acl=default_acl,
        ssl=ssl,
        max_request_bytes=max_request_bytes,
    )
