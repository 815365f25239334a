"""The engine every lock-like recipe shares: reentrancy per task, local FIFO queueing of this
process's tasks on one object, the holding's owner task (a task that ends without releasing
is released for it), and bodies cancelled when the holding is lost. The public shape
(``async with``, ``acquire()``, ``release()``, ...) is ``Handle``'s (``_handle.py``).

A recipe subclasses ``Primitive`` and supplies how to take and give back the resource (the
hooks its docstring lists); everything here is recipe-independent.
"""

from __future__ import annotations

import contextlib
import logging
import math
from abc import abstractmethod
from collections.abc import Sequence
from types import TracebackType
from typing import Protocol

import anyio

from aiozklock._acl import ACL
from aiozklock._exceptions import LockLost, LockTimeout, NotLockOwner, shorten
from aiozklock._recipes._core._gate import LocalGate
from aiozklock._recipes._core._handle import Handle, _task_ended
from aiozklock._recipes._core._holding import Holding, HoldingMonitor
from aiozklock._recipes._core._local_waiters import LocalWaiters
from aiozklock._recipes._core._observe import RecipeObserver
from aiozklock._wire._now import uptime
from aiozklock._wire._session import Session
from aiozklock._wire._tasks import TaskRef

log = logging.getLogger(__name__)


class Registry(Protocol):
    """What a primitive reports to its client's registry of recipe objects (``Recipes``,
    ``_core/_registry.py``): what each task holds, for the self-deadlock check and the
    lock-order check (``order``: None when off)."""

    @property
    def order(self) -> object | None: ...

    def check(self, primitive: Primitive, task: TaskRef, timeout: float | None) -> None: ...

    def held(self, primitive: Primitive, task_id: int) -> None: ...

    def released(self, primitive: Primitive, task_id: int) -> None: ...


