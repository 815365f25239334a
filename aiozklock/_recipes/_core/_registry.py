"""The client's recipe objects: one per recipe and arguments, shared by every call site.

Sharing makes reentrancy per task hold across call sites (``async with zk.lock(p):`` in a
helper called under ``async with zk.lock(p):``), and makes this process's tasks queue
locally on one object, with one node on the server at a time, instead of one node each.
Objects are kept while held (strongly) or referenced (weakly), so per-request paths do not
accumulate. With telemetry, each object gets its observer here, once.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Protocol, TypeVar

from aiozklock._acl import ACL
from aiozklock._exceptions import UsageError
from aiozklock._recipes._core._observe import Observer, RecipeObserver
from aiozklock._recipes._core._order import LockOrder
from aiozklock._recipes._core._primitive import Primitive, Registry
from aiozklock._wire._tasks import TaskRef

P = TypeVar("P", bound="Registered")


class Registered(Protocol):
    """What the registry keeps: a ``Primitive``, or an object that makes primitives (the
    semaphore, which hands them its registry and observer)."""

    acl: tuple[ACL, ...]
    _label: str
    _paths: tuple[str, ...]
    _registry: Registry | None
    _observer: RecipeObserver | None


class Recipes:
    """The registry (see the module docstring), which its objects also report to (what they
    hold, per task: ``Registry`` in ``_primitive.py``).
    ``observer``: the client's telemetry, if any; ``order``: its lock-order checker, if
    on (``_order.py``)."""

    def __init__(self, observer: Observer | None = None, order: LockOrder | None = None) -> None:
        self._observer = observer
        self.order = order
        self._objects: weakref.WeakValueDictionary[Hashable, Registered] = (
            weakref.WeakValueDictionary()
        )
        # task id -> what it holds: the object itself while it is the only one (the usual
        # case, and one list less per held lock), else a list in acquisition order
        self._held_by: dict[int, Primitive | list[Primitive]] = {}

    def get(
        self,
        cls: type[P],
        kind: str,
        key: Hashable,
        create: Callable[[], P],
        acl: tuple[ACL, ...],
    ) -> P:
        """The object of recipe ``cls`` for ``key`` (its identity: a queue recipe's path(s)
        and ``RecipeOptions``, ``_options.py``; the other recipes' factory arguments), made by
        ``create()`` if there is none (``create`` validates, and may raise). ``kind``: its
        telemetry kind (from its recipe's description entry), told to the observer when the
        object is made. ``acl`` is not part of the identity (one object per contender):
        asking for an existing object with another ACL raises ``UsageError``."""
        try:
            found = self._objects.get((cls, key))
        except TypeError:  # unhashable arguments: create() rejects them
            return create()
        if isinstance(found, cls):
            if found.acl != acl:
                raise UsageError(
                    f"the {found._label} of this client creates its nodes with acl="
                    f"{list(found.acl)}, not {list(acl)}: one object per path, one ACL"
                )
            return found
        made = create()
        made._registry = self
        if self._observer is not None:
            made._observer = self._observer.recipe(kind, made._paths)
        self._objects[(cls, key)] = made
        return made

    def check(self, primitive: Primitive, task: TaskRef, timeout: float | None) -> None:
        """Before ``task`` takes ``primitive`` anew, waiting up to ``timeout`` seconds (None:
        without a timeout; only then is it called when the lock-order check is off).

        Raise ``UsageError`` if ``timeout`` is None and the task holds another object on one
        of the same paths: it would wait for itself forever. Then the lock-order check, if
        on, for a wait (not a ``try_acquire()``): ``LockOrderViolation`` in its ``"raise"``
        mode (see ``_order.py``)."""
        task_id = task.id
        held = self._held(task_id) if timeout is None else ()
        if held:  # (a task that holds nothing, the usual case: no path set to build)
            paths = frozenset(primitive._paths)
            for other in held:
                # The path test first: a task may hold thousands, nearly all elsewhere. An
                # ended task's id may be reused: what that task held is not the caller's.
                if paths.isdisjoint(other._paths) or other is primitive:
                    continue
                if other._held_by_task(task_id) and not primitive._may_hold_with(other):
                    raise UsageError(
                        f"this task holds the {other._label} and now acquires the "
                        f"{primitive._label}: it would wait for itself forever. Use one "
                        "object per path (zk.lock(path) returns the same one for the same "
                        "arguments; a different identifier makes a different contender)"
                    )
        # A task that holds nothing (the usual case) orders nothing: no call.
        if self.order is not None and timeout != 0 and task_id in self._held_by:
            self._check_order(self.order, primitive, task)

    def _check_order(self, order: LockOrder, primitive: Primitive, task: TaskRef) -> None:
        held = [
            other
            for other in self._held(task.id)
            if other is not primitive and other._held_by_task(task.id)
        ]
        if held:
            order.check(primitive, held, task.name)

    def _held(self, task_id: int) -> Sequence[Primitive]:
        held = self._held_by.get(task_id)
        return () if held is None else held if isinstance(held, list) else (held,)

    def held(self, primitive: Primitive, task_id: int) -> None:
        """``primitive`` is now held by the task: keep it alive until released."""
        held = self._held_by.get(task_id)
        if held is None:
            self._held_by[task_id] = primitive
        elif isinstance(held, list):
            held.append(primitive)
        else:
            self._held_by[task_id] = [held, primitive]

    def released(self, primitive: Primitive, task_id: int) -> None:
        """``primitive`` was released by (or for) the task."""
        held = self._held_by.get(task_id)
        if held is primitive:
            del self._held_by[task_id]
        elif isinstance(held, list):
            if held[-1] is primitive:  # released in reverse order, as nested ones are
                held.pop()
            else:
                held.remove(primitive)
            if not held:
                del self._held_by[task_id]

    def holds(self, task_id: int) -> list[str]:
        """The labels of what the task ``task_id`` holds now (lost or not), oldest first:
        what would stay held if its holder went on running."""
        return [held._label for held in self._held(task_id) if held._held_by_task(task_id)]

    async def reap_orphans(self) -> None:
        """Release what tasks that ended without releasing still hold (logged as errors)."""
        for held in list(self._held_by.values()):
            for primitive in list(held) if isinstance(held, list) else [held]:
                await primitive._reap_orphan()


__all__ = ("Recipes",)
