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
session changes (or the loss policy gives it up) while we wait under it. A lease created but
not yet ours (cancelled, timed out, lost reply) is a ``NamedClaim`` (``_core/_uncertain.py``)
that ``_abandon`` deletes.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any

import anyio

from aiozklock._acl import ACL
from aiozklock._exceptions import (
    ConnectionLoss,
    LockLost,
    NodeExistsError,
    SessionExpired,
    short_repr,
)
from aiozklock._recipes._core._contenders import Contender, Identity, contender_of
from aiozklock._recipes._core._holding import Holding, HoldingMonitor
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._names import Compat, is_sequence
from aiozklock._recipes._core._retry import RETRY, create_in
from aiozklock._recipes._core._uncertain import (
    NamedClaim,
    abandon,
    delete_shielded,
    find_ours,
    release_nowait,
)
from aiozklock._recipes._core._waiting import Wakeup
from aiozklock._recipes._lock import Lock
from aiozklock._recipes._semaphore import LeaseBase, Semaphore
from aiozklock._wire._protocol import (
    Created,
    CreateMode,
    MultiCheck,
    MultiCreate,
    MultiResult,
    Op,
    container_path_ops,
    create_op,
    encode_acl,
    get_children_op,
    get_data_op,
    multi_op,
)
from aiozklock._wire._session import Session
from aiozklock._wire._validation import join


class _MutexGone(Exception):
    """The peer's mutex we counted under is no longer ours: take it again, then count."""


