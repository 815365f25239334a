"""A holding that the tasks of this process share: the read lock's.

``Primitive`` gives an object's holding to one task at a time, and queues its other tasks
locally. A ``SharedHolding`` lets them hold it together, as readers do: the first task takes
the resource (one node on the server), the others join that holding, each with its own
reentrancy depth and its own ``async with`` body, and the node is given back when the last of
them releases. Everything else is ``Primitive``'s: the loss policy cancels every holder's body
(the bodies' scopes are the holding's), each holder's release raises the loss, a holder task
that ended without releasing is released for it (logged as an error), cleanup is shielded.

* A task that arrives while the first task's acquisition is still waiting waits for that same
  acquisition (no second node) and shares its grant.
* A task that arrives while it is held joins at once if the recipe admits it (``_may_share``,
  local state; ``_admits_more``, which may ask the server: the read lock's "no writer waits
  behind our node"). Refused, the holding takes no more holders: later tasks wait until its
  last holder leaves, and queue anew.
* If the acquiring task fails, times out or is cancelled, its node is removed as for any
  recipe, and a waiting task queues anew (at the back of the server's queue).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import anyio

from aiozklock._exceptions import LockLost, LockTimeout, NotLockOwner
from aiozklock._recipes._core._handle import _task_ended
from aiozklock._recipes._core._holding import Holding
from aiozklock._recipes._core._primitive import Primitive
from aiozklock._recipes._core._waiting import wait_woken
from aiozklock._wire._now import uptime
from aiozklock._wire._tasks import TaskRef

log = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class _Holder:
    """A task holding the shared holding: its reentrancy depth, and when it joined."""

    task: TaskRef
    depth: int
    since: float  # uptime(), for telemetry


@dataclass(eq=False, slots=True)
class _Acquisition:
    """The first task's acquisition, while in flight: its holding once granted."""

    holding: Holding | None = None


