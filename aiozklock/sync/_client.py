"""The synchronous client: its lifecycle (opened on first use, closed once, made again in
a forked child), its session's state and settings, its listeners, ``diagnose`` and the
znode API. It is built on its recipe factories (``_factories``, generated from the async
ones by ``.ci/gen_sync.py``), and supplies what their objects need of it (``_handle.Owner``)."""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Unpack

from aiozklock._acl import ACL
from aiozklock._client import ZooKeeperClient
from aiozklock._doctor._defaults import HOLD_WARNING, LEFTOVER_AGE, QUEUE_WARNING
from aiozklock._exceptions import (
    MESSAGE_LIMIT,
    ClientClosed,
    InvalidArgument,
    NotLockOwner,
    shorten,
)
from aiozklock._recipes._core._handle import Handle
from aiozklock._recipes._core._holding import LossPolicy
from aiozklock._recipes._core._order import Mode
from aiozklock._settings import ConnectOptions
from aiozklock._wire._protocol import Stat
from aiozklock._wire._session import SessionState, StateListener
from aiozklock._wire._validation import validate_path
from aiozklock.sync import _fork
from aiozklock.sync._factories import SyncFactories
from aiozklock.sync._handle import SyncHandle
from aiozklock.sync._portal import Portal, refuse_blocking
from aiozklock.sync._proxy import Proxy

if TYPE_CHECKING:
    from aiozklock._doctor._model import Diagnosis

log = logging.getLogger(__name__)