KAZOO_LOCK_SUFFIX = "-__lock__"  # kazoo's Semaphore locks the sibling <path>-__lock__
CURATOR_LOCKS = "locks"  # InterProcessSemaphoreV2's mutex, under the path
CURATOR_LEASES = "leases"  # ... and its leases
CURATOR_LEASE = "lease-"  # a lease's name after the protection prefix
_CLEANUP_SECONDS = 5.0  # an abandoned lease's delete, before the janitor takes over


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class _CompatLease(LeaseBase):
    """One task's lease taken the peer's way (reentrant, loss-aware). Made by
    ``CompatSemaphore`` only."""

    def __init__(self, owner: CompatSemaphore, mutex: Lock) -> None:
        super().__init__(owner._session, owner._monitor, owner._label, owner._paths, owner.acl)
        self._owner_sem = owner
        self._mutex = mutex
        self._janitor = owner._janitor
        self._acl = encode_acl(owner.acl)
        self._identity = Identity(owner.identifier)
        # A lease node that may exist and is not held yet (its node None while the create's
        # outcome is unknown), and its czxid. The claim's GUID is in its name (kazoo: the
        # whole name; Curator: the protection UUID).
        self._pending: NamedClaim | None = None
        self._pending_czxid = 0
        self._held: str | None = None  # our lease node while held

    def _node_names(self) -> tuple[str, ...]:
        pending = self._pending.node if self._pending else None
        return tuple(n.rsplit("/", 1)[-1] for n in (self._held, pending) if n)

    # ---------------------------------------------------------------- acquire

    async def _take(self, deadline: float | None, task_name: str | None) -> Holding:
        data = self._identity.data(task_name)
        if self._owner_sem.compat == "kazoo":
            await self._owner_sem._ensure_path(deadline)
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
        session = self._session
        sem = self._owner_sem
        parent = sem._lease_parent
        server_parent = session.server_path(parent)
        while True:
            generation = session.generation
            if self._mutex_lost(generation):
                return None
            if sem.compat == "curator" and self._pending_node(generation) is None:
                # Curator creates its lease first, then counts it with the others.
                token = str(uuid.uuid4())
                name = join(parent, f"_c_{token}-{CURATOR_LEASE}")
                await self._create(name, token, data, generation)
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
                if children is None:
                    children = []  # Curator: the lease's create makes it again
                    if sem.compat == "kazoo":  # deleted by someone: make it again
                        sem._assured = False
                        await sem._ensure_path(deadline)
                        continue
                try:
                    step = await self._step(children, data, generation)
                except _MutexGone:
                    return None
                if isinstance(step, Holding):
                    return step
                if step:
                    await wakeup.wait(deadline, f"{self._label}: no lease free in time")

    def _may_take(self, children: list[str]) -> bool:
        """Whether the count of children allows a lease (kazoo: before creating ours;
        Curator: with ours)."""
        limit = self._owner_sem.max_leases
        if self._owner_sem.compat == "kazoo":
            return len(children) < limit
        return len(children) <= limit

    async def _step(self, children: list[str], data: bytes, generation: int) -> Holding | bool:
        """One decision on a listing: the holding, True to wait for the watch, or False to
        list again now."""
        sem = self._owner_sem
        if sem.compat == "kazoo":
            if not self._may_take(children):
                return True
            name = uuid.uuid4().hex
            return await self._create(join(sem.path, name), name, data, generation) or False
        pending, node = self._pending, self._pending_node(generation)
        if pending is None or node is None:
            return False  # the create's outcome was unknown, and it made nothing
        czxid = self._pending_czxid
        if node.rsplit("/", 1)[-1] not in children:
            self._pending = None  # gone (Curator: "sequential path not found"): create again
            return False
        if not self._may_take(children):
            return True
        return self._hold(node, czxid, generation)

    def _pending_node(self, generation: int) -> str | None:
        """Our lease node not held yet, if it was created in ``generation``."""
        pending = self._pending
        return pending.node if pending is not None and pending.generation == generation else None

    async def _create(self, node: str, token: str, data: bytes, generation: int) -> Holding | None:
        """Create a lease node; kazoo's is held at once, Curator's is pending until a
        listing counts it. A lost reply is resolved by looking for the token in the
        children: kazoo's unique name, Curator's protection UUID."""
        session = self._session
        sequential = self._owner_sem.compat == "curator"
        mode = CreateMode.EPHEMERAL | (CreateMode.SEQUENTIAL if sequential else 0)
        parent = self._owner_sem._lease_parent
        op = self._create_lease_op(node, data, mode)
        self._pending = NamedClaim(parent, token, generation)
        try:
            created = await create_in(session, op, parent, self._acl, generation=generation)
        except SessionExpired:
            self._pending = None  # not sent (the session changed), or gone with it
            return None
        if isinstance(created, Created):
            return self._made(created.path, token, created.stat.czxid, generation)
        if isinstance(created, MultiResult):
            if created.ok:
                return self._made(str(created.results[1]), token, created.zxid, generation)
            index, failure = created.failure or (1, created)
            if index == 0:  # our mutex node is gone: the count we made is void
                self._pending = None
                raise _MutexGone
            created = failure
        if isinstance(created, (ConnectionLoss, NodeExistsError)):
            try:
                found = await find_ours(session, parent, token, generation)
            except SessionExpired:
                found = None  # gone with its session
            if found is None:
                self._pending = None
                return None
            return self._made(found[0], token, found[1].czxid, generation)
        self._pending = None
        if isinstance(created, SessionExpired):
            return None
        assert isinstance(created, BaseException)
        raise created

    def _create_lease_op(self, node: str, data: bytes, mode: CreateMode) -> Op[Any]:
        """The lease's create. kazoo's lease is created after the count, so it goes in one
        transaction with a check that our mutex node still exists (the loss policy may have
        given the mutex up meanwhile, and the janitor deleted it: another holder may have
        counted since). Raises ``_MutexGone`` if the mutex is not held now."""
        session = self._session
        server_node = session.server_path(node)
        if self._owner_sem.compat == "curator":  # created before the count: counted by all
            return create_op(server_node, data, mode, session.client_path, acl=self._acl)
        held = self._mutex._held_node()
        if held is None:
            raise _MutexGone
        mutex_node = session.server_path(held[0])
        check, create = MultiCheck(mutex_node, -1), MultiCreate(server_node, data, mode, self._acl)
        return multi_op([check, create], session.client_path)

    def _made(self, node: str, token: str, czxid: int, generation: int) -> Holding | None:
        """A lease node of ours exists: kazoo holds it now, Curator counts it first."""
        if self._owner_sem.compat == "kazoo":
            return self._hold(node, czxid, generation)
        self._pending = NamedClaim(self._owner_sem._lease_parent, token, generation, node)
        self._pending_czxid = czxid
        return None

    def _hold(self, node: str, czxid: int, generation: int) -> Holding:
        self._pending = None
        self._held = node
        return Holding((node,), generation, czxid)

    # ---------------------------------------------------------------- release and cleanup

    async def _give_back(self, holding: Holding) -> None:
        await delete_shielded(self._session, holding.nodes[0], holding.generation)

    def _give_back_nowait(self, holding: Holding) -> bool:
        node = holding.nodes[0]  # a unique name: the janitor's retry is safe
        release_nowait(self._session, self._janitor, node, holding.generation)
        return True

    def _drop(self, holding: Holding) -> None:
        self._held = None

    async def _abandon(self) -> None:
        """After a failed or cancelled acquire: delete a lease created (or maybe created)
        and not held. Shielded and bounded; the janitor finishes what cannot be done now."""
        pending, self._pending = self._pending, None
        await abandon(self._session, self._janitor, pending)


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
        if compat == "kazoo":
            mutex_path, self._lease_parent = self.path + KAZOO_LOCK_SUFFIX, self.path
        else:
            mutex_path = join(self.path, CURATOR_LOCKS)
            self._lease_parent = join(self.path, CURATOR_LEASES)
        self._mutex = Lock._construct(
            session,
            mutex_path,
            identifier=identifier,
            monitor=monitor,
            janitor=janitor,
            acl=acl,
            compat=compat,
        )
        self._assured = False  # kazoo: the path exists and stores our limit

    def _new_lease(self) -> _CompatLease:
        return _CompatLease._construct(self, self._mutex)

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
            create_op(server_path + KAZOO_LOCK_SUFFIX, b"", persistent, strip, acl=acl),
        ]
        results = await RETRY.pipeline(session, ops, wait_until=deadline)
        for result in results[-2:]:
            if not isinstance(result, (Created, NodeExistsError)):
                raise result
        if not isinstance(results[-2], Created):
            await self._check_limit(None, deadline)
        self._assured = True

    async def leases(self) -> list[Contender]:
        """The current lease holders as ZooKeeper has them, each with its identity (as
        ``Lock.contenders()``; kazoo's leases have no sequence: 0). Curator's leases are
        all counted, oldest first, up to ``max_leases``. Connection losses are retried;
        raises ``ClientClosed`` once closed, ``UsageError`` outside the client's loop."""
        session = self._session
        parent = session.server_path(self._lease_parent)
        children = await RETRY.lookup(session, get_children_op(parent))
        names = children if isinstance(children, list) else []
        if self.compat == "curator":
            names = sorted((n for n in names if is_sequence(n[-10:])), key=lambda n: n[-10:])
            names = names[: self.max_leases]
        ops = [get_data_op(join(parent, name)) for name in names]
        results = await session.pipeline(ops) if ops else []
        return [
            contender_of(name, data, stat, is_holder=True, sequence=_sequence(name))
            for name, result in zip(names, results, strict=False)
            if isinstance(result, tuple)
            for data, stat in [result]
        ]

    def __repr__(self) -> str:
        return (
            f"<aiozklock.Semaphore {short_repr(self.path)} max_leases={self.max_leases} "
            f"identifier={short_repr(self.identifier)} compat={self.compat!r}>"
        )


def _sequence(name: str) -> int:
    return int(name[-10:]) if is_sequence(name[-10:]) else 0


__all__ = ("CompatSemaphore",)
