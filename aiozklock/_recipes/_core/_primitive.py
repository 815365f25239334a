"""The shape every lock-like recipe shares: ``async with``, ``acquire(timeout=)`` (awaitable
and async context manager), ``try_acquire()``, ``release()``, reentrancy per task, local FIFO
queueing of this process's tasks on one object, and bodies cancelled when the holding is lost.

A recipe subclasses ``Primitive`` and supplies how to take and give back the resource
(``_take``, ``_give_back``, ``_drop``); everything here is recipe-independent.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import sys
import time
import warnings
from abc import ABCMeta, abstractmethod
from collections.abc import Coroutine, Generator, Sequence
from types import TracebackType
from typing import Any, ClassVar, Generic, NoReturn, Protocol, Self, TypeVar

import anyio
import anyio.lowlevel

from aiozklock._acl import ACL
from aiozklock._exceptions import LockLost, LockTimeout, NotLockOwner, shorten
from aiozklock._recipes._core._contenders import Identity
from aiozklock._recipes._core._holding import Holding, HoldingRegistry
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._names import LOCK_MARKER
from aiozklock._recipes._core._observe import RecipeObserver
from aiozklock._recipes._core._plan import Decide
from aiozklock._recipes._core._queue import Guard, Queue
from aiozklock._wire._session import Session
from aiozklock._wire._validation import validate_flag, validate_timeout

log = logging.getLogger(__name__)

P = TypeVar("P", bound="Acquirable")


class Acquirable(Protocol):
    """What ``AcquireContext`` drives: a ``Primitive``, or an object that hands each task
    a primitive of its own (the semaphore)."""

    _session: Session
    _label: str

    async def _acquire(self, limit: float | None, task: anyio.TaskInfo | None = None) -> None: ...

    def _enter_body(self) -> anyio.CancelScope: ...

    async def _exit_body(
        self,
        scope: anyio.CancelScope,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        task_id: int,
        confirm: bool = False,
    ) -> None: ...


class Tracker(Protocol):
    """What a primitive reports to its client's registry (``_core/_registry.py``)."""

    def check(self, primitive: Primitive, task_id: int) -> None: ...

    def held(self, primitive: Primitive, task_id: int) -> None: ...

    def released(self, primitive: Primitive, task_id: int) -> None: ...


def _task_ended(coro: object) -> bool:
    """True if the coroutine a task runs has finished (its frame is gone)."""
    if isinstance(coro, AcquireContext):  # a task made of ``lock.acquire()`` itself
        coro = coro._coro
    return getattr(coro, "cr_frame", False) is None


class AcquireContext(Coroutine[Any, Any, None], Generic[P]):
    """What ``acquire()`` returns: an async context manager, and a coroutine (so that
    ``await``, ``asyncio.create_task(lock.acquire())`` and ``tg.start_soon(lock.acquire)``
    all work). The underlying coroutine is created only if it is awaited or driven; one that
    is never awaited or entered warns, as an un-awaited coroutine does."""

    __slots__ = ("_coro", "_origin", "_primitive", "_scope", "_timeout")

    def __init__(self, primitive: P, timeout: float | None, origin: str | None) -> None:
        self._primitive = primitive
        self._timeout = timeout
        self._origin = origin  # where acquire() was called; None once used
        self._scope: anyio.CancelScope | None = None
        self._coro: Coroutine[Any, Any, None] | None = None

    def __del__(self) -> None:
        if self._origin is not None:
            warnings.warn(
                f"{self._primitive._label}: acquire() called at {self._origin} was never "
                "awaited or entered, so it was not acquired: "
                "use 'await x.acquire()' or 'async with x.acquire():'",
                RuntimeWarning,
                stacklevel=2,
            )

    def _coroutine(self) -> Coroutine[Any, Any, None]:
        if self._coro is None:
            self._origin = None
            self._coro = self._primitive._acquire(self._timeout)
        return self._coro

    def __await__(self) -> Generator[Any, None, None]:
        return self._coroutine().__await__()

    def send(self, value: Any) -> Any:
        return self._coroutine().send(value)

    def throw(self, *args: Any) -> Any:
        return self._coroutine().throw(*args)

    def close(self) -> None:
        self._origin = None  # closed on purpose, as for a coroutine: no warning
        if self._coro is not None:
            self._coro.close()

    async def __aenter__(self) -> P:
        self._origin = None
        primitive: Any = self._primitive
        await primitive._acquire(self._timeout)
        self._scope = primitive._enter_body()
        result: P = primitive
        return result

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.exit(exc_type, exc, tb)

    async def exit(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        *,
        confirm: bool = False,
    ) -> None:
        """``__aexit__``; with ``confirm``, it returns once the server has applied the
        release (for integrations that promise it, e.g. before an HTTP response)."""
        self._primitive._session.check_loop()
        assert self._scope is not None
        scope, self._scope = self._scope, None
        task_id = anyio.get_current_task().id
        await self._primitive._exit_body(scope, exc_type, exc, tb, task_id, confirm)


