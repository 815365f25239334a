"""The recipes whose holding is our place at the head of one or more queues (the mutex, the
multi-lock, election, the semaphore's leases): ``Primitive`` over the queue engine
(``_queue.py``), which does the work with the recipe's ``decide``."""

from __future__ import annotations

from collections.abc import Sequence

from aiozklock._acl import ACL
from aiozklock._recipes._core._contenders import Identity
from aiozklock._recipes._core._holding import Holding, HoldingMonitor
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._names import LOCK_MARKER
from aiozklock._recipes._core._peers import Layout
from aiozklock._recipes._core._plan import Decide
from aiozklock._recipes._core._primitive import Primitive
from aiozklock._recipes._core._queue import Guard, Queue
from aiozklock._wire._session import Session


class QueuedPrimitive(Primitive):
    """A recipe whose holding is our place at the head of one or more queues (the mutex,
    the multi-lock, election): the queue engine does the work, with ``decide``. ``layout``:
    what we write, to refuse peers that cannot order it (``_peers.py``); None: no check."""

    __slots__ = ("_identity", "_queue")

    def __init__(
        self,
        session: Session,
        monitor: HoldingMonitor,
        janitor: Janitor,
        members: Sequence[str],
        decide: Decide,
        label: str,
        identifier: str | None,
        acl: tuple[ACL, ...],
        marker: str = LOCK_MARKER,
        guard: Guard | None = None,
        layout: Layout | None = None,
    ) -> None:
        super().__init__(session, monitor, label, members, acl)
        if layout is not None:
            marker = layout.marker
        self._queue = Queue(
            session, janitor, members, decide, self._label, acl, marker, guard, layout
        )
        self._identity = Identity(identifier)

    async def _take(self, deadline: float | None, task_name: str | None) -> Holding:
        return await self._queue.take(deadline, lambda: self._identity.data(task_name))

    def _ahead(self) -> int | None:
        return self._queue.ahead

    async def _abandon(self) -> None:
        await self._queue.abandon()

    async def _give_back(self, holding: Holding) -> None:
        await self._queue.delete_own()

    def _give_back_nowait(self, holding: Holding) -> bool:
        self._queue.delete_own_nowait()
        return True

    def _drop(self, holding: Holding) -> None:
        if holding.lost:
            self._queue.retire_guid()  # the loss policy left our nodes to the janitor
        self._queue.forget()


__all__ = ("QueuedPrimitive",)
