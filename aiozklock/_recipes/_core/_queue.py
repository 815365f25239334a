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

The parts, each a class ``Queue`` is made of, over the state they share (``_queue_state.py``):
``_enqueue.py`` (the create and a lost create reply), ``_queue_wait.py`` (the waits),
``_give_back.py`` (release and cleanup) and ``_delay.py`` (lock-delay: once first, a record
left by a holder that vanished without a release is waited out). This module is the acquire
loop.
"""

from __future__ import annotations

from collections.abc import Callable

from aiozklock._exceptions import ConnectionLoss, NodeExistsError, SessionExpired
from aiozklock._recipes._core._delay import Delaying
from aiozklock._recipes._core._delay_record import LockDelay, delay_seen
from aiozklock._recipes._core._enqueue import Enqueuing
from aiozklock._recipes._core._give_back import GivingBack
from aiozklock._recipes._core._holding import Holding
from aiozklock._recipes._core._names import node_prefix
from aiozklock._recipes._core._plan import Step, plan
from aiozklock._recipes._core._queue_state import (
    Alone,
    Guard,
    Hint,
    Joined,
    Lead,
    Listings,
    OnJoin,
    Replies,
    Round,
)
from aiozklock._recipes._core._queue_wait import Waiting
from aiozklock._recipes._core._retry import RETRY, refused
from aiozklock._wire._protocol import Created, CreateMode, create_op, exists_op
from aiozklock._wire._validation import join

_LOST_OR_THERE = (ConnectionLoss, NodeExistsError)

# A join proven alone: first, nothing stale, nothing behind.
_ALONE = Step(stale=(), requeue=False, held=True, waits={}, behind=0)


class Queue(Enqueuing, Waiting, GivingBack, Delaying):
    """Our nodes, one per member path, under one GUID (see the module docstring).

    ``label`` names the recipe object in messages. A queue is used by one task at a time (the
    recipe's local lock serialises its tasks).
    """

    __slots__ = ()

    async def take(
        self, deadline: float | None, data: Callable[[], bytes], on_join: OnJoin | None = None
    ) -> Holding:
        """Queue on every member and wait until first on all; returns the holding.

        ``data()`` gives our nodes' data at each enqueue; ``on_join(server_paths,
        generation)`` is told of our nodes once each join has created them, before any wait
        (a revocable recipe's watch). Raises ``LockTimeout`` at ``deadline``; after any
        failure or cancellation, ``abandon()`` leaves nothing queued.
        """
        self._deadline = deadline
        delay = self._delay
        if delay is not None:  # what this acquisition sees of lock-delay, from scratch
            if delay.seconds is None:
                self._delay = None
            else:
                delay.seen, delay.waited = False, 0.0
                delay.owed.clear()
        try:
            return await self._take(deadline, data, on_join)
        finally:
            if self._armed is not None:
                self._disarm()

    async def _take(
        self, deadline: float | None, data: Callable[[], bytes], on_join: OnJoin | None
    ) -> Holding:
        listings: Listings | None = None
        handed_off = False  # the last wait ended in a direct hand-off (nothing listed behind)
        watched = False  # the listings decided on carry the newcomers' watch
        while True:
            try:
                joined = None
                if listings is None:
                    joined = await self._join(deadline, data, on_join)
                    listings, watched = joined.listings, joined.watched
                if self._layout is not None:
                    for member, children in listings.items():  # fail closed: see _peers.py
                        self._layout.check(member, children, self.guid, self._label)
                step = self._decided(listings, joined)
                if step.held and not (step.stale or step.requeue):
                    if self._delay is None:
                        break
                    # Lock-delay's record writes are changes of the children: they would
                    # fire the watch, a listing per grant (``_newcomers.py``).
                    watched = False
                    if await self._honored(listings, deadline):
                        break
                    listings = await self._list_all(self.generation, deadline)  # changed
                elif step.stale or step.requeue:
                    listings = await self._drop(step, listings)  # still the watched ones
                    handed_off = False
                else:
                    handed_off = await self._wait(step.waits, listings, deadline)
                    watched = False
            except SessionExpired:
                # Our nodes' session is gone: queue again in the new one.
                listings, handed_off = None, False
        self._lead = self._lead_for(step, handed_off)
        # Contended: our next join most likely waits, and its watch would only fire unheard
        # (a notification per grant): it lists without one (``_newcomers.py``).
        self._contended = handed_off or bool(step.behind)
        if step.mark:
            self._mark(data())  # the bytes our node was created with
        assert self.token is not None
        nodes = tuple([join(member, self.nodes[member]) for member in self.members])
        holding = Holding(nodes, self.generation, self.token)
        if self._newcomers is not None:
            self._newcomers.hold(holding, watched, self.guid)
        return holding

    async def _join(
        self, deadline: float | None, data: Callable[[], bytes], on_join: OnJoin | None
    ) -> Joined:
        """Enqueue (and check the recipe's guard), with what our last grant left for this
        join (taken: for this join only); returns what the join learned."""
        lead, self._lead = self._lead, None
        joined = await self._enqueue(deadline, data, lead, on_join)
        if self._guard is not None:
            await self._guard.check(joined.guarded, deadline)
        return joined

    def _decided(self, listings: Listings, joined: Joined | None) -> Step:
        """The next step from ``listings``; right after a join (``joined``), also how many
        are ahead. Notes whether they show lock-delay (see ``_delay.py``)."""
        if delay_seen(listings.values(), self.guid):
            if self._delay is None:
                self._delay = LockDelay(None)  # honor the record: for this acquisition
            self._delay.seen = True
        if joined is not None and joined.proven:
            self.ahead = 0
            return _ALONE  # no other node: nothing to decide (see _enqueue.py)
        step = plan(listings, self.nodes, self.guid, self._decide)
        if joined is None:
            return step
        if joined.followed is not None:
            self.ahead = joined.followed.behind  # counted when we were last granted
        else:  # (no waits when held at once: the hot path)
            waits = step.waits
            self.ahead = max([d.ahead for d in waits.values()]) if waits else 0
        return step

    def _lead_for(self, step: Step, handed_off: bool) -> Lead:
        """Held: what the next join may use (a hint, or our node proven alone)."""
        if step.newest is not None:
            return Hint(step.newest, step.behind or 0, self.generation)
        if step.behind == 0 and not handed_off and self._delay is None:
            # Nothing behind us, as listed. (After a hand-off nobody listed what is behind:
            # a proof would then likely fail and cost a listing. It stays sound either way.)
            assert self.token is not None
            return Alone(self.nodes[self.members[0]], self.generation, self.token)
        return None

    async def _drop(self, step: Step, listings: Listings) -> Listings | None:
        """Not held, with stale nodes of ours or one missing: delete our stale nodes, or
        leave every queue (to enqueue again). Returns the listings to decide on next, None
        to enqueue again."""
        if step.stale:
            await self._delete_stale(step.stale)
            for member, name in step.stale:
                listings[member] = [c for c in listings[member] if c != name]
            return listings
        if len(self.members) > 1:
            await self._delete_all_of_ours()  # never re-create one member alone
        return None

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
        sent = Round(generation, deadline, op)
        token = None
        while token is None:  # None: it was not created, create it again
            # A node there already may be ours: from an attempt whose reply was lost.
            outcome = await self._write_create(sent, self._owned_at, _LOST_OR_THERE)
            if not isinstance(outcome, Replies):
                token = outcome  # resolved by reading the node's owner
            elif isinstance(outcome.created, Created):
                token = outcome.created.stat.czxid
            else:
                assert isinstance(outcome.created, BaseException)
                raise outcome.created
        self._adopt({member: name}, token, generation)
        self.ahead = 0
        return Holding((join(member, name),), generation, token)

    async def _owned_at(self, sent: Round, replies: Replies) -> int | None:
        """The token of the node ``take_at`` meant to create, if it exists and our session
        owns it; None if it does not exist. Raises the create's failure if it is another
        session's."""
        session = self._session
        op = exists_op(sent.create.path)
        stat = await RETRY.call(session, op, generation=sent.generation, wait_until=sent.deadline)
        if stat is None:
            return None
        if stat.ephemeral_owner != session.session_id:
            assert isinstance(replies.created, BaseException)
            raise replies.created
        return stat.czxid


__all__ = ("Guard", "Listings", "OnJoin", "Queue", "refused")