class Primitive(Handle):
    """The engine of a lock-like recipe, and its handle (see the module docstring).

    ``label`` names the object in error messages, e.g. ``"lock /locks/a"``. A recipe
    implements:

    * ``_take(deadline, task_name)``: acquire the resource, or raise;
    * ``_abandon(deadline)``: after ``_take`` failed or was cancelled, leave nothing of ours
      behind (once ``deadline`` has passed, without waiting);
    * ``_give_back(holding)``: release a holding that was not lost, and return once done;
    * ``_drop(holding)``: forget the local state of a holding (released, or lost);

    and, if the defaults do not fit:

    * ``_give_back_nowait(holding)``: release without waiting for the reply (default:
      cannot, so ``_give_back`` runs);
    * ``_may_hold_with(other)``: whether a task holding ``other`` on a shared path may
      acquire this too (default: no; a read lock, with its own write lock);
    * ``_valid_until(holding)``: until when the holding is certainly ours (default: the
      session's clock; a lease: its own expiry);
    * ``_ahead()``: how many contenders were queued before us (telemetry; default: None);

    and, if a loss is not ``LockLost``, sets ``_lost_error``. (Its telemetry kind is its
    recipe's description entry's: the factory that makes it gives it to the registry.)
    """

    # Slots: thousands of held locks are thousands of these (a subclass without slots of
    # its own still gets a ``__dict__`` for its attributes).
    __slots__ = (
        "__weakref__",  # the client's registry holds its objects weakly
        "_acquisitions",
        "_bodies",
        "_depth",
        "_granted_at",
        "_holding",
        "_label",
        "_last_wait",
        "_local",
        "_losses",
        "_monitor",
        "_observer",
        "_owner",
        "_paths",
        "_registry",
        "_session",
        "_waiters",
        "acl",
    )

    _lost_error: type[LockLost] = LockLost  # what a loss raises (election: LeadershipLost)

    def __init__(
        self,
        session: Session,
        monitor: HoldingMonitor,
        label: str,
        paths: Sequence[str],
        acl: tuple[ACL, ...],
    ) -> None:
        self.acl = acl  # what its nodes, and the containers it creates, are created with
        self._session = session
        self._monitor = monitor
        self._label = shorten(label)  # in every message and log line: a path may be long
        self._paths = tuple(paths)  # what it locks, for the registry's self-deadlock check
        self._registry: Registry | None = None
        self._observer: RecipeObserver | None = None  # set by the registry, with telemetry
        self._granted_at = 0.0  # uptime() of the grant (kept only with an observer)
        # One holding per object: local tasks queue here, FIFO.
        self._local = LocalGate()
        self._waiters: LocalWaiters | None = None  # made with the first task that waits
        self._owner: TaskRef | None = None
        self._depth = 0
        self._holding: Holding | None = None
        self._acquisitions = 0
        self._losses = 0
        self._last_wait: float | None = None
        # The cancel scopes of ``async with`` bodies, with their task's id: nested ones exit
        # in LIFO order within their task. Usually the owner's only: one stack, no dict.
        self._bodies: list[tuple[int, anyio.CancelScope]] | None = None  # made with the first

    # ---------------------------------------------------------------- what a recipe supplies

    @abstractmethod
    async def _take(self, deadline: float | None, task_name: str | None) -> Holding:
        """Acquire the resource by ``deadline`` (``uptime()``), or raise (a
        ``TimeoutError`` on time-out); ``_abandon`` then cleans up."""

    @abstractmethod
    async def _abandon(self, deadline: float | None) -> None:
        """After ``_take`` failed or was cancelled: leave nothing of ours on the server
        (shielded and bounded, by ``deadline`` too if the recipe can; what cannot be done
        at once goes to the janitor)."""

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

    # ---------------------------------------------------------------- the handle's hooks

    def _holds(self, task_id: int) -> bool:
        holding = self._holding
        if holding is None or holding.lost or self._owner is None:
            return False
        if uptime() >= self._valid_until(holding):
            return False
        return self._owner.id == task_id

    def _held_engine(self, why: str) -> Primitive:
        if self._holding is None:
            raise NotLockOwner(f"the {self._label} is not held{why}")
        return self

    def _detach_bodies(self) -> None:
        """Let a loss no longer cancel the bodies entered so far (still marked lost, and
        raised by the release): for an integration's commit point, after which what the
        body waits for has been sent and cannot be called back."""
        if self._holding is not None and self._holding.scopes:
            self._holding.scopes.clear()

    def _push_body(self, task_id: int) -> None:
        if self._bodies is None:
            self._bodies = []
        self._bodies.append((task_id, self._enter_body()))

    def _pop_body(self, task_id: int) -> anyio.CancelScope:
        bodies = self._bodies or []
        # The innermost is the task's own, unless it released inside its body and another
        # task entered one since.
        for index in range(len(bodies) - 1, -1, -1):
            if bodies[index][0] == task_id:
                return bodies.pop(index)[1]
        raise KeyError(task_id)

    # ---------------------------------------------------------------- acquire and release

    async def _acquire(self, timeout: float | None, task: TaskRef | None = None) -> None:  # noqa: ASYNC109
        self._session.check_loop()
        if task is None:
            task = self._session.tasks.current()
        if self._owner is not None:
            if self._orphaned():
                await self._reap_orphan()  # it would block us forever
            elif self._owner.id == task.id:
                assert self._holding is not None
                if self._holding.lost:
                    raise self._loss(self._holding)
                self._depth += 1
                return
        await self._acquire_new(timeout, task)

    async def _acquire_new(self, timeout: float | None, task: TaskRef) -> None:  # noqa: ASYNC109
        """A new holding for ``task`` (not a reentry): the cross-lock deadlock check (for an
        unbounded wait: a bounded one simply times out) and the lock-order check (if on),
        the acquisition, observed."""
        registry = self._registry
        if registry is not None and (timeout is None or registry.order is not None):
            registry.check(self, task, timeout)
        if self._observer is None:
            await self._obtain(timeout, task)
        else:
            await self._obtain_observed(timeout, task, self._observer)
        if self._registry is not None:
            self._registry.held(self, task.id)

    async def _obtain_observed(
        self,
        timeout: float | None,  # noqa: ASYNC109
        task: TaskRef,
        observer: RecipeObserver,
    ) -> None:
        attempt = observer.acquiring()
        started = uptime()
        try:
            await self._obtain(timeout, task)
        except BaseException as exc:
            attempt.failed(uptime() - started, exc)
            raise
        self._granted_at = uptime()
        assert self._holding is not None
        attempt.acquired(self._granted_at - started, self._ahead(), self._holding.token)

    def _new_waiters(self) -> LocalWaiters:
        """Its local waiters, counted from the first task that waits (``_local_waiters.py``)."""
        return LocalWaiters(self._observer)

    def _ahead(self) -> int | None:
        """How many contenders were queued before us when we last joined (telemetry);
        None for a recipe without a queue."""
        return None

    async def _obtain(self, timeout: float | None, task: TaskRef) -> None:  # noqa: ASYNC109
        """The acquisition, in three steps: this process's turn (its other tasks first),
        the recipe's ``_take`` of the resource by the deadline, and the start of the
        holding (its body waits for a proven ``valid_until``)."""
        started = uptime()
        deadline = None if timeout is None else started + timeout
        await self._local_turn(timeout)
        holding = await self._taken(deadline, task)
        await self._start_holding(holding, task, timeout, deadline)
        self._last_wait = uptime() - started

    async def _local_turn(self, timeout: float | None) -> None:  # noqa: ASYNC109
        """Wait for this process's other tasks on this object (FIFO), within ``timeout``."""
        try:
            self._local.acquire_nowait()
        except anyio.WouldBlock:
            if self._waiters is None:
                self._waiters = self._new_waiters()
            if not await self._waiters.wait(self._local, timeout):
                raise LockTimeout(
                    f"{self._label} not acquired within {timeout} s "
                    "(other tasks of this process were first)"
                ) from None

    async def _taken(self, deadline: float | None, task: TaskRef) -> Holding:
        """The recipe's ``_take``; after a failure or a cancellation, its ``_abandon`` and
        our turn given back."""
        try:
            return await self._take(deadline, task.name)
        except BaseException as exc:
            try:
                await self._abandon(deadline)
            finally:
                self._local.release()
            if isinstance(exc, TimeoutError) and not isinstance(exc, LockTimeout):
                raise LockTimeout(f"{self._label} not acquired in time: {exc}") from None
            raise

    async def _start_holding(
        self,
        holding: Holding,
        task: TaskRef,
        timeout: float | None,  # noqa: ASYNC109
        deadline: float | None,
    ) -> None:
        """``task`` holds ``holding`` now, watched by the loss policy; its body starts once
        the session is proven far enough ahead (given back if not by ``deadline``)."""
        self._holding = holding
        holding.observer = self._observer
        self._monitor.register(holding)  # marks it lost at once if it is unsafe already
        self._owner = task
        self._depth = 1
        self._acquisitions += 1
        try:
            # No body before a proven valid_until; the acquire's deadline still bounds it.
            if not await self._monitor.proven(holding, deadline):
                raise LockTimeout(
                    f"{self._label} not acquired within {timeout} s (granted, but the session "
                    "was not proven through the ZooKeeper leader in time: given back)"
                )
        except BaseException:
            with contextlib.suppress(LockLost):  # lost: the janitor has its nodes
                await self._let_go(holding, task.id)
            raise

    async def _release(self, task_id: int, confirm: bool = False) -> None:
        holding = self._holding
        # The owner's ``TaskRef`` keeps its task alive, so no other task can have its id:
        # the same id is the owner itself, still running.
        if self._owner is None or self._owner.id != task_id:
            orphan = await self._reap_orphan()
            detail = f" (task {orphan!r} held it, ended without releasing it: released now)"
            raise NotLockOwner(
                f"the current task does not hold the {self._label}{detail if orphan else ''}"
            )
        assert holding is not None
        if self._depth > 1:
            self._depth -= 1
            if holding.lost:
                raise self._loss(holding)
            return
        await self._let_go(holding, task_id, confirm)

    def _loss(self, holding: Holding) -> LockLost:
        """What a lost ``holding`` raises (the holding says which: ``Holding.loss``)."""
        return holding.loss(self._label, self._lost_error)

    async def _let_go(self, holding: Holding, task_id: int, confirm: bool = True) -> None:
        self._depth = 0
        self._owner = None
        self._holding = None
        self._monitor.unregister(holding)
        if self._registry is not None:
            self._registry.released(self, task_id)
        if self._observer is not None:
            self._observer.released(uptime() - self._granted_at)
        try:
            if holding.lost:
                self._losses += 1
                if holding.left_to_janitor:  # its nodes are the loss policy's
                    raise self._loss(holding)
            if confirm or not self._give_back_nowait(holding):
                await self._give_back(holding)
            elif not holding.lost:
                return  # nothing awaited: no cancellation can have arrived meanwhile
        finally:
            self._drop(holding)
            self._local.release()
        if holding.lost and not holding.left_to_janitor:  # given back as by a release
            raise self._loss(holding)
        # The give-back was shielded; a cancellation that arrived meanwhile is delivered now.
        await self._session.tasks.checkpoint_if_cancelled()

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
            "now. Release in the task that acquired (use 'async with'; with aiozklock.sync, "
            "in the thread that acquired: 'with')",
            self._label,
            owner.name,
            owner.id,
        )
        self._bodies = [body for body in self._bodies or () if body[0] != owner.id]
        assert self._holding is not None
        with contextlib.suppress(LockLost):  # lost: the loss policy left it to the janitor
            await self._let_go(self._holding, owner.id)
        return owner.name or str(owner.id)

    # ---------------------------------------------------------------- body scopes

    def _enter_body(self) -> anyio.CancelScope:
        holding = self._holding
        assert holding is not None
        scope = self._session.tasks.cancel_scope()
        if holding.scopes is None:
            holding.scopes = []
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
        if holding is not None and holding.scopes and scope in holding.scopes:
            holding.scopes.remove(scope)
        cancelled = self._session.tasks.cancelled
        outer_cancel = exc_type is not None and issubclass(exc_type, cancelled) and not swallowed
        try:
            await self._release(task_id, confirm)
        except LockLost:
            if not outer_cancel:  # the caller's own cancellation must propagate, not be hidden
                raise


__all__ = ("Primitive", "Registry")
