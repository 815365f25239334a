"""The shape every lock-like recipe shares: ``async with``, ``acquire(timeout=)`` (awaitable
and async context manager), ``try_acquire()``, ``release()``, reentrancy per task, local FIFO
queueing of this process's tasks on one object, and bodies cancelled when the holding is lost.

A recipe subclasses ``Primitive`` and supplies how to take and give back the resource
(``_take``, ``_give_back``, ``_drop``); everything here is recipe-independent.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Coroutine, Generator, Sequence
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

import anyio
import anyio.lowlevel

from aiozklock._exceptions import LockLost, LockTimeout, NotLockOwner
from aiozklock._recipes._core._contenders import Identity
from aiozklock._recipes._core._holding import Holding, HoldingRegistry
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._plan import Decide
from aiozklock._recipes._core._queue import Queue
from aiozklock._wire._session import Session
from aiozklock._wire._validation import validate_timeout

P = TypeVar("P", bound="Primitive")


class AcquireContext(Coroutine[Any, Any, None], Generic[P]):
    """What ``acquire()`` returns: an async context manager, and a coroutine (so that
    ``await``, ``asyncio.create_task(lock.acquire())`` and ``tg.start_soon(lock.acquire)``
    all work). The underlying coroutine is created only if it is awaited or driven."""

    __slots__ = ("_coro", "_primitive", "_scope", "_timeout")

    def __init__(self, primitive: P, timeout: float | None) -> None:
        self._primitive = primitive
        self._timeout = timeout
        self._scope: anyio.CancelScope | None = None
        self._coro: Coroutine[Any, Any, None] | None = None

    def _coroutine(self) -> Coroutine[Any, Any, None]:
        if self._coro is None:
            self._coro = self._primitive._acquire(self._timeout)
        return self._coro

    def __await__(self) -> Generator[Any, None, None]:
        return self._coroutine().__await__()

    def send(self, value: Any) -> Any:
        return self._coroutine().send(value)

    def throw(self, *args: Any) -> Any:
        return self._coroutine().throw(*args)

    def close(self) -> None:
        if self._coro is not None:
            self._coro.close()

    async def __aenter__(self) -> P:
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
    ) -> bool:
        assert self._scope is not None
        scope, self._scope = self._scope, None
        task_id = anyio.get_current_task().id
        return await self._primitive._exit_body(scope, exc_type, exc, tb, task_id)


class Primitive(ABC):
    """Shared implementation of the lock-like recipes (see the module docstring).

    ``label`` names the object in error messages, e.g. ``"lock /locks/a"``.
    """

    _lost_error: type[LockLost] = LockLost  # what a loss raises (election: LeadershipLost)

    def __init__(self, session: Session, registry: HoldingRegistry, label: str) -> None:
        self._session = session
        self._registry = registry
        self._label = label
        self._local = anyio.Lock()  # one holding per object: local tasks queue here, FIFO
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

    @abstractmethod
    def _drop(self, holding: Holding) -> None:
        """Forget the local state of ``holding`` (released, or lost and left to the janitor)."""

    def _valid_until(self, holding: Holding) -> float:
        """Until when ``holding`` is certainly ours: the session's clock by default."""
        if holding.lost or holding.generation != self._session.generation:
            return -math.inf
        return self._session.valid_until

    # ---------------------------------------------------------------- public API

    def acquire(self, timeout: float | None = None) -> AcquireContext[Self]:
        """Acquire: ``await x.acquire()`` or ``async with x.acquire(timeout=1):``.

        ``timeout`` bounds the waiting (for the connection, for other tasks of this process,
        for the holder); the round trip already in flight is never abandoned, so a free
        resource is acquired even with ``timeout=0``. Raises ``LockTimeout`` if not acquired
        in time, ``InvalidArgument`` for a bad ``timeout``.
        """
        return AcquireContext(self, validate_timeout(timeout))

    async def try_acquire(self) -> bool:
        """One attempt, no waiting: True if it is now held by the current task."""
        try:
            await self._acquire(0.0)
        except LockTimeout:
            return False
        return True

    async def release(self) -> None:
        """Release what the current task holds (one level, if reentered).

        Raises ``NotLockOwner`` if the current task does not hold it, and ``LockLost`` if it
        was lost while held (its nodes are then removed in the background once possible).
        """
        await self._release(anyio.get_current_task().id)

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
    ) -> bool:
        task_id = anyio.get_current_task().id
        scopes = self._body_scopes[task_id]
        scope = scopes.pop()
        if not scopes:
            del self._body_scopes[task_id]
        return await self._exit_body(scope, exc_type, exc, tb, task_id)

    @property
    def is_held(self) -> bool:
        """True if the current task holds it, it has not been lost, and it is still within
        ``valid_until``: a cheap check to make right before acting on the resource."""
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
        if task is None:
            task = anyio.get_current_task()
        if self._owner is not None and self._owner.id == task.id:
            assert self._holding is not None
            if self._holding.lost:
                raise self._lost_error(f"{self._label} was lost: {self._holding.lost_reason}")
            self._depth += 1
            return
        started = time.monotonic()
        deadline = None if limit is None else started + limit
        try:
            self._local.acquire_nowait()
        except anyio.WouldBlock:
            with anyio.move_on_after(math.inf if limit is None else limit) as scope:
                await self._local.acquire()
            if scope.cancelled_caught:  # anyio.Lock gives the lock back if cancelled late
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
        self._registry.register(holding)  # marks it lost at once if it is unsafe already
        self._owner = task
        self._depth = 1
        self._acquisitions += 1
        self._last_wait = time.monotonic() - started

    async def _release(self, task_id: int) -> None:
        holding = self._holding
        if self._owner is None or self._owner.id != task_id or holding is None:
            raise NotLockOwner(f"the current task does not hold the {self._label}")
        if self._depth > 1:
            self._depth -= 1
            if holding.lost:
                raise self._lost_error(f"{self._label} was lost: {holding.lost_reason}")
            return
        self._depth = 0
        self._owner = None
        self._holding = None
        self._registry.unregister(holding)
        try:
            if holding.lost:
                self._losses += 1
                raise self._lost_error(f"{self._label} was lost: {holding.lost_reason}")
            await self._give_back(holding)
        finally:
            self._drop(holding)
            self._local.release()
        # The give-back was shielded; a cancellation that arrived meanwhile is delivered now.
        await anyio.lowlevel.checkpoint_if_cancelled()

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
    ) -> bool:
        holding = self._holding
        swallowed = bool(scope.__exit__(exc_type, exc, tb))
        if holding is not None and scope in holding.scopes:
            holding.scopes.remove(scope)
        cancelled = anyio.get_cancelled_exc_class()
        outer_cancel = exc_type is not None and issubclass(exc_type, cancelled) and not swallowed
        try:
            await self._release(task_id)
        except LockLost:
            if outer_cancel:
                return False  # the caller's own cancellation must propagate, not be hidden
            raise
        return swallowed


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
    ) -> None:
        super().__init__(session, registry, label)
        self._queue = Queue(session, janitor, members, decide, label)
        self._identity = Identity(identifier)

    async def _take(self, deadline: float | None, task_name: str | None) -> Holding:
        return await self._queue.take(deadline, lambda: self._identity.data(task_name))

    async def _abandon(self) -> None:
        await self._queue.abandon()

    async def _give_back(self, holding: Holding) -> None:
        await self._queue.delete_own()

    def _drop(self, holding: Holding) -> None:
        if holding.lost:
            self._queue.retire_guid()  # the loss policy left our nodes to the janitor
        self._queue.forget()


__all__ = ("AcquireContext", "Primitive", "QueuedPrimitive")
