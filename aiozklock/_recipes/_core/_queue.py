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

The parts, each owning its state, given the place in the queues (``Place``,
``_place.py``) and passing what they learn on as values: joining (``Joining``,
``_enqueue.py``: the create and a lost create reply, what the last grant left for the next
join), waiting (``Waiting``, ``_queue_wait.py``), giving back (``_give_back.py``: release
and cleanup) and lock-delay (``Delay``, ``_delay.py``: once first, a record left by a
holder that vanished without a release is waited out). This module is the acquire, in a
few named steps (``take``: join, decide, then wait, drop or honor the lock-delay, until
held), and the release.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from aiozklock._acl import ACL
from aiozklock._exceptions import ConnectionLoss, LayoutConflict, NodeExistsError, SessionExpired
from aiozklock._recipes._core._delay import Delay
from aiozklock._recipes._core._delay_record import delay_seen
from aiozklock._recipes._core._enqueue import Joining
from aiozklock._recipes._core._give_back import delete_bounded, delete_own, delete_own_nowait, mark
from aiozklock._recipes._core._holding import Holding
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._names import LOCK_MARKER, node_prefix
from aiozklock._recipes._core._newcomers import NewcomerWatch, lose_to_newcomer
from aiozklock._recipes._core._peers import Layout
from aiozklock._recipes._core._place import (
    Alone,
    Guard,
    Hint,
    Joined,
    Lead,
    Listings,
    OnJoin,
    Place,
    Replies,
    Round,
)
from aiozklock._recipes._core._plan import Decide, Step, plan
from aiozklock._recipes._core._queue_wait import Waiting
from aiozklock._recipes._core._retry import RETRY, refused
from aiozklock._wire._now import uptime
from aiozklock._wire._protocol import Created, CreateMode, MultiDelete, create_op, exists_op
from aiozklock._wire._session import Session
from aiozklock._wire._validation import join

_LOST_OR_THERE = (ConnectionLoss, NodeExistsError)

# A join proven alone: first, nothing stale, nothing behind.
_ALONE = Step(stale=(), requeue=False, held=True, waits={}, behind=0)


