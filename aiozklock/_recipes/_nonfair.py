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
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from dataclasses import dataclass
from typing import Literal

import anyio

from aiozklock._acl import ACL
from aiozklock._exceptions import (
    ConnectionLoss,
    InvalidACLError,
    LockTimeout,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    SessionExpired,
    short_repr,
)
from aiozklock._recipes._core._contenders import Contender, Identity, contender_of
from aiozklock._recipes._core._holding import Holding, HoldingMonitor
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._primitive import Primitive
from aiozklock._recipes._core._retry import create_in
from aiozklock._recipes._core._uncertain import (
    FixedClaim,
    abandon,
    delete_shielded,
    owned_by,
    release_nowait,
)
from aiozklock._recipes._core._waiting import Wakeup
from aiozklock._wire._protocol import Created, CreateMode, Stat, create_op, encode_acl, get_data_op
from aiozklock._wire._session import Session
from aiozklock._wire._validation import join, validate_identifier, validate_recipe_path

log = logging.getLogger(__name__)

NODE_NAME = "lock"
# Pitfall 18 (herd): after this many lost races in a row, wait a jittered moment before the
# next create, so that a crowd of waiters spreads out instead of colliding on every release.
_BACKOFF_AFTER = 2
_BACKOFF_BASE = 0.002  # seconds, doubled per further loss
_BACKOFF_CAP = 0.05

_Outcome = Literal["taken", "unknown"]


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
        self._acl = encode_acl(acl)
        self.node = join(self.path, NODE_NAME)
        self._server_node = session.server_path(self.node)
        self._janitor = janitor
        self._identity = Identity(self.identifier)
        self._guid = ""  # this acquisition attempt's GUID, in the node's data
        self._held: Stat | None = None  # our node's stat while held (czxid, version)
        self._claim: FixedClaim | None = None  # a create of ours had an unknown outcome
        self._races_lost = 0

    # ---------------------------------------------------------------- acquire

    async def _take(self, deadline: float | None, task_name: str | None) -> Holding:
        self._guid = uuid.uuid4().hex
        data = self._identity.data(task_name, guid=self._guid)
        losses = 0
        while True:
            outcome = await self._create(data, deadline)
            if isinstance(outcome, Holding):
                return outcome
            if outcome == "taken":
                losses += 1
                self._races_lost += 1
                if self._claim is None and _expired(deadline):
                    raise LockTimeout(f"{self._label} is held by another contender")
            held = await self._wait_free(deadline)
            if held is not None:
                return held
            if losses >= _BACKOFF_AFTER:
                await self._backoff(losses, deadline)

    async def _create(self, data: bytes, deadline: float | None) -> Holding | _Outcome:
        """One create of the node (with its container parent if that is missing)."""
        session = self._session
        while True:
            generation = session.generation
            op = create_op(
                self._server_node, data, CreateMode.EPHEMERAL, session.client_path, acl=self._acl
            )
            owned = owned_by(session, self._guid)
            previous, self._claim = self._claim, FixedClaim(self.node, generation, owned)
            try:
                created = await create_in(
                    session, op, self.path, self._acl, generation=generation, deadline=deadline
                )
            except (SessionExpired, TimeoutError, NoAuthError, InvalidACLError) as exc:
                self._claim = previous  # not sent, or a definite answer: nothing was made
                if isinstance(exc, SessionExpired):
                    continue  # the session changed before we could send: use the new one
                raise
            if isinstance(created, Created):
                return self._hold(created.stat, generation)
            if isinstance(created, ConnectionLoss):
                return "unknown"  # resolved by reading the node back (pitfall 19)
            self._claim = previous  # a definite answer: this create made nothing
            if isinstance(created, NodeExistsError):
                return "taken"
            if not isinstance(created, SessionExpired):  # else: gone with its session
                assert isinstance(created, BaseException)
                raise created

    def _hold(self, stat: Stat, generation: int) -> Holding:
        self._claim = None
        self._held = stat
        return Holding((self.node,), generation, stat.czxid, guarded=True)

    async def _wait_free(self, deadline: float | None) -> Holding | None:
        """Read the node with a watch: ours (a lost create reply) → the holding; gone →
        None at once; someone else's (or ours from an old session) → wait for its deletion
        or a session state change, then None (create again)."""
        session = self._session
        with Wakeup(session) as wakeup:
            found = await wakeup.get_data(self._server_node, deadline=deadline)
            generation = session.generation
            if found is not None and owned_by(session, self._guid)(*found):
                log.info("%s: adopted our node after a lost create reply", self._label)
                return self._hold(found[1], generation)
            self._claim = None  # nothing there, someone else's, or ours from an old session
            if found is not None:
                await wakeup.wait(deadline, f"{self._label} not acquired in time")
            return None

    async def _backoff(self, losses: int, deadline: float | None) -> None:
        bound = min(_BACKOFF_CAP, _BACKOFF_BASE * 2 ** (losses - _BACKOFF_AFTER))
        delay = random.uniform(0, bound)
        if deadline is not None:
            delay = min(delay, max(0.0, deadline - time.monotonic()))
        await anyio.sleep(delay)

    # ---------------------------------------------------------------- release and cleanup

    async def _give_back(self, holding: Holding) -> None:
        stat = self._held
        assert stat is not None
        # A lost reply is resolved before any retry (pitfall 20: a blind retry could delete
        # the next holder's node).
        await delete_shielded(
            self._session, self.node, holding.generation, czxid=stat.czxid, version=stat.version
        )

    def _give_back_nowait(self, holding: Holding) -> bool:
        stat = self._held
        assert stat is not None
        session, janitor = self._session, self._janitor
        release_nowait(
            session, janitor, self.node, holding.generation, version=stat.version, czxid=stat.czxid
        )
        return True

    def _drop(self, holding: Holding) -> None:
        self._held = None

    async def _abandon(self) -> None:
        """After a failed or cancelled acquire: if a create of ours had an unknown outcome,
        make sure its node (if any) does not stay."""
        claim, self._claim = self._claim, None
        await abandon(self._session, self._janitor, claim)

    # ---------------------------------------------------------------- introspection

    def statistics(self) -> NonFairLockStatistics:
        """Local state of this object; sends nothing and raises nothing."""
        holding = self._holding
        return NonFairLockStatistics(
            path=self.path,
            node=self.node,
            locked=holding is not None and not holding.lost,
            owner=self._owner,
            depth=self._depth,
            tasks_waiting=self._local.statistics().tasks_waiting,
            fencing_token=holding.token if holding is not None else None,
            acquisitions=self._acquisitions,
            losses=self._losses,
            races_lost=self._races_lost,
            last_wait=self._last_wait,
        )

    async def contenders(self) -> list[Contender]:
        """The holder as ZooKeeper has it (one round trip), or ``[]`` when the lock is free.

        Waiters leave no trace on the server, so only the holder is listed; its ``sequence``
        is 0 (a fixed node has none). Raises ``ConnectionLoss``/``SessionExpired`` if the
        read cannot be answered.
        """
        try:
            data, stat = await self._session.call(get_data_op(self._server_node))
        except NoNodeError:
            return []
        return [contender_of(NODE_NAME, data, stat, is_holder=True, sequence=0)]

    def __repr__(self) -> str:
        state = "held" if self._holding is not None else "free"
        return (
            f"<aiozklock.NonFairLock {short_repr(self.path)} {state} "
            f"identifier={short_repr(self.identifier)}>"
        )


def _expired(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


__all__ = ("NODE_NAME", "NonFairLock", "NonFairLockStatistics")
