"""Semaphores that follow a peer library's own algorithm and layout (``compat=``).

Our default ``Semaphore`` is a FIFO queue that neither kazoo's ``Semaphore`` nor Curator's
``InterProcessSemaphoreV2`` can read. With ``compat="kazoo"`` or ``compat="curator"`` a lease
is taken exactly as the peer takes one, so that peers and we on one path never hold more
than ``max_leases`` leases in total:

* kazoo: holding a kazoo ``Lock`` at the sibling ``<path>-__lock__``, list ``<path>``'s
  children with a watch; fewer than ``max_leases`` → create the lease ``<path>/<32hex>``
  (EPHEMERAL), else wait for the watch and list again, still holding the lock. The limit is
  decimal ASCII in ``<path>``'s data. ``<path>`` and the sibling are persistent, as kazoo
  makes them (kazoo caches that they exist, and fails if a container was reaped).
* Curator: holding an ``InterProcessMutex`` at ``<path>/locks``, create the protected lease
  ``<path>/leases/_c_<uuid>-lease-<seq>`` (EPHEMERAL_SEQUENTIAL) and list ``leases`` with a
  watch: at most ``max_leases`` children (ours included) → held, else wait and list again,
  still holding the mutex. Curator stores no limit: it is agreed out of band.

The mutex is our ``Lock`` with the same ``compat`` (already compatible with the peer's). It
is released as soon as the lease is held, or the attempt fails; it is taken again if the
session changes (or the loss policy gives it up) while we wait under it. The lease node is
created, claimed until held, found again after a lost reply and deleted as
``_core/_unique.py`` does it for any node of ours with a unique name. The two layouts are
data, two ``Layout`` values (``KAZOO``, ``CURATOR``) that one algorithm reads.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from aiozklock._acl import ACL
from aiozklock._exceptions import LockLost, NodeExistsError, SessionExpired
from aiozklock._recipes._core._contenders import Identity
from aiozklock._recipes._core._holding import Holding, HoldingMonitor
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._names import Compat, is_sequence
from aiozklock._recipes._core._options import RecipeOptions
from aiozklock._recipes._core._retry import RETRY
from aiozklock._recipes._core._unique import ConditionFailed, UniqueNodePrimitive
from aiozklock._recipes._core._waiting import Wakeup
from aiozklock._recipes._lock import Lock
from aiozklock._recipes._semaphore import LeaseBase, Semaphore
from aiozklock._wire._now import uptime
from aiozklock._wire._protocol import (
    Created,
    CreateMode,
    Op,
    container_path_ops,
    create_op,
    encode_acl,
)
from aiozklock._wire._session import Session


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a peer's semaphore keeps its mutex and its leases, and how it takes a lease (see
    the module docstring). In the paths ``{}`` is the semaphore's path; in ``lease``, the
    lease's token (what tells our node after a lost create reply)."""

    mutex: str  # the peer's lock
    leases: str  # the leases' parent
    lease: str  # a lease's name
    token: Callable[[], str]
    mode: CreateMode
    # Curator creates its lease, then counts it with the others (at most ``max_leases``,
    # ours included); kazoo counts the others (fewer than ``max_leases``), then creates.
    create_first: bool
    # kazoo: ``<path>`` (persistent) stores the limit; the mutex's sibling path is persistent.
    stores_limit: bool


KAZOO = Layout(
    mutex="{}-__lock__",
    leases="{}",
    lease="{}",  # 32 hex digits
    token=lambda: uuid.uuid4().hex,
    mode=CreateMode.EPHEMERAL,
    create_first=False,
    stores_limit=True,
)
CURATOR = Layout(  # InterProcessSemaphoreV2
    mutex="{}/locks",
    leases="{}/leases",
    lease="_c_{}-lease-",  # the protection prefix, then the name, then ZooKeeper's sequence
    token=lambda: str(uuid.uuid4()),
    mode=CreateMode.EPHEMERAL | CreateMode.SEQUENTIAL,
    create_first=True,
    stores_limit=False,
)
LAYOUTS: dict[Compat, Layout] = {"kazoo": KAZOO, "curator": CURATOR}


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - uptime())


