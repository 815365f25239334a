"""A counting semaphore: at most ``max_leases`` holders at once, across every process.

The recipe is the mutex's queue with another decision function (``decide_leases``): each
contender queues an ``EPHEMERAL_SEQUENTIAL`` node ``<guid>-lock-<seq>`` directly under the
semaphore path, and holds a lease while fewer than ``max_leases`` nodes precede its own. So
grants are FIFO, a free lease costs one round trip (create and listing pipelined), and a lost
create reply, cancellation and loss are handled by the queue engine as for the mutex.

No herd, with one watch per waiter. Holders release in any order, so no single node decides
the grant of the first waiter (at position ``max_leases``): it watches the children (its
listing sets the watch, so it sends nothing more per wake-up). Every later waiter watches its
predecessor only, and wakes when the predecessor is deleted or *marked*: a contender that is
granted while a node follows its own rewrites its node's data, once. A waiter becomes first
waiter exactly when its predecessor is granted or leaves, so it is woken then; a release wakes
the first waiter only, whose grant wakes its successor only. (The rule "watch the node
``max_leases`` places ahead" misses grants: the first waiter would watch the oldest holder,
and sleep while any other holder releases.) With ``max_leases == 1`` this is the mutex.

Never more than ``max_leases`` holders: nodes never queue ahead of an existing node, so a node
with ``max_leases`` live predecessors now had them in every listing since its creation, and
never believed it held.

The limit is stored as decimal ASCII in the path's data (as kazoo's Semaphore stores it):
written when the queue creates the path (a container), claimed if the path exists with empty
data, and read with every enqueue (in the same round trip); another value raises
``MaxLeasesMismatch`` and our node is removed.

Each task holds its own lease (its own node, its own fencing token), reentrant per task: a
task that acquires a semaphore it holds nests, as with ``Lock``, rather than taking a second
lease (which, at ``max_leases`` holders, would wait for itself forever).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

import anyio

from aiozklock._acl import ACL
from aiozklock._exceptions import (
    BadVersionError,
    ConnectionLoss,
    InvalidArgument,
    MaxLeasesMismatch,
    NoNodeError,
    NotLockOwner,
    short_repr,
    shorten,
)
from aiozklock._recipes._core._contenders import Contender, contender_of
from aiozklock._recipes._core._handle import Handle
from aiozklock._recipes._core._holding import HoldingMonitor
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._names import Compat, guid_of, queue_order
from aiozklock._recipes._core._observe import RecipeObserver
from aiozklock._recipes._core._options import RecipeOptions
from aiozklock._recipes._core._plan import Decide, Decision
from aiozklock._recipes._core._primitive import Primitive, Registry
from aiozklock._recipes._core._queue import Guard
from aiozklock._recipes._core._queued import QueuedPrimitive
from aiozklock._recipes._core._retry import RETRY
from aiozklock._recipes._decision import decide
from aiozklock._wire._protocol import Stat, get_children_op, get_data_op, set_data_op
from aiozklock._wire._session import Session
from aiozklock._wire._tasks import TaskRef
from aiozklock._wire._validation import (
    join,
    validate_identifier,
    validate_recipe_path,
)

T = TypeVar("T")

MAX_LEASES = 10_000  # far more would make every listing of the path huge
_CLAIM_ATTEMPTS = 5  # concurrent claimers of an empty path: each round, one of them wins


def validate_max_leases(max_leases: object) -> int:
    """``max_leases`` as given, if it is an int in 1..``MAX_LEASES``."""
    if isinstance(max_leases, bool) or not isinstance(max_leases, int):
        raise InvalidArgument(f"max_leases must be an int, not {type(max_leases).__name__}")
    if not 1 <= max_leases <= MAX_LEASES:
        raise InvalidArgument(f"max_leases must be in 1..{MAX_LEASES}, not {max_leases}")
    return max_leases


def decide_leases(max_leases: int) -> Decide:
    """The semaphore's decision function (pure; see the module docstring)."""
    if max_leases == 1:
        return decide  # the mutex: the first waiter's grant depends on its predecessor only

    def decide_lease(children: Iterable[str], ours: str, guid: str) -> Decision:
        queue = queue_order(children)
        stale = tuple(c for c in queue if c != ours and guid_of(c) == guid)
        try:
            position = queue.index(ours)
        except ValueError:
            return Decision(held=False, predecessor=None, missing=True, stale=stale)
        if position < max_leases:
            successor = position + 1 < len(queue)
            return Decision(held=True, predecessor=None, missing=False, stale=stale, mark=successor)
        if position == max_leases:
            return Decision(
                held=False,
                predecessor=None,
                missing=False,
                stale=stale,
                ahead=position,
                children=True,
            )
        return Decision(
            held=False,
            predecessor=queue[position - 1],
            missing=False,
            stale=stale,
            ahead=position,
            mark=True,
        )

    return decide_lease


def stored_limit(data: bytes) -> int | None:
    """The lease count stored in a semaphore path's data; None if it is not one."""
    text = data.decode("ascii", errors="replace")
    return int(text) if text.isdigit() and text.isascii() else None


