"""Our place in the queue engine's queues (``Place``), and the values its parts pass on.

``Place`` holds our identity (one GUID for our node in every member queue), the nodes we
have, the session generation they live in, and the one record of a create of ours whose
outcome is unknown (``write_create`` writes it, an abandon takes it), with the reads and
deletes every part makes of it. The parts of the engine (``_queue.py``) each own their
state and are given the place: joining (``_enqueue.py``), waiting (``_queue_wait.py``),
giving back (``_give_back.py``), lock-delay (``_delay.py``). What a step learns travels as
a value: a join's ``Joined``, a wait's hand-off, a grant's ``Lead`` for the next join.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any, NamedTuple, TypeVar

from aiozklock._acl import ACL
from aiozklock._exceptions import ConnectionLoss, InvalidArgument, NoNodeError, SessionExpired
from aiozklock._recipes._core._delay_record import delay_guid
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._names import LOCK_MARKER, node_prefix
from aiozklock._recipes._core._newcomers import NewcomerWatch
from aiozklock._recipes._core._retry import RETRY
from aiozklock._wire._frozen import fast_init
from aiozklock._wire._protocol import Op, delete_op, encode_acl, get_children_op
from aiozklock._wire._session import Session
from aiozklock._wire._validation import join

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
    of its queue when we were granted (see ``_alone.py``). ``written``: its release's
    delete was written; ``deleted``: its reply has come, and it succeeded."""

    __slots__ = ("deleted", "generation", "name", "token", "written")

    def __init__(self, name: str, generation: int, token: int) -> None:
        self.name = name
        self.generation = generation
        self.token = token
        self.written = self.deleted = False


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


