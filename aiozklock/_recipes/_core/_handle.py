"""The public shape of every lock-like recipe, written once: ``async with x:``,
``acquire(timeout=)`` (awaitable and async context manager), ``try_acquire()``,
``release()``, ``is_held``, ``valid_until`` and ``fencing_token``.

A ``Handle`` is what users hold; what it drives is the engine of the calling task (a
``Primitive``, ``_primitive.py``): the handle itself for a lock, the task's own lease for a
semaphore (as anyio's ``Lock`` hands out its implementation, and trio's
``AsyncContextManagerMixin`` writes a context manager once).
"""

from __future__ import annotations

import inspect
import sys
import warnings
from abc import ABCMeta, abstractmethod
from collections.abc import Coroutine, Generator
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Generic,
    Literal,
    NoReturn,
    Protocol,
    Self,
    TypeVar,
)

import anyio

from aiozklock._exceptions import (
    LockLost,
    LockTimeout,
    NotLockOwner,
    StaleFencingToken,
    UsageError,
)
from aiozklock._wire._session import Session
from aiozklock._wire._validation import validate_acquire, validate_flag

if TYPE_CHECKING:
    from aiozklock._acl import ACL
    from aiozklock._recipes._core._holding import Holding
    from aiozklock._wire._tasks import TaskRef

H = TypeVar("H", bound="Handle")

# Why a recipe on one fixed node cannot guard a write (its ``_unguardable``).
FIXED_NODE = (
    "it holds a fixed node, which the next holder creates again at the same path with "
    "version 0, and ZooKeeper's check compares versions only: a check would pass for a "
    "stale holder, so guard= is refused. Guard with a fair lock (zk.lock(path)), whose node "
    "names are unique to each acquisition, or pass its fencing_token to the store"
)


def _task_ended(coro: object) -> bool:
    """True if the coroutine a task runs has finished (its frame is gone)."""
    if isinstance(coro, AcquireContext):  # a task made of ``lock.acquire()`` itself
        coro = coro._coro
    return getattr(coro, "cr_frame", False) is None


class Engine(Protocol):
    """What holds a handle for a task (a ``Primitive``, ``_primitive.py``, which builds on
    ``Handle``: the handle names only what it asks of it): its holding, whose it is, until
    when it is certainly ours, what its loss raises, and its integrations' commit point."""

    _holding: Holding | None

    def _held_by_task(self, task_id: int) -> bool: ...

    def _valid_until(self, holding: Holding) -> float: ...

    def _loss(self, holding: Holding) -> LockLost: ...

    def _detach_bodies(self) -> None: ...


