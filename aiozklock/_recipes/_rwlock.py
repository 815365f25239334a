"""The read/write lock: many readers or one writer, fair, on one queue that Curator shares.

Readers and writers queue as ``EPHEMERAL_SEQUENTIAL`` nodes under the lock path, named as
Curator's ``InterProcessReadWriteLock`` names them (see ``_rwdecision.py``, which decides who
holds and whom to watch). The queue engine (``_core/_queue.py``) does the rest, exactly as for
the mutex: 1 round trip for a free acquire, a release with no round trip, lost create replies
resolved by GUID, no node left after a cancellation, bodies cancelled on loss.

The read lock is shared by the tasks of this process (``_core/_shared.py``): one node, taken
by the first reader, joined by the others while no writer waits behind it, deleted by the
last one to leave.

The write lock's holder may take the read lock too (in the same task): its read node is then
created at the write node's place (a plain ephemeral node with the same sequence suffix, as
Curator 5.5+ does), so releasing the write lock afterwards downgrades without letting a queued
writer in. The converse, a reader taking the write lock, would wait for itself forever: it
raises ``UsageError`` before any request.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from aiozklock._acl import ACL
from aiozklock._exceptions import LockLost, SessionExpired, UsageError, short_repr
from aiozklock._recipes._core._contenders import Contender, contender_of, holds_now
from aiozklock._recipes._core._handle import _FactoryMade
from aiozklock._recipes._core._holding import Holding, HoldingMonitor
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._names import Compat
from aiozklock._recipes._core._options import RecipeOptions
from aiozklock._recipes._core._peers import Layout
from aiozklock._recipes._core._plan import Decide
from aiozklock._recipes._core._primitive import Primitive
from aiozklock._recipes._core._shared import SharedHolding
from aiozklock._recipes._lock import LockStatistics, PathLock
from aiozklock._recipes._rwdecision import (
    KAZOO_READ_MARKER,
    KAZOO_WRITE_MARKER,
    READ_MARKER,
    WRITE_MARKER,
    decide_read,
    decide_write,
    rw_order,
)
from aiozklock._wire._protocol import get_data_op
from aiozklock._wire._session import Session
from aiozklock._wire._tasks import TaskRef
from aiozklock._wire._validation import join, validate_identifier, validate_recipe_path


@dataclass(frozen=True, slots=True)
class ReadLockStatistics(LockStatistics):
    """A read lock's ``LockStatistics``, with ``readers``: how many tasks of this process
    hold it now (together, on one node). ``owner`` and ``depth`` are those of the one that
    has held it longest; ``tasks_waiting`` counts the tasks in an acquisition of it (the one
    queued on the server included)."""

    readers: int


class _Side(PathLock):
    """What the read lock and the write lock share: one queue on the path, one marker."""

    _mode: str  # "read" or "write", in messages

    def __init__(
        self,
        session: Session,
        path: str,
        *,
        options: RecipeOptions,
        monitor: HoldingMonitor,
        janitor: Janitor,
        acl: tuple[ACL, ...],
        decide: Decide,
        layout: Layout,
    ) -> None:
        self.path = validate_recipe_path(path)
        self.identifier = validate_identifier(options.identifier)
        label = f"{self._mode} lock {self.path}"
        self._marker = layout.marker
        super().__init__(
            session,
            monitor,
            janitor,
            (self.path,),
            decide,
            label,
            options.checked(self.identifier),
            acl,
            layout=layout,
        )

    async def contenders(self) -> list[Contender]:
        """The queue as ZooKeeper has it (readers and writers, in queue order; a node's name
        says which: ``__READ__``/``__rlock__`` read, others write), ``is_holder`` for each
        node that holds now. Connection losses are retried; raises ``ClientClosed`` once
        closed, ``UsageError`` outside the client's event loop."""
        session = self._session
        queue = rw_order(await self._queue.list_children(self.path, None, None))
        ops = [get_data_op(session.server_path(join(self.path, name))) for name, _, _ in queue]
        results = await session.pipeline(ops) if ops else []
        # A node that vanished while we read was released: skipped.
        present = [
            (node, result)
            for node, result in zip(queue, results, strict=True)
            if isinstance(result, tuple)
        ]
        holds = holds_now([(not is_write, sequence) for (_, is_write, sequence), _ in present])
        contenders = [
            contender_of(name, data, stat, is_holder=held, sequence=sequence)
            for held, ((name, _, sequence), (data, stat)) in zip(holds, present, strict=True)
        ]
        return contenders

    def __repr__(self) -> str:
        state = "held" if self._holding is not None else "free"
        kind = type(self).__name__
        return (
            f"<aiozklock.{kind} {short_repr(self.path)} {state} "
            f"identifier={short_repr(self.identifier)}>"
        )


