"""Joining the queues: our create and every member's listing in one round trip, and the
resolution of a create whose reply was lost.

* One ``create2`` (or one ``multi`` of creates, for several members) pipelined with the
  ``getChildren`` of every member: the session's requests run in order, so the listings
  already contain our nodes. A missing member path costs one more round trip: its container
  goes in the same write as the retried create.
* The last release's deletes were written when it returned (``_give_back.py``), so they
  are ahead of this create in the session's order; a lost create reply never adopts
  their nodes (``Round.released``).
* A lost create reply is resolved by GUID, never by a blind resend: a node is adopted only
  if its ephemeral owner is our current session, and only a whole node set (one node per
  member); duplicates are deleted.
* A join that follows a hint (``Hint``: the newest node behind ours when we were last
  granted, in a queue where every node before ours blocks us) pipelines an existence watch
  on that node instead of the listing: our new node most likely queues right after it, so
  the listing is deferred until it is gone, when one is needed anyway to know we are first
  (one request less per grant under contention). The hint is only trusted as far as the
  server confirms it: it must exist and be older than our new node; otherwise we list.
* A join proven alone (``Alone``) sends no listing at all: our last holding was the queue's
  only node and nothing but our own session's writes came between its create and ours
  (``_alone.py``: the proof, and when it is tried).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiozklock._exceptions import (
    NodeExistsError,
    NoNodeError,
    SessionExpired,
    shorten,
)
from aiozklock._recipes._core._alone import Backoff, holds, worth_trying
from aiozklock._recipes._core._names import in_sequence_order, nodes_of, sequence_of
from aiozklock._recipes._core._newcomers import NewcomerWatch
from aiozklock._recipes._core._place import (
    Alone,
    Guard,
    Hint,
    Joined,
    Lead,
    Listings,
    Names,
    OnJoin,
    Place,
    Replies,
    Round,
)
from aiozklock._recipes._core._retry import PARENT_ATTEMPTS, RETRY, refused
from aiozklock._recipes._core._waiting import Wakeup
from aiozklock._wire._protocol import (
    Created,
    CreateMode,
    MultiCreate,
    MultiResult,
    Op,
    Stat,
    container_path_ops,
    create_op,
    exists_op,
    multi_op,
)
from aiozklock._wire._validation import join

# The logger documented for "adopted after a lost create reply" (docs/observability.md).
log = logging.getLogger("aiozklock._recipes._core._queue")

_EPHEMERAL_SEQUENTIAL = CreateMode.EPHEMERAL | CreateMode.SEQUENTIAL


@dataclass(slots=True)
class _Containers:
    """The container creates written with our create while member paths are missing: a
    member's own path at first, its whole chain once that failed too; ``attempts`` left."""

    ops: list[Op[Any]] = field(default_factory=list)
    whole_chain: set[str] = field(default_factory=set)
    attempts: int = PARENT_ATTEMPTS


@dataclass(slots=True)
class _Follow:
    """A join that follows ``hint``: the existence watch on its node (``op``), armed on
    ``wakeup``."""

    hint: Hint
    wakeup: Wakeup
    op: Op[Any]