class AcquireContext(Coroutine[Any, Any, None], Generic[H]):
    """What ``acquire()`` returns: an async context manager, and a coroutine (so that
    ``await``, ``asyncio.create_task(lock.acquire())`` and ``tg.start_soon(lock.acquire)``
    all work). The underlying coroutine is created only if it is awaited or driven; one that
    is never awaited or entered warns, as an un-awaited coroutine does.

    Awaited (``await x.acquire()``), the holding is the awaiting task's. Driven as a task of
    its own (``asyncio.wait_for`` on Python 3.11, ``create_task``, ``gather``, ``shield``,
    ``start_soon``), that task ends as soon as it returns: the holding is then the task's
    that called ``acquire()`` (the one that awaits the result), not the short-lived one's."""

    __slots__ = ("_caller", "_coro", "_handle", "_origin", "_scope", "_timeout")

    def __init__(
        self, handle: H, timeout: float | None, origin: str | None, caller: TaskRef | None
    ) -> None:
        self._handle = handle
        self._timeout = timeout
        self._origin = origin  # where acquire() was called; None once used
        self._caller = caller  # the task that called acquire(), if in the client's loop
        self._scope: anyio.CancelScope | None = None
        self._coro: Coroutine[Any, Any, None] | None = None

    def __del__(self) -> None:
        if self._origin is not None:
            warnings.warn(
                f"{self._handle._label}: acquire() called at {self._origin} was never "
                "awaited or entered, so it was not acquired: "
                "use 'await x.acquire()' or 'async with x.acquire():'",
                RuntimeWarning,
                stacklevel=2,
            )

    def _coroutine(self, task: TaskRef | None = None) -> Coroutine[Any, Any, None]:
        if self._coro is None:
            self._origin = None
            self._coro = self._handle._acquire(self._timeout, task)
        return self._coro

    def __await__(self) -> Generator[Any, None, None]:
        return self._coroutine().__await__()

    def send(self, value: Any) -> Any:
        # Driven by ``send`` rather than awaited: it is a task's own coroutine, a task that
        # ends when it returns, so the holding goes to the task that called acquire().
        return self._coroutine(self._caller).send(value)

    def throw(self, *args: Any) -> Any:
        return self._coroutine().throw(*args)

    def close(self) -> None:
        self._origin = None  # closed on purpose, as for a coroutine: no warning
        if self._coro is not None:
            self._coro.close()

    async def __aenter__(self) -> H:
        self._origin = None
        handle: Any = self._handle
        await handle._acquire(self._timeout)
        self._scope = handle._enter_body()
        result: H = handle
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
        self._handle._session.check_loop()
        assert self._scope is not None
        scope, self._scope = self._scope, None
        task_id = self._handle._session.tasks.current_id()
        await self._handle._exit_body(scope, exc_type, exc, tb, task_id, confirm)


