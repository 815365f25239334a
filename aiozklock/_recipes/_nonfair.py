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

import json
import logging
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import anyio

from aiozklock._acl import ACL
from aiozklock._exceptions import (
    AiozklockError,
    BadVersionError,
    ClientClosed,
    ConnectionLoss,
    LockTimeout,
    NodeExistsError,
    NoNodeError,
    SessionExpired,
    short_repr,
)
from aiozklock._recipes._core._contenders import Contender, Identity, contender_of
from aiozklock._recipes._core._holding import Holding, HoldingRegistry
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._primitive import Primitive
from aiozklock._recipes._core._queue import refused
from aiozklock._recipes._core._waiting import wait_woken
from aiozklock._wire._protocol import (
    Created,
    CreateMode,
    Op,
    Stat,
    container_path_ops,
    create_op,
    delete_op,
    encode_acl,
    exists_op,
    get_data_op,
)
from aiozklock._wire._session import Session, SessionState
from aiozklock._wire._validation import join, validate_identifier, validate_recipe_path

log = logging.getLogger(__name__)

NODE_NAME = "lock"
_PARENT_ATTEMPTS = 3  # the server may reap the empty container parent between our requests
# Pitfall 18 (herd): after this many lost races in a row, wait a jittered moment before the
# next create, so that a crowd of waiters spreads out instead of colliding on every release.
_BACKOFF_AFTER = 2
_BACKOFF_BASE = 0.002  # seconds, doubled per further loss
_BACKOFF_CAP = 0.05

_Outcome = Literal["taken", "unknown"]
Owned = Callable[[bytes, Stat], bool]  # is the node read (data, stat) ours?


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