class Place:
    """Our nodes, one per member path, under one GUID (see the module docstring).

    ``label`` names the recipe object in messages; ``tagged``: our GUIDs are a lock-delay
    contender's (``_delay_record.py``). Used by one task at a time (the recipe's local lock
    serialises its tasks); the session, janitor, label and ACL are read by every part."""

    # One per lock object, alive while it is: slots, and nothing kept that a message or a
    # listing can build when needed (a held lock's memory, issue 22).
    __slots__ = (
        "_in_doubt",
        "_marker",
        "_prefixes",
        "_tagged",
        "acl",
        "generation",
        "guid",
        "janitor",
        "label",
        "members",
        "nodes",
        "on_adopt",
        "session",
        "through",
        "token",
    )

    def __init__(
        self,
        session: Session,
        janitor: Janitor,
        members: Sequence[str],
        label: str,
        acl: tuple[ACL, ...],
        marker: str = LOCK_MARKER,
        tagged: bool = False,
    ) -> None:
        self.members = tuple(members)
        self._marker = marker  # our nodes are named <guid><marker><sequence>
        self._tagged = tagged
        self.acl = encode_acl(acl)  # our nodes', and the containers' we create
        self.session = session
        self.janitor = janitor
        self.label = label
        self.nodes: dict[str, str] = {}  # member -> our node's name, while queued or holding
        self._set_guid(self._new_guid())  # and our create prefixes (the hot path)
        self.generation = -1
        self.token: int | None = None
        self._in_doubt = False  # a create was written and its outcome is unknown
        # Called once nodes are ours (the local waiters' publisher, if any: their count may
        # have changed since the data they were created with was built).
        self.on_adopt: Callable[[], None] | None = None

    @property
    def late(self) -> str:
        """A timed-out wait's message."""
        return f"{self.label} not acquired in time"

    @property
    def prefixes(self) -> list[str]:
        """The server paths our creates name (the sequence appended), one per member."""
        return self._prefixes

    @property
    def marker(self) -> str:
        """What our node names carry between the GUID and the sequence."""
        return self._marker

    def listing_op(self, member: str, watch: NewcomerWatch | None = None) -> Op[list[str]]:
        """``member``'s getChildren; with ``watch``, the newcomers' watch (``_newcomers.py``)."""
        server_path = self.session.server_path(member)
        if watch is not None:
            return watch.listing_op(server_path)
        return get_children_op(server_path)

    # ---------------------------------------------------------------- identity

    def _new_guid(self) -> str:
        """A new GUID: a lock-delay contender's is tagged (``_delay_record.py``)."""
        return delay_guid() if self._tagged else uuid.uuid4().hex

    def _set_guid(self, guid: str) -> None:
        self.guid = guid
        server_path = self.session.server_path
        self._prefixes = [
            server_path(join(m, node_prefix(guid, self._marker))) for m in self.members
        ]

    def retire_guid(self) -> None:
        """Take a new GUID once a node of ours is left to the janitor: a later lost create
        reply must never find (and adopt) the node the janitor is about to delete, and a GUID
        sweep must never hit a node of a later attempt."""
        self._set_guid(self._new_guid())

    def adopt(self, paths: dict[str, Any], token: int, generation: int) -> None:
        """These nodes (member -> path or name) are ours now, with ``token``."""
        self.nodes = {member: str(path).rpartition("/")[2] for member, path in paths.items()}
        self.token = token
        self.generation = generation
        if self.on_adopt is not None:
            self.on_adopt()

    def server_nodes(self) -> list[str]:
        """The server paths of our nodes, one per member."""
        server_path = self.session.server_path
        return [server_path(join(member, self.nodes[member])) for member in self.members]

    def names(self) -> list[tuple[str, str]]:
        """Our nodes as (member path, node name) pairs, in member order."""
        return [(m, self.nodes[m]) for m in self.members]

    def forget(self) -> None:
        """Released or lost: no node is ours any more."""
        self.nodes = {}
        self.token = None

    # ---------------------------------------------------------------- a create of unknown outcome

    async def write_create(
        self,
        sent: Round,
        resolve: Callable[[Round, Replies], Awaitable[R]],
        unknown: tuple[type[Exception], ...] = (ConnectionLoss,),
    ) -> Replies | R:
        """Write ``sent``; returns its replies, or, if our create failed with one of
        ``unknown`` (its reply was lost), ``resolve(sent, replies)``: what it did, found out.

        The one place that records a create of ours whose outcome is unknown (an abandon
        takes the record, and then sweeps our GUID): from the write until the create's
        reply, or until ``resolve`` returns. An exception leaves it recorded, except one of
        ``NOT_WRITTEN`` raised by the write (nothing was written)."""
        self._in_doubt = True
        ops = sent.ops()
        try:
            results = await self.session.pipeline(
                ops, generation=sent.generation, wait_until=sent.deadline
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

    def take_doubt(self) -> bool:
        """Whether a create of ours has an unknown outcome; the record is the caller's now."""
        in_doubt, self._in_doubt = self._in_doubt, False
        return in_doubt

    # ---------------------------------------------------------------- reads and deletes

    async def list_children(
        self,
        member: str,
        generation: int | None,
        deadline: float | None,
        watch: NewcomerWatch | None = None,
    ) -> list[str]:
        """The children of ``member``, none if it does not exist (a container reaped once
        empty); retried after a connection loss (a read). ``watch``: see ``listing_op``."""
        op = self.listing_op(member, watch)
        try:
            return await RETRY.call(self.session, op, generation=generation, wait_until=deadline)
        except NoNodeError:
            return []

    async def list_all(self, generation: int, deadline: float | None) -> Listings:
        """Every member's children, in one round trip (repeated after a connection loss)."""
        ops = [self.listing_op(m) for m in self.members]
        results = await RETRY.pipeline(
            self.session, ops, generation=generation, wait_until=deadline
        )
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, NoNodeError):
                raise result
        listings = [[] if isinstance(r, NoNodeError) else r for r in results]
        return dict(zip(self.members, listings, strict=True))

    async def delete_stale(self, names: Names) -> None:
        """Delete these nodes of ours, in one round trip; what fails is the janitor's."""
        session = self.session
        ops = [delete_op(session.server_path(join(m, name)), ephemeral=True) for m, name in names]
        for (member, name), result in zip(names, await session.pipeline(ops), strict=True):
            if isinstance(result, BaseException) and not isinstance(result, NoNodeError):
                self.janitor.delete(join(member, name), session.generation)
                self.retire_guid()

    async def delete_all(self) -> None:
        """One member lost its node: delete the others, so all are enqueued again together."""
        await self.delete_stale(list(self.nodes.items()))
        self.nodes = {}


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
    "Place",
    "Replies",
    "Round",
)