class _FactoryMade(ABCMeta):
    """Recipe objects come from the client's factories, which share one object per
    arguments (``_core/_registry.py``); calling a recipe class raises ``TypeError``."""

    def __call__(cls, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(
            f"aiozklock.{cls.__name__} objects come from the client: use zk.lock(), "
            "zk.multi_lock(), zk.election(), zk.lease_lock(), zk.rw_lock() or zk.semaphore()"
        )


class Handle(metaclass=_FactoryMade):
    """The public contract of a lock-like recipe (see the module docstring).

    What a handle implements, for the calling task (a ``Primitive`` for itself; a
    semaphore by handing each task's call to that task's lease):

    * ``_acquire(timeout, task=None)`` and ``_release(task_id, confirm)``: take it, or give
      one level back;
    * ``_enter_body()`` and ``_exit_body(scope, exc_type, exc, tb, task_id, confirm)``: the
      cancel scope of a body, which a loss cancels (what ``AcquireContext`` drives), and
      ``_push_body(task_id)``/``_pop_body(task_id)``: those of ``async with x:`` bodies;
    * ``_holds(task_id)``: held by the task, not lost, still valid (``is_held``);
    * ``_held_engine(why)``: the engine that holds it for the current task, or ``NotLockOwner``
      (with ``why`` at the end of its message).
    """

    __slots__ = ()  # a recipe object's own attributes are slots too, down to ``Lock``
    __signature__ = inspect.Signature()  # help() shows no private constructor

    identifier: str | None
    """The identifier its nodes carry (``identifier=``); None if none was given."""
    acl: tuple[ACL, ...]
    """The ACL its nodes, and the containers it creates, are created with."""

    _session: Session
    _label: str
    # Why its holding cannot guard a ZooKeeper write (``zk.set_data(..., guard=x)``); None
    # if it can: its nodes' names are unique to the acquisition, so nobody re-creates them.
    _unguardable: ClassVar[str | None] = None

    @classmethod
    def _construct(cls, *args: Any, **kwargs: Any) -> Self:
        """Construct (for the client's factories only; see ``_FactoryMade``)."""
        made: Self = type.__call__(cls, *args, **kwargs)
        return made

    # ---------------------------------------------------------------- what a handle implements

    @abstractmethod
    async def _acquire(self, timeout: float | None, task: TaskRef | None = None) -> None:  # noqa: ASYNC109
        """Take it for ``task`` (the current one if None) within ``timeout`` seconds."""

    @abstractmethod
    async def _release(self, task_id: int, confirm: bool = False) -> None:
        """Give one level back for the task ``task_id`` (see ``release``)."""

    @abstractmethod
    def _enter_body(self) -> anyio.CancelScope:
        """The entered cancel scope of the current task's body."""

    @abstractmethod
    async def _exit_body(
        self,
        scope: anyio.CancelScope,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        task_id: int,
        confirm: bool = False,
    ) -> None:
        """Leave the body of ``scope`` and release one level."""

    @abstractmethod
    def _push_body(self, task_id: int) -> None:
        """Enter a body for ``async with x:`` (kept until ``_pop_body``)."""

    @abstractmethod
    def _pop_body(self, task_id: int) -> anyio.CancelScope:
        """The scope of the task's innermost ``async with x:`` body, forgotten."""

    @abstractmethod
    def _holds(self, task_id: int) -> bool:
        """Held by the task ``task_id``, not lost, within ``valid_until``."""

    @abstractmethod
    def _held_engine(self, why: str) -> Engine:
        """The engine holding it for the current task; ``NotLockOwner`` otherwise."""

    def _guarding(self, resource: str) -> Holding:
        """The current task's holding, for a write to ``resource`` guarded by it: the write
        goes in one transaction with a check that each of ``nodes`` exists, which is true
        exactly while the holding is ours. Sends nothing. Raises ``UsageError`` if the
        recipe cannot guard (``_unguardable``), ``NotLockOwner`` if the current task does
        not hold it, ``StaleFencingToken`` if the holding is known lost."""
        if self._unguardable is not None:
            raise UsageError(f"the {self._label} cannot guard a write: {self._unguardable}")
        why = ", so it cannot guard a write"
        engine = self._held_engine(why)
        holding = engine._holding
        if holding is None or not engine._held_by_task(self._session.tasks.current_id()):
            raise NotLockOwner(f"the current task does not hold the {self._label}{why}")
        if holding.lost or holding.generation != self._session.generation:
            stale = StaleFencingToken(resource, holding.token)
            stale.add_note(f"the {self._label} was lost: {holding.lost_reason or 'session gone'}")
            raise stale
        return holding

    # ---------------------------------------------------------------- public API

    def acquire(
        self, timeout: float | None = None, *, blocking: Literal[True] = True
    ) -> AcquireContext[Self]:
        """Acquire: ``await x.acquire()`` or ``async with x.acquire(timeout=1):``.

        ``timeout`` bounds the waiting (for the connection, for other tasks of this process,
        for the holder); the round trip that enqueues is never abandoned, so a free resource
        is acquired even with ``timeout=0``. Once the time is up, the queue recipes (lock,
        multi-lock, read/write lock, election, semaphore) send nothing more and do not wait
        for their cleanup: the attempt's node is deleted as ``release()`` deletes, written at
        once (before this client's next request), its reply not awaited, so another session
        may list it for a moment; it is handed to the OS before ``LockTimeout`` is raised
        (as the cleanup of a cancelled or failed acquire). ``blocking``: kazoo's spelling,
        True only: for one attempt without waiting, ``try_acquire()``. Raises ``LockTimeout``
        if not acquired in time, ``InvalidArgument`` for a bad ``timeout`` (a bool too:
        kazoo's ``acquire(False)``) or ``blocking=False``, naming ``try_acquire()``,
        ``UsageError`` outside the
        client's event loop, or if the task holds another object on the same path and
        ``timeout`` is None (it would wait for itself forever). Never awaited nor entered,
        it warns (``RuntimeWarning``). Run as a task of its own (``asyncio.wait_for`` on
        Python 3.11, ``create_task``, ``gather``, ``shield``), the holding is the task's that
        called ``acquire()``, which awaits it, not the short-lived task's.
        """
        frame = sys._getframe(1)  # the loop check is _acquire's, when it runs
        origin = f"{frame.f_code.co_filename}:{frame.f_lineno}"
        checked = validate_acquire(timeout, blocking)
        return AcquireContext(self, checked, origin, self._caller())

    def _caller(self) -> TaskRef | None:
        """The calling task, if called in a task of the client's event loop (a task of
        another loop or thread is refused when the acquire runs)."""
        try:
            self._session.check_loop()
            return self._session.tasks.current()
        except (UsageError, RuntimeError):
            return None

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
        the delete is written before it returns (handed to the OS; only a socket whose
        kernel buffer is full keeps the rest for the event loop), so a caller that blocks
        next (CPU-bound work, a synchronous library) keeps it from nobody. ZooKeeper runs
        this session's requests in order, so everything this client sends later is ordered
        after it, and no other contender can be granted before it is applied: until then
        other sessions may still list our node. A delete that fails, or cannot be written
        now (disconnected: there is no wire), is done in the background once reconnected
        in the same session; ``close()`` ends the session, and its nodes with it.
        ``confirm=True`` waits until the server has applied the release (one round trip
        more; through a reconnect if need be).

        Raises ``NotLockOwner`` if the current task does not hold it (if it was held by a
        task that ended without releasing it, it is released now, and logged as an error),
        ``LockLost`` if it was lost while held (its nodes are then removed in the
        background once possible), ``UsageError`` outside the client's event loop,
        ``InvalidArgument`` for a non-bool ``confirm``.
        """
        self._session.check_loop()
        await self._release(self._session.tasks.current_id(), validate_flag("confirm", confirm))

    async def __aenter__(self) -> Self:
        task = self._session.tasks.current()
        await self._acquire(None, task)
        self._push_body(task.id)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._session.check_loop()
        task_id = self._session.tasks.current_id()
        await self._exit_body(self._pop_body(task_id), exc_type, exc, tb, task_id)

    @property
    def is_held(self) -> bool:
        """True if the current task holds it (a read lock: together with any other task of
        this process), it has not been lost, and it is still within ``valid_until``: a
        cheap check to make right before acting on the resource. Never raises."""
        try:
            task_id = anyio.get_current_task().id
        except RuntimeError:  # not called from a task
            return False
        return self._holds(task_id)

    @property
    def valid_until(self) -> float:
        """The ``aiozklock.clock()`` instant until which it is certainly still ours.

        For a session-bound recipe, one rule on every topology: only an answer proves. No
        server can expire our session, and so grant the resource to anyone else, earlier than
        the session timeout after the send time of our newest request proven to have reached
        the session's keeper: on a standalone server, any request it answered; on an
        ensemble, one the leader is proven to have heard of (by writes it committed for us
        later on the same connection: our creates and deletes, and probes sent while
        something is held). This is that instant less a 10 % margin. Only answers move it
        (watch events and other frames never do). The holding ends at it, connected or not:
        its body is cancelled and its nodes deleted later; the session is kept (only a
        server says it expired). It catches what no notification can: a process that was
        paused (GC, SIGSTOP, a swapped-out VM, a suspended machine: ``aiozklock.clock()``
        counts a suspend) and resumes after its session may have expired.
        ``-inf`` once lost. Raises ``NotLockOwner`` if not held. Fencing tokens remain the
        real protection: a write can still be delayed in flight.
        """
        engine = self._held_engine(", so it has no validity")
        assert engine._holding is not None
        return engine._valid_until(engine._holding)

    @property
    def fencing_token(self) -> int:
        """The czxid of our node: it grows with every grant, across the whole ensemble.

        Pass it to the resource you protect, and have it reject writes with a smaller token.
        Raises ``NotLockOwner`` if not held.
        """
        holding = self._held_engine(", so it has no fencing token")._holding
        assert holding is not None
        return holding.token


__all__ = ("FIXED_NODE", "AcquireContext", "Handle")
