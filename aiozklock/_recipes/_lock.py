"""The fair, reentrant, loss-aware ZooKeeper lock.

The recipe: an ``EPHEMERAL_SEQUENTIAL`` node named with this lock object's GUID under the lock
path; the lowest sequence holds the lock; a waiter watches only its predecessor. The queue
engine (``_core/_queue.py``) does the work with the mutex's decision function
(``_decision.py``); the shared shape (``_core/_primitive.py``) gives reentrancy, local FIFO and
bodies cancelled on loss (``_core/_holding.py``). On top of the classic recipe:

* 1 round trip for an uncontended acquire (create2 and getChildren pipelined: the session's
  requests run in order, so the listing already contains our node), 1 for a release;
* a create whose reply was lost is resolved by GUID, never resent blindly;
* cancellation anywhere leaves no node behind.
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio

from aiozklock._acl import ACL
from aiozklock._exceptions import short_repr
from aiozklock._recipes._core._contenders import Contender, read_contenders
from aiozklock._recipes._core._holding import HoldingMonitor
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._names import KAZOO_MARKER, LOCK_MARKER
from aiozklock._recipes._core._options import RecipeOptions
from aiozklock._recipes._core._peers import Layout
from aiozklock._recipes._core._queued import QueuedPrimitive
from aiozklock._recipes._decision import decide
from aiozklock._wire._session import Session
from aiozklock._wire._validation import validate_identifier, validate_recipe_path


@dataclass(frozen=True, slots=True)
class LockStatistics:
    """Local state of one lock object (no request is sent to build it)."""

    path: str
    locked: bool  # a task of this object holds the lock
    owner: anyio.TaskInfo | None
    depth: int  # reentrant acquisitions by the owner
    tasks_waiting: int  # tasks of this process waiting on this object
    node: str | None  # our znode's name while queued or holding
    fencing_token: int | None
    acquisitions: int
    losses: int
    last_wait: float | None  # seconds the last acquisition waited
    lock_delay_waited: float  # of which, waiting out a lock-delay (0.0 if none)


class PathLock(QueuedPrimitive):
    """A queued recipe with one node on one ``path``: the mutex, each side of a read/write
    lock."""

    __slots__ = ("path",)
    path: str
    """The lock's path."""

    _publishes = True  # its local waiters, in its node's data (``_core/_local_waiters.py``)

    def statistics(self) -> LockStatistics:
        """Local state of this object; sends nothing and raises nothing."""
        holding = self._holding
        return LockStatistics(
            path=self.path,
            locked=holding is not None and not holding.lost,
            owner=None if self._owner is None else self._owner.info(),
            depth=self._depth,
            tasks_waiting=self._local.tasks_waiting,
            node=self._queue.nodes.get(self.path),
            fencing_token=holding.token if holding is not None else None,
            acquisitions=self._acquisitions,
            losses=self._losses,
            last_wait=self._last_wait,
            lock_delay_waited=self._delay_waited(),
        )


class Lock(PathLock):
    """A distributed mutual-exclusion lock on ZooKeeper. Create it with ``zk.lock(path)``.

    Fair (FIFO across processes and across the tasks of this process), reentrant per task,
    and loss-aware: the body of ``async with lock:`` is cancelled when the lock can no longer
    be trusted to be ours, and ``LockLost`` is raised when it exits. With ``lock_delay``
    (``zk.lock(path, lock_delay=S)``), a grant after a holder that vanished without a release
    waits until S seconds after the vanish (see docs/fencing.md, "Lock-delay"). With
    ``zk.lock(path, revocable=True)``, a revoke request (``zk.revoke(path)``, Curator's
    ``Revoker.attemptRevoke``) is such a loss: the body is cancelled, the lock released,
    and ``LockRevoked`` raised. Bad arguments raise ``InvalidArgument`` here, before any
    request.
    """

    __slots__ = ("identifier",)

    def __init__(
        self,
        session: Session,
        path: str,
        *,
        options: RecipeOptions,
        monitor: HoldingMonitor,
        janitor: Janitor,
        acl: tuple[ACL, ...],
    ) -> None:
        self.path = validate_recipe_path(path)
        self.identifier = validate_identifier(options.identifier)
        super().__init__(
            session,
            monitor,
            janitor,
            (self.path,),
            decide,
            f"lock {self.path}",
            options.checked(self.identifier),
            acl,
            layout=Layout(options.compat, LOCK_MARKER, KAZOO_MARKER, "zk.lock()"),
        )

    async def contenders(self) -> list[Contender]:
        """The queue as ZooKeeper has it, holder first, with each contender's identity.
        Connection losses are retried; raises ``ClientClosed`` once closed, ``UsageError``
        outside the client's event loop."""
        return await read_contenders(self._session, self._queue, self.path)

    def _held_node(self) -> tuple[str, int] | None:
        """Our node and the session generation it lives in, while held and not lost; None
        otherwise. For a recipe built on this lock (a compat semaphore counts its leases
        under one): whether it still holds it, and the node its writes can check."""
        holding = self._holding
        if holding is None or holding.lost:
            return None
        return holding.nodes[0], holding.generation

    def __repr__(self) -> str:
        state = "held" if self._holding is not None else "free"
        return (
            f"<aiozklock.Lock {short_repr(self.path)} {state} "
            f"identifier={short_repr(self.identifier)}>"
        )


__all__ = ("Lock", "LockStatistics", "PathLock")
