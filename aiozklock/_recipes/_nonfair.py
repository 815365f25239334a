"""The non-fair lock: one fixed ephemeral node, ``<path>/lock``, whose creator holds the lock.

Acquire is one ``create`` (1 round trip when free). A contender that finds the node taken
watches it and, once it is deleted, races the others to create it again: there is no queue,
so there is no order either. What the fair ``Lock`` gets from per-attempt sequential names,
this recipe gets from the node's data, which carries a per-attempt GUID next to the holder's
identity (``_core/_contenders.Identity``):

* a create whose reply was lost is resolved by reading the node back: it is ours only if its
  data carries our GUID *and* its ephemeral owner is our current session (a node of ours from
  an old session is waited on like anyone's: it dies with that session);
* the node's name is not ours alone, so no delete is ever blind: a delete whose reply was lost
  is retried only after ``exists`` shows the same czxid (else it is gone, or someone else's),
  and the holding is ``guarded`` so the loss policy's janitor checks the czxid too.

What is done on the node (the create, its read-back, the wait, the owned delete) is
``_core/_fixed.py``'s ``FixedNode``, which the lease shares.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import anyio

from aiozklock._acl import ACL
from aiozklock._exceptions import NoNodeError, short_repr
from aiozklock._recipes._core._contenders import Contender, Identity, contender_of
from aiozklock._recipes._core._fixed import Bid, FixedHolding, FixedNode
from aiozklock._recipes._core._handle import FIXED_NODE
from aiozklock._recipes._core._holding import Holding, HoldingMonitor
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._primitive import Primitive
from aiozklock._recipes._core._uncertain import owned_by
from aiozklock._wire._protocol import get_data_op
from aiozklock._wire._session import Session
from aiozklock._wire._validation import validate_identifier, validate_recipe_path

NODE_NAME = "lock"


@dataclass(frozen=True, slots=True)
class NonFairLockStatistics:
    """Local state of one non-fair lock object (no request is sent to build it)."""

    path: str
    node: str  # the fixed node whose creator holds the lock
    locked: bool  # a task of this object holds the lock
    owner: anyio.TaskInfo | None
    depth: int  # reentrant acquisitions by the owner
    tasks_waiting: int  # tasks of this process waiting on this object
    fencing_token: int | None
    acquisitions: int
    losses: int
    races_lost: int  # creates that found the node taken (each costs a watch and a wake-up)
    last_wait: float | None  # seconds the last acquisition waited


class NonFairLock(Primitive):
    """A distributed lock on one fixed node. Create it with ``zk.lock(path, fair=False)``.

    Same interface as ``Lock`` (reentrant per task, loss-aware, ``fencing_token`` = the
    node's czxid, ``try_acquire()``, ``LockTimeout``), but not fair: on every release, all
    waiters race to create the node and any of them (or a newcomer) may win.

    The trade-off: 1 round trip to acquire when free and 1 to release, against a herd effect
    when contended. Every waiter watches the same node, so each release sends one
    notification to each of N waiters, and N creates follow, of which one wins; the losers
    read the node again and wait on it. A release therefore costs O(N) requests, where the
    fair ``Lock`` costs O(1). Waiters that lose several races in a row back off for a few
    jittered milliseconds. Prefer the fair ``Lock`` with many waiters, or when starvation
    matters; this one suits low contention and short critical sections.

    Do not mix it with a fair ``Lock`` on the same path: they do not exclude each other.
    Bad arguments raise ``InvalidArgument`` here, before any request.
    """

    path: str
    """The lock's path."""
    node: str
    """The one node whose creator holds it (``{path}/lock``)."""

    _unguardable = FIXED_NODE  # guard= would not be sound (see FIXED_NODE)

    def __init__(
        self,
        session: Session,
        path: str,
        *,
        identifier: str | None,
        monitor: HoldingMonitor,
        janitor: Janitor,
        acl: tuple[ACL, ...],
    ) -> None:
        self.path = validate_recipe_path(path)
        self.identifier = validate_identifier(identifier)
        super().__init__(session, monitor, f"non-fair lock {self.path}", (self.path,), acl)
        # Back off after lost races: every waiter watches the one node (pitfall 18).
        self._fixed = FixedNode(
            session, janitor, self.path, NODE_NAME, acl, self._label, backoff=True
        )
        self.node = self._fixed.node
        self._identity = Identity(self.identifier)

    # ---------------------------------------------------------------- acquire and release

    async def _take(self, deadline: float | None, task_name: str | None) -> Holding:
        guid = uuid.uuid4().hex  # this attempt's, in the node's data
        data = self._identity.data(task_name, guid=guid)
        return await self._fixed.take(Bid(data, owned_by(self._session, guid)), deadline)

    async def _abandon(self, deadline: float | None) -> None:
        """After a failed or cancelled acquire: if a create of ours had an unknown outcome,
        make sure its node (if any) does not stay."""
        await self._fixed.abandon()

    async def _give_back(self, holding: Holding) -> None:
        assert isinstance(holding, FixedHolding)
        await self._fixed.release(holding)

    def _give_back_nowait(self, holding: Holding) -> bool:
        assert isinstance(holding, FixedHolding)
        self._fixed.release_nowait(holding)
        return True

    def _drop(self, holding: Holding) -> None:
        """Nothing to forget: the holding carries the node's version."""

    # ---------------------------------------------------------------- introspection

    def statistics(self) -> NonFairLockStatistics:
        """Local state of this object; sends nothing and raises nothing."""
        holding = self._holding
        return NonFairLockStatistics(
            path=self.path,
            node=self.node,
            locked=holding is not None and not holding.lost,
            owner=None if self._owner is None else self._owner.info(),
            depth=self._depth,
            tasks_waiting=self._local.tasks_waiting,
            fencing_token=holding.token if holding is not None else None,
            acquisitions=self._acquisitions,
            losses=self._losses,
            races_lost=self._fixed.races_lost,
            last_wait=self._last_wait,
        )

    async def contenders(self) -> list[Contender]:
        """The holder as ZooKeeper has it (one round trip), or ``[]`` when the lock is free.

        Waiters leave no trace on the server, so only the holder is listed; its ``sequence``
        is 0 (a fixed node has none). Raises ``ConnectionLoss``/``SessionExpired`` if the
        read cannot be answered.
        """
        try:
            data, stat = await self._session.call(get_data_op(self._fixed.server_node))
        except NoNodeError:
            return []
        return [contender_of(NODE_NAME, data, stat, is_holder=True, sequence=0)]

    def __repr__(self) -> str:
        state = "held" if self._holding is not None else "free"
        return (
            f"<aiozklock.NonFairLock {short_repr(self.path)} {state} "
            f"identifier={short_repr(self.identifier)}>"
        )


__all__ = ("NODE_NAME", "NonFairLock", "NonFairLockStatistics")