class WriteLock(_Side):
    """The exclusive side of a ``ReadWriteLock`` (``zk.rw_lock(path).write_lock``).

    The ``Lock`` interface: fair, reentrant per task, loss-aware (the body of ``async with``
    is cancelled on loss, and ``LockLost`` raised). Acquiring it in a task that holds the
    read lock of the same ``ReadWriteLock`` raises ``UsageError`` (an upgrade would wait for
    itself forever).
    """

    compat: Compat
    """Whose node names it writes (``compat=``); its read lock writes the same."""

    _mode = "write"
    _reader: ReadLock | None = None  # set by the read lock, once made

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
        self.compat = options.compat
        super().__init__(
            session,
            path,
            options=options,
            monitor=monitor,
            janitor=janitor,
            acl=acl,
            decide=decide_write,
            layout=Layout(options.compat, WRITE_MARKER, KAZOO_WRITE_MARKER, "zk.rw_lock()"),
        )

    async def _acquire(self, timeout: float | None, task: TaskRef | None = None) -> None:  # noqa: ASYNC109
        self._session.check_loop()
        if task is None:
            task = self._session.tasks.current()
        reader = self._reader
        upgrade = reader is not None and _holds(reader, task) and not _holds(self, task)
        if upgrade:
            raise UsageError(
                f"this task holds the read lock of {self.path} and now acquires its write "
                "lock: a reader cannot upgrade (the write lock waits for every reader, this "
                "one included). Release the read lock first, or take the write lock first "
                "(its holder may also take the read lock)"
            )
        await super()._acquire(timeout, task)

    async def _let_go(self, holding: Holding, task_id: int, confirm: bool = True) -> None:
        try:
            await super()._let_go(holding, task_id, confirm)
        finally:
            if self._reader is not None:
                self._reader._wake()  # readers waiting for our write lock to go may join


class ReadLock(SharedHolding, _Side):
    """The shared side of a ``ReadWriteLock`` (``zk.rw_lock(path).read_lock``).

    The ``Lock`` interface (``async with``, ``acquire``, ``try_acquire``, ``release``,
    reentrant per task, loss-aware), and shared: the tasks of this process that take this
    client's read lock for the path and identifier hold it together, on one node. The first
    one queues the node, fairly (behind any writer queued before it); tasks that arrive while
    it waits share its grant (as if queued at its place); tasks that arrive while it is held
    join at once, after one listing and with no node of their own, unless a writer waits
    behind the node: then they wait until the last local reader has left and queue a new
    node, behind that writer, so a busy process cannot starve writers (Curator's readers, a
    node per thread, queue behind it too). The node is deleted when the last reader
    releases; a reader that is not the last releases without any request (``confirm=True``
    then returns at once). Every reader has the node's ``fencing_token`` and
    ``valid_until``; a loss cancels every reader's body, and each reader's release raises
    ``LockLost``. If the first reader fails, times out or is cancelled while queued, its
    node is removed and a waiting task queues a new one.

    In the task that holds the write lock it is granted at once, at the write lock's place
    in the queue: releasing the write lock then downgrades (``LockLost`` if that write lock
    was lost; ``UsageError`` if another task of this process is acquiring this read lock
    meanwhile: that acquisition waits for our write lock). While a task of this process
    holds the write lock, other tasks wait for the read lock (and join a downgrade once the
    write lock is released). A reader taking the write lock gets ``UsageError``. A different
    ``identifier`` is a separate contender, with its own node.
    """

    _mode = "read"
    # Its tasks share one node: they wait only for its acquisition, not behind a holder.
    _publishes = False

    def __init__(self, write_lock: WriteLock, janitor: Janitor) -> None:
        super().__init__(
            write_lock._session,
            write_lock.path,
            # Not revocable: its node is shared by this process's readers.
            options=RecipeOptions(write_lock.identifier, write_lock.compat),
            monitor=write_lock._monitor,
            janitor=janitor,
            acl=write_lock.acl,
            decide=decide_read,
            layout=Layout(write_lock.compat, READ_MARKER, KAZOO_READ_MARKER, "zk.rw_lock()"),
        )
        self._writer = write_lock
        write_lock._reader = self

    def _may_hold_with(self, other: Primitive) -> bool:
        return other is self._writer  # a write holder takes the read lock at its place

    async def _acquire(self, timeout: float | None, task: TaskRef | None = None) -> None:  # noqa: ASYNC109
        self._session.check_loop()
        if task is None:
            task = self._session.tasks.current()
        # Another task's acquisition of ours is queued behind this task's write lock.
        if self._acquiring is not None and _holds(self._writer, task, lost_too=True):
            raise UsageError(
                f"this task holds the write lock of {self.path} and takes its read lock while "
                "another task of this process is acquiring that read lock, behind this "
                "task's write lock: it would wait for that task forever. Give one of them "
                "its own identifier (zk.rw_lock(path, identifier=...))"
            )
        await super()._acquire(timeout, task)

    def _may_share(self, task: TaskRef) -> bool:
        # A task of ours holds the write lock: no reader with it (its holder itself takes
        # the read lock at its place, once the read lock is free here).
        return self._writer._holding is None

    async def _admits_more(self, holding: Holding, deadline: float | None) -> bool:
        """No writer waits behind our node (one listing): a newcomer then delays no one
        who was waiting. Once one does, sharing with newcomers would starve it. The listing
        is checked for peers that cannot order our nodes, as a join's is: one that came
        after our grant ends the holding (``_core/_newcomers.py``)."""
        try:
            children = await self._queue.list_children(self.path, holding.generation, deadline)
        except SessionExpired:
            return False  # the holding is lost with its session
        if not self._queue.check_held(self.path, children, holding):
            return False  # lost: a peer that cannot order our nodes came after our grant
        ours = holding.nodes[0].rpartition("/")[2]
        queue = rw_order(children)
        places = [name for name, _, _ in queue]
        if ours not in places:
            return False
        place = places.index(ours)
        sequence = queue[place][2]  # a downgrade's write node shares it: not behind us
        return not any(write and seq != sequence for _, write, seq in queue[place + 1 :])

    def statistics(self) -> ReadLockStatistics:
        """Local state of this object; sends nothing and raises nothing."""
        holding = self._holding
        first = next(iter(self._holders.values()), None)
        return ReadLockStatistics(
            path=self.path,
            locked=holding is not None and not holding.lost,
            owner=None if first is None else first.task.info(),
            depth=0 if first is None else first.depth,
            tasks_waiting=self._waiting,
            node=self._queue.nodes.get(self.path),
            fencing_token=holding.token if holding is not None else None,
            acquisitions=self._acquisitions,
            losses=self._losses,
            last_wait=self._last_wait,
            lock_delay_waited=self._delay_waited(),
            readers=len(self._holders),
        )

    async def _take(self, deadline: float | None, task_name: str | None) -> Holding:
        writer = self._writer
        holding = writer._holding
        if holding is None or not _holds(writer, self._session.tasks.current(), lost_too=True):
            return await super()._take(deadline, task_name)
        if holding.lost:
            raise LockLost(
                f"{self._label} not taken at the place of the {writer._label}, which was "
                f"lost: {holding.lost_reason}"
            )
        sequence = holding.nodes[0].rpartition(writer._marker)[2]
        data = self._identity.data(task_name)
        return await self._queue.take_at(sequence, holding.generation, deadline, data)