class _FactoryMade(ABCMeta):
    """Recipe objects come from the client's factories, which share one object per
    arguments (``_core/_registry.py``); calling a recipe class raises ``TypeError``."""

    def __call__(cls, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(
            f"aiozklock.{cls.__name__} objects come from the client: use zk.lock(), "
            "zk.multi_lock(), zk.election(), zk.lease_lock(), zk.rw_lock() or zk.semaphore()"
        )


class Primitive(metaclass=_FactoryMade):
    """Shared implementation of the lock-like recipes (see the module docstring).

    ``label`` names the object in error messages, e.g. ``"lock /locks/a"``.
    """

    __signature__ = inspect.Signature()  # help() shows no private constructor

    @classmethod
    def _construct(cls, *args: Any, **kwargs: Any) -> Self:
        """Construct (for the client's factories only; see ``_FactoryMade``)."""
        made: Self = type.__call__(cls, *args, **kwargs)
        return made

    _lost_error: type[LockLost] = LockLost  # what a loss raises (election: LeadershipLost)
    _kind: ClassVar[str]  # the recipe's name in telemetry, e.g. "lock"

    def __init__(
        self,
        session: Session,
        registry: HoldingRegistry,
        label: str,
        paths: Sequence[str],
        acl: tuple[ACL, ...],
    ) -> None:
        self.acl = acl  # what its nodes, and the containers it creates, are created with
        self._session = session
        self._registry = registry
        self._label = shorten(label)  # in every message and log line: a path may be long
        self._paths = tuple(paths)  # what it locks, for the registry's self-deadlock check
        self._tracker: Tracker | None = None
        self._observer: RecipeObserver | None = None  # set by the registry, with telemetry
        self._granted_at = 0.0  # time.monotonic() of the grant (kept only with an observer)
        # One holding per object: local tasks queue here, FIFO. A semaphore, not a lock, so
        # that an orphaned holding can be given back from another task.
        self._local = anyio.Semaphore(1, max_value=1)
        self._owner: anyio.TaskInfo | None = None
        self._depth = 0
        self._holding: Holding | None = None
        self._acquisitions = 0
        self._losses = 0
        self._last_wait: float | None = None
        # The cancel scopes of ``async with`` bodies, per task: nested ones exit in LIFO order
        # within their task.
        self._body_scopes: dict[int, list[anyio.CancelScope]] = {}

    # ---------------------------------------------------------------- what a recipe supplies

    @abstractmethod
    async def _take(self, deadline: float | None, task_name: str | None) -> Holding:
        """Acquire the resource by ``deadline`` (``time.monotonic()``), or raise (a
        ``TimeoutError`` on time-out); ``_abandon`` then cleans up."""

    @abstractmethod
    async def _abandon(self) -> None:
        """After ``_take`` failed or was cancelled: leave nothing of ours on the server
        (shielded and bounded; what cannot be done at once goes to the janitor)."""

    @abstractmethod
    async def _give_back(self, holding: Holding) -> None:
        """Release a holding that was not lost: shielded, returns once it is given up."""

    def _give_back_nowait(self, holding: Holding) -> bool:
        """Have the release of ``holding`` written without waiting for the reply (what
        fails, or cannot be written now, is the janitor's); False if the recipe cannot release so
        (a lease: its node is not bound to the session): ``_give_back`` then runs."""
        return False

    @abstractmethod
    def _drop(self, holding: Holding) -> None:
        """Forget the local state of ``holding`` (released, or lost and left to the janitor)."""

    def _may_hold_with(self, other: Primitive) -> bool:
        """Whether a task holding ``other`` (on one of the same paths) may acquire this
        without waiting for itself: only a read lock, with its own write lock."""
        return False

    def _valid_until(self, holding: Holding) -> float:
        """Until when ``holding`` is certainly ours: the session's clock by default."""
        if holding.lost or holding.generation != self._session.generation:
            return -math.inf
        return self._session.valid_until

    # ---------------------------------------------------------------- public API

    def acquire(self, timeout: float | None = None) -> AcquireContext[Self]:
        """Acquire: ``await x.acquire()`` or ``async with x.acquire(timeout=1):``.

        ``timeout`` bounds the waiting (for the connection, for other tasks of this process,
        for the holder); the round trip that enqueues is never abandoned, so a free resource
        is acquired even with ``timeout=0``. Once the time is up, the queue recipes (lock,
        multi-lock, read/write lock, election, semaphore) send nothing more and do not wait
        for their cleanup: the attempt's node is deleted as ``release()`` deletes, written at
        once (before this client's next request), its reply not awaited, so another session
        may list it for a moment. Raises ``LockTimeout`` if not acquired
        in time, ``InvalidArgument`` for a bad ``timeout``, ``UsageError`` outside the
        client's event loop, or if the task holds another object on the same path and
        ``timeout`` is None (it would wait for itself forever). Never awaited nor entered,
        it warns (``RuntimeWarning``).
        """
        frame = sys._getframe(1)  # the loop check is _acquire's, when it runs
        origin = f"{frame.f_code.co_filename}:{frame.f_lineno}"
        return AcquireContext(self, validate_timeout(timeout), origin)

    async def try_acquire(self) -> bool:
        """One attempt, no waiting: True if it is now held by the current task.

        Raises what ``acquire()`` raises, except ``LockTimeout``."""
        try:
            await self._acquire(0.0)
        except LockTimeout:
            return False
        return True

    async def release(self, *, confirm: bool = False) -> None:
        """Release what the current task holds (one level, if reentered).

        Returns at once, without waiting for the server (so does leaving ``async with``):
        the delete is written before the event loop next waits, or with this client's next
        request (a re-acquire of this lock by then takes it into its own transaction).
        ZooKeeper runs this session's requests in order, so everything this client sends
        later is ordered after it, and no other contender can be granted before it is
        applied: until then other sessions may still list our node, and a caller that
        blocks the event loop delays it. A delete that fails, or cannot be written now
        (disconnected), is done in the background once reconnected in the same session;
        ``close()`` sends it before closing. ``confirm=True`` waits until the server has
        applied the release (one round trip more; through a reconnect if need be).

        Raises ``NotLockOwner`` if the current task does not hold it (if it was held by a
        task that ended without releasing it, it is released now, and logged as an error),
        ``LockLost`` if it was lost while held (its nodes are then removed in the
        background once possible), ``UsageError`` outside the client's event loop,
        ``InvalidArgument`` for a non-bool ``confirm``.
        """
        self._session.check_loop()
        await self._release(anyio.get_current_task().id, validate_flag("confirm", confirm))

    async def __aenter__(self) -> Self:
        task = anyio.get_current_task()
        await self._acquire(None, task)
        # Only the owning task enters bodies, and nested ones exit in LIFO order: a stack works.
        self._body_scopes.setdefault(task.id, []).append(self._enter_body())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._session.check_loop()
        task_id = anyio.get_current_task().id
        scopes = self._body_scopes[task_id]
        scope = scopes.pop()
        if not scopes:
            del self._body_scopes[task_id]
        await self._exit_body(scope, exc_type, exc, tb, task_id)

    @property
    def is_held(self) -> bool:
        """True if the current task holds it, it has not been lost, and it is still within
        ``valid_until``: a cheap check to make right before acting on the resource. Never
        raises."""
        holding = self._holding
        if holding is None or holding.lost or self._owner is None:
            return False
        if time.monotonic() >= self._valid_until(holding):
            return False
        try:
            return self._owner.id == anyio.get_current_task().id
        except RuntimeError:  # not called from a task
            return False

    @property
    def valid_until(self) -> float:
        """The ``time.monotonic()`` instant until which it is certainly still ours.

        For a session-bound recipe: the server cannot expire our session, and so cannot grant
        the resource to anyone else, earlier than the send time of our newest answered request
        plus the session timeout; this is that instant less a 10 % margin. It advances with
        every reply (pings keep it moving while idle), and it catches what no notification
        can: a process that was paused (GC, SIGSTOP, a swapped-out VM) and resumes after its
        session may have expired. ``-inf`` once lost. Raises ``NotLockOwner`` if not held.
        Fencing tokens remain the real protection: a write can still be delayed in flight.
        """
        holding = self._holding
        if holding is None:
            raise NotLockOwner(f"the {self._label} is not held, so it has no validity")
        return self._valid_until(holding)

    @property
    def fencing_token(self) -> int:
        """The czxid of our node: it grows with every grant, across the whole ensemble.

        Pass it to the resource you protect, and have it reject writes with a smaller token.
        Raises ``NotLockOwner`` if not held.
        """
        if self._holding is None:
            raise NotLockOwner(f"the {self._label} is not held, so it has no fencing token")
        return self._holding.token

    # ---------------------------------------------------------------- acquire and release

    async def _acquire(self, limit: float | None, task: anyio.TaskInfo | None = None) -> None:
        self._session.check_loop()
        if task is None:
            task = anyio.get_current_task()
        if self._owner is not None:
            if self._orphaned():
                await self._reap_orphan()  # it would block us forever
            elif self._owner.id == task.id:
                assert self._holding is not None
                if self._holding.lost:
                    raise self._lost_error(f"{self._label} was lost: {self._holding.lost_reason}")
                self._depth += 1
                return
        if self._tracker is not None and limit is None:  # bounded waits simply time out
            self._tracker.check(self, task.id)
        if self._observer is None:
            await self._obtain(limit, task)
        else:
            await self._obtain_observed(limit, task, self._observer)
        if self._tracker is not None:
            self._tracker.held(self, task.id)

    async def _obtain_observed(
        self, limit: float | None, task: anyio.TaskInfo, observer: RecipeObserver
    ) -> None:
        attempt = observer.acquiring()
        started = time.monotonic()
        try:
            await self._obtain(limit, task)
        except BaseException as exc:
            attempt.failed(time.monotonic() - started, exc)
            raise
        self._granted_at = time.monotonic()
        assert self._holding is not None
        attempt.acquired(self._granted_at - started, self._ahead(), self._holding.token)

    def _ahead(self) -> int | None:
        """How many contenders were queued before us when we last joined (telemetry);
        None for a recipe without a queue."""
        return None

    async def _obtain(self, limit: float | None, task: anyio.TaskInfo) -> None:
        """Wait for this process's other tasks, then take the resource (see ``_acquire``)."""
        started = time.monotonic()
        deadline = None if limit is None else started + limit
        try:
            self._local.acquire_nowait()
        except anyio.WouldBlock:
            with anyio.move_on_after(math.inf if limit is None else limit) as scope:
                await self._local.acquire()
            if scope.cancelled_caught:  # anyio's semaphore gives it back if cancelled late
                raise LockTimeout(
                    f"{self._label} not acquired within {limit} s "
                    "(other tasks of this process were first)"
                ) from None
        try:
            holding = await self._take(deadline, task.name)
        except BaseException as exc:
            try:
                await self._abandon()
            finally:
                self._local.release()
            if isinstance(exc, TimeoutError) and not isinstance(exc, LockTimeout):
                raise LockTimeout(f"{self._label} not acquired in time: {exc}") from None
            raise
        self._holding = holding
        holding.observer = self._observer
        self._registry.register(holding)  # marks it lost at once if it is unsafe already
        self._owner = task
        self._depth = 1
        self._acquisitions += 1
        self._last_wait = time.monotonic() - started

    async def _release(self, task_id: int, confirm: bool = False) -> None:
        holding = self._holding
        # An ended owner's task id may have been reused by the caller: not the owner either.
        if self._owner is None or self._owner.id != task_id or self._orphaned():
            orphan = await self._reap_orphan()
            detail = f" (task {orphan!r} held it, ended without releasing it: released now)"
            raise NotLockOwner(
                f"the current task does not hold the {self._label}{detail if orphan else ''}"
            )
        assert holding is not None
        if self._depth > 1:
            self._depth -= 1
            if holding.lost:
                raise self._lost_error(f"{self._label} was lost: {holding.lost_reason}")
            return
        await self._let_go(holding, task_id, confirm)

    async def _let_go(self, holding: Holding, task_id: int, confirm: bool = True) -> None:
        self._depth = 0
        self._owner = None
        self._holding = None
        self._registry.unregister(holding)
        if self._tracker is not None:
            self._tracker.released(self, task_id)
        if self._observer is not None:
            self._observer.released(time.monotonic() - self._granted_at)
        try:
            if holding.lost:
                self._losses += 1
                raise self._lost_error(f"{self._label} was lost: {holding.lost_reason}")
            if confirm or not self._give_back_nowait(holding):
                await self._give_back(holding)
        finally:
            self._drop(holding)
            self._local.release()
        # The give-back was shielded; a cancellation that arrived meanwhile is delivered now.
        await anyio.lowlevel.checkpoint_if_cancelled()

    def _held_by_task(self, task_id: int) -> bool:
        """Whether the task ``task_id`` holds it (lost or not) and has not ended (an ended
        task's id may be reused)."""
        owner = self._owner
        return owner is not None and owner.id == task_id and not self._orphaned()

    def _orphaned(self) -> bool:
        """True if the task that holds it has ended without releasing it."""
        return self._owner is not None and _task_ended(self._owner.coro)

    async def _reap_orphan(self) -> str | None:
        """If the task holding it has ended without releasing it: log an error and release
        it (its nodes would otherwise block every contender until the session ends).
        Returns the task's name if it did."""
        owner = self._owner
        if owner is None or not self._orphaned():
            return None
        log.error(
            "%s was held by task %r (id %d), which ended without releasing it: releasing it "
            "now. Release in the task that acquired (use 'async with')",
            self._label,
            owner.name,
            owner.id,
        )
        self._body_scopes.pop(owner.id, None)
        assert self._holding is not None
        with contextlib.suppress(LockLost):  # lost: the loss policy left it to the janitor
            await self._let_go(self._holding, owner.id)
        return owner.name or str(owner.id)

    # ---------------------------------------------------------------- body scopes

    def _enter_body(self) -> anyio.CancelScope:
        holding = self._holding
        assert holding is not None
        scope = anyio.CancelScope()
        holding.scopes.append(scope)
        scope.__enter__()
        if holding.lost:
            scope.cancel()
        return scope

    async def _exit_body(
        self,
        scope: anyio.CancelScope,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        task_id: int,
        confirm: bool = False,
    ) -> None:
        holding = self._holding
        # The scope swallows only a cancellation of its own, made by a loss; then _release
        # raises the loss, which replaces it.
        swallowed = bool(scope.__exit__(exc_type, exc, tb))
        if holding is not None and scope in holding.scopes:
            holding.scopes.remove(scope)
        cancelled = anyio.get_cancelled_exc_class()
        outer_cancel = exc_type is not None and issubclass(exc_type, cancelled) and not swallowed
        try:
            await self._release(task_id, confirm)
        except LockLost:
            if not outer_cancel:  # the caller's own cancellation must propagate, not be hidden
                raise


class QueuedPrimitive(Primitive):
    """A recipe whose holding is our place at the head of one or more queues (the mutex,
    the multi-lock, election): the queue engine does the work, with ``decide``."""

    def __init__(
        self,
        session: Session,
        registry: HoldingRegistry,
        janitor: Janitor,
        members: Sequence[str],
        decide: Decide,
        label: str,
        identifier: str | None,
        acl: tuple[ACL, ...],
        marker: str = LOCK_MARKER,
        guard: Guard | None = None,
    ) -> None:
        super().__init__(session, registry, label, members, acl)
        self._queue = Queue(session, janitor, members, decide, self._label, acl, marker, guard)
        self._identity = Identity(identifier)

    async def _take(self, deadline: float | None, task_name: str | None) -> Holding:
        return await self._queue.take(deadline, lambda: self._identity.data(task_name))

    def _ahead(self) -> int | None:
        return self._queue.ahead

    async def _abandon(self) -> None:
        await self._queue.abandon()

    async def _give_back(self, holding: Holding) -> None:
        await self._queue.delete_own()

    def _give_back_nowait(self, holding: Holding) -> bool:
        self._queue.delete_own_nowait()
        return True

    def _drop(self, holding: Holding) -> None:
        if holding.lost:
            self._queue.retire_guid()  # the loss policy left our nodes to the janitor
        self._queue.forget()


__all__ = ("AcquireContext", "Acquirable", "Primitive", "QueuedPrimitive")
