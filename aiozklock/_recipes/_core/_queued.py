"""The recipes whose holding is our place at the head of one or more queues (the mutex, the
multi-lock, election, the semaphore's leases): ``Primitive`` over the queue engine
(``_queue.py``), which does the work with the recipe's ``decide``."""

from __future__ import annotations

from collections.abc import Sequence

from aiozklock._acl import ACL
from aiozklock._recipes._core._contenders import Identity
from aiozklock._recipes._core._delay_record import warn_short_delay
from aiozklock._recipes._core._holding import Holding, HoldingMonitor
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._local_waiters import LocalWaiters, PublishedWaiters
from aiozklock._recipes._core._names import LOCK_MARKER
from aiozklock._recipes._core._options import RecipeOptions
from aiozklock._recipes._core._peers import Layout
from aiozklock._recipes._core._plan import Decide
from aiozklock._recipes._core._primitive import Primitive
from aiozklock._recipes._core._queue import Guard, Queue
from aiozklock._recipes._core._revocation import Revocation
from aiozklock._wire._session import Session


class QueuedPrimitive(Primitive):
    """A recipe whose holding is our place at the head of one or more queues (the mutex,
    the multi-lock, election): the queue engine does the work, with ``decide``. ``layout``:
    what we write, to refuse peers that cannot order it (``_peers.py``); None: no check.
    ``lock_delay``: seconds a grant after our node vanished without a release waits
    (``_delay.py``); None: none asked (a record found on the path is honored anyway).
    ``revocable``: a revoke request (``_revocation.py``) ends its holding, or its wait, with
    ``LockRevoked``; its nodes' data says so (``"revocable": true``)."""

    __slots__ = ("_identity", "_queue", "_revocation")

    # Whether its node's data publishes its local waiters (``_local_waiters.py``): only
    # where every peer that may watch the node tolerates a change of its data (the locks).
    _publishes = False

    def __init__(
        self,
        session: Session,
        monitor: HoldingMonitor,
        janitor: Janitor,
        members: Sequence[str],
        decide: Decide,
        label: str,
        options: RecipeOptions,
        acl: tuple[ACL, ...],
        marker: str = LOCK_MARKER,
        guard: Guard | None = None,
        layout: Layout | None = None,
    ) -> None:
        super().__init__(session, monitor, label, members, acl)
        if layout is not None:
            marker = layout.marker
        delay = options.lock_delay
        self._queue = Queue(
            session, janitor, members, decide, self._label, acl, marker, guard, layout, delay
        )
        if delay is not None and delay < session.timeout:
            warn_short_delay(self._label, delay, session.timeout)
        self._identity = Identity(options.identifier, revocable=options.revocable)
        self._revocation = Revocation(session) if options.revocable else None

    @property
    def revocable(self) -> bool:
        """Whether a revoke request ends its holding (``revocable=True``)."""
        return self._revocation is not None

    async def _take(self, deadline: float | None, task_name: str | None) -> Holding:
        def data() -> bytes:
            return self._node_data(task_name)

        if self._revocation is None:  # the hot path: nothing more
            return await self._queue.take(deadline, data)
        # A revocable holding: the policy watches our nodes from each join on.
        return await self._revocation.take(
            lambda watch: self._queue.take(deadline, data, watch), self._label
        )

    def _node_data(self, task_name: str | None) -> bytes:
        """Our nodes' data at an enqueue: our identity, with the local waiters if published."""
        waiters = self._waiters
        if waiters is not None and waiters.publishes:
            return waiters.data(task_name)
        return self._identity.data(task_name, 0 if self._publishes else None)

    def _new_waiters(self) -> LocalWaiters:
        if not self._publishes:
            return super()._new_waiters()
        return PublishedWaiters(self._observer, self._session, self._queue.place, self._identity)

    def _ahead(self) -> int | None:
        return self._queue.ahead

    @property
    def lock_delay(self) -> float | None:
        """The lock-delay this contender's grants ask for (seconds), None without one."""
        return self._queue.lock_delay

    def _delay_waited(self) -> float:
        """Seconds the last acquisition waited for a lock-delay (0.0 if none)."""
        return self._queue.delay_waited

    async def _abandon(self, deadline: float | None) -> None:
        if self._revocation is not None:
            self._revocation.forget()
        await self._queue.abandon(deadline)

    async def _give_back(self, holding: Holding) -> None:
        await self._queue.release()

    def _give_back_nowait(self, holding: Holding) -> bool:
        self._queue.release_nowait()
        return True

    def _drop(self, holding: Holding) -> None:
        if self._revocation is not None:
            self._revocation.forget()
        if holding.lost:
            self._queue.retire_guid()  # the loss policy left our nodes to the janitor
        self._queue.forget()


__all__ = ("QueuedPrimitive",)