def _holds(primitive: Primitive, task: TaskRef, *, lost_too: bool = False) -> bool:
    """Whether ``task`` holds ``primitive`` (a lost holding counts only with ``lost_too``)."""
    holding = primitive._holding
    if holding is None or not primitive._held_by_task(task.id):
        return False
    return lost_too or not holding.lost


class ReadWriteLock(metaclass=_FactoryMade):
    """Many readers or one writer on ``path``: ``zk.rw_lock(path)``.

    ``read_lock`` and ``write_lock`` each have the ``Lock`` interface. Semantics as Curator's
    ``InterProcessReadWriteLock`` (and its node names, so both libraries share a path): fair
    in queue order, a reader holds when no writer is queued ahead of it, a writer when
    first; a write holder may also take the read lock (downgrade by releasing the write
    lock), a read holder may not take the write lock (``UsageError``). The tasks of this
    process share the read lock: they hold it together on one node (see ``ReadLock``).
    """

    __slots__ = ("read_lock", "write_lock")
    __signature__ = inspect.Signature()  # help() shows no private constructor

    def __init__(self, read_lock: ReadLock, write_lock: WriteLock) -> None:
        self.read_lock = read_lock
        self.write_lock = write_lock

    @classmethod
    def _construct(cls, read_lock: ReadLock, write_lock: WriteLock) -> ReadWriteLock:
        """Construct (for the client's factory only)."""
        made: ReadWriteLock = type.__call__(cls, read_lock, write_lock)
        return made

    @property
    def path(self) -> str:
        """The lock's path."""
        return self.write_lock.path

    @property
    def identifier(self) -> str | None:
        """The identifier its nodes carry."""
        return self.write_lock.identifier

    def __repr__(self) -> str:
        return (
            f"<aiozklock.ReadWriteLock {short_repr(self.path)} "
            f"identifier={short_repr(self.identifier)}>"
        )


__all__ = ("ReadLock", "ReadLockStatistics", "ReadWriteLock", "WriteLock")