class _CompatLease(UniqueNodePrimitive, LeaseBase):
    """One task's lease taken the peer's way (reentrant, loss-aware): a node of its own,
    created and counted under the peer's mutex. Made by ``CompatSemaphore`` only."""

    def __init__(self, owner: CompatSemaphore) -> None:
        super().__init__(
            owner._session, owner._monitor, owner._janitor, owner._label, owner._paths, owner.acl
        )
        self._sem = owner
        self._layout = owner._layout
        self._mutex = owner._mutex
        self._identity = Identity(owner.identifier)

    async def _take(self, deadline: float | None, task_name: str | None) -> Holding:
        data = self._identity.data(task_name)
        if self._layout.stores_limit:
            await self._sem._ensure_path(deadline)
        while True:
            await self._mutex.acquire(timeout=_left(deadline))
            try:
                held = await self._lease_under_mutex(data, deadline)
            finally:
                with anyio.CancelScope(shield=True), contextlib.suppress(LockLost):
                    await self._mutex.release()
            if held is not None:
                return held  # else the mutex was lost while we waited: take it again

    def _mutex_lost(self, generation: int) -> bool:
        held = self._mutex._held_node()
        return held is None or held[1] != generation

    async def _lease_under_mutex(self, data: bytes, deadline: float | None) -> Holding | None:
        """List with a watch and take the lease when the count allows; None if the mutex
        can no longer be trusted (its session changed, or the loss policy gave it up)."""
        session, layout = self._session, self._layout
        server_parent = session.server_path(self._sem._lease_parent)
        while True:
            generation = session.generation
            if self._mutex_lost(generation):
                return None
            if layout.create_first and self._claimed(generation) is None:
                await self._create(data, generation)  # then counted with the others
                continue
            with Wakeup(session) as wakeup:
                try:
                    children = await wakeup.get_children(
                        server_parent, generation=generation, deadline=deadline
                    )
                except SessionExpired:
                    return None
                if self._mutex_lost(generation):
                    return None  # given up while we were disconnected
                if children is None and layout.stores_limit:  # <path> deleted: make it again
                    self._sem._assured = False
                    await self._sem._ensure_path(deadline)
                    continue
                try:  # no parent (Curator's leases): our lease's create makes it again
                    step = await self._step(children or [], data, generation)
                except ConditionFailed:
                    return None
                if isinstance(step, Holding):
                    return step
                if step:
                    await wakeup.wait(deadline, f"{self._label}: no lease free in time")

    async def _step(self, children: list[str], data: bytes, generation: int) -> Holding | bool:
        """One decision on a listing: the holding, True to wait for the watch, or False to
        list again now."""
        limit = self._sem.max_leases
        if not self._layout.create_first:  # count the others, then create ours
            if len(children) >= limit:
                return True
            node = await self._create(data, generation)
            return False if node is None else self._hold()
        node = self._claimed(generation)  # created, to be counted with the others
        if node is None or node.rsplit("/", 1)[-1] not in children:
            self._claim = None  # gone (Curator: "sequential path not found"): create again
            return False
        if len(children) > limit:
            return True
        return self._hold()

    async def _create(self, data: bytes, generation: int) -> str | None:
        """Create our lease node, claimed (``_create_unique``); None if it made nothing.

        A lease created after the count (kazoo's) goes in one transaction with a check
        that our mutex node still exists: the loss policy may have given the mutex up
        meanwhile, and the janitor deleted it, so another holder may have counted since.
        Raises ``ConditionFailed`` then, or if the mutex is not held now. A lease created
        before the count (Curator's) is counted by every contender: no check."""
        layout, parent, token = self._layout, self._sem._lease_parent, self._layout.token()
        mutex = None
        if not layout.create_first:
            held = self._mutex._held_node()
            if held is None:
                raise ConditionFailed
            mutex = held[0]
        name = layout.lease.format(token)
        return await self._create_unique(
            parent, token, name, data, layout.mode, generation, while_exists=mutex
        )


class CompatSemaphore(Semaphore):
    """A ``Semaphore`` whose leases follow kazoo's or Curator's algorithm and layout.
    Create it with ``zk.semaphore(path, n, compat="kazoo")`` (or ``"curator"``).

    Same interface as ``Semaphore`` (per-task, reentrant, loss-aware leases), but not FIFO:
    contenders queue on a mutex, and its holder waits (holding it) for a lease to be freed.
    Bad arguments raise ``InvalidArgument`` when created, before any request.
    """

    def __init__(
        self,
        session: Session,
        path: str,
        max_leases: int,
        *,
        identifier: str | None,
        monitor: HoldingMonitor,
        janitor: Janitor,
        acl: tuple[ACL, ...],
        compat: Compat,
    ) -> None:
        super().__init__(
            session,
            path,
            max_leases,
            identifier=identifier,
            monitor=monitor,
            janitor=janitor,
            acl=acl,
        )
        self.compat = compat
        self._layout = LAYOUTS[compat]
        self._lease_parent = self._layout.leases.format(self.path)
        self._mutex = Lock._construct(
            session,
            self._layout.mutex.format(self.path),
            options=RecipeOptions(identifier, compat),
            monitor=monitor,
            janitor=janitor,
            acl=acl,
        )
        self._assured = False  # kazoo: the path exists and stores our limit

    def _new_lease(self) -> _CompatLease:
        return _CompatLease._construct(self)

    async def _ensure_path(self, deadline: float | None) -> None:
        """kazoo: create ``<path>`` (persistent, with our limit) and the lock's sibling
        (persistent), or check the limit ``<path>`` stores. Raises ``MaxLeasesMismatch``."""
        if self._assured:
            return
        session, acl, persistent = self._session, encode_acl(self.acl), CreateMode.PERSISTENT
        server_path, strip = session.server_path(self.path), session.client_path
        ops: list[Op[Any]] = [
            *container_path_ops(server_path.rsplit("/", 1)[0], strip, acl=acl),
            create_op(server_path, self._limit, persistent, strip, acl=acl),
            create_op(session.server_path(self._mutex.path), b"", persistent, strip, acl=acl),
        ]
        results = await RETRY.pipeline(session, ops, wait_until=deadline)
        for result in results[-2:]:
            if not isinstance(result, (Created, NodeExistsError)):
                raise result
        if not isinstance(results[-2], Created):
            await self._check_limit(None, deadline)
        self._assured = True

    def _holders(self, children: list[str]) -> list[tuple[str, int | None]]:
        """kazoo counts every child as a lease (with no sequence: 0); Curator every lease,
        and the oldest ``max_leases`` (by their sequence) hold."""
        if not self._layout.mode & CreateMode.SEQUENTIAL:
            return [(name, 0) for name in children]
        names = sorted((n for n in children if is_sequence(n[-10:])), key=lambda n: n[-10:])
        return [(name, int(name[-10:])) for name in names[: self.max_leases]]


__all__ = ("CompatSemaphore",)
