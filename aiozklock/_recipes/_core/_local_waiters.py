"""The tasks of this process queued behind a recipe object's node (its local waiters): counted,
told to telemetry, and published in the node's data for other processes to see
(``contenders``, the doctor, ``top``).

A recipe object queues this process's tasks locally, behind one node on the server
(``_primitive.py``): fifty requests waiting across two workers look like two contenders to
anyone reading ZooKeeper. ``LocalWaiters`` counts the tasks waiting on the object's local
gate; it is made with the first task that has to wait (an uncontended object never has
one) and tells the recipe's telemetry (``RecipeObserver.queued_locally``) each arrival and
departure.

``PublishedWaiters`` also writes the count into the node's data (our identity JSON's
``local_waiters``), for the recipes whose peers tolerate a change of that data (see
``docs/observability.md``, "Local queues"):

* **free in the common case**: the count goes into the data the node is created with (0 for
  an object that never had a local waiter), so a node made while the count is steady needs
  no other request; a ``setData`` is only written when the count moves while the node lives
  (tasks arriving behind a holder, or leaving by a time-out or a cancellation), by ``STEP``
  (2) or more from what the node says: a change of one task alone is not written (tasks
  looping back behind the next holder make exactly that change once per grant);
* **coalesced**: at most one write in flight per node, and once its reply comes the count of
  that moment is written if it differs at all from the one just written, so a burst ends
  exact (never one write per arrival: a burst of 1,000 arrivals behind a holder costs two
  writes);
* **never in the way**: a write is queued with ``send_soon`` and its reply handled by a
  callback: no acquire or release waits for it. A failed write is dropped; the node's data
  keeps its last count until the next change, or the next node;
* **never over a foreign write**: each write carries the node's version as we last wrote
  it (0 at its create). A ``BadVersion`` means someone else wrote the node (a revoker's
  ``__REVOKE__``): the object then stops publishing on that node, so a revoke request is
  never overwritten. A lost reply (``ConnectionLoss``) leaves the version unknown: the
  object stops publishing on that node too; its next node publishes again.
"""

from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING, Any

import anyio

from aiozklock._exceptions import AiozklockError
from aiozklock._recipes._core._observe import RecipeObserver
from aiozklock._wire._protocol import MultiResult, MultiSetData, Stat, multi_op, set_data_op
from aiozklock._wire._validation import join

if TYPE_CHECKING:
    from aiozklock._recipes._core._contenders import Identity
    from aiozklock._recipes._core._gate import LocalGate
    from aiozklock._recipes._core._place import Place
    from aiozklock._wire._session import Session


# A write starts once the count is this far from what the node says (then it follows the
# count exactly until they agree): a task that loops back behind the next holder (acquire,
# release, acquire again) moves the count by one during each node's life, and would
# otherwise cost a write per grant.
STEP = 2


class LocalWaiters:
    """How many tasks of this process wait on one recipe object's local gate; each change
    told to ``observer`` (None: no telemetry)."""

    __slots__ = ("_observer", "count")

    publishes = False  # PublishedWaiters: the count is in the node's data

    def __init__(self, observer: RecipeObserver | None) -> None:
        self._observer = observer
        self.count = 0

    async def wait(self, gate: LocalGate, timeout: float | None) -> bool:  # noqa: ASYNC109
        """Wait for ``gate``, counted; False if ``timeout`` (seconds) passed first (anyio's
        semaphore gives the gate back if it came too late)."""
        self.arrived()
        try:
            with anyio.move_on_after(math.inf if timeout is None else timeout) as scope:
                await gate.acquire()
        finally:
            self.left()
        return not scope.cancelled_caught

    def arrived(self) -> None:
        """A task starts waiting."""
        self.count += 1
        if self._observer is not None:
            self._observer.queued_locally(1)
        self._changed()

    def left(self) -> None:
        """A task stops waiting (it has the gate, timed out or was cancelled)."""
        self.count -= 1
        if self._observer is not None:
            self._observer.queued_locally(-1)
        self._changed()

    def _changed(self) -> None:
        """The count changed."""

    def data(self, task_name: str | None) -> bytes:  # pragma: no cover - publishers only
        raise NotImplementedError