class SyncClient(SyncFactories):
    """A ZooKeeper client for synchronous code (threads): the async client's features,
    driven from a background event loop thread. Make it with ``aiozklock.sync.connect()``.

    The session is opened by ``with``, or on first use (so a client made at module level,
    before a ``fork()``, opens its own session in each child). Every method blocks the
    calling thread, which is what owns a lock: see ``SyncHandle``. Made in a forked child's
    parent, it works in the child with a session of its own; the child never sends anything
    on the parent's.

    Besides what each method says, every call (but the session properties, which raise
    nothing) raises ``ClientClosed`` once the client is closed, ``UsageError`` from a thread
    that runs an event loop (asyncio or trio: use ``aiozklock.connect()`` there) or from
    the client's own thread (an ``on_lost`` callback, a listener), and the exception of a
    signal handler that interrupts its wait (the call is then cancelled first).
    """

    def __init__(self, hosts: str, **options: Unpack[ConnectOptions]) -> None:
        # Validated now, in the caller's thread (InvalidArgument); it sends nothing.
        self._fresh: ZooKeeperClient | None = ZooKeeperClient(hosts, **options)
        self._options = options
        # The first client made: its settings (validated, defaults filled in) are those of
        # every client this one makes, in each epoch.
        self._settings = self._fresh
        #: The connect string, as given; ``chroot``: its chroot ("" if none).
        self.hosts = hosts
        self.chroot = self._fresh.chroot
        self._portal: Portal | None = None
        self._closed = False
        self._lock = threading.Lock()  # opening and closing (made again in a forked child)
        self._listeners: list[StateListener] = []
        self._removers: list[tuple[StateListener, Callable[[], None]]] = []  # this epoch's
        self._handles: weakref.WeakSet[SyncHandle[Any]] = weakref.WeakSet()  # its recipes
        self._inherited: list[Portal] = []  # in a forked child: the parents' portals
        _fork.track(self)

    # ---------------------------------------------------------------- lifecycle

    def __enter__(self) -> SyncClient:
        """Open the session now (if not open yet) and return the client; raises what
        ``open()`` raises."""
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the client (see ``close()``)."""
        self.close()

    def open(self) -> None:
        """Open the session now, if it is not open yet (every other call opens it when
        needed). Raises ``ZooKeeperUnavailable`` if no server answers within
        ``connect_timeout`` (a later call tries again), ``AuthenticationFailed`` if the
        server refuses ``auth``, ``ClientClosed`` once closed, ``UsageError`` from a thread
        that runs an event loop."""
        if self._portal is None:
            self._open()

    def _open(self) -> Portal:
        refuse_blocking(0)
        with self._lock:
            if self._closed:
                raise ClientClosed("the ZooKeeper client is closed")
            if self._portal is not None:
                return self._portal
            client = self._fresh or ZooKeeperClient(self.hosts, **self._options)
            self._fresh = None  # a client is entered once: a retry makes a new one
            portal = Portal(client, f"aiozklock-sync {self.hosts}")
            try:
                portal.start()
            except BaseException:  # failed, or interrupted while connecting: end it
                portal.stop_soon()
                raise
            # A client dropped without close() must not leave its thread and session alive.
            weakref.finalize(self, portal.stop_soon).atexit = False
            listeners = list(self._listeners)
            self._removers = portal.call(lambda proxy: _register(proxy, listeners), False)
            self._portal = portal
            return portal

    def close(self) -> None:
        """Close the session (its ephemeral nodes go at once) and end the client's thread.

        Locks still held are lost (``lost`` is set, ``on_lost`` called), and calls waiting
        in other threads raise ``ClientClosed``, as does any later use. Bounded (a few
        seconds at worst, if the server does not answer); idempotent. Raises ``UsageError``
        from the client's own thread (``on_lost``, a listener) or a thread that runs an
        event loop."""
        portal = self._portal
        refuse_blocking(portal.thread_id if portal is not None else 0)
        with self._lock:
            self._closed = True
            portal, self._portal = self._portal, None
        if portal is not None:
            portal.stop()

    def _close_at_exit(self) -> None:
        """At the interpreter's exit (``_fork``): ``close()``, unless threads that are still
        alive (daemon threads, and the exiting main thread, which runs the exit handlers
        that follow) hold something through this client. Those run on until the
        interpreter stops them: closing would free their locks to other processes under
        them. Their session is left open instead, its holdings end with the process, and
        the server expires it a session timeout later; a WARNING names the threads."""
        portal = self._portal
        if portal is None:
            return
        kept = portal.stop_at_exit()
        if not kept:
            with self._lock:
                self._closed = True
                if self._portal is portal:
                    self._portal = None
            return
        held = "; ".join(f"thread {name!r} holds {', '.join(labels)}" for name, labels in kept)
        log.warning(
            "aiozklock.sync: at the interpreter's exit, session 0x%x of %s is left open, "
            "because threads still alive hold through it (%s): closing it would let other "
            "processes take their locks while they run on. Their holdings end with the "
            "process; the server expires the session %.3g s after it ends. Release before "
            "exiting (or join those threads) to free them at once",
            portal.client.session_id,
            self.hosts,
            shorten(held, MESSAGE_LIMIT),
            portal.client.negotiated_timeout,
        )

    def _forked(self) -> None:
        """In a forked child: the parent's loop, thread and session are not ours. Drop
        them without a word; the next call opens a session of the child's own. Every
        holding the parent had is lost here at once (``SyncHandle._forsaken``)."""
        self._lock = threading.Lock()  # it may have been held by a thread of the parent
        portal, self._portal = self._portal, None
        self._removers = []
        if portal is not None:
            _fork.forsake(portal)
            self._inherited.append(portal)
        for handle in list(self._handles):
            handle._forsaken()

    def _portal_now(self) -> Portal:
        portal = self._portal
        return portal if portal is not None else self._open()

    def _call(self, func: Callable[[Proxy], Any], undo: Any = None) -> Any:
        """``await func(proxy)`` in the calling thread's task (``Portal.call``)."""
        try:
            return self._portal_now().call(func, True, undo)
        except (NotLockOwner, InvalidArgument) as exc:
            _in_threads(exc)
            raise

    def _peek(self, func: Callable[[Proxy], Any]) -> Any:
        """``func(proxy)`` (not a coroutine) in the calling thread's task."""
        try:
            return self._portal_now().call(func, False)
        except (NotLockOwner, InvalidArgument) as exc:
            _in_threads(exc)
            raise

    def _proxy_if_any(self) -> Proxy | None:
        portal = self._portal
        return None if portal is None else portal.proxy_if_any()

    # ---------------------------------------------------------------- the session

    @property
    def state(self) -> SessionState:
        """The session's state now (``SessionState``): ``CONNECTING`` before it is opened,
        ``CLOSED`` once closed; see the async client's ``state``. Raises nothing."""
        portal = self._portal
        if portal is None:
            return SessionState.CLOSED if self._closed else SessionState.CONNECTING
        return portal.client.state

    @property
    def session_id(self) -> int:
        """The current ZooKeeper session id; 0 before the session is opened (in a forked
        child: before its own is). Raises nothing."""
        portal = self._portal
        return 0 if portal is None else portal.client.session_id

    @property
    def session_password(self) -> bytes:
        """With ``session_id``, what re-attaches to the session; empty before it is
        opened. Raises nothing."""
        portal = self._portal
        return b"" if portal is None else portal.client.session_password

    @property
    def negotiated_timeout(self) -> float:
        """The session timeout the server granted, in seconds (the requested one before
        the session is opened). Raises nothing."""
        portal = self._portal
        if portal is None:
            return self._settings.session_timeout
        return portal.client.negotiated_timeout

    # The settings: the async client's, as ``connect()`` took them. They raise nothing.

    @property
    def session_timeout(self) -> float:
        """The requested session timeout, in seconds (``negotiated_timeout``: granted)."""
        return self._settings.session_timeout

    @property
    def connect_timeout(self) -> float:
        """How long opening waits for a server to answer, in seconds."""
        return self._settings.connect_timeout

    @property
    def loss_policy(self) -> LossPolicy:
        """When a holding is lost (see ``aiozklock.LossPolicy``)."""
        return self._settings.loss_policy

    @property
    def default_acl(self) -> tuple[ACL, ...]:
        """The ACL of the nodes created without one (a recipe's, ``create``'s)."""
        return self._settings.default_acl

    @property
    def max_request_bytes(self) -> int:
        """The largest request this client sends (see ``aiozklock.connect()``)."""
        return self._settings.max_request_bytes

    @property
    def check_lock_order(self) -> Mode | None:
        """The lock-order check's mode (``"warn"``, ``"raise"``), or None if off."""
        return self._settings.check_lock_order

    def add_listener(self, listener: StateListener) -> Callable[[], None]:
        """Call ``listener(change)`` (a ``StateChange``) on every session state change,
        in every session this client opens (after a fork too); returns a callable that
        removes it. The listener runs in the client's event loop thread: it must not block
        nor call the client (``UsageError``). Raises ``ClientClosed`` once closed."""
        if not callable(listener):
            raise InvalidArgument(f"listener must be callable, not {listener!r}")
        with self._lock:
            if self._closed:
                raise ClientClosed("the ZooKeeper client is closed")
            self._listeners.append(listener)
            portal = self._portal
        if portal is not None:
            self._removers += portal.call(lambda proxy: _register(proxy, [listener]), False)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(listener)
            for entry in list(self._removers):
                if entry[0] is listener:
                    entry[1]()  # a list removal: safe from any thread
                    with contextlib.suppress(ValueError):
                        self._removers.remove(entry)

        return remove

    def diagnose(
        self,
        prefix: str = "/",
        *,
        hold_warning: float = HOLD_WARNING,
        queue_warning: int = QUEUE_WARNING,
        leftover_age: float = LEFTOVER_AGE,
    ) -> Diagnosis:
        """What is wrong under ``prefix``: the async client's ``diagnose()`` (deadlocks,
        unsafe layout mixes, old holders, long queues, leftovers), with the same arguments
        and errors."""
        return self._call(  # type: ignore[no-any-return]
            lambda proxy: proxy.client.diagnose(
                prefix,
                hold_warning=hold_warning,
                queue_warning=queue_warning,
                leftover_age=leftover_age,
            )
        )

    def revoke(self, path: str, *, wait: float | None = 10.0) -> tuple[str, ...]:
        """Ask the holder of the lock at ``path`` to let go, and wait up to ``wait`` seconds
        until it did: the async client's ``revoke()``, with the same arguments, result
        (the holder's node paths) and errors (``NotRevoked`` with its ``reason``,
        ``InvalidArgument`` before any traffic)."""
        return self._call(  # type: ignore[no-any-return]
            lambda proxy: proxy.client.revoke(path, wait=wait)
        )

    # ---------------------------------------------------------------- znodes
    # The async client's methods, with the same arguments, results and errors; ``guard``
    # is a sync recipe object of this client that the calling thread holds.

    def exists(self, path: str) -> Stat | None:
        """The node's ``Stat``, or None if it does not exist (see the async client)."""
        validate_path(path)  # before the session is opened: nothing sent
        return self._call(lambda proxy: proxy.client.exists(path))  # type: ignore[no-any-return]

    def get_children(self, path: str, *, missing_ok: bool = False) -> list[str]:
        """The names of the node's children; ``NoNodeError`` if it does not exist, unless
        ``missing_ok`` (see the async client)."""
        validate_path(path)  # before the session is opened: nothing sent
        return self._call(  # type: ignore[no-any-return]
            lambda proxy: proxy.client.get_children(path, missing_ok=missing_ok)
        )

    def get_data(self, path: str) -> tuple[bytes, Stat]:
        """The node's data and ``Stat``; ``NoNodeError`` if it does not exist."""
        validate_path(path)  # before the session is opened: nothing sent
        return self._call(lambda proxy: proxy.client.get_data(path))  # type: ignore[no-any-return]

    def set_data(
        self,
        path: str,
        data: bytes,
        version: int = -1,
        *,
        guard: SyncHandle[Any] | None = None,
    ) -> Stat:
        """Replace the node's data if its version is ``version`` (-1: any); with ``guard``,
        only while the calling thread's holding of it is ours (``StaleFencingToken``
        otherwise, nothing written). Errors: see the async client."""
        validate_path(path)  # before the session is opened: nothing sent
        self._unforked(guard, path)
        return self._call(  # type: ignore[no-any-return]
            lambda proxy: proxy.client.set_data(
                path, data, version, guard=self._guard(proxy, guard)
            )
        )

    def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        acl: Sequence[ACL] | None = None,
        guard: SyncHandle[Any] | None = None,
    ) -> str:
        """Create a node; returns its path. ``guard``: as for ``set_data``. Errors: see the
        async client."""
        validate_path(path)  # before the session is opened: nothing sent
        self._unforked(guard, path)
        return self._call(  # type: ignore[no-any-return]
            lambda proxy: proxy.client.create(
                path,
                data,
                ephemeral=ephemeral,
                sequential=sequential,
                acl=acl,
                guard=self._guard(proxy, guard),
            )
        )

    def delete(self, path: str, *, guard: SyncHandle[Any] | None = None) -> None:
        """Delete a node (any version). ``guard``: as for ``set_data``. Errors: see the
        async client."""
        validate_path(path)  # before the session is opened: nothing sent
        self._unforked(guard, path)
        self._call(lambda proxy: proxy.client.delete(path, guard=self._guard(proxy, guard)))

    def ensure_path(self, path: str, *, acl: Sequence[ACL] | None = None) -> None:
        """Create ``path`` and its ancestors as containers; existing ones are left alone.
        Errors: see the async client."""
        validate_path(path)  # before the session is opened: nothing sent
        self._call(lambda proxy: proxy.client.ensure_path(path, acl=acl))

    def get_acl(self, path: str) -> tuple[list[ACL], Stat]:
        """The node's ACL and ``Stat``. Errors: see the async client."""
        validate_path(path)  # before the session is opened: nothing sent
        return self._call(lambda proxy: proxy.client.get_acl(path))  # type: ignore[no-any-return]

    def _unforked(self, guard: SyncHandle[Any] | None, path: str) -> None:
        """Refuse (``StaleFencingToken``, nothing sent) a write guarded by a holding that
        this forked child inherited from its parent: it is lost here."""
        if isinstance(guard, SyncHandle) and guard._client is self:
            guard._refuse_inherited_guard(path)

    def _guard(self, proxy: Proxy, guard: SyncHandle[Any] | None) -> Handle | None:
        if guard is None:
            return None
        if not isinstance(guard, SyncHandle) or guard._client is not self:
            raise InvalidArgument(
                f"guard must be a recipe object of this client (zk.lock(), ...), not {guard!r}"
            )
        handle: Handle = guard._bind(proxy)
        return handle

    def __repr__(self) -> str:
        return f"<aiozklock.sync.SyncClient {self.hosts!r} {self.state.value}>"


def _in_threads(exc: BaseException) -> None:
    """The core's error in the words of threaded code (reworded in place): the caller is a
    thread, whose calls run in a task of its own in the client's event loop."""
    if exc.args and isinstance(exc.args[0], str) and "the current task" in exc.args[0]:
        exc.args = (exc.args[0].replace("the current task", "this thread"), *exc.args[1:])


def _register(
    proxy: Proxy, listeners: list[StateListener]
) -> list[tuple[StateListener, Callable[[], None]]]:
    return [(listener, proxy.client.add_listener(listener)) for listener in listeners]


__all__ = ("SyncClient",)
