"""The queue engine: our place in one or more ephemeral-sequential queues, one per member path.

One GUID names our node in every member queue. The engine:

* enqueues in one round trip: the create (one ``create2``, or one ``multi`` of creates for
  several members) pipelined with the ``getChildren`` of every member; a missing member path
  costs one more round trip (its container goes in the same write as the retried create);
* resolves a lost create reply by GUID, never by a blind resend: a node is adopted only if its
  ephemeral owner is our current session, duplicates are deleted;
* asks a pure decision function, per member, whether we are first and whom to watch, and waits
  on those predecessors only (the wake-up event exists before the existence check, and session
  state changes wake the waiter too);
* on failure or cancellation leaves nothing behind: cleanup is shielded and bounded, and what
  cannot be done at once goes to the janitor; once the deadline has passed, nothing more is
  sent nor waited for (the deletes are written as a release's, their replies not awaited).

A node missing on one member while present on others is never re-created alone: all of ours are
deleted and every member is enqueued again in one transaction, which keeps the multi-lock's
ordering argument (see ``_multilock.py``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from aiozklock._acl import ACL
from aiozklock._exceptions import (
    AiozklockError,
    ClientClosed,
    ConnectionLoss,
    InvalidArgument,
    LockTimeout,
    NodeExistsError,
    NoNodeError,
    SessionExpired,
    shorten,
)
from aiozklock._recipes._core._holding import Holding
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._names import LOCK_MARKER, node_prefix, nodes_of
from aiozklock._recipes._core._plan import Decide, Decision, plan
from aiozklock._recipes._core._retry import (
    GONE_ALREADY,
    PARENT_ATTEMPTS,
    RETRY,
    delete_node,
    refused,
)
from aiozklock._recipes._core._waiting import wait_woken
from aiozklock._wire._outgoing import Release
from aiozklock._wire._protocol import (
    Created,
    CreateMode,
    EventType,
    MultiCreate,
    MultiDelete,
    MultiResult,
    Op,
    Stat,
    WatchedEvent,
    container_path_ops,
    create_op,
    delete_op,
    encode_acl,
    exists_op,
    get_children_op,
    multi_op,
    set_data_op,
)
from aiozklock._wire._session import Session, SessionState
from aiozklock._wire._validation import join

log = logging.getLogger(__name__)


Listings = dict[str, list[str]]  # member path -> its children
_EPHEMERAL_SEQUENTIAL = CreateMode.EPHEMERAL | CreateMode.SEQUENTIAL


@dataclass(frozen=True, slots=True)
class Guard:
    """A recipe's check of its (single) member path, made with every enqueue at no extra
    round trip: ``op``, a read, is written just before our create, and ``check(result,
    deadline)`` (its reply, or the exception it failed with) runs once our node is adopted;
    raising
    refuses the acquire, and the failed acquire's cleanup removes our node. A member
    container the queue creates gets ``container_data``."""

    op: Op[Any]
    check: Callable[[object, float | None], Awaitable[None]]
    container_data: bytes


@dataclass(eq=False, slots=True)
class _ChildWatch:
    """An armed child watch on a member: the listing it came with, and its wake-up."""

    path: str
    generation: int
    woken: anyio.Event
    wake: Callable[[object], None]
    remove_listener: Callable[[], None]
    children: list[str] | None = None


class Queue:
    """Our nodes, one per member path, under one GUID (see the module docstring).

    ``label`` names the recipe object in messages. A queue is used by one task at a time (the
    recipe's local lock serialises its tasks).
    """

    def __init__(
        self,
        session: Session,
        janitor: Janitor,
        members: Sequence[str],
        decide: Decide,
        label: str,
        acl: tuple[ACL, ...],
        marker: str = LOCK_MARKER,
        guard: Guard | None = None,
    ) -> None:
        self.members = tuple(members)
        self._marker = marker  # our nodes are named <guid><marker><sequence>
        self._guard = guard
        self._guarded: object = None  # the guard's reply at our last enqueue
        self._armed: _ChildWatch | None = None
        self._data = b""  # our nodes' data at the last enqueue (a mark writes it again)
        self._acl = encode_acl(acl)  # our nodes', and the containers' we create
        self._session = session
        self._janitor = janitor
        self._decide = decide
        self._label = label
        self.nodes: dict[str, str] = {}  # member -> our node's name, while queued or holding
        # Built once (the hot path): the members' listings, and our create prefixes per GUID.
        self._listing_ops = [get_children_op(session.server_path(m)) for m in self.members]
        self._set_guid(uuid.uuid4().hex)
        self.generation = -1
        self.token: int | None = None
        self._unresolved = False  # a create was sent and its outcome is unknown
        # Our last release's deletes, which the next create may fold in, and their nodes.
        self._give_back: tuple[Release, list[tuple[str, str]]] | None = None
        self._deadline: float | None = None  # the current acquire's (abandon() reads it)
        self.ahead = 0  # contenders queued before us when we last joined (for telemetry)

    # ---------------------------------------------------------------- acquire

    async def take(self, deadline: float | None, data: Callable[[], bytes]) -> Holding:
        """Queue on every member and wait until first on all; returns the holding.

        ``data()`` gives our nodes' data at each enqueue. Raises ``LockTimeout`` at
        ``deadline``; after any failure or cancellation, ``abandon()`` leaves nothing queued.
        """
        self._deadline = deadline
        try:
            return await self._take(deadline, data)
        finally:
            self._disarm()

    async def _take(self, deadline: float | None, data: Callable[[], bytes]) -> Holding:
        listings: Listings | None = None
        while True:
            try:
                enqueued = listings is None
                if listings is None:
                    listings = await self._enqueue(deadline, data)
                    if self._guard is not None:
                        await self._guard.check(self._guarded, deadline)
                step = plan(listings, self.nodes, self.guid, self._decide)
                if enqueued:
                    self.ahead = max([d.ahead for d in step.waits.values()], default=0)
                if step.stale:
                    await self._delete_stale(step.stale)
                    for member, name in step.stale:
                        listings[member] = [c for c in listings[member] if c != name]
                elif step.requeue:
                    if len(self.members) > 1:
                        await self._delete_all_of_ours()  # never re-create one member alone
                    listings = None
                elif step.held:
                    if step.mark:
                        self._mark()
                    break
                else:
                    await self._wait(step.waits, listings, deadline)
            except SessionExpired:
                listings = None  # our nodes' session is gone: queue again in the new one
        assert self.token is not None
        nodes = tuple([join(member, self.nodes[member]) for member in self.members])
        return Holding(nodes, self.generation, self.token)

    async def take_at(
        self, sequence: str, generation: int, deadline: float | None, data: bytes
    ) -> Holding:
        """Hold at once with a plain ephemeral node named with another node's ``sequence``
        suffix, in session ``generation``: its place in the queue (a read lock's node taken
        by its write lock's holder: Curator's downgrade). Raises ``SessionExpired`` if that
        session is gone; a lost reply is resolved by reading the node's owner."""
        session, member = self._session, self.members[0]
        name = f"{node_prefix(self.guid, self._marker)}{sequence}"
        path = session.server_path(join(member, name))
        op = create_op(path, data, CreateMode.EPHEMERAL, session.client_path, acl=self._acl)
        self._deadline = deadline
        self._unresolved = True
        while True:
            try:
                created = await session.call(op, generation=generation, wait_until=deadline)
                token = created.stat.czxid
            except (ConnectionLoss, NodeExistsError):  # ours if our session owns it
                try:
                    stat = await session.call(
                        exists_op(path), generation=generation, wait_until=deadline
                    )
                except ConnectionLoss:
                    continue
                if stat is None:
                    continue  # not created: create again
                if stat.ephemeral_owner != session.session_id:
                    raise
                token = stat.czxid
            self._unresolved = False
            self._adopt({member: name}, token, generation)
            self.ahead = 0
            return Holding((join(member, name),), generation, token)

    def _set_guid(self, guid: str) -> None:
        self.guid = guid
        server_path = self._session.server_path
        self._prefixes = [
            server_path(join(m, node_prefix(guid, self._marker))) for m in self.members
        ]

    def _create_op(self, data: bytes) -> Op[Any]:
        """Our creates: one create, or one transaction of them (a multi-lock)."""
        acl, prefixes, strip = self._acl, self._prefixes, self._session.client_path
        if len(prefixes) == 1:
            return create_op(prefixes[0], data, _EPHEMERAL_SEQUENTIAL, strip, acl=acl)
        return multi_op([MultiCreate(p, data, _EPHEMERAL_SEQUENTIAL, acl) for p in prefixes], strip)

    def _fold(self, generation: int, data: bytes) -> tuple[list[tuple[str, str]], Op[Any]]:
        """Our create, with the last release's deletes folded into it if the session still
        can (``Session.fold``: one transaction, one commit on the server, one wake-up here).
        Deletes left alone are written first, on their own."""
        give_back, self._give_back = self._give_back, None
        if give_back is not None:
            release, nodes = give_back
            acl = self._acl
            creates = [MultiCreate(p, data, _EPHEMERAL_SEQUENTIAL, acl) for p in self._prefixes]
            folded = self._session.fold(release, creates, generation)
            if folded is not None:
                return nodes, folded
        return [], self._create_op(data)

    def _adopt_created(self, created: object, generation: int, skip: int) -> bool:
        """Record our nodes from a create's reply (after ``skip`` folded deletes); False if
        it failed."""
        if isinstance(created, Created):
            self._adopt({self.members[0]: created.path}, created.stat.czxid, generation)
            return True
        if isinstance(created, MultiResult) and created.ok:
            paths = dict(zip(self.members, created.results[skip:], strict=True))
            self._adopt(paths, created.zxid, generation)  # the transaction's zxid: the czxid
            return True
        return False

    def _adopt(self, paths: dict[str, Any], token: int, generation: int) -> None:
        self.nodes = {member: str(path).rpartition("/")[2] for member, path in paths.items()}
        self.token = token
        self.generation = generation

    async def _enqueue(self, deadline: float | None, data: Callable[[], bytes]) -> Listings:
        """Create our nodes and list the queues, in one round trip. Returns the listings."""
        session = self._session
        parent_ops: list[Op[Any]] = []
        whole_chain: set[str] = set()
        attempts = PARENT_ATTEMPTS
        while True:
            generation = session.generation
            self.nodes = {}
            ours = data()  # before the take-back: nothing may fail between it and the write
            folded, create = self._fold(generation, ours)
            self._data = ours
            guard = [] if self._guard is None else [self._guard.op]
            ops = [*parent_ops, *guard, create, *self._listing_ops]
            self._unresolved = True
            try:
                results = await session.pipeline(ops, generation=generation, wait_until=deadline)
            except SessionExpired:
                self._unresolved = False
                continue  # the session changed before we could send: bind to the new one
            except (TimeoutError, InvalidArgument):  # nothing was sent (one was too large)
                self._unresolved = False
                for member, name in folded:  # taken back: never written
                    self._janitor.delete(join(member, name), generation)
                raise
            parents = results[: len(parent_ops)]
            if guard:
                self._guarded = results[len(parent_ops)]
            created = results[len(parent_ops) + len(guard)]
            listings = results[len(parent_ops) + len(guard) + 1 :]
            if self._adopt_created(created, generation, len(folded)):
                self._unresolved = False
                complete = [listing for listing in listings if isinstance(listing, list)]
                if len(complete) == len(listings):
                    return dict(zip(self.members, complete, strict=True))
                return await self._complete(listings, generation, deadline)
            index, failure = _failure_of(created, len(folded))
            if isinstance(failure, ConnectionLoss):  # outcome unknown: resolve it first
                recovered = await self._resolve_lost_create(generation, deadline, folded)
                if recovered is not None:
                    return recovered
                continue
            self._unresolved = False
            if isinstance(failure, SessionExpired) or index < 0:
                continue  # nothing was created (a folded delete failed: that node is gone)
            for member, name in folded:  # refused with the create: not applied either
                self._janitor.delete(join(member, name), generation)
            if isinstance(failure, NoNodeError) and attempts > 0 and refused(parents) is None:
                whole_chain |= self._chain_needed(index, listings, parent_ops, parents)
                parent_ops = self._parent_ops(self._missing(index, listings), whole_chain)
                attempts -= 1
                continue
            for result in parents:
                if isinstance(result, BaseException) and not isinstance(result, NodeExistsError):
                    raise result
            raise failure

    def _missing(self, index: int, listings: Sequence[object]) -> list[str]:
        """The member whose create failed, and any whose listing says it is missing (the
        listing may also find a path another session created meanwhile)."""
        return [
            member
            for i, (member, listing) in enumerate(zip(self.members, listings, strict=True))
            if i == index or isinstance(listing, NoNodeError)
        ]

    def _chain_needed(
        self, index: int, listings: Sequence[object], parent_ops: list[Op[Any]], parents: list[Any]
    ) -> set[str]:
        """Missing members whose own container create failed NoNode: their ancestors too."""
        failed = {
            op.path
            for op, result in zip(parent_ops, parents, strict=True)
            if isinstance(result, NoNodeError)
        }
        server_path = self._session.server_path
        return {m for m in self._missing(index, listings) if server_path(m) in failed}

    async def _resolve_lost_create(
        self, generation: int, deadline: float | None, released: list[tuple[str, str]]
    ) -> Listings | None:
        """After a ConnectionLoss on our create: the listings if a node set of ours was
        adopted, None to create again (``released``: nodes whose deletes went with it)."""
        try:
            return await self._recover_create(generation, deadline, released)
        except SessionExpired:
            self._unresolved = False  # the session and any node it made are gone
            return None

    async def _complete(
        self, listings: Sequence[object], generation: int, deadline: float | None
    ) -> Listings:
        """The listings that came with our create; those that failed are read again."""
        complete: Listings = {}
        for member, listing in zip(self.members, listings, strict=True):
            if isinstance(listing, list):
                complete[member] = listing
            else:
                complete[member] = await self.list_children(member, generation, deadline)
        return complete

    def _parent_ops(self, missing: Iterable[str], whole_chain: set[str]) -> list[Op[Any]]:
        """Container creates for the missing members: only the member path at first (its
        ancestors usually exist, and even a create that fails NodeExists is a logged
        transaction), its whole chain (chroot included) if its parent is missing too."""
        session = self._session
        ops: dict[str, Op[Any]] = {}
        data = b"" if self._guard is None else self._guard.container_data
        for member in missing:
            chain = container_path_ops(
                session.server_path(member), session.client_path, acl=self._acl, data=data
            )
            for op in chain if member in whole_chain else chain[-1:]:
                ops.setdefault(op.path, op)
        return list(ops.values())

    async def _recover_create(
        self, generation: int, deadline: float | None, released: list[tuple[str, str]]
    ) -> Listings | None:
        """The create's reply was lost: find our nodes by GUID (not the ``released`` ones,
        still there if the transaction was not applied: they are then stale). Returns the
        listings if ours were adopted, None to create again."""
        session = self._session
        while True:
            listings = await self._list_all(generation, deadline)
            ours = [
                (m, name)
                for m in self.members
                for name in nodes_of(listings[m], self.guid, self._marker)
                if (m, name) not in released
            ]
            stats = await session.pipeline(
                [exists_op(session.server_path(join(m, name))) for m, name in ours],
                generation=generation,
                wait_until=deadline,
            )
            # Without every answer we cannot tell "not created" from "reply lost": ask again.
            if not any(isinstance(stat, ConnectionLoss) for stat in stats):
                break
        adopted: dict[str, str] = {}
        token = 0
        duplicates = []
        # Newest first: the create whose reply we lost made the newest node of ours.
        for (member, name), stat in reversed(list(zip(ours, stats, strict=True))):
            if not isinstance(stat, Stat):
                continue
            if member not in adopted and stat.ephemeral_owner == session.session_id:
                adopted[member] = name
                token = stat.czxid
            else:
                duplicates.append((member, name))
        if adopted and len(adopted) < len(self.members):
            duplicates += list(adopted.items())  # a partial set cannot be ours: queue anew
            adopted = {}
        if duplicates:
            await self._delete_stale(duplicates)
        self._unresolved = False
        if not adopted:
            return None
        self._adopt(adopted, token, generation)
        log.info("%s: adopted %s after a lost create reply", self._label, shorten(str(adopted)))
        gone = set(duplicates)
        return {m: [c for c in listings[m] if (m, c) not in gone] for m in self.members}

    async def list_children(
        self, member: str, generation: int | None, deadline: float | None
    ) -> list[str]:
        """The children of ``member``, none if it does not exist (a container reaped once
        empty); retried after a connection loss (a read)."""
        session = self._session
        op = get_children_op(session.server_path(member))
        try:
            return await RETRY.call(session, op, generation=generation, wait_until=deadline)
        except NoNodeError:
            return []

    async def _list_all(self, generation: int, deadline: float | None) -> Listings:
        """Every member's children, in one round trip (repeated after a connection loss)."""
        results = await RETRY.pipeline(
            self._session, self._listing_ops, generation=generation, wait_until=deadline
        )
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, NoNodeError):
                raise result
        listings = [[] if isinstance(r, NoNodeError) else r for r in results]
        return dict(zip(self.members, listings, strict=True))

    # ---------------------------------------------------------------- waiting

    async def _wait(
        self, waits: dict[str, Decision], listings: Listings, deadline: float | None
    ) -> None:
        """Wait until a predecessor is gone (or the session changes); updates ``listings``.

        ``deadline`` bounds it all: nothing is sent once it has passed, and a reply still
        awaited then is given up (only reads are sent here: nothing to undo)."""
        left = math.inf if deadline is None else deadline - time.monotonic()
        with anyio.move_on_after(left) as bound:
            if len(self.members) == 1:
                ((member, decision),) = waits.items()
                if decision.children:
                    await self._wait_children(member, listings, deadline)
                else:
                    await self._wait_one(member, decision, listings, deadline)
            else:
                await self._wait_many(waits, listings, deadline)
        if bound.cancelled_caught:
            raise LockTimeout(f"{self._label} not acquired in time")

    async def _wait_one(
        self, member: str, decision: Decision, listings: Listings, deadline: float | None
    ) -> None:
        """One queue (the mutex, election: the hot path): one existence watch.

        If the predecessor was the only node ahead of ours, we are first once the server says
        it was deleted: nothing can queue ahead of us later (sequence numbers only grow, and
        a path with children is never reaped), so no listing is needed to know it.
        """
        session = self._session
        generation = self.generation
        woken = anyio.Event()
        deleted = False

        def wake(event: object) -> None:
            nonlocal deleted
            if isinstance(event, WatchedEvent) and event.type is EventType.DELETED:
                deleted = True
            woken.set()

        # The event exists, and both the watch and the state listener point at it, before the
        # existence check: a deletion between the check and the wait cannot be missed.
        remove_listener = session.add_listener(wake)
        assert decision.predecessor is not None
        server_path = session.server_path(join(member, decision.predecessor))
        try:
            try:
                op = exists_op(server_path, wake)
                stat = await session.call(op, generation=generation, wait_until=deadline)
                deleted = deleted or stat is None
            except ConnectionLoss:
                stat = None  # re-check from the listing after the reconnect
            # A marked predecessor was granted already (see Decision.mark): no wait for it.
            if stat is not None and not (decision.mark and stat.version > 0):
                self._before_wait_hook()
                await wait_woken(woken, deadline, f"{self._label} not acquired in time")
            if deleted and decision.ahead == 1 and session.generation == generation:
                listings[member] = [self.nodes[member]]
            else:
                listings[member] = await self.list_children(member, generation, deadline)
        finally:
            remove_listener()
            session.remove_watcher(server_path, wake)

    async def _wait_many(
        self, waits: dict[str, Decision], listings: Listings, deadline: float | None
    ) -> None:
        """Several member queues: watch every predecessor (one write), wake on the first
        change, then list every member again (one round trip): a node of ours that went
        missing where we were already first must be seen before we hold."""
        session = self._session
        generation = self.generation
        woken = anyio.Event()

        def wake(event: object) -> None:
            woken.set()

        paths = [
            session.server_path(join(member, d.predecessor))
            for member, d in waits.items()
            if d.predecessor is not None
        ]
        remove_listener = session.add_listener(wake)  # before the checks, as in _wait_one
        try:
            results = await session.pipeline(
                [exists_op(path, wake) for path in paths],
                generation=generation,
                wait_until=deadline,
            )
            for result in results:
                if isinstance(result, BaseException) and not isinstance(result, ConnectionLoss):
                    raise result
            # Wait only if every predecessor is still there (a connection loss: re-list).
            if all(isinstance(result, Stat) for result in results):
                self._before_wait_hook()
                await wait_woken(woken, deadline, f"{self._label} not acquired in time")
            listings.update(await self._list_all(generation, deadline))
        finally:
            remove_listener()
            for path in paths:
                session.remove_watcher(path, wake)

    async def _wait_children(self, member: str, listings: Listings, deadline: float | None) -> None:
        """Wait for any change among ``member``'s children, then list them (with a new child
        watch: one request per wake-up). A watch armed with the listing we decided on is
        waited on; otherwise (first call, or it has fired) it is armed with a new listing,
        which the caller decides on again."""
        armed = self._armed
        if (
            armed is not None
            and armed.generation == self.generation
            and armed.children == listings[member]
        ):
            self._before_wait_hook()
            await wait_woken(armed.woken, deadline, f"{self._label} not acquired in time")
        self._disarm()
        session = self._session
        woken = anyio.Event()

        def wake(event: object) -> None:
            woken.set()

        path = session.server_path(member)
        armed = _ChildWatch(path, self.generation, woken, wake, session.add_listener(wake))
        self._armed = armed
        op = get_children_op(path, wake)
        try:
            children = await session.call(op, generation=self.generation, wait_until=deadline)
        except ConnectionLoss:
            children = None  # the state change woke it: armed again at the next call
        except NoNodeError:
            children = []  # our node is gone with its parent: queue again
        if children is None:
            listings[member] = await self.list_children(member, self.generation, deadline)
        else:
            armed.children = listings[member] = children

    def _disarm(self) -> None:
        """Forget an armed child watch (the server's fires unheard)."""
        armed, self._armed = self._armed, None
        if armed is not None:
            armed.remove_listener()
            self._session.remove_watcher(armed.path, armed.wake)

    def _mark(self) -> None:
        """Granted with a successor that may wait for our grant: change our node's data (to
        the same bytes), which fires the successor's watch. Written with the next request,
        no reply awaited; if it cannot be written now or its outcome is unknown, the
        janitor writes it once reconnected (until then the successor waits for our node's
        deletion or the mark). NoNode or a lost session: the deletion wakes the successor."""
        ((member, name),) = self.nodes.items()
        session, janitor, generation, data = (
            self._session,
            self._janitor,
            self.generation,
            self._data,
        )
        node = join(member, name)
        op = set_data_op(session.server_path(node), data)

        def done(result: object, error: AiozklockError | None) -> None:
            if isinstance(error, ConnectionLoss):
                janitor.rewrite(node, generation, data)

        with contextlib.suppress(SessionExpired):
            if session.send_soon((op,), generation=generation, on_done=done) is None:
                janitor.rewrite(node, generation, data)

    def _before_wait_hook(self) -> None:
        """Test seam: runs between the existence checks and the wait (see test_lock_races)."""

    # ---------------------------------------------------------------- release and cleanup

    async def _delete_stale(self, names: Sequence[tuple[str, str]]) -> None:
        session = self._session
        ops = [delete_op(session.server_path(join(m, name))) for m, name in names]
        for (member, name), result in zip(names, await session.pipeline(ops), strict=True):
            if isinstance(result, BaseException) and not isinstance(result, NoNodeError):
                self._janitor.delete(join(member, name), session.generation)
                self.retire_guid()

    async def _delete_all_of_ours(self) -> None:
        """One member lost its node: delete the others, so all are enqueued again together."""
        await self._delete_stale(list(self.nodes.items()))
        self.nodes = {}

    async def delete_own(self) -> None:
        """Delete our nodes: shielded; returns once they are gone (or their session is)."""
        if not self.nodes:
            return
        session = self._session
        nodes = [join(m, self.nodes[m]) for m in self.members]
        with anyio.CancelScope(shield=True):
            if len(nodes) > 1 and await self._delete_in_one(list(map(session.server_path, nodes))):
                return
            for node in nodes:
                # Gone with its session: the server deletes it with the session.
                with contextlib.suppress(SessionExpired, ClientClosed):
                    await delete_node(session, node, self.generation)

    def delete_own_nowait(self) -> None:
        """Have the deletes of our nodes written before the event loop next waits, and
        return without their replies. Every later request of this session is ordered after
        them, so a re-acquire goes out at once: one round trip per cycle, and a re-acquire
        by this queue before they are written takes them into its create's transaction. A
        delete that fails, or that cannot be written now (disconnected), is the janitor's."""
        if not self.nodes:
            return
        session, janitor, generation = self._session, self._janitor, self.generation
        names = [(m, self.nodes[m]) for m in self.members]
        nodes = [join(m, name) for m, name in names]
        paths = [session.server_path(node) for node in nodes]

        def done(result: Any, error: AiozklockError | None) -> None:
            failed_multi = isinstance(result, MultiResult) and not result.ok
            if isinstance(error, GONE_ALREADY) or (error is None and not failed_multi):
                return
            for node in nodes:  # outcome unknown, or a multi that a missing node failed
                janitor.delete(node, generation)

        try:
            release = session.release_soon(paths, generation=generation, on_done=done)
            if release is None:
                for node in nodes:
                    janitor.delete(node, generation)  # once reconnected, in this session
            else:
                self._give_back = (release, names)
        except SessionExpired:
            pass  # their session is gone, and the server deletes them with it

    async def _delete_in_one(self, paths: list[str]) -> bool:
        """One ``multi`` of deletes (one round trip); False to fall back to single deletes
        (a node already gone fails the whole transaction; a lost reply is resolved by them)."""
        session = self._session
        op = multi_op([MultiDelete(path) for path in paths], session.client_path)
        try:
            result = await session.call(op, generation=self.generation)
        except (SessionExpired, ClientClosed):
            return True  # their session is gone, and the server deletes them with it
        except ConnectionLoss:
            return False
        return result.ok

    async def abandon(self) -> None:
        """After a failed or cancelled acquire: leave nothing of ours in the queues.

        Once the acquire's deadline has passed, nothing is waited for: the deletes are
        written as a release's are (``delete_own_nowait``), and a create of unknown outcome
        is the janitor's; a caller whose time is up must not wait for a slow or silent
        server. Otherwise (an error, a cancellation) the deletes are confirmed, within half
        the session timeout, and what is not done by then is the janitor's."""
        deadline = self._deadline
        if deadline is not None and time.monotonic() >= deadline:
            self._abandon_nowait()
            return
        nodes, generation = self.nodes, self.generation
        unresolved = self._unresolved
        self.nodes = {}
        self.token = None
        self._unresolved = False
        if not nodes and not unresolved:
            return
        session = self._session
        if not nodes:
            generation = session.generation
        with anyio.CancelScope(shield=True):
            done = False
            if session.state is SessionState.CONNECTED and session.generation == generation:
                with anyio.move_on_after(session.timeout / 2):
                    done = await self._delete_now(nodes, generation)
            elif session.generation != generation or session.state is SessionState.CLOSED:
                done = True  # the nodes' session is gone, and the nodes with it
        if not done:
            for member in self.members:
                if member in nodes:
                    self._janitor.delete(join(member, nodes[member]), generation)
                elif not nodes:
                    self._janitor.delete_guid(member, self.guid, generation)
            self.retire_guid()

    def _abandon_nowait(self) -> None:
        if self.nodes:
            self.delete_own_nowait()
        elif self._unresolved:
            generation = self._session.generation
            for member in self.members:
                self._janitor.delete_guid(member, self.guid, generation)
        if self.nodes or self._unresolved:
            self.retire_guid()  # the deletes may yet be the janitor's (see retire_guid)
        self._unresolved = False
        self.forget()

    async def _delete_now(self, nodes: dict[str, str], generation: int) -> bool:
        session = self._session
        try:
            if nodes:
                ops = [delete_op(session.server_path(join(m, n))) for m, n in nodes.items()]
                results = await session.pipeline(
                    ops, generation=generation, wait_until=time.monotonic()
                )
                errors = [r for r in results if isinstance(r, BaseException)]
                if any(not isinstance(e, NoNodeError | SessionExpired) for e in errors):
                    return False
            else:
                listings = await self._list_all(generation, time.monotonic())
                ours = [
                    (m, n)
                    for m in self.members
                    for n in nodes_of(listings[m], self.guid, self._marker)
                ]
                await self._delete_stale(ours)
            return True
        except (NoNodeError, SessionExpired):
            return True
        except (AiozklockError, TimeoutError):  # ClientClosed included
            return False

    def retire_guid(self) -> None:
        """Take a new GUID once a node of ours is left to the janitor: a later lost create
        reply must never find (and adopt) the node the janitor is about to delete, and a GUID
        sweep must never hit a node of a later attempt."""
        self._set_guid(uuid.uuid4().hex)

    def forget(self) -> None:
        """Released or lost: no node is ours any more."""
        self.nodes = {}
        self.token = None


def _failure_of(created: object, skip: int) -> tuple[int, BaseException]:
    """Which member's create failed (its index; negative for one of the ``skip`` folded
    deletes before the creates), and why."""
    if isinstance(created, MultiResult):
        failure = created.failure
        assert failure is not None
        return failure[0] - skip, failure[1]
    assert isinstance(created, BaseException)
    return 0, created


__all__ = ("Guard", "Listings", "Queue", "refused")