def _guid_in(data: bytes) -> str | None:
    """The GUID our node data carries (None for data not written by this recipe)."""
    try:
        identity = json.loads(data.decode())
    except ValueError:
        return None
    guid = identity.get("guid") if isinstance(identity, dict) else None
    return guid if isinstance(guid, str) else None


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

    _kind = "nonfair_lock"

    def __init__(
        self,
        session: Session,
        path: str,
        *,
        identifier: str | None,
        registry: HoldingRegistry,
        janitor: Janitor,
        acl: tuple[ACL, ...],
    ) -> None:
        self.path = validate_recipe_path(path)
        self.identifier = validate_identifier(identifier)
        super().__init__(session, registry, f"non-fair lock {self.path}", (self.path,), acl)
        self._acl = encode_acl(acl)
        self.node = join(self.path, NODE_NAME)
        self._janitor = janitor
        self._identity = Identity(self.identifier)
        self._guid = ""  # this acquisition attempt's GUID, in the node's data
        self._held: Stat | None = None  # our node's stat while held (czxid, version)
        # The session generation in which a create of ours had an unknown outcome: a node of
        # ours may exist there until a read of the node tells.
        self._maybe_ours: int | None = None
        self._races_lost = 0

    # ---------------------------------------------------------------- acquire

    async def _take(self, deadline: float | None, task_name: str | None) -> Holding:
        self._guid = uuid.uuid4().hex
        data = self._identity.data(task_name, guid=self._guid)
        return await self._contend(data, deadline)

    async def _contend(self, data: bytes, deadline: float | None) -> Holding:
        losses = 0
        while True:
            outcome = await self._create(data, deadline)
            if isinstance(outcome, Holding):
                return outcome
            if outcome == "taken":
                losses += 1
                self._races_lost += 1
                if self._maybe_ours is None and _expired(deadline):
                    raise LockTimeout(f"{self._label} is held by another contender")
            held = await self._wait_free(deadline)
            if held is not None:
                return held
            if losses >= _BACKOFF_AFTER:
                await self._backoff(losses, deadline)

    async def _create(self, data: bytes, deadline: float | None) -> Holding | _Outcome:
        """One create of the node (with its container parent if that is missing)."""
        session = self._session
        server_node = session.server_path(self.node)
        parents: list[Op[Any]] = []
        attempts = _PARENT_ATTEMPTS
        while True:
            generation = session.generation
            create = create_op(
                server_node, data, CreateMode.EPHEMERAL, session.client_path, acl=self._acl
            )
            previous, self._maybe_ours = self._maybe_ours, generation
            try:
                results = await session.pipeline(
                    [*parents, create], generation=generation, wait_until=deadline
                )
            except SessionExpired:
                self._maybe_ours = previous  # not sent: the session changed, use the new one
                continue
            except TimeoutError:
                self._maybe_ours = previous  # not sent: no connection in time
                raise
            created = results[-1]
            if isinstance(created, Created):
                return self._hold(created.stat, generation)
            if isinstance(created, ConnectionLoss):
                return "unknown"  # resolved by reading the node back (pitfall 19)
            self._maybe_ours = previous  # a definite answer: this create made nothing
            if isinstance(created, NodeExistsError):
                return "taken"
            if isinstance(created, SessionExpired):
                continue  # any node it made died with its session
            refusal = refused(results[:-1])
            if refusal is not None:
                raise refusal  # the container's create: the path's missing parent
            if isinstance(created, NoNodeError) and attempts > 0:
                # The container first; its ancestors too if that is not enough.
                chain = container_path_ops(
                    session.server_path(self.path), session.client_path, acl=self._acl
                )
                parents = chain if parents else chain[-1:]
                attempts -= 1
                continue
            raise created

    def _hold(self, stat: Stat, generation: int) -> Holding:
        self._maybe_ours = None
        self._held = stat
        return Holding((self.node,), generation, stat.czxid, guarded=True)

    def _owns(self, guid: str) -> Owned:
        """Whether a node read back carries ``guid`` and belongs to our session now."""
        session = self._session

        def owned(data: bytes, stat: Stat) -> bool:
            return stat.ephemeral_owner == session.session_id and _guid_in(data) == guid

        return owned

    async def _wait_free(self, deadline: float | None) -> Holding | None:
        """Read the node with a watch: ours (a lost create reply) → the holding; gone →
        None at once; someone else's (or ours from an old session) → wait for its deletion
        or a session state change, then None (create again)."""
        session = self._session
        server_node = session.server_path(self.node)
        woken = anyio.Event()

        def wake(_: object) -> None:
            woken.set()

        # The event, the watch and the state listener exist before the read: a deletion
        # between the read and the wait cannot be missed (pitfall 6).
        remove_listener = session.add_listener(wake)
        try:
            try:
                data, stat = await session.call(get_data_op(server_node, wake), wait_until=deadline)
            except NoNodeError:
                self._maybe_ours = None  # nothing there, so nothing of ours
                return None
            except ConnectionLoss:
                return None  # create again after the reconnect: a fixed name cannot duplicate
            generation = session.generation
            if self._owns(self._guid)(data, stat):
                log.info("%s: adopted our node after a lost create reply", self._label)
                return self._hold(stat, generation)
            if _guid_in(data) == self._guid:
                log.info("%s: our node from an old session: waiting for it to go", self._label)
            self._maybe_ours = None  # someone else's, or ours from a session that is gone
            await wait_woken(woken, deadline, f"{self._label} not acquired in time")
            return None
        finally:
            remove_listener()
            session.remove_watcher(server_node, wake)

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
        with anyio.CancelScope(shield=True):
            await self._delete(holding.generation, stat.czxid, stat.version)

    def _give_back_nowait(self, holding: Holding) -> bool:
        stat = self._held
        assert stat is not None
        node, janitor, generation = self.node, self._janitor, holding.generation

        def done(result: object, error: AiozklockError | None) -> None:
            if error is not None and not isinstance(
                error, (NoNodeError, SessionExpired, ClientClosed)
            ):
                # Unknown outcome: the janitor deletes it only if it is still ours (czxid).
                janitor.delete(node, generation, czxid=stat.czxid)

        op = delete_op(self._session.server_path(node), stat.version)
        try:
            if not self._session.send((op,), generation=generation, on_done=done):
                janitor.delete(node, generation, czxid=stat.czxid)  # once reconnected
        except SessionExpired:
            pass  # our session is gone, and the server deletes its node with it
        return True

    def _drop(self, holding: Holding) -> None:
        self._held = None

    async def _delete(self, generation: int, czxid: int, version: int) -> None:
        """Delete our node (czxid) with ``version``; a lost reply is resolved before any
        retry (pitfall 20: a blind retry could delete the next holder's node)."""
        session = self._session
        server_node = session.server_path(self.node)
        try:
            while True:
                try:
                    await session.call(delete_op(server_node, version), generation=generation)
                    return
                except NoNodeError:
                    return  # gone already
                except (ConnectionLoss, BadVersionError):
                    pass  # the outcome is unknown, or someone changed the node's data
                stat = await self._stat(server_node, generation)
                if stat is None or stat.czxid != czxid:
                    return  # our delete worked, or the node is another holder's now
                version = stat.version
        except (SessionExpired, ClientClosed):
            return  # our session is gone, and the server deletes its node with it

    async def _stat(self, server_node: str, generation: int) -> Stat | None:
        while True:
            try:
                return await self._session.call(exists_op(server_node), generation=generation)
            except ConnectionLoss:
                continue  # a read: safe to repeat

    async def _abandon(self) -> None:
        """After a failed or cancelled acquire: if a create of ours had an unknown outcome,
        make sure its node (if any) does not stay. Shielded and bounded; the janitor
        finishes what cannot be done at once."""
        generation, self._maybe_ours = self._maybe_ours, None
        session = self._session
        if generation is None or session.generation != generation:
            return  # nothing of ours, or only in a session that is gone (with its nodes)
        if session.state is SessionState.CLOSED:
            return
        owned = self._owns(self._guid)
        with anyio.CancelScope(shield=True):
            if session.state is SessionState.CONNECTED:
                with anyio.move_on_after(session.timeout / 2):
                    try:
                        await self._delete_if(owned, generation)
                        return
                    except (SessionExpired, ClientClosed):
                        return
                    except AiozklockError:
                        pass  # a connection loss, most likely: the janitor retries
        self._janitor.delete_if_owned(self.node, generation, owned)

    async def _delete_if(self, owned: Owned, generation: int) -> None:
        session = self._session
        try:
            data, stat = await session.call(
                get_data_op(session.server_path(self.node)), generation=generation
            )
        except NoNodeError:
            return
        if owned(data, stat):
            await self._delete(generation, stat.czxid, stat.version)

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
        session = self._session
        try:
            data, stat = await session.call(get_data_op(session.server_path(self.node)))
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