class PublishedWaiters(LocalWaiters):
    """``LocalWaiters`` that also publish the count in the data of our ``place``'s nodes (see
    the module docstring). ``writes``: the setData requests written so far (diagnostics)."""

    __slots__ = (
        "_busy",
        "_created",
        "_identity",
        "_off",
        "_place",
        "_session",
        "_shown",
        "_task",
        "_token",
        "_version",
        "writes",
    )

    publishes = True

    def __init__(
        self,
        observer: RecipeObserver | None,
        session: Session,
        place: Place,
        identity: Identity,
    ) -> None:
        super().__init__(observer)
        self._session = session
        self._place = place
        self._identity = identity
        self._task = identity.last_task  # the task named in the data of the last create
        self._created = 0  # the count in the data of the last create
        self._token: int | None = None  # the node we publish on (its czxid)
        self._version = 0  # its data version, as we last wrote it
        self._shown = 0  # the count its data holds
        self._off = False  # a foreign write, or a lost reply: no more writes on it
        self._busy: int | None = None  # the node whose write is in flight
        self.writes = 0
        place.on_adopt = self._changed  # a node of ours: write the count if it changed

    def data(self, task_name: str | None) -> bytes:
        """The data of a node about to be created, with the count of now in it."""
        self._task, self._created = task_name, self.count
        return self._identity.data(task_name, self.count)

    def _changed(self, following: bool = False) -> None:
        """Write the count if the node's data is ``STEP`` or more off it (any difference
        right after a write of ours, ``following``), and no write is in flight."""
        token = self._place.token
        if token is None or not self._place.nodes:
            return  # no node (yet, or queued anew): the next create carries the count
        if token != self._token:  # a node of ours we have not written yet
            self._token, self._version, self._shown, self._off = token, 0, self._created, False
        if self._off or self._busy == token:
            return
        if abs(self.count - self._shown) >= (1 if following else STEP):
            self._write(token, self.count)

    def _write(self, token: int, count: int) -> None:
        place, session = self._place, self._session
        data = self._identity.data(self._task, count)
        paths = [session.server_path(join(m, name)) for m, name in place.names()]
        op: Any
        if len(paths) == 1:
            op = set_data_op(paths[0], data, self._version)
        else:  # a multi-lock's nodes: one transaction (they share one version)
            ops = [MultiSetData(path, data, self._version) for path in paths]
            op = multi_op(ops, session.client_path)

        def done(result: object, error: AiozklockError | None) -> None:
            self._written(token, count, result, error)

        try:
            queued = session.send_soon((op,), generation=place.generation, on_done=done)
        except AiozklockError:  # the session is gone: so is the node
            self._off = True
            return
        if queued is not None:  # else not connected now: the next change writes it
            self._busy = token
            self.writes += 1

    def _written(
        self, token: int, count: int, result: object, error: AiozklockError | None
    ) -> None:
        """A write's reply (called by the session: must not raise)."""
        if self._busy == token:
            self._busy = None
        if token != self._token:
            return  # that node is gone: ours now is another
        stat = _stat_of(result) if error is None else None
        if stat is None:
            self._off = True  # a foreign write (BadVersion), a lost reply, the node gone
            return
        self._version, self._shown = stat.version, count
        with contextlib.suppress(Exception):  # the next change tries again
            self._changed(following=True)


def _stat_of(result: object) -> Stat | None:
    """The new ``Stat`` of a setData's reply (a multi's first), None if it failed."""
    if isinstance(result, MultiResult):
        first = result.results[0] if result.ok else None
        return first if isinstance(first, Stat) else None
    return result if isinstance(result, Stat) else None


__all__ = ("LocalWaiters", "PublishedWaiters")