class Queue:
    """Our nodes, one per member path, under one GUID (see the module docstring): the
    place, and the parts that join, wait, give back and honor lock-delay there.

    ``label`` names the recipe object in messages; ``decide`` is the recipe's decision
    function; ``guard``: its check of the member path, made with every join; ``layout``:
    what we write, to refuse peers that cannot order it (None: no check); ``lock_delay``:
    seconds a grant after our node vanished without a release waits (None: none asked; a
    record found on the path is honored anyway). A queue is used by one task at a time (the
    recipe's local lock serialises its tasks).
    """

    __slots__ = (
        "__weakref__",
        "_decide",
        "_delay",
        "_joining",
        "_layout",
        "_newcomers",
        "_place",
        "_waiting",
        "ahead",
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
        lock_delay: float | None = None,
    ) -> None:
        tagged = lock_delay is not None  # a lock-delay contender's GUIDs are tagged
        place = self._place = Place(session, janitor, members, label, acl, marker, tagged)
        self._decide = decide
        self._layout = layout  # peers that cannot order our nodes are refused (None: no check)
        # ... and a holder is told of one that comes after its grant (``_newcomers.py``).
        self._newcomers = (
            None if layout is None else NewcomerWatch(session, members, layout, label, janitor)
        )
        self._joining = Joining(place, guard, self._newcomers)
        self._waiting: Waiting | None = None  # made with the first wait (held locks: memory)
        # Lock-delay: ours, or a record's we honor (made when one is seen, for an acquire).
        self._delay = None if lock_delay is None else Delay(place, lock_delay)
        self.ahead = 0  # contenders queued before us when we last joined (for telemetry)

    # ---------------------------------------------------------------- what recipes read

    @property
    def place(self) -> Place:
        """Our place in the queues (its nodes, generation, token; ``on_adopt``)."""
        return self._place

    @property
    def guid(self) -> str:
        """The GUID our nodes are named with now."""
        return self._place.guid

    @property
    def members(self) -> tuple[str, ...]:
        """The member paths, one queue each."""
        return self._place.members

    @property
    def nodes(self) -> dict[str, str]:
        """Member path -> our node's name, while queued or holding."""
        return self._place.nodes

    @property
    def lock_delay(self) -> float | None:
        """The lock-delay our grants ask for (seconds), None without one."""
        return None if self._delay is None else self._delay.seconds

    @property
    def delay_waited(self) -> float:
        """Seconds the last acquisition waited for a lock-delay (0.0 if none)."""
        return 0.0 if self._delay is None else self._delay.waited

    # ---------------------------------------------------------------- the acquire

    async def take(
        self, deadline: float | None, data: Callable[[], bytes], on_join: OnJoin | None = None
    ) -> Holding:
        """Queue on every member and wait until first on all; returns the holding.

        ``data()`` gives our nodes' data at each join; ``on_join(server_paths,
        generation)`` is told of our nodes once each join has created them, before any wait
        (a revocable recipe's watch). Raises ``LockTimeout`` at ``deadline``; after any
        failure or cancellation, ``abandon(deadline)`` leaves nothing queued.

        The steps: join (create our nodes, list the queues), decide (``plan``: first on
        all?), then, until held: wait for a predecessor, drop our stale nodes, or, once
        first, honor a lock-delay; held, the grant is kept for the next join."""
        delay = self._delay
        if delay is not None:  # what this acquisition sees of lock-delay, from scratch
            if delay.seconds is None:
                self._delay = None
            else:
                delay.begin()
        try:
            step, handed_off, watched = await self._until_first(deadline, data, on_join)
        finally:
            if self._waiting is not None:
                self._waiting.disarm()
        return self._held(step, handed_off, watched, data)

    async def _until_first(
        self, deadline: float | None, data: Callable[[], bytes], on_join: OnJoin | None
    ) -> tuple[Step, bool, bool]:
        """Join, decide, and wait (or drop, or honor lock-delay) until first on every
        member; returns the deciding step, whether the last wait ended in a direct hand-off
        (nothing listed behind), and whether its listings carry the newcomers' watch."""
        place = self._place
        listings: Listings | None = None
        handed_off = False
        watched = False
        while True:
            try:
                joined = None
                if listings is None:
                    joined = await self._joining.join(deadline, data, on_join)
                    listings, watched = joined.listings, joined.watched
                # A join proven alone listed only our node: no peer to check.
                if self._layout is not None and not (joined is not None and joined.proven):
                    for member, children in listings.items():  # fail closed: see _peers.py
                        self._layout.check(member, children, place.guid, place.label)
                step = self._decided(listings, joined)
                if step.held and not (step.stale or step.requeue):
                    if self._delay is None:
                        return step, handed_off, watched
                    # Lock-delay's record writes are changes of the children: they would
                    # fire the watch, a listing per grant (``_newcomers.py``).
                    watched = False
                    if await self._delay.honored(listings, deadline):
                        return step, handed_off, watched
                    listings = await place.list_all(place.generation, deadline)  # changed
                elif step.stale or step.requeue:
                    listings = await self._drop(step, listings)  # still the watched ones
                    handed_off = False
                else:
                    handed_off = await self._wait(step, listings, deadline)
                    watched = False
            except SessionExpired:
                # Our nodes' session is gone: queue again in the new one.
                listings, handed_off = None, False

    async def _wait(self, step: Step, listings: Listings, deadline: float | None) -> bool:
        """Wait for a predecessor ``step`` names (updating ``listings``); whether the wait
        ended in a direct hand-off (``_queue_wait.py``)."""
        if self._waiting is None:
            self._waiting = Waiting(self._place)
        return await self._waiting.wait(step.waits, listings, deadline)

    def _held(
        self, step: Step, handed_off: bool, watched: bool, data: Callable[[], bytes]
    ) -> Holding:
        """First on every member: the holding, and what the grant leaves for the next join."""
        place = self._place
        # Contended: our next join most likely waits, and its watch would only fire unheard
        # (a notification per grant): it lists without one (``_newcomers.py``).
        self._joining.granted(self._lead_for(step, handed_off), handed_off or bool(step.behind))
        if step.mark:
            mark(place, data())  # the bytes our node was created with
        assert place.token is not None
        nodes = tuple([join(member, place.nodes[member]) for member in place.members])
        holding = Holding(nodes, place.generation, place.token)
        if self._newcomers is not None:
            self._newcomers.hold(holding, watched, place.guid)
        return holding

    def _decided(self, listings: Listings, joined: Joined | None) -> Step:
        """The next step from ``listings``; right after a join (``joined``), also how many
        are ahead. Notes whether they show lock-delay (see ``_delay.py``)."""
        place = self._place
        if delay_seen(listings.values(), place.guid):
            if self._delay is None:
                self._delay = Delay(place, None)  # honor the record: for this acquisition
            self._delay.see()
        if joined is not None and joined.proven:
            self.ahead = 0
            return _ALONE  # no other node: nothing to decide (see _enqueue.py)
        step = plan(listings, place.nodes, place.guid, self._decide)
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
        place = self._place
        if step.newest is not None:
            return Hint(step.newest, step.behind or 0, place.generation)
        if step.behind == 0 and not handed_off and self._delay is None:
            # Nothing behind us, as listed. (After a hand-off nobody listed what is behind:
            # a proof would then likely fail and cost a listing. It stays sound either way.)
            assert place.token is not None
            node = place.nodes[place.members[0]]
            return Alone(node, place.generation, place.token)
        return None

    async def _drop(self, step: Step, listings: Listings) -> Listings | None:
        """Not held, with stale nodes of ours or one missing: delete our stale nodes, or
        leave every queue (to enqueue again). Returns the listings to decide on next, None
        to enqueue again."""
        if step.stale:
            await self._place.delete_stale(step.stale)
            for member, name in step.stale:
                listings[member] = [c for c in listings[member] if c != name]
            return listings
        if len(self._place.members) > 1:
            await self._place.delete_all()  # never re-create one member alone
        return None

    async def take_at(
        self, sequence: str, generation: int, deadline: float | None, data: bytes
    ) -> Holding:
        """Hold at once with a plain ephemeral node named with another node's ``sequence``
        suffix, in session ``generation``: its place in the queue (a read lock's node taken
        by its write lock's holder: Curator's downgrade). Raises ``SessionExpired`` if that
        session is gone; a lost reply is resolved by reading the node's owner."""
        place = self._place
        session, member = place.session, place.members[0]
        name = f"{node_prefix(place.guid, place.marker)}{sequence}"
        path = session.server_path(join(member, name))
        op = create_op(path, data, CreateMode.EPHEMERAL, session.client_path, acl=place.acl)
        sent = Round(generation, deadline, op)
        token = None
        while token is None:  # None: it was not created, create it again
            # A node there already may be ours: from an attempt whose reply was lost.
            outcome = await place.write_create(sent, self._owned_at, _LOST_OR_THERE)
            if not isinstance(outcome, Replies):
                token = outcome  # resolved by reading the node's owner
            elif isinstance(outcome.created, Created):
                token = outcome.created.stat.czxid
            else:
                assert isinstance(outcome.created, BaseException)
                raise outcome.created
        place.adopt({member: name}, token, generation)
        self.ahead = 0
        return Holding((join(member, name),), generation, token)

    async def _owned_at(self, sent: Round, replies: Replies) -> int | None:
        """The token of the node ``take_at`` meant to create, if it exists and our session
        owns it; None if it does not exist. Raises the create's failure if it is another
        session's."""
        session = self._place.session
        op = exists_op(sent.create.path)
        stat = await RETRY.call(session, op, generation=sent.generation, wait_until=sent.deadline)
        if stat is None:
            return None
        if stat.ephemeral_owner != session.session_id:
            assert isinstance(replies.created, BaseException)
            raise replies.created
        return stat.czxid

    # ---------------------------------------------------------------- reads for a holder

    async def list_children(
        self, member: str, generation: int | None, deadline: float | None
    ) -> list[str]:
        """The children of ``member`` (none if it does not exist); retried after a
        connection loss."""
        return await self._place.list_children(member, generation, deadline)

    def check_held(self, member: str, children: list[str], holding: Holding) -> bool:
        """A listing of ``member`` that a holder of ``holding`` made for its own ends: False,
        and the holding lost, if it shows a peer that cannot order our nodes
        (``_newcomers.py``)."""
        if self._layout is None:
            return True
        place = self._place
        try:
            self._layout.check(member, children, place.guid, place.label, held=True)
        except LayoutConflict as conflict:
            lose_to_newcomer(holding, conflict, place.janitor)
            return False
        return True

    # ---------------------------------------------------------------- giving our place back

    async def release(self) -> None:
        """Delete our nodes (and our lock-delay records): shielded; returns once they are
        gone (or their session is)."""
        self._stop_watching()
        await delete_own(self._place, self._records())

    def release_nowait(self) -> None:
        """Write the deletes of our nodes (and our lock-delay records) now, and return
        without their replies (``_give_back.delete_own_nowait``)."""
        self._stop_watching()
        self._release_nowait()

    def _release_nowait(self) -> None:
        place = self._place
        alone = self._joining.alone(place.nodes[place.members[0]]) if place.nodes else None
        released = delete_own_nowait(place, self._records(), alone)
        if released is not None:
            self._joining.released(released)  # never adopted after a lost create reply

    def _stop_watching(self) -> None:
        """Our holding ends: our own deletes must not read as a newcomer's change."""
        if self._newcomers is not None:
            self._newcomers.forget()

    def _records(self) -> list[MultiDelete]:
        """The deletes of the lock-delay records our grant wrote (none without one)."""
        return [] if self._delay is None else self._delay.records()

    def forget(self) -> None:
        """Released or lost: no node is ours any more."""
        self._place.forget()
        self._stop_watching()
        if self._delay is not None:
            self._delay.forget()

    def retire_guid(self) -> None:
        """A node of ours was left to the janitor: a new GUID (``Place.retire_guid``)."""
        self._place.retire_guid()

    async def abandon(self, deadline: float | None) -> None:
        """After a failed or cancelled acquire (bounded by ``deadline``): leave nothing of
        ours in the queues.

        Once ``deadline`` has passed, nothing is waited for: the deletes are written as a
        release's are (``release_nowait``), and a create of unknown outcome is the
        janitor's; a caller whose time is up must not wait for a slow or silent server.
        Otherwise (an error, a cancellation) the deletes are confirmed, within half the
        session timeout, and what is not done by then is the janitor's. Raises nothing."""
        if deadline is not None and uptime() >= deadline:
            self._abandon_nowait()
            return
        place = self._place
        nodes, generation = place.nodes, place.generation
        in_doubt = place.take_doubt()
        self.forget()
        if not nodes and not in_doubt:
            return
        if not nodes:
            generation = place.session.generation
        if not await delete_bounded(place, nodes, generation):
            for member in place.members:
                if member in nodes:
                    place.janitor.delete(join(member, nodes[member]), generation)
                elif not nodes:
                    place.janitor.delete_guid(member, place.guid, generation)
            place.retire_guid()

    def _abandon_nowait(self) -> None:
        place = self._place
        in_doubt = place.take_doubt()
        if place.nodes:
            self.release_nowait()
            place.retire_guid()  # the deletes may yet be the janitor's (see retire_guid)
        elif in_doubt:
            generation = place.session.generation
            for member in place.members:
                place.janitor.delete_guid(member, place.guid, generation)
            place.retire_guid()
        self.forget()


__all__ = ("Guard", "Listings", "OnJoin", "Queue", "refused")
