"""What the queue engine knows of our place in its queues, shared by its parts.

``QueueState`` holds our identity (one GUID for our node in every member queue), the nodes
we have, the session generation they live in, and the one record of a create of ours whose
outcome is unknown (``_write_create`` writes it, ``abandon`` takes it). The engine's parts
build on it: ``_enqueue.py`` (the create, and a lost create reply), ``_queue_wait.py``
(waiting for a predecessor) and ``_give_back.py`` (release and cleanup); ``_queue.py``
puts them together. What a step learns travels as its value (a join's ``Joined``, a wait's
hand-off); only what must outlive an acquire is kept: the grant's ``Lead`` for the next
join, and the nodes of our last release (``Round.released``).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from aiozklock._acl import ACL
from aiozklock._exceptions import (
    ConnectionLoss,
    InvalidArgument,
    LayoutConflict,
    NoNodeError,
    SessionExpired,
)
from aiozklock._recipes._core._delay_record import LockDelay, delay_guid
from aiozklock._recipes._core._holding import Holding
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._names import LOCK_MARKER, node_prefix
from aiozklock._recipes._core._newcomers import NewcomerWatch, lose_to_newcomer
from aiozklock._recipes._core._peers import Layout
from aiozklock._recipes._core._plan import Decide
from aiozklock._recipes._core._retry import RETRY
from aiozklock._wire._frozen import fast_init
from aiozklock._wire._protocol import Op, delete_op, encode_acl, get_children_op
from aiozklock._wire._session import Session
from aiozklock._wire._validation import join

if TYPE_CHECKING:
    from aiozklock._recipes._core._queue_wait import _ChildWatch

R = TypeVar("R")

Listings = dict[str, list[str]]  # member path -> its children
Names = Sequence[tuple[str, str]]  # (member path, node name) pairs
# Told of our nodes (their server paths, their session generation) as soon as a join has
# created them, before it waits for anything (a revocable recipe's watch: _revocation.py).
OnJoin = Callable[[Sequence[str], int], None]
# Raised by a write before anything of it was written: nothing of ours can exist.
NOT_WRITTEN = (SessionExpired, TimeoutError, InvalidArgument)


@dataclass(frozen=True, slots=True)
class Guard:
    """A recipe's check of its (single) member path, made with every enqueue at no extra
    round trip: ``op``, a read, is written just before our create, and ``check(result,
    deadline)`` (its reply, or the exception it failed with) runs once our node is adopted;
    raising refuses the acquire, and the failed acquire's cleanup removes our node. A member
    container the queue creates gets ``container_data``."""

    op: Op[Any]
    check: Callable[[object, float | None], Awaitable[None]]
    container_data: bytes


class Hint(NamedTuple):
    """Where our next node most likely queues: right after node ``name`` (the newest of
    ``behind`` nodes queued behind ours when we were granted, in session ``generation``)."""

    name: str
    behind: int
    generation: int


class Alone:
    """Our node ``name`` (czxid ``token``), in session ``generation``, proven the only node
    of its queue when we were granted (see ``_enqueue.py``). ``written``: its release's
    delete was written; ``answered``: its reply has come; ``deleted``: it succeeded."""

    __slots__ = ("answered", "deleted", "generation", "name", "token", "written")

    def __init__(self, name: str, generation: int, token: int) -> None:
        self.name = name
        self.generation = generation
        self.token = token
        self.written = self.answered = self.deleted = False


# What our last grant left for the next join: a hint to follow, or our node proven alone
# (see ``_enqueue.py``); the grant returns it, and the next join takes it.
Lead = Hint | Alone | None


@fast_init  # one per acquire
@dataclass(frozen=True, slots=True)
class Joined:
    """What a join learned: the ``listings`` to decide on, the guard's reply (``guarded``,
    None without a guard), whether it was ``proven`` alone (first, nothing else queued), the
    hint it ``followed`` (waited on), if any (see ``_enqueue.py``), and whether the listings
    were ``watched`` (``_newcomers.py``)."""

    listings: Listings
    guarded: object = None
    proven: bool = False
    followed: Hint | None = None
    watched: bool = False


class Replies(NamedTuple):
    """The replies to a ``Round``, each under the name of its request (a reply is the
    request's result, or the exception it failed with)."""

    parents: list[Any]  # to the container creates
    guarded: object  # to the guard's read (None without a guard)
    created: object  # to our create
    listings: list[Any]  # to each member's getChildren


class Round(NamedTuple):
    """One write of ours: our ``create``, after the ``parents`` (container creates for
    missing member paths) and the ``guard``'s read, and before the ``listings`` (each
    member's getChildren), all in one round trip, in session ``generation``, bounded by
    ``deadline``. ``released``: the nodes of our last release, whose deletes were written
    before: never adopted after a lost create reply (with the same GUID, they are still
    listed if those deletes were lost too, and then the janitor deletes them)."""

    generation: int
    deadline: float | None
    create: Op[Any]
    released: Names = ()
    parents: Sequence[Op[Any]] = ()
    guard: Op[Any] | None = None
    listings: Sequence[Op[Any]] = ()

    def ops(self) -> list[Op[Any]]:
        """The requests, in the order they are written."""
        guard = () if self.guard is None else (self.guard,)
        return [*self.parents, *guard, self.create, *self.listings]

    def replies(self, results: list[Any]) -> Replies:
        """``results`` (in the order of ``ops()``) by name."""
        replies = iter(results)
        parents = list(islice(replies, len(self.parents)))
        guarded = None if self.guard is None else next(replies)
        created = next(replies)
        return Replies(parents, guarded, created, list(replies))


class QueueState:
    """Our nodes, one per member path, under one GUID (see the module docstring).

    ``label`` names the recipe object in messages. A queue is used by one task at a time (the
    recipe's local lock serialises its tasks).
    """

    # One per lock object, alive while it is: slots, and nothing kept that a message or a
    # listing can build when needed (a held lock's memory, issue 22).
    __slots__ = (
        "__weakref__",
        "_acl",
        "_armed",
        "_contended",
        "_deadline",
        "_decide",
        "_delay",
        "_guard",
        "_in_doubt",
        "_janitor",
        "_label",
        "_layout",
        "_lead",
        "_marker",
        "_newcomers",
        "_prefixes",
        "_released",
        "_session",
        "ahead",
        "generation",
        "guid",
        "members",
        "nodes",
        "on_adopt",
        "token",
    )

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
        layout: Layout | None = None,
        delay: float | None = None,
    ) -> None:
        self.members = tuple(members)
        # Lock-delay (``_delay.py``): ours, or a record's we honor (made when one is seen).
        self._delay = None if delay is None else LockDelay(delay)
        self._marker = marker  # our nodes are named <guid><marker><sequence>
        self._layout = layout  # peers that cannot order our nodes are refused (None: no check)
        # ... and a holder is told of one that comes after its grant (``_newcomers.py``).
        self._newcomers = (
            None if layout is None else NewcomerWatch(session, members, layout, label, janitor)
        )
        self._guard = guard
        self._acl = encode_acl(acl)  # our nodes', and the containers' we create
        self._session = session
        self._janitor = janitor
        self._decide = decide
        self._label = label
        self.nodes: dict[str, str] = {}  # member -> our node's name, while queued or holding
        self._set_guid(self._new_guid())  # and our create prefixes (the hot path)
        self.generation = -1
        self.token: int | None = None
        self._in_doubt = False  # a create was written and its outcome is unknown
        # The nodes of our last release written without waiting (``Round.released``).
        self._released: Names = ()
        self._deadline: float | None = None  # the current acquire's (abandon() reads it)
        self.ahead = 0  # contenders queued before us when we last joined (for telemetry)
        # What our last grant left for the next join (written by ``take``, the release
        # records its deletes' outcome on an ``Alone``).
        self._lead: Lead = None
        self._contended = False  # our last grant came by a hand-off, or had nodes behind
        self._armed: _ChildWatch | None = None  # a child watch kept between the waits
        # Called once nodes are ours (the local waiters' publisher, if any: their count may
        # have changed since the data they were created with was built).
        self.on_adopt: Callable[[], None] | None = None

    @property
    def _late(self) -> str:
        """A timed-out wait's message."""
        return f"{self._label} not acquired in time"

    @property
    def _listing_ops(self) -> list[Op[list[str]]]:
        """Every member's getChildren (a join proven alone needs none: built when listed)."""
        server_path = self._session.server_path
        return [get_children_op(server_path(m)) for m in self.members]

    def _listing_op(self, member: str, watched: bool = False) -> Op[list[str]]:
        """``member``'s getChildren; ``watched``: with the newcomers' watch, if we keep one
        (a join's listing: ``_newcomers.py``)."""
        server_path = self._session.server_path(member)
        if watched and self._newcomers is not None:
            return self._newcomers.listing_op(server_path)
        return get_children_op(server_path)

    # ---------------------------------------------------------------- identity

    def _new_guid(self) -> str:
        """A new GUID: a lock-delay contender's is tagged (``_delay_record.py``)."""
        if self._delay is not None and self._delay.seconds is not None:
            return delay_guid()
        return uuid.uuid4().hex

    def _set_guid(self, guid: str) -> None:
        self.guid = guid
        server_path = self._session.server_path
        self._prefixes = [
            server_path(join(m, node_prefix(guid, self._marker))) for m in self.members
        ]

    def retire_guid(self) -> None:
        """Take a new GUID once a node of ours is left to the janitor: a later lost create
        reply must never find (and adopt) the node the janitor is about to delete, and a GUID
        sweep must never hit a node of a later attempt."""
        self._set_guid(self._new_guid())

    def _adopt(self, paths: dict[str, Any], token: int, generation: int) -> None:
        self.nodes = {member: str(path).rpartition("/")[2] for member, path in paths.items()}
        self.token = token
        self.generation = generation
        if self.on_adopt is not None:
            self.on_adopt()

    def _server_nodes(self) -> list[str]:
        """The server paths of our nodes, one per member."""
        server_path = self._session.server_path
        return [server_path(join(member, self.nodes[member])) for member in self.members]

    def forget(self) -> None:
        """Released or lost: no node is ours any more."""
        self.nodes = {}
        self.token = None
        if self._newcomers is not None:
            self._newcomers.forget()
        if self._delay is not None:
            self._delay.versions = {}  # our records: deleted with the release, or left

    # ---------------------------------------------------------------- a create of unknown outcome

    async def _write_create(
        self,
        sent: Round,
        resolve: Callable[[Round, Replies], Awaitable[R]],
        unknown: tuple[type[Exception], ...] = (ConnectionLoss,),
    ) -> Replies | R:
        """Write ``sent``; returns its replies, or, if our create failed with one of
        ``unknown`` (its reply was lost), ``resolve(sent, replies)``: what it did, found out.

        The one place that records a create of ours whose outcome is unknown (``abandon``
        takes the record, and then sweeps our GUID): from the write until the create's
        reply, or until ``resolve`` returns. An exception leaves it recorded, except one of
        ``NOT_WRITTEN`` raised by the write (nothing was written)."""
        self._in_doubt = True
        try:
            results = await self._session.pipeline(
                sent.ops(), generation=sent.generation, wait_until=sent.deadline
            )
        except NOT_WRITTEN:
            self._in_doubt = False
            raise
        replies = sent.replies(results)
        if isinstance(replies.created, unknown):
            resolved = await resolve(sent, replies)
            self._in_doubt = False
            return resolved
        self._in_doubt = False
        return replies

    def _take_doubt(self) -> bool:
        """Whether a create of ours has an unknown outcome; the record is the caller's now."""
        in_doubt, self._in_doubt = self._in_doubt, False
        return in_doubt

    def check_held(self, member: str, children: list[str], holding: Holding) -> bool:
        """A listing of ``member`` that a holder of ``holding`` made for its own ends: False,
        and the holding lost, if it shows a peer that cannot order our nodes
        (``_newcomers.py``)."""
        if self._layout is None:
            return True
        try:
            self._layout.check(member, children, self.guid, self._label, held=True)
        except LayoutConflict as conflict:
            lose_to_newcomer(holding, conflict, self._janitor)
            return False
        return True

    # ---------------------------------------------------------------- reads and deletes

    async def list_children(
        self, member: str, generation: int | None, deadline: float | None, watched: bool = False
    ) -> list[str]:
        """The children of ``member``, none if it does not exist (a container reaped once
        empty); retried after a connection loss (a read). ``watched``: see ``_listing_op``."""
        session = self._session
        op = self._listing_op(member, watched)
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

    async def _delete_stale(self, names: Names) -> None:
        """Delete these nodes of ours, in one round trip; what fails is the janitor's."""
        session = self._session
        ops = [delete_op(session.server_path(join(m, name))) for m, name in names]
        for (member, name), result in zip(names, await session.pipeline(ops), strict=True):
            if isinstance(result, BaseException) and not isinstance(result, NoNodeError):
                self._janitor.delete(join(member, name), session.generation)
                self.retire_guid()


__all__ = (
    "NOT_WRITTEN",
    "Alone",
    "Guard",
    "Hint",
    "Joined",
    "Lead",
    "Listings",
    "Names",
    "OnJoin",
    "QueueState",
    "Replies",
    "Round",
)
