"""The synchronous face of every lock-like recipe, written once over the async ``Handle``:
``with x:``, ``acquire(timeout=)``, ``try_acquire()``, ``release()``, ``is_held``,
``fencing_token``, ``valid_until``, and what a thread, which cannot be cancelled, has
instead of a cancelled body: ``lost``, ``check()``, ``LockLost`` at the block's exit and
``on_lost``.

Each call runs in the calling thread's proxy task (``_portal.py``), so the async object's
per-task state is this thread's. A sync object keeps the factory call that made its async
object, and makes it again for a new client epoch (in a forked child).
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, Self, TypeVar

from aiozklock._exceptions import LockLost, LockTimeout, NotLockOwner, StaleFencingToken
from aiozklock._recipes._core import _faces as faces
from aiozklock._recipes._core._handle import Handle
from aiozklock._recipes._core._holding import Holding
from aiozklock._wire._validation import validate_acquire, validate_flag
from aiozklock.sync._proxy import Proxy

if TYPE_CHECKING:
    from aiozklock._client import ZooKeeperClient
    from aiozklock.sync._portal import Portal

log = logging.getLogger(__name__)

H = TypeVar("H", bound=Handle)
T = TypeVar("T")

LostCallback = Callable[[], object]


class Owner(Protocol):
    """What a sync recipe object needs of the client that made it (``SyncClient``, through
    its factories): its calls run in the calling thread's proxy task (``_call`` awaits,
    ``_peek`` does not; ``undo`` as ``Portal.call``), the calling thread's proxy if it has
    one, the set its recipe objects join (told of a fork), and in a forked child the
    parents' portals. A protocol, so that the objects do not import the client made of
    their factories."""

    _handles: weakref.WeakSet[SyncHandle[Any]]
    _inherited: list[Portal]

    def _call(self, func: Callable[[Proxy], Any], undo: Any = None) -> Any: ...

    def _peek(self, func: Callable[[Proxy], Any]) -> Any: ...

    def _proxy_if_any(self) -> Proxy | None: ...


class _Held:
    """One thread's acquisition through one sync object: how deep it is nested, the
    holding, and the event its loss sets."""

    __slots__ = ("depth", "forget", "holding", "lost")

    def __init__(self, holding: Holding) -> None:
        self.depth = 1
        self.holding = holding
        self.lost = threading.Event()
        self.forget: Callable[[], None] | None = None  # stops listening to the holding


class SyncHandle(Generic[H]):
    """The synchronous contract of a lock-like recipe (see the module docstring). Made by
    ``SyncClient``'s factories; each call blocks the calling thread, which is the owner.

    ``on_lost``: called once, with no argument, as soon as a holding taken through this
    object is lost; it runs in the client's event loop thread, so it must return at once
    and must not call the client (``UsageError``): set a flag, signal a process.

    Besides what each method says, every call but ``lost`` raises ``ClientClosed`` once
    the client is closed and ``UsageError`` from a thread that must not block (see
    ``SyncClient``); an acquisition interrupted by a signal handler's exception is
    withdrawn (nothing left on the server, nothing held) before that exception is raised.
    """

    __slots__ = ("__weakref__", "_bound_to", "_client", "_held", "_make", "_on_lost", "_target")

    def __init__(
        self,
        client: Owner,
        make: Callable[[ZooKeeperClient], H],
        on_lost: LostCallback | None,
    ) -> None:
        self._client = client
        self._make = make
        self._on_lost = on_lost
        self._target: H | None = None
        self._bound_to: ZooKeeperClient | None = None
        self._held: weakref.WeakKeyDictionary[Proxy, _Held] = weakref.WeakKeyDictionary()
        client._peek(self._bind)  # made now: bad arguments raise here, in the caller's thread
        client._handles.add(self)  # told of a fork (``_forsaken``)

    # ---------------------------------------------------------------- in the loop thread

    def _bind(self, proxy: Proxy) -> H:
        """The async object of the proxy's client epoch (made again in a forked child)."""
        client = proxy.client
        if self._bound_to is not client or self._target is None:
            self._target = self._make(client)
            self._bound_to = client
        return self._target

    def _noted(self, proxy: Proxy, handle: H) -> None:
        """After an acquisition by the proxy's thread: nest, or watch the new holding."""
        holding = faces.holding(handle, proxy.task_id)
        assert holding is not None
        held = self._held.get(proxy)
        if held is not None and held.depth > 0 and held.holding is holding:
            held.depth += 1
            return
        held = _Held(holding)
        self._held[proxy] = held
        held.forget = holding.when_lost(lambda: self._tell_lost(held))

    def _tell_lost(self, held: _Held) -> None:
        if held.depth == 0:  # released meanwhile
            return
        held.lost.set()
        if self._on_lost is not None:
            self._on_lost()

    async def _acquire_job(self, proxy: Proxy, limit: float | None) -> None:
        handle = self._bind(proxy)
        await faces.acquire(handle, limit)
        self._noted(proxy, handle)

    async def _try_job(self, proxy: Proxy) -> bool:
        handle = self._bind(proxy)
        try:
            await faces.acquire(handle, 0.0)
        except LockTimeout:
            return False
        self._noted(proxy, handle)
        return True

    async def _release_job(self, proxy: Proxy, confirm: bool = False) -> None:
        handle = self._bind(proxy)
        held = self._held.get(proxy)
        try:
            await handle.release(confirm=confirm)
        except NotLockOwner:
            raise
        except BaseException:
            _given_back(held)  # the core's LockLost comes after the level is given back
            raise
        _given_back(held)

    async def _undo(self, proxy: Proxy) -> None:
        await self._release_job(proxy)

    def _check_job(self, proxy: Proxy) -> None:
        faces.check(self._bind(proxy), proxy.task_id, owner="this thread")

    # ---------------------------------------------------------------- in a forked child

    def _forsaken(self) -> None:
        """In a forked child (the only thread, at once): every holding of the parent's
        through this object is lost here, though the parent still holds it. Their loss
        events are set (the child's copy of a body polls them); ``on_lost`` is not called
        (it runs in the client's loop thread, which a child does not have)."""
        for held in list(self._held.values()):
            if held.depth > 0:
                _set_in_child(held.lost)

    def _inherited(self, any_depth: bool = False) -> _Held | None:
        """In a forked child: the calling thread's holding through this object that the
        parent held at the fork (lost here), while the child has not left it (or, with
        ``any_depth``, even once it has)."""
        for portal in self._client._inherited:  # empty but in a forked child
            proxy = portal.proxy_if_any()
            held = None if proxy is None else self._held.get(proxy)
            if held is not None and (held.depth > 0 or any_depth):
                return held
        return None

    def _inherited_loss(self) -> LockLost:
        lost = LockLost if self._target is None else faces.lost_error(self._target)
        label = "lock" if self._target is None else faces.label(self._target)
        return lost(
            f"{label} was lost in this process: it was forked while its parent held it, and "
            "a forked child holds none of its parent's locks (the parent still does)"
        )

    def _refuse_inherited(self) -> None:
        """Raise the loss if the calling thread is in a holding it inherited: no call of
        a forked child reaches the parent's holding (nothing is sent)."""
        if self._client._inherited and self._inherited() is not None:
            raise self._inherited_loss()

    def _refuse_inherited_guard(self, resource: str) -> None:
        """``StaleFencingToken`` for a write guarded by an inherited holding."""
        held = self._inherited() if self._client._inherited else None
        if held is not None:
            stale = StaleFencingToken(resource, held.holding.token)
            stale.add_note(str(self._inherited_loss()))
            raise stale

    # ---------------------------------------------------------------- the user's calls

    def _call(self, func: Callable[[Proxy], Any]) -> Any:
        return self._client._call(func)

    def _ask(self, func: Callable[[H], Awaitable[T]]) -> T:
        """``await func(async object)`` in the calling thread's task."""
        result: T = self._client._call(lambda proxy: func(self._bind(proxy)))
        return result

    def _read(self, func: Callable[[H], T]) -> T:
        """``func(async object)`` in the calling thread's task (nothing awaited)."""
        result: T = self._client._peek(lambda proxy: func(self._bind(proxy)))
        return result

    def acquire(
        self, timeout: float | None = None, *, blocking: Literal[True] = True
    ) -> Acquired[Self]:
        """Acquire for the calling thread, waiting at most ``timeout`` seconds (None:
        without limit). Returns once held: the result needs no use, and ``with
        x.acquire(timeout=5):`` releases at the block's exit (as ``with x:``, which waits
        without limit). Reentrant in its thread. ``blocking``: kazoo's spelling, True
        only: for one attempt without waiting, ``try_acquire()`` (it returns a bool).

        Raises ``LockTimeout`` if not acquired in time (nothing of ours is left on the
        server), ``InvalidArgument`` for a bad ``timeout`` (a bool too: kazoo's
        ``acquire(False)``) or ``blocking=False``, naming ``try_acquire()`` (nothing
        sent), ``ClientClosed`` once the client
        is closed, ``UsageError`` from a thread that runs an event loop (use the async API)
        or from the client's own loop thread, and what the async ``acquire()`` raises. In
        a forked child, while the thread is in a holding the parent had: ``LockLost``, as
        the reentry of a lost holding (``release()`` leaves it), nothing sent.
        """
        timeout = validate_acquire(timeout, blocking)
        self._refuse_inherited()
        self._client._call(lambda proxy: self._acquire_job(proxy, timeout), self._undo)
        return Acquired(self)

    def try_acquire(self) -> bool:
        """One attempt, no waiting: True if it is now held by the calling thread. Raises
        what ``acquire()`` raises, except ``LockTimeout``."""
        self._refuse_inherited()
        result: bool = self._client._call(self._try_job, self._undo)
        return result

    def release(self, *, confirm: bool = False) -> None:
        """Release one level held by the calling thread. Returns once the release is
        written to the server's connection (or, with ``confirm=True``, applied by the
        server): whatever the thread does next, blocking or not, keeps the lock from
        nobody.

        Raises ``NotLockOwner`` if the calling thread does not hold it, ``LockLost``
        (``LeadershipLost`` for an election) if it was lost while held (it is released
        all the same), ``InvalidArgument`` for a non-bool ``confirm``, ``ClientClosed``,
        ``UsageError`` as ``acquire()``. In a forked child, leaving a holding the parent
        had raises ``LockLost`` and sends nothing (the parent's node is the parent's).
        """
        confirm = validate_flag("confirm", confirm)
        held = self._inherited() if self._client._inherited else None
        if held is not None:  # a forked child leaves the parent's holding: nothing sent
            _given_back(held)
            raise self._inherited_loss()
        self._call(lambda proxy: self._release_job(proxy, confirm))

    def __enter__(self) -> Self:
        """``with x:`` acquires for the calling thread, without a time limit."""
        self._refuse_inherited()
        self._client._call(lambda proxy: self._acquire_job(proxy, None), self._undo)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Release; raises ``LockLost`` if it was lost during the block, unless the block
        raised: its own exception then passes unchanged (the loss was logged)."""
        try:
            self.release()
        except LockLost:
            if exc is None:
                raise

    @property
    def is_held(self) -> bool:
        """True if the calling thread holds it, it has not been lost, and it is within
        ``valid_until``: a cheap check right before acting on the resource. Raises
        ``ClientClosed`` once the client is closed, ``UsageError`` as ``acquire()``."""
        if self._client._inherited and self._inherited() is not None:
            return False
        held: bool = self._client._peek(lambda proxy: faces.holds(self._bind(proxy), proxy.task_id))
        return held

    @property
    def fencing_token(self) -> int:
        """The fencing token of the calling thread's holding (see the async recipe): pass it
        to the resource you protect. Raises ``NotLockOwner`` if not held, and in a forked
        child, ``LockLost`` for the holding it inherited (the parent holds it, with this
        token: a store could not tell the two apart)."""
        self._refuse_inherited()
        token: int = self._client._peek(lambda proxy: self._bind(proxy).fencing_token)
        return token

    @property
    def valid_until(self) -> float:
        """The ``aiozklock.clock()`` instant until which the calling thread's holding is
        certainly still ours (see the async recipe); ``-inf`` once lost (in a forked child,
        for a holding the parent had). Raises ``NotLockOwner`` if not held."""
        if self._client._inherited and self._inherited() is not None:
            return -math.inf
        until: float = self._client._peek(lambda proxy: self._bind(proxy).valid_until)
        return until

    @property
    def lost(self) -> threading.Event:
        """The calling thread's loss event: set the moment its current (or last) holding
        through this object is lost. Poll it (``lost.is_set()``) or wait on it
        (``lost.wait(timeout)``) in the body; a new acquisition has a new event. An
        unset event if this thread never acquired through this object. In a forked child,
        the events of the parent's holdings are set at the fork. Sends nothing, blocks
        nothing, raises nothing."""
        proxy = self._client._proxy_if_any()
        held = None if proxy is None else self._held.get(proxy)
        if held is None and self._client._inherited:  # a forked child: the parent's holding
            held = self._inherited(any_depth=True)
        return threading.Event() if held is None else held.lost

    def check(self) -> None:
        """Raise unless the calling thread still holds it: ``LockLost`` (``LeadershipLost``
        for an election) if it was lost, or is past ``valid_until``; ``NotLockOwner`` if the
        thread does not hold it. Call it between the steps of a long body. Sends nothing
        (one hop to the client's thread); ``ClientClosed``, ``UsageError`` as ``acquire()``.
        In a forked child, a holding the parent had is lost: ``LockLost``, nothing sent.
        """
        self._refuse_inherited()
        self._client._peek(self._check_job)

    def __repr__(self) -> str:
        target = self._target
        return f"<aiozklock.sync {type(self).__name__} {target!r}>"


def _set_in_child(event: threading.Event) -> None:
    """Set an event in a forked child: a thread of the parent (none exists here) may have
    held its lock at the fork, so it is made anew first, as ``threading`` does for its own."""
    reinit = getattr(event, "_at_fork_reinit", None)
    if reinit is not None:
        reinit()
    event.set()


def _given_back(held: _Held | None) -> None:
    if held is not None and held.depth > 0:
        held.depth -= 1
        if held.depth == 0 and held.forget is not None:
            # A read lock's holding outlives ours while other threads hold it: no trace.
            held.forget()
            held.forget = None


class Acquired(Generic[T]):
    """What ``acquire()`` returns, once acquired: ``with x.acquire(timeout=5):`` releases
    at the block's exit (as ``with x:`` does); unused, it does nothing."""

    __slots__ = ("_handle",)

    def __init__(self, handle: SyncHandle[Any]) -> None:
        self._handle = handle

    def __enter__(self) -> T:
        """The recipe object, already held."""
        handle: T = self._handle  # type: ignore[assignment]
        return handle

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Release, as leaving ``with x:`` does."""
        self._handle.__exit__(exc_type, exc, tb)


__all__ = ("Acquired", "LostCallback", "Owner", "SyncHandle")