class SharedHolding(Primitive):
    """A ``Primitive`` whose holding the tasks of this process share (module docstring).

    ``_owner`` and ``_depth`` stay unused: the holders are ``_holders`` (task id -> holder).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._holders: dict[int, _Holder] = {}
        self._acquiring: _Acquisition | None = None
        self._giving_back = False  # the last holder's release is under way
        self._closed: Holding | None = None  # a holding refused to a newcomer: no more join
        self._changed = anyio.Event()  # set (and replaced) by every change waiters await
        self._waiting = 0  # tasks in an acquisition of it

    # ---------------------------------------------------------------- what a recipe supplies

    def _may_share(self, task: TaskRef) -> bool:
        """Whether ``task`` may join the holding now, by local state (no request)."""
        return True

    async def _admits_more(self, holding: Holding, deadline: float | None) -> bool:
        """Whether ``holding``, held by other tasks, admits one more holder (it may ask the
        server); False closes it to every later arrival until it ends."""
        return True

    # ---------------------------------------------------------------- holders

    def _wake(self) -> None:
        """Wake the waiting tasks: the holding, or what they wait for, changed."""
        self._changed.set()
        self._changed = anyio.Event()

    def _held_by_task(self, task_id: int) -> bool:
        holder = self._holders.get(task_id)
        return holder is not None and not _task_ended(holder.task.coro)

    def _orphaned(self) -> bool:
        return any(_task_ended(holder.task.coro) for holder in self._holders.values())

    def _holds(self, task_id: int) -> bool:
        holding = self._holding
        if holding is None or holding.lost or uptime() >= self._valid_until(holding):
            return False
        return self._held_by_task(task_id)

    # ---------------------------------------------------------------- acquire

    async def _acquire(self, timeout: float | None, task: TaskRef | None = None) -> None:  # noqa: ASYNC109
        self._session.check_loop()
        if task is None:
            task = self._session.tasks.current()
        await self._reap_orphan()  # an ended holder would keep the holding forever
        holder = self._holders.get(task.id)
        if holder is not None:
            assert self._holding is not None
            if self._holding.lost:
                raise self._loss(self._holding)
            holder.depth += 1
            return
        await self._acquire_new(timeout, task)

    async def _obtain(self, timeout: float | None, task: TaskRef) -> None:  # noqa: ASYNC109
        """Join the holding, or take it first (see the module docstring)."""
        started = uptime()
        deadline = None if timeout is None else started + timeout
        self._waiting += 1
        try:
            await self._join_or_take(task, deadline)
        except TimeoutError as exc:
            if isinstance(exc, LockTimeout):
                raise
            raise LockTimeout(f"{self._label} not acquired in time: {exc}") from None
        finally:
            self._waiting -= 1
        # Returned with the holding to join, and no checkpoint since.
        self._holders[task.id] = _Holder(task, 1, uptime())
        self._acquisitions += 1
        self._last_wait = uptime() - started

    async def _join_or_take(self, task: TaskRef, deadline: float | None) -> None:
        """Return when ``self._holding`` is for ``task`` to join (or was just taken by it)."""
        waited_for: _Acquisition | None = None
        while True:
            changed = self._changed  # before any await: a change meanwhile is not missed
            holding = self._holding
            if holding is None and self._acquiring is None and not self._giving_back:
                await self._take_first(task, deadline)
                return
            if holding is not None and self._joinable(holding, task):
                # A task that waited for this very grant came before any later arrival.
                granted = waited_for is not None and waited_for.holding is holding
                if granted or await self._admitted(holding, deadline):
                    if self._holding is holding and not holding.lost:
                        return
                    continue
            waited_for = self._acquiring
            await wait_woken(
                changed, deadline, f"{self._label} not acquired in time (shared with other tasks)"
            )

    def _joinable(self, holding: Holding, task: TaskRef) -> bool:
        return not holding.lost and holding is not self._closed and self._may_share(task)

    async def _admitted(self, holding: Holding, deadline: float | None) -> bool:
        if await self._admits_more(holding, deadline):
            return True
        if self._holding is holding:
            self._closed = holding
        return False

    async def _take_first(self, task: TaskRef, deadline: float | None) -> None:
        """Take the resource for the holders to come; the waiting tasks share the grant."""
        acquisition = self._acquiring = _Acquisition()
        try:
            holding = await self._take(deadline, task.name)
        except BaseException:
            try:
                await self._abandon(deadline)
            finally:
                self._acquiring = None
                self._wake()  # the next waiting task queues anew
            raise
        self._acquiring = None
        acquisition.holding = holding
        self._holding = holding
        holding.observer = self._observer
        self._monitor.register(holding)  # marks it lost at once if it is unsafe already
        # No body before a proven valid_until. Shielded: the grant is shared, released by its
        # last holder as usual. Bounded: the clock gives the holding up at valid_until, less
        # than a session timeout away; if that ever failed, no body starts unproven.
        with anyio.CancelScope(shield=True):
            proven = await self._monitor.proven(holding, uptime() + self._session.timeout)
        if not proven:
            self._monitor.give_up(holding, "session not proven within a session timeout")
        self._wake()

    # ---------------------------------------------------------------- release

    async def _release(self, task_id: int, confirm: bool = False) -> None:
        holder = self._holders.get(task_id)
        # An ended holder's task id may have been reused by the caller: not a holder either.
        if holder is None or _task_ended(holder.task.coro):
            orphan = await self._reap_orphan()
            detail = f" (task {orphan!r} held it, ended without releasing it: released now)"
            raise NotLockOwner(
                f"the current task does not hold the {self._label}{detail if orphan else ''}"
            )
        await self._reap_orphan()  # a holder that ended must not outlive the last live one
        holding = self._holding
        assert holding is not None
        if holder.depth > 1:
            holder.depth -= 1
            if holding.lost:
                raise self._loss(holding)
            return
        await self._leave(task_id, holder, holding, confirm)

    async def _leave(self, task_id: int, holder: _Holder, holding: Holding, confirm: bool) -> None:
        """``task_id`` stops holding; the last holder gives the resource back."""
        del self._holders[task_id]
        if self._registry is not None:
            self._registry.released(self, task_id)
        if self._observer is not None:
            self._observer.released(uptime() - holder.since)
        if self._holders:  # the others keep it: nothing to tell the server
            if holding.lost:
                raise self._loss(holding)
            return
        self._holding = None
        self._monitor.unregister(holding)
        self._giving_back = True
        try:
            if holding.lost:
                self._losses += 1
                raise self._loss(holding)
            if confirm or not self._give_back_nowait(holding):
                await self._give_back(holding)
        finally:
            self._drop(holding)
            self._giving_back = False
            self._wake()
        # The give-back was shielded; a cancellation that arrived meanwhile is delivered now.
        await self._session.tasks.checkpoint_if_cancelled()

    async def _reap_orphan(self) -> str | None:
        """Release the share of every holder task that ended without releasing (logged as
        an error); their names, if any."""
        reaped: list[str] = []
        for task_id, holder in list(self._holders.items()):
            if self._holders.get(task_id) is not holder or not _task_ended(holder.task.coro):
                continue
            log.error(
                "%s was held by task %r (id %d), which ended without releasing it: releasing "
                "its share now. Release in the task that acquired (use 'async with'; in "
                "aiozklock.sync, in the thread that acquired: 'with')",
                self._label,
                holder.task.name,
                task_id,
            )
            self._bodies = [body for body in self._bodies or () if body[0] != task_id]
            assert self._holding is not None
            with contextlib.suppress(LockLost):  # lost: the loss policy left it to the janitor
                await self._leave(task_id, holder, self._holding, True)
            reaped.append(holder.task.name or str(task_id))
        return ", ".join(reaped) or None


__all__ = ("SharedHolding",)