class Joining:
    """Joining the queues at ``place`` (see the module docstring), with the recipe's
    ``guard`` (if any) and the newcomers' ``watch`` (if we keep one), and what our last
    grant and release left for the next join: the ``Lead`` (a hint, or our node proven
    alone), whether that grant was contended, and the nodes of that release."""

    __slots__ = (
        "_backoff",
        "_contended",
        "_create",
        "_guard",
        "_lead",
        "_place",
        "_released",
        "_watch",
    )

    def __init__(self, place: Place, guard: Guard | None, watch: NewcomerWatch | None) -> None:
        self._place = place
        self._guard = guard
        self._watch = watch
        self._lead: Lead = None
        self._contended = False  # our last grant came by a hand-off, or had nodes behind
        # The nodes of our last release written without waiting (``Round.released``).
        self._released: Names = ()
        # Our last create (its prefix, data and request): the next one is nearly always the
        # same request (an Op is never changed once made, and a reply is matched by xid).
        self._create: tuple[str, bytes, Op[Any]] | None = None
        self._backoff: Backoff | None = None  # made at the first failed proof

    def granted(self, lead: Lead, contended: bool) -> None:
        """Granted: what the next join may use (``lead``), and whether the grant was
        ``contended`` (a hand-off, or nodes behind us)."""
        self._lead, self._contended = lead, contended

    def alone(self, name: str) -> Alone | None:
        """Our node ``name`` as our grant proved it alone, if it did (its release records
        its delete there, for the next join's proof)."""
        lead = self._lead
        return lead if isinstance(lead, Alone) and lead.name == name else None

    def released(self, names: Names) -> None:
        """The deletes of these nodes of ours were written: never adopt them."""
        self._released = names

    async def join(
        self, deadline: float | None, data: Callable[[], bytes], on_join: OnJoin | None
    ) -> Joined:
        """Enqueue, and check the recipe's guard, with what our last grant left for this
        join (taken: for this join only); returns what the join learned."""
        lead, self._lead = self._lead, None
        joined = await self._enqueue(deadline, data, lead, on_join)
        if self._guard is not None:
            await self._guard.check(joined.guarded, deadline)
        return joined

    def _listing_op(self, member: str) -> Op[list[str]]:
        """A join's listing: with the newcomers' watch unless our last grant was contended
        (``_newcomers.py``)."""
        return self._place.listing_op(member, None if self._contended else self._watch)

    async def _enqueue(
        self,
        deadline: float | None,
        data: Callable[[], bytes],
        lead: Lead,
        on_join: OnJoin | None = None,
    ) -> Joined:
        """Create our nodes and list the queues, in one round trip (a join that follows a
        hint watches it instead and lists once it is gone; one proven alone lists nothing:
        see the module docstring); ``lead``: what our last grant left for it. Returns what
        the join learned.

        Raises what the create or a container create failed with (``NoNodeError`` once
        the container attempts are spent), and what ``session.pipeline`` raises when
        nothing was written."""
        place = self._place
        containers: _Containers | None = None  # once a member path is missing
        guard = None if self._guard is None else self._guard.op
        released, self._released = self._released, ()
        while True:
            generation = place.session.generation
            place.nodes = {}
            create = self._create_op(data())
            parents = () if containers is None else containers.ops
            follow = self._follow(lead, generation)
            proof = self._proof(lead, generation)
            lead = None  # for this join's first write only
            reads = (
                []
                if proof is not None
                else [self._listing_op(m) for m in place.members]
                if follow is None
                else [follow.op]
            )
            sent = Round(generation, deadline, create, released, parents, guard, reads)
            try:
                outcome = await self._write_join(sent)
                if isinstance(outcome, Replies):
                    if self._adopt_created(outcome.created, generation):
                        if on_join is not None:  # before any wait (_after_follow's)
                            on_join(place.server_nodes(), generation)
                        return await self._joined(outcome, proof, follow, deadline)
                    containers = self._after_failure(sent, outcome, containers)
                elif outcome is not None:
                    if on_join is not None:
                        on_join(place.server_nodes(), place.generation)
                    return outcome  # a lost reply's nodes, found and adopted
                # Otherwise nothing of ours was created: create again.
            finally:
                if follow is not None:
                    follow.wakeup.close()  # its watch fires unheard if not waited on

    async def _write_join(self, sent: Round) -> Replies | Joined | None:
        """Write ``sent``: its replies, or a lost create reply's nodes found and adopted, or
        None if nothing of ours was created (a lost reply's create made nothing, or the
        session changed before the write: bind to the new one)."""
        try:
            return await self._place.write_create(sent, self._resolve_lost_create)
        except SessionExpired:
            return None

    async def _joined(
        self,
        replies: Replies,
        proof: Alone | None,
        follow: _Follow | None,
        deadline: float | None,
    ) -> Joined:
        """Our create succeeded (our nodes adopted): what the join learned."""
        if proof is not None:
            return await self._after_proof(proof, replies.guarded, deadline)
        if follow is not None:
            return await self._after_follow(follow, replies, deadline)
        listings = await self._listed(replies.listings, self._place.generation, deadline)
        # Watched if every listing came with our create (one read again carries no watch).
        watched = (
            self._watch is not None
            and not self._contended
            and all(isinstance(listing, list) for listing in replies.listings)
        )
        return Joined(listings, replies.guarded, watched=watched)

    async def _listed(
        self, listings: Sequence[object], generation: int, deadline: float | None
    ) -> Listings:
        """The listings that came with our create, those that failed read again."""
        listed: Listings = {}
        for member, listing in zip(self._place.members, listings, strict=True):
            if isinstance(listing, list):
                listed[member] = listing
            else:
                listed[member] = await self._place.list_children(member, generation, deadline)
        return listed

    def _proof(self, lead: Lead, generation: int) -> Alone | None:
        """``lead`` if this join may be proven alone (``_alone.py``): one member, no guard,
        our last holding proven alone in this session, its release's delete written, and
        worth trying. The proof itself needs the replies (``_after_proof``)."""
        if (
            isinstance(lead, Alone)
            and lead.generation == generation
            and lead.written
            and self._guard is None
            and len(self._place.members) == 1
            and worth_trying(lead, self._place.session, self._backoff)
        ):
            return lead
        return None

    async def _after_proof(self, alone: Alone, guarded: object, deadline: float | None) -> Joined:
        """After a join that may be proven alone: our node alone if the proof holds
        (``_alone.holds``); else the queue listed."""
        place = self._place
        member = place.members[0]
        ours = place.nodes[member]
        proven = holds(alone, ours, place.token, place.session)
        if not proven and self._backoff is None:
            self._backoff = Backoff()
        if self._backoff is not None:
            self._backoff.record(proven)
        if proven:
            return Joined({member: [ours]}, guarded, proven=True)
        listing = await place.list_children(member, place.generation, deadline, self._watch)
        # A proof follows a grant with nothing behind it: uncontended, watched.
        return Joined({member: listing}, guarded, watched=self._watch is not None)

    def _follow(self, lead: Lead, generation: int) -> _Follow | None:
        """The existence watch to write instead of the listing, if ``lead`` is a hint that
        can be followed (one member, no guard, the hint's session)."""
        if not isinstance(lead, Hint) or lead.generation != generation or self._guard is not None:
            return None
        session = self._place.session
        wakeup = Wakeup(session)
        path = session.server_path(join(self._place.members[0], lead.name))
        return _Follow(lead, wakeup, exists_op(path, wakeup.watch(path)))

    async def _after_follow(
        self, follow: _Follow, replies: Replies, deadline: float | None
    ) -> Joined:
        """After a join that followed a hint: wait until its node is gone if it is there and
        older than ours (then it is ahead of us: we cannot be first before it is gone; the
        join ``followed`` it), then list the queue to decide on."""
        place = self._place
        member, generation = place.members[0], place.generation
        hinted, ours = follow.hint.name, place.nodes[member]
        followed = None
        if isinstance(replies.listings[0], Stat) and _older(hinted, ours):
            followed = follow.hint
            await follow.wakeup.wait(deadline, place.late)
        # A hint follows a grant with nodes behind it (contended): watched only if not.
        watch = None if self._contended else self._watch
        listing = await place.list_children(member, generation, deadline, watch)
        watched = watch is not None
        return Joined({member: listing}, replies.guarded, followed=followed, watched=watched)

    def _create_op(self, data: bytes) -> Op[Any]:
        """Our creates: one create, or one transaction of them (a multi-lock)."""
        place = self._place
        acl, prefixes, strip = place.acl, place.prefixes, place.session.client_path
        if len(prefixes) == 1:
            prefix, last = prefixes[0], self._create
            if last is not None and last[0] == prefix and last[1] == data:
                return last[2]
            op = create_op(prefix, data, _EPHEMERAL_SEQUENTIAL, strip, acl=acl)
            self._create = (prefix, data, op)
            return op
        return multi_op([MultiCreate(p, data, _EPHEMERAL_SEQUENTIAL, acl) for p in prefixes], strip)

    def _adopt_created(self, created: object, generation: int) -> bool:
        """Record our nodes from a create's reply; False if it failed."""
        place = self._place
        if isinstance(created, Created):
            place.adopt({place.members[0]: created.path}, created.stat.czxid, generation)
            return True
        if isinstance(created, MultiResult) and created.ok:
            paths = dict(zip(place.members, created.results, strict=True))
            place.adopt(paths, created.zxid, generation)  # the transaction's zxid: the czxid
            return True
        return False

    # ---------------------------------------------------------------- a failed create

    def _after_failure(
        self, sent: Round, replies: Replies, containers: _Containers | None
    ) -> _Containers | None:
        """Our create failed: the container creates to write with the next one (a member
        path is missing), or the same if nothing was created. Raises the failure
        otherwise (a container create's, if one was refused)."""
        failed, failure = self._failure_of(replies.created)
        if isinstance(failure, SessionExpired):
            return containers  # nothing was created
        if isinstance(failure, NoNodeError) and refused(replies.parents) is None:
            containers = _Containers() if containers is None else containers
            if containers.attempts > 0:
                missing = self._missing(failed, replies.listings)
                containers.whole_chain |= self._chain_needed(missing, sent, replies)
                containers.ops = self._parent_ops(missing, containers.whole_chain)
                containers.attempts -= 1
                return containers
        for result in replies.parents:
            if isinstance(result, BaseException) and not isinstance(result, NodeExistsError):
                raise result
        raise failure

    def _failure_of(self, created: object) -> tuple[str, BaseException]:
        """Which member's create failed, and why."""
        if isinstance(created, MultiResult):
            failure = created.failure
            assert failure is not None
            return self._place.members[failure[0]], failure[1]
        assert isinstance(created, BaseException)
        return self._place.members[0], created

    def _missing(self, failed: str, listings: Sequence[object]) -> list[str]:
        """The member whose create failed, and any whose listing says it is missing (the
        listing may also find a path another session created meanwhile)."""
        members = self._place.members
        padded = [*listings, *[None] * len(members)]  # a join proven alone lists nothing
        return [
            member
            for member, listing in zip(members, padded)  # noqa: B905 (padded is longer)
            if member == failed or isinstance(listing, NoNodeError)
        ]

    def _chain_needed(self, missing: list[str], sent: Round, replies: Replies) -> set[str]:
        """Missing members whose own container create failed NoNode: their ancestors too."""
        failed = {
            op.path
            for op, result in zip(sent.parents, replies.parents, strict=True)
            if isinstance(result, NoNodeError)
        }
        server_path = self._place.session.server_path
        return {m for m in missing if server_path(m) in failed}

    def _parent_ops(self, missing: list[str], whole_chain: set[str]) -> list[Op[Any]]:
        """Container creates for the missing members: only the member path at first (its
        ancestors usually exist, and even a create that fails NodeExists is a logged
        transaction), its whole chain (chroot included) if its parent is missing too."""
        session, acl = self._place.session, self._place.acl
        ops: dict[str, Op[Any]] = {}
        data = b"" if self._guard is None else self._guard.container_data
        for member in missing:
            chain = container_path_ops(
                session.server_path(member), session.client_path, acl=acl, data=data
            )
            for op in chain if member in whole_chain else chain[-1:]:
                ops.setdefault(op.path, op)
        return list(ops.values())

    # ---------------------------------------------------------------- a lost create reply

    async def _resolve_lost_create(self, sent: Round, replies: Replies) -> Joined | None:
        """After a ConnectionLoss on our create: find our nodes by GUID (not those of our
        last release, still there if its deletes were lost too: they are the janitor's).
        Returns what the join learned if a node set of ours was adopted, None to create
        again."""
        try:
            listings = await self._recover_create(sent)
        except SessionExpired:
            return None  # the session and any node it made are gone
        return None if listings is None else Joined(listings, replies.guarded)

    async def _recover_create(self, sent: Round) -> Listings | None:
        place = self._place
        session, generation, members = place.session, sent.generation, place.members
        listings = await place.list_all(generation, sent.deadline)
        ours = [
            (m, name)
            for m in members
            for name in nodes_of(listings[m], place.guid, place.marker)
            if (m, name) not in sent.released
        ]
        # Without every answer we cannot tell "not created" from "reply lost": asked again.
        stats = await RETRY.pipeline(
            session,
            [exists_op(session.server_path(join(m, name))) for m, name in ours],
            generation=generation,
            wait_until=sent.deadline,
        )
        found = list(zip(ours, stats, strict=True))
        adopted, token, duplicates = _pick(found, len(members), session.session_id)
        if duplicates:
            await place.delete_stale(duplicates)
        if not adopted:
            return None
        place.adopt(adopted, token, generation)
        log.info("%s: adopted %s after a lost create reply", place.label, shorten(str(adopted)))
        gone = set(duplicates)
        return {m: [c for c in listings[m] if (m, c) not in gone] for m in members}


def _older(name: str, ours: str) -> bool:
    """Whether node ``name`` was created before ``ours`` in the same queue."""
    return in_sequence_order({name: sequence_of(name), ours: sequence_of(ours)})[0] == name


def _pick(
    found: list[tuple[tuple[str, str], object]], members: int, session_id: int
) -> tuple[dict[str, str], int, list[tuple[str, str]]]:
    """Of the nodes of ours ``found`` after a lost create reply (oldest first, each with
    its ``exists`` reply): the node set to adopt (per member, the newest one our session
    owns; every member's, or none), its token, and the others, to delete."""
    adopted: dict[str, str] = {}
    token = 0
    duplicates = []
    # Newest first: the create whose reply we lost made the newest node of ours.
    for (member, name), stat in reversed(found):
        if not isinstance(stat, Stat):
            continue
        if member not in adopted and stat.ephemeral_owner == session_id:
            adopted[member] = name
            token = stat.czxid
        else:
            duplicates.append((member, name))
    if adopted and len(adopted) < members:
        duplicates += list(adopted.items())  # a partial set cannot be ours: queue anew
        adopted = {}
    return adopted, token, duplicates


__all__ = ("Joining",)
