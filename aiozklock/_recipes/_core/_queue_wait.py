"""Waiting in the queues: on the predecessors a decision names, or on a queue's children.

Every wait is a ``Wakeup`` (``_waiting.py``): its event, its state listener and the watches
it arms exist before the read that arms them, so a change between that read and the wait
cannot be missed. ``deadline`` bounds each wait: nothing is sent once it has passed, and a
reply still awaited then is given up (only reads are sent here: nothing to undo).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import anyio

from aiozklock._exceptions import ConnectionLoss, LockTimeout, NoNodeError
from aiozklock._recipes._core._place import Listings, Place
from aiozklock._recipes._core._plan import Decision
from aiozklock._recipes._core._waiting import Wakeup
from aiozklock._wire._now import uptime
from aiozklock._wire._protocol import Stat, exists_op, get_children_op
from aiozklock._wire._validation import join


@dataclass(eq=False, slots=True)
class _ChildWatch:
    """A child watch armed on a member in session ``generation``: its wake-up, and the
    listing it came with (None until its reply)."""

    wakeup: Wakeup
    generation: int
    children: list[str] | None = None


class Waiting:
    """The queue engine's waits at ``place`` (see the module docstring), and the child
    watch it keeps armed between them (``armed``: the semaphore's first waiter)."""

    __slots__ = ("_place", "armed")

    def __init__(self, place: Place) -> None:
        self._place = place
        self.armed: _ChildWatch | None = None

    async def wait(
        self, waits: dict[str, Decision], listings: Listings, deadline: float | None
    ) -> bool:
        """Wait until a predecessor is gone (or the session changes); updates ``listings``.
        Returns whether the wait ended in a direct hand-off (``_wait_one``). Raises
        ``LockTimeout`` at ``deadline``."""
        left = math.inf if deadline is None else deadline - uptime()
        handed_off = False
        with anyio.move_on_after(left) as bound:
            if len(self._place.members) == 1:
                ((member, decision),) = waits.items()
                if decision.children:
                    await self._wait_children(member, listings, deadline)
                else:
                    handed_off = await self._wait_one(member, decision, listings, deadline)
            else:
                await self._wait_many(waits, listings, deadline)
        if bound.cancelled_caught:
            raise LockTimeout(self._place.late)
        return handed_off

    async def _wait_one(
        self, member: str, decision: Decision, listings: Listings, deadline: float | None
    ) -> bool:
        """One queue (the mutex, election: the hot path): one existence watch.

        If the predecessor was the only node ahead of ours, we are first once the server says
        it was deleted: nothing can queue ahead of us later (sequence numbers only grow, and
        a path with children is never reaped), so no listing is needed to know it: a direct
        hand-off (returns True: first, but nothing is known of the nodes behind).
        """
        place = self._place
        session, generation = place.session, place.generation
        assert decision.predecessor is not None
        server_path = session.server_path(join(member, decision.predecessor))
        with Wakeup(session) as wakeup:
            try:
                op = exists_op(server_path, wakeup.watch(server_path))
                stat = await session.call(op, generation=generation, wait_until=deadline)
                gone = stat is None
            except ConnectionLoss:
                stat, gone = None, False  # re-check from the listing after the reconnect
            # A marked predecessor was granted already (see Decision.mark): no wait for it.
            if stat is not None and not (decision.mark and stat.version > 0):
                await wakeup.wait(deadline, place.late)
            if (
                (gone or wakeup.deleted)
                and decision.ahead == 1
                and session.generation == generation
            ):
                listings[member] = [place.nodes[member]]
                return True
            listings[member] = await place.list_children(member, generation, deadline)
            return False

    async def _wait_many(
        self, waits: dict[str, Decision], listings: Listings, deadline: float | None
    ) -> None:
        """Several member queues: watch every predecessor (one write), wake on the first
        change, then list every member again (one round trip): a node of ours that went
        missing where we were already first must be seen before we hold."""
        place = self._place
        session, generation = place.session, place.generation
        paths = [
            session.server_path(join(member, d.predecessor))
            for member, d in waits.items()
            if d.predecessor is not None
        ]
        with Wakeup(session) as wakeup:
            results = await session.pipeline(
                [exists_op(path, wakeup.watch(path)) for path in paths],
                generation=generation,
                wait_until=deadline,
            )
            for result in results:
                if isinstance(result, BaseException) and not isinstance(result, ConnectionLoss):
                    raise result
            # Wait only if every predecessor is still there (a connection loss: re-list).
            if all(isinstance(result, Stat) for result in results):
                await wakeup.wait(deadline, place.late)
            listings.update(await place.list_all(generation, deadline))

    async def _wait_children(self, member: str, listings: Listings, deadline: float | None) -> None:
        """Wait for any change among ``member``'s children, then list them (with a new child
        watch: one request per wake-up). A watch armed with the listing we decided on is
        waited on; otherwise (first call, or it has fired) it is armed with a new listing,
        which the caller decides on again."""
        place, armed = self._place, self.armed
        generation = place.generation
        if (
            armed is not None
            and armed.generation == generation
            and armed.children == listings[member]
        ):
            await armed.wakeup.wait(deadline, place.late)
        self.disarm()
        session = place.session
        path = session.server_path(member)
        armed = self.armed = _ChildWatch(Wakeup(session), generation)
        op = get_children_op(path, armed.wakeup.watch(path))
        try:
            children = await session.call(op, generation=generation, wait_until=deadline)
        except ConnectionLoss:
            children = None  # the state change woke it: armed again at the next call
        except NoNodeError:
            children = []  # our node is gone with its parent: queue again
        if children is None:
            listings[member] = await place.list_children(member, generation, deadline)
        else:
            armed.children = listings[member] = children

    def disarm(self) -> None:
        """Forget an armed child watch (the server's fires unheard)."""
        armed, self.armed = self.armed, None
        if armed is not None:
            armed.wakeup.close()


__all__ = ("Waiting",)