@dataclass(frozen=True, slots=True)
class SemaphoreStatistics:
    """Local state of one semaphore object (no request is sent to build it)."""

    path: str
    max_leases: int
    held: int  # leases held by tasks of this process through this object
    tasks_waiting: int  # tasks of this process waiting for a lease of this object
    nodes: tuple[str, ...]  # our znodes' names, queued or holding
    acquisitions: int
    losses: int
    last_wait: float | None  # seconds the last acquisition waited


class LeaseBase(Primitive):
    """What a semaphore needs of one task's lease, beyond the ``Primitive``."""

    @abstractmethod
    def _node_names(self) -> tuple[str, ...]:
        """The names of the znodes this lease has now (queued, pending or held)."""


class _Lease(QueuedPrimitive, LeaseBase):
    """One task's place in the semaphore's queue: a mutex-shaped primitive (reentrant,
    loss-aware) with the semaphore's decision function. Made by ``Semaphore`` only."""

    def _node_names(self) -> tuple[str, ...]:
        return tuple(self._queue.nodes.values())


class Semaphore(Handle):
    """At most ``max_leases`` holders at once. Create it with ``zk.semaphore(path, n)``.

    ``async with sem:`` or ``await sem.acquire(timeout=)`` takes a lease for the current
    task; the interface is ``Lock``'s, per task: FIFO across processes, reentrant per task
    (a nested acquire does not take a second lease), loss-aware (the body is cancelled when
    the lease can no longer be trusted, and ``LockLost`` is raised when it exits), and
    ``is_held``, ``fencing_token``, ``valid_until`` are the current task's lease's. Tasks of
    one process hold leases of one object concurrently, one node each. Bad arguments raise
    ``InvalidArgument`` here, before any request; an acquire raises ``MaxLeasesMismatch``
    if the path stores another ``max_leases``.
    """

    path: str
    """The semaphore's path."""
    max_leases: int
    """The number of leases: at most this many holders at once."""
    compat: Compat | None = None  # set by ``CompatSemaphore``
    """The peer's layout (``compat=``), or None: our queue of leases."""

    def __init__(
        self,
        session: Session,
        path: str,
        max_leases: int,
        *,
        identifier: str | None,
        monitor: HoldingMonitor,
        janitor: Janitor,
        acl: tuple[ACL, ...],
    ) -> None:
        self.path = validate_recipe_path(path, what="semaphore path")
        self.max_leases = validate_max_leases(max_leases)
        self.identifier = validate_identifier(identifier)
        self.acl = acl
        self._session = session
        self._monitor = monitor
        self._janitor = janitor
        self._label = shorten(f"semaphore {self.path}")
        self._paths: tuple[str, ...] = (self.path,)
        self._lease_parent = self.path  # where the lease holders' nodes are
        self._registry: Registry | None = None  # set by the client's registry
        self._observer: RecipeObserver | None = None
        self._decide = decide_leases(self.max_leases)
        self._limit = str(self.max_leases).encode()
        server_path = session.server_path(self.path)
        self._guard = Guard(get_data_op(server_path), self._check_limit, self._limit)
        self._leases: list[LeaseBase] = []  # one per task holding or acquiring, and idle ones

    # ---------------------------------------------------------------- leases

    def _lease_of(self, task_id: int) -> LeaseBase | None:
        """The lease the task holds (or held, if lost and not yet released)."""
        for lease in self._leases:
            if lease._owner is not None and lease._owner.id == task_id:
                return lease
        return None

    def _lease_for(self, task_id: int) -> LeaseBase:
        """The task's lease if it holds one (to nest), else an idle one (the most recently
        released: its release can go with the next create), else a new one."""
        held = self._lease_of(task_id)
        if held is not None:
            return held
        idle = [lease for lease in self._leases if lease._owner is None and lease._local.value]
        if len(idle) > self.max_leases:  # a burst of waiters is over: keep a few
            extra = set(idle[: -self.max_leases])
            self._leases = [lease for lease in self._leases if lease not in extra]
        if idle:
            return idle[-1]
        lease = self._new_lease()
        lease._registry, lease._observer = self._registry, self._observer
        self._leases.append(lease)
        return lease

    def _new_lease(self) -> LeaseBase:
        return _Lease._construct(
            self._session,
            self._monitor,
            self._janitor,
            self._paths,
            self._decide,
            self._label,
            RecipeOptions(self.identifier),
            self.acl,
            guard=self._guard,
        )

    def _lease_of_task(self, task_id: int) -> LeaseBase:
        """The lease the task holds; ``NotLockOwner`` if none."""
        lease = self._lease_of(task_id)
        if lease is None:
            raise NotLockOwner(f"the current task holds no lease of the {self._label}")
        return lease

    def _held_lease(self, what: str) -> LeaseBase:
        lease = self._lease_of(self._session.tasks.current_id())
        if lease is None or lease._holding is None:
            raise NotLockOwner(f"the current task holds no lease of the {self._label}{what}")
        return lease

    # ---------------------------------------------------------------- the handle's hooks
    # Each task's call goes to that task's lease.

    async def _acquire(self, timeout: float | None, task: TaskRef | None = None) -> None:  # noqa: ASYNC109
        self._session.check_loop()
        if task is None:
            task = self._session.tasks.current()
        await self._lease_for(task.id)._acquire(timeout, task)

    async def _release(self, task_id: int, confirm: bool = False) -> None:
        await self._lease_of_task(task_id)._release(task_id, confirm)

    def _enter_body(self) -> anyio.CancelScope:
        return self._held_lease("")._enter_body()

    async def _exit_body(
        self,
        scope: anyio.CancelScope,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        task_id: int,
        confirm: bool = False,
    ) -> None:
        await self._lease_of_task(task_id)._exit_body(scope, exc_type, exc, tb, task_id, confirm)

    def _push_body(self, task_id: int) -> None:
        self._held_lease("")._push_body(task_id)

    def _pop_body(self, task_id: int) -> anyio.CancelScope:
        return self._lease_of_task(task_id)._pop_body(task_id)

    def _holds(self, task_id: int) -> bool:
        lease = self._lease_of(task_id)
        return lease is not None and lease._holds(task_id)

    def _held_engine(self, why: str) -> Primitive:
        return self._held_lease(why)

    def statistics(self) -> SemaphoreStatistics:
        """Local state of this object; sends nothing and raises nothing."""
        leases = self._leases
        return SemaphoreStatistics(
            path=self.path,
            max_leases=self.max_leases,
            held=sum(1 for lease in leases if lease._holding and not lease._holding.lost),
            tasks_waiting=sum(
                1 for lease in leases if lease._owner is None and not lease._local.value
            ),
            nodes=tuple(name for lease in leases for name in lease._node_names()),
            acquisitions=sum(lease._acquisitions for lease in leases),
            losses=sum(lease._losses for lease in leases),
            last_wait=max(
                (lease._last_wait for lease in leases if lease._last_wait is not None),
                default=None,
            ),
        )

    async def leases(self) -> list[Contender]:
        """The current lease holders as ZooKeeper has them (the first ``max_leases`` nodes of
        the queue, oldest first; with ``compat=``, the leases the peer counts: every kazoo
        lease, with sequence 0, or Curator's oldest ``max_leases``), each with its identity
        (as ``Lock.contenders()``). Connection losses are retried; raises ``ClientClosed``
        once closed, ``UsageError`` outside the client's event loop."""
        session = self._session
        parent = session.server_path(self._lease_parent)
        children = await RETRY.lookup(session, get_children_op(parent))
        holders = self._holders(children if isinstance(children, list) else [])
        ops = [get_data_op(join(parent, name)) for name, _ in holders]
        results = await session.pipeline(ops) if ops else []
        # A node that vanished while we read was released.
        return [
            contender_of(name, data, stat, is_holder=True, sequence=sequence)
            for (name, sequence), result in zip(holders, results, strict=False)
            if isinstance(result, tuple)
            for data, stat in [result]
        ]

    def _holders(self, children: list[str]) -> list[tuple[str, int | None]]:
        """The lease holders among the children of the lease parent, oldest first, each
        with its sequence number (None: the one in its name)."""
        return [(name, None) for name in queue_order(children)[: self.max_leases]]

    # ---------------------------------------------------------------- the stored limit

    async def _check_limit(self, result: object, deadline: float | None) -> None:
        """The guard of every enqueue: the path's data must be our ``max_leases`` (claimed
        if empty). Raises ``MaxLeasesMismatch`` otherwise."""
        session = self._session
        path = session.server_path(self.path)
        for _ in range(_CLAIM_ATTEMPTS):
            if not isinstance(result, tuple):  # the path was created meanwhile, or lost reply
                read = await RETRY.lookup(session, get_data_op(path), wait_until=deadline)
                if isinstance(read, NoNodeError):
                    return  # gone with our node: the queue enqueues (and checks) again
                result = read
            data, stat = result
            stored = stored_limit(data)
            if stored == self.max_leases:
                return
            if data:
                raise MaxLeasesMismatch(self.path, self.max_leases, stored, data)
            assert isinstance(stat, Stat)
            try:  # created without a limit (ensure_path, another library): claim it
                op = set_data_op(path, self._limit, stat.version)
                await session.call(op, wait_until=deadline)
                return
            except (BadVersionError, ConnectionLoss, NoNodeError):
                result = None  # someone else wrote first, or we cannot tell: read again
        raise MaxLeasesMismatch(self.path, self.max_leases, None, b"")

    def __repr__(self) -> str:
        layout = "" if self.compat is None else f" compat={self.compat!r}"
        return (
            f"<aiozklock.Semaphore {short_repr(self.path)} max_leases={self.max_leases} "
            f"identifier={short_repr(self.identifier)}{layout}>"
        )


__all__ = (
    "MAX_LEASES",
    "LeaseBase",
    "Semaphore",
    "SemaphoreStatistics",
    "decide_leases",
    "stored_limit",
    "validate_max_leases",
)
