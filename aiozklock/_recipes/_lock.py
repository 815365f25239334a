"""The fair, reentrant, loss-aware ZooKeeper lock.

The recipe: an ``EPHEMERAL_SEQUENTIAL`` node named with this lock object's GUID under the lock
path; the lowest sequence holds the lock; a waiter watches only its predecessor. On top of the
classic recipe:

* 1 round trip for an uncontended acquire (create2 and getChildren pipelined: the session's
  requests run in order, so the listing already contains our node), 1 for a release;
* a create whose reply was lost is resolved by GUID, never resent blindly: our node is adopted
  only if its ephemeral owner is our current session, duplicates are deleted;
* the wake-up event exists before the existence check, and state changes wake waiters too;
* cancellation anywhere leaves no node behind: cleanup is shielded and bounded, and what cannot
  be done at once is handed to the janitor, which retries while the owning session lives;
* a holder whose session becomes unsafe is told (see ``Holding`` and the client's loss policy).
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Coroutine, Generator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

import anyio
import anyio.lowlevel

from aiozklock._exceptions import (
    AiozklockError,
    ClientClosed,
    ConnectionLoss,
    InvalidArgument,
    LockLost,
    LockTimeout,
    NodeExistsError,
    NoNodeError,
    NotLockOwner,
    SessionExpired,
)
from aiozklock._recipes._decision import decide, node_prefix, nodes_of, queue_order
from aiozklock._recipes._decision import sequence_of as _sequence_of
from aiozklock._recipes._janitor import Janitor
from aiozklock._wire._paths import join, validate_data, validate_path
from aiozklock._wire._protocol import (
    Created,
    CreateMode,
    EventType,
    Op,
    Stat,
    WatchedEvent,
    container_path_ops,
    create_op,
    delete_op,
    exists_op,
    get_children_op,
    get_data_op,
)
from aiozklock._wire._session import Session, SessionState

log = logging.getLogger(__name__)

_HOST = socket.gethostname()
_MAX_IDENTIFIER = 1024


@dataclass(eq=False)
class Holding:
    """One acquisition, as seen by the loss policy: which session it lives in, and the cancel
    scopes of the ``async with`` bodies to cancel if the lock can no longer be trusted."""

    path: str  # our node
    generation: int
    token: int
    scopes: list[anyio.CancelScope] = field(default_factory=list)
    lost: bool = False
    lost_reason: str = ""

    def mark_lost(self, reason: str) -> bool:
        """Mark the holding lost and cancel its bodies; True if it was not lost before."""
        if self.lost:
            return False
        self.lost = True
        self.lost_reason = reason
        for scope in self.scopes:
            scope.cancel()
        return True


class HoldingRegistry(Protocol):
    """What the lock needs from the client's loss policy."""

    def register(self, holding: Holding) -> None: ...

    def unregister(self, holding: Holding) -> None: ...


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


@dataclass(frozen=True, slots=True)
class Contender:
    """One node in a lock's queue, as read from ZooKeeper by ``Lock.contenders()``."""

    node: str
    sequence: int
    is_holder: bool
    fencing_token: int
    session_id: int
    identifier: str | None
    host: str | None
    pid: int | None
    task: str | None
    enqueued_at: float | None  # Unix time


def validate_lock_path(path: object) -> str:
    checked = validate_path(path, what="lock path")
    if checked == "/":
        raise InvalidArgument("the lock path cannot be the root '/'")
    if checked == "/zookeeper" or checked.startswith("/zookeeper/"):
        raise InvalidArgument(f"/zookeeper is reserved for ZooKeeper itself: {checked!r}")
    return checked


def _validate_timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise InvalidArgument(f"timeout must be a number of seconds or None, not {timeout!r}")
    if math.isnan(timeout) or timeout < 0:
        raise InvalidArgument(f"timeout must be >= 0, not {timeout!r}")
    return None if math.isinf(timeout) else float(timeout)


class _AcquireContext(Coroutine[Any, Any, None]):
    """What ``Lock.acquire()`` returns: an async context manager, and a coroutine (so that
    ``await``, ``asyncio.create_task(lock.acquire())`` and ``tg.start_soon(lock.acquire)``
    all work). The underlying coroutine is created only if it is awaited or driven."""

    __slots__ = ("_coro", "_lock", "_scope", "_timeout")

    def __init__(self, lock: Lock, timeout: float | None) -> None:
        self._lock = lock
        self._timeout = timeout
        self._scope: anyio.CancelScope | None = None
        self._coro: Coroutine[Any, Any, None] | None = None

    def _coroutine(self) -> Coroutine[Any, Any, None]:
        if self._coro is None:
            self._coro = self._lock._acquire(self._timeout)
        return self._coro

    def __await__(self) -> Generator[Any, None, None]:
        return self._coroutine().__await__()

    def send(self, value: Any) -> Any:
        return self._coroutine().send(value)

    def throw(self, *args: Any) -> Any:
        return self._coroutine().throw(*args)

    def close(self) -> None:
        if self._coro is not None:
            self._coro.close()

    async def __aenter__(self) -> Lock:
        await self._lock._acquire(self._timeout)
        self._scope = self._lock._enter_body()
        return self._lock

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        assert self._scope is not None
        scope, self._scope = self._scope, None
        task_id = anyio.get_current_task().id
        return await self._lock._exit_body(scope, exc_type, exc, tb, task_id)


class Lock:
    """A distributed mutual-exclusion lock on ZooKeeper. Create it with ``zk.lock(path)``.

    Fair (FIFO across processes and across the tasks of this process), reentrant per task,
    and loss-aware: the body of ``async with lock:`` is cancelled when the lock can no longer
    be trusted to be ours, and ``LockLost`` is raised when it exits.
    """

    def __init__(
        self,
        session: Session,
        path: str,
        *,
        identifier: str | None,
        registry: HoldingRegistry,
        janitor: Janitor,
    ) -> None:
        self.path = validate_lock_path(path)
        if identifier is not None and not isinstance(identifier, str):
            raise InvalidArgument(f"identifier must be a str, not {type(identifier).__name__}")
        if identifier is not None and len(identifier) > _MAX_IDENTIFIER:
            raise InvalidArgument(f"identifier is longer than {_MAX_IDENTIFIER} characters")
        self.identifier = identifier
        self._session = session
        self._registry = registry
        self._janitor = janitor
        self._guid = uuid.uuid4().hex
        self._local = anyio.Lock()  # one node per lock object: local tasks queue here, FIFO
        self._owner: anyio.TaskInfo | None = None
        self._depth = 0
        self._holding: Holding | None = None
        self._node: str | None = None  # our node's name while queued or holding
        self._node_generation = -1
        self._token: int | None = None
        self._create_unresolved = False  # a create was sent and its outcome is unknown
        self._acquisitions = 0
        self._losses = 0
        self._last_wait: float | None = None
        # The cancel scopes of ``async with lock:`` bodies, per task: nested ones exit in LIFO
        # order within their task.
        self._body_scopes: dict[int, list[anyio.CancelScope]] = {}
        self._identity_head: str | None = None  # our node's JSON data, up to the task name

    # ---------------------------------------------------------------- public API

    def acquire(self, timeout: float | None = None) -> _AcquireContext:
        """Acquire the lock: ``await lock.acquire()`` or ``async with lock.acquire(timeout=1):``.

        ``timeout`` bounds the waiting (for the connection, for other tasks of this process,
        for the holder); the round trip already in flight is never abandoned, so a free lock
        is acquired even with ``timeout=0``. Raises ``LockTimeout`` if not acquired in time.
        """
        return _AcquireContext(self, _validate_timeout(timeout))

    async def try_acquire(self) -> bool:
        """One attempt, no waiting: True if the lock is now held by the current task."""
        try:
            await self._acquire(0.0)
        except LockTimeout:
            return False
        return True

    async def release(self) -> None:
        """Release the lock held by the current task (one level, if reentered).

        Raises ``NotLockOwner`` if the current task does not hold it, and ``LockLost`` if the
        lock was lost while held (the node is then removed in the background once possible).
        """
        await self._release(anyio.get_current_task().id)

    async def _release(self, task_id: int) -> None:
        holding = self._holding
        if self._owner is None or self._owner.id != task_id or holding is None:
            raise NotLockOwner(f"the current task does not hold the lock {self.path}")
        if self._depth > 1:
            self._depth -= 1
            if holding.lost:
                raise LockLost(f"lock {self.path} was lost: {holding.lost_reason}")
            return
        self._depth = 0
        self._owner = None
        self._holding = None
        self._registry.unregister(holding)
        try:
            if holding.lost:
                self._losses += 1
                self._retire_guid()  # the loss policy left our node to the janitor
                raise LockLost(f"lock {self.path} was lost: {holding.lost_reason}")
            await self._delete_own_node()
        finally:
            self._node = None
            self._token = None
            self._local.release()
        # The delete was shielded; a cancellation that arrived meanwhile is delivered now.
        await anyio.lowlevel.checkpoint_if_cancelled()

    async def __aenter__(self) -> Lock:
        task = anyio.get_current_task()
        await self._acquire(None, task)
        # Only the owning task enters bodies, and nested ones exit in LIFO order: a stack works.
        scopes = self._body_scopes.setdefault(task.id, [])
        scopes.append(self._enter_body())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        task_id = anyio.get_current_task().id
        scopes = self._body_scopes[task_id]
        scope = scopes.pop()
        if not scopes:
            del self._body_scopes[task_id]
        return await self._exit_body(scope, exc_type, exc, tb, task_id)

    @property
    def is_held(self) -> bool:
        """True if the current task holds the lock, it has not been lost, and it is still
        within ``valid_until``: a cheap check to make right before acting on the resource."""
        holding = self._holding
        if holding is None or holding.lost or self._owner is None:
            return False
        if time.monotonic() >= self._session.valid_until:
            return False
        try:
            return self._owner.id == anyio.get_current_task().id
        except RuntimeError:  # not called from a task
            return False

    @property
    def valid_until(self) -> float:
        """The ``time.monotonic()`` instant until which the lock is certainly still ours.

        The server cannot expire our session, and so cannot grant the lock to anyone else,
        earlier than the send time of our newest answered request plus the session timeout;
        this is that instant less a 10 % margin. It advances with every reply (pings keep it
        moving while idle), and it catches what no notification can: a process that was
        paused (GC, SIGSTOP, a swapped-out VM) and resumes after its session may have expired,
        before its heartbeat has had a chance to notice. ``-inf`` once the lock is lost.
        Fencing tokens remain the real protection: a write can still be delayed in flight.
        """
        holding = self._holding
        if holding is None:
            raise NotLockOwner(f"the lock {self.path} is not held, so it has no validity")
        if holding.lost or holding.generation != self._session.generation:
            return -math.inf
        return self._session.valid_until

    @property
    def fencing_token(self) -> int:
        """The czxid of our lock node: it grows with every grant, across the whole ensemble.

        Pass it to the resource you protect, and have it reject writes with a smaller token.
        """
        if self._holding is None or self._token is None:
            raise NotLockOwner(f"the lock {self.path} is not held, so it has no fencing token")
        return self._token

    def statistics(self) -> LockStatistics:
        return LockStatistics(
            path=self.path,
            locked=self._holding is not None and not self._holding.lost,
            owner=self._owner,
            depth=self._depth,
            tasks_waiting=self._local.statistics().tasks_waiting,
            node=self._node,
            fencing_token=self._token if self._holding is not None else None,
            acquisitions=self._acquisitions,
            losses=self._losses,
            last_wait=self._last_wait,
        )

    async def contenders(self) -> list[Contender]:
        """The queue as ZooKeeper has it, holder first, with each contender's identity."""
        session = self._session
        try:
            children = await self._list(session.generation, None, bind=False)
        except NoNodeError:
            return []
        queue = queue_order(children)
        ops = [get_data_op(session.server_path(join(self.path, name))) for name in queue]
        results = await session.pipeline(ops) if ops else []
        # A node that vanished while we read was released: the next one is the holder.
        present = [(n, r) for n, r in zip(queue, results, strict=True) if isinstance(r, tuple)]
        return [
            _contender(name, data, stat, position == 0)
            for position, (name, (data, stat)) in enumerate(present)
        ]

    def __repr__(self) -> str:
        state = "held" if self._holding is not None else "free"
        return f"<aiozklock.Lock {self.path!r} {state} identifier={self.identifier!r}>"

    # ---------------------------------------------------------------- body scopes

    def _enter_body(self) -> anyio.CancelScope:
        holding = self._holding
        assert holding is not None
        scope = anyio.CancelScope()
        holding.scopes.append(scope)
        scope.__enter__()
        if holding.lost:
            scope.cancel()
        return scope

    async def _exit_body(
        self,
        scope: anyio.CancelScope,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        task_id: int,
    ) -> bool:
        holding = self._holding
        swallowed = bool(scope.__exit__(exc_type, exc, tb))
        if holding is not None and scope in holding.scopes:
            holding.scopes.remove(scope)
        cancelled = anyio.get_cancelled_exc_class()
        outer_cancel = exc_type is not None and issubclass(exc_type, cancelled) and not swallowed
        try:
            await self._release(task_id)
        except LockLost:
            if outer_cancel:
                return False  # the caller's own cancellation must propagate, not be hidden
            raise
        return swallowed

    # ---------------------------------------------------------------- acquire

    async def _acquire(self, limit: float | None, task: anyio.TaskInfo | None = None) -> None:
        if task is None:
            task = anyio.get_current_task()
        if self._owner is not None and self._owner.id == task.id:
            assert self._holding is not None
            if self._holding.lost:
                raise LockLost(f"lock {self.path} was lost: {self._holding.lost_reason}")
            self._depth += 1
            return
        started = time.monotonic()
        deadline = None if limit is None else started + limit
        try:
            self._local.acquire_nowait()
        except anyio.WouldBlock:
            with anyio.move_on_after(math.inf if limit is None else limit) as scope:
                await self._local.acquire()
            if scope.cancelled_caught:  # anyio.Lock gives the lock back if cancelled late
                raise LockTimeout(
                    f"lock {self.path} not acquired within {limit} s "
                    "(other tasks of this process were first)"
                ) from None
        try:
            await self._acquire_node(deadline, task.name)
        except BaseException:
            self._local.release()
            raise
        self._owner = task
        self._depth = 1
        self._acquisitions += 1
        self._last_wait = time.monotonic() - started

    async def _acquire_node(self, deadline: float | None, task_name: str | None) -> None:
        children: list[str] | None = None
        try:
            while True:
                try:
                    if children is None:
                        children = await self._enqueue(deadline, task_name)
                    assert self._node is not None
                    decision = decide(children, self._node, self._guid)
                    if decision.stale:
                        await self._delete_stale(decision.stale)
                        children = [c for c in children if c not in decision.stale]
                    elif decision.missing:
                        children = None  # deleted under us: queue again
                    elif decision.held:
                        break
                    else:
                        assert decision.predecessor is not None
                        children = await self._wait_for(
                            decision.predecessor,
                            deadline,
                            next_in_line=decision.ahead == 1,
                        )
                except SessionExpired:
                    children = None  # our node's session is gone: queue again in the new one
        except TimeoutError as exc:
            await self._abandon()
            if isinstance(exc, LockTimeout):
                raise
            raise LockTimeout(f"lock {self.path} not acquired in time: {exc}") from None
        except BaseException:
            await self._abandon()
            raise
        assert self._token is not None
        assert self._node is not None
        holding = Holding(join(self.path, self._node), self._node_generation, self._token)
        self._holding = holding
        self._registry.register(holding)  # marks it lost at once if the session is unsafe now

    def _identity(self, task_name: str | None) -> bytes:
        if self._identity_head is None:
            head = {"identifier": self.identifier, "host": _HOST, "pid": os.getpid()}
            self._identity_head = json.dumps(head, ensure_ascii=False)[:-1]
        task = json.dumps(task_name, ensure_ascii=False)
        data = f'{self._identity_head}, "task": {task}, "enqueued_at": {time.time()!r}}}'
        return validate_data(data.encode())

    async def _enqueue(self, deadline: float | None, task_name: str | None) -> list[str]:
        """Create our node and list the queue, in one round trip. Returns the children."""
        session = self._session
        prefix = session.server_path(join(self.path, node_prefix(self._guid)))
        parent = session.server_path(self.path)
        # After a NoNode, the lock path's container goes in the same write as the retried
        # create: a missing lock path costs one extra round trip. Only that container at first
        # (its ancestors usually exist, and even a create that fails NodeExists is a logged
        # transaction on the server); the whole chain if its parent is missing too.
        parent_ops: list[Op[Any]] = []
        # The server reaps an empty container parent at any moment, even between our own
        # requests: a NoNode can recur, rarely, so the parent is re-created a few times.
        parent_attempts = 3
        while True:
            generation = session.generation
            self._node = None
            ops: list[Op[Any]] = [
                *parent_ops,
                create_op(
                    prefix,
                    self._identity(task_name),
                    CreateMode.EPHEMERAL | CreateMode.SEQUENTIAL,
                    session.client_path,
                ),
                get_children_op(parent),
            ]
            self._create_unresolved = True
            try:
                results = await session.pipeline(ops, generation=generation, wait_until=deadline)
            except SessionExpired:
                self._create_unresolved = False
                continue  # the session changed before we could send: bind to the new one
            except TimeoutError:
                self._create_unresolved = False  # nothing was sent
                raise
            created, children = results[-2:]
            if isinstance(created, Created):
                self._create_unresolved = False
                self._adopt(created.path.rpartition("/")[2], created.stat, generation)
                if isinstance(children, list):
                    return children
                return await self._list(generation, deadline)
            if isinstance(created, NoNodeError) and parent_attempts > 0:
                self._create_unresolved = False
                ancestors_missing = bool(parent_ops) and isinstance(results[-3], NoNodeError)
                parent_ops = self._parent_ops(whole_chain=ancestors_missing)
                parent_attempts -= 1
                continue
            for result in results[: len(parent_ops)]:
                if isinstance(result, BaseException) and not isinstance(result, NodeExistsError):
                    self._create_unresolved = False
                    raise result
            if isinstance(created, SessionExpired):
                self._create_unresolved = False
                continue
            if isinstance(created, ConnectionLoss):
                try:
                    recovered = await self._recover_create(generation, deadline)
                except SessionExpired:
                    self._create_unresolved = False  # the session and any node it made are gone
                    continue
                if recovered is not None:
                    return recovered
                continue
            self._create_unresolved = False
            assert isinstance(created, BaseException)
            raise created

    def _adopt(self, name: str, stat: Stat, generation: int) -> None:
        self._node = name
        self._token = stat.czxid
        self._node_generation = generation

    async def _recover_create(self, generation: int, deadline: float | None) -> list[str] | None:
        """The create's reply was lost: find our node by GUID. Returns the children if a node
        of ours was adopted, None to create again."""
        session = self._session
        while True:
            children = await self._list(generation, deadline)
            ours = nodes_of(children, self._guid)
            stats = await session.pipeline(
                [exists_op(session.server_path(join(self.path, name))) for name in ours],
                generation=generation,
            )
            # Without every answer we cannot tell "not created" from "reply lost": ask again.
            if not any(isinstance(stat, ConnectionLoss) for stat in stats):
                break
        adopted: str | None = None
        duplicates = []
        # Newest first: the create whose reply we lost is the newest node of ours.
        for name, stat in reversed(list(zip(ours, stats, strict=True))):
            if not isinstance(stat, Stat):
                continue
            if adopted is None and stat.ephemeral_owner == session.session_id:
                self._adopt(name, stat, generation)
                adopted = name
            else:
                duplicates.append(name)
        if duplicates:
            await self._delete_stale(tuple(duplicates))
        self._create_unresolved = False
        if adopted is None:
            return None
        log.info("lock %s: adopted %s after a lost create reply", self.path, adopted)
        return [c for c in children if c not in duplicates]

    def _parent_ops(self, *, whole_chain: bool) -> list[Op[Any]]:
        """Creates of the lock path, and of its ancestors (chroot included) if
        ``whole_chain``, as containers."""
        session = self._session
        ops = container_path_ops(session.server_path(self.path), session.client_path)
        return ops if whole_chain else ops[-1:]

    async def _list(
        self, generation: int, deadline: float | None, *, bind: bool = True
    ) -> list[str]:
        session = self._session
        while True:
            try:
                return await session.call(
                    get_children_op(session.server_path(self.path)),
                    generation=generation if bind else None,
                    wait_until=deadline,
                )
            except ConnectionLoss:
                continue  # a read: safe to repeat

    async def _wait_for(
        self, predecessor: str, deadline: float | None, *, next_in_line: bool
    ) -> list[str]:
        """Wait until ``predecessor`` is gone (or the session changes); returns the children.

        ``next_in_line``: the predecessor was the only node ahead of ours. Nothing can queue
        ahead of us later (sequence numbers only grow, and a lock path with children is never
        reaped), so once the server says it was deleted we are at the head, and the listing
        that would say so is not needed: a hand-off costs the notification alone.
        """
        session = self._session
        generation = self._node_generation
        woken = anyio.Event()
        deleted = False

        def wake(event: object) -> None:
            nonlocal deleted
            if isinstance(event, WatchedEvent) and event.type is EventType.DELETED:
                deleted = True
            woken.set()

        # The event exists, and both the watch and the state listener point at it, before the
        # existence check: a deletion between the check and the wait cannot be missed.
        remove_listener = session.add_listener(wake)
        server_path = session.server_path(join(self.path, predecessor))
        try:
            try:
                stat = await session.call(
                    exists_op(server_path, wake), generation=generation, wait_until=deadline
                )
                deleted = deleted or stat is None
            except ConnectionLoss:
                stat = None  # re-check from the listing after the reconnect
            if stat is not None:
                self._before_wait_hook()
                if deadline is None:
                    await woken.wait()
                else:
                    with anyio.move_on_after(deadline - time.monotonic()):
                        await woken.wait()
                    if not woken.is_set():
                        raise LockTimeout(f"lock {self.path} not acquired in time")
            if deleted and next_in_line and session.generation == generation:
                assert self._node is not None
                return [self._node]
            return await self._list(generation, deadline)
        finally:
            remove_listener()
            session.remove_watcher(server_path, wake)

    def _before_wait_hook(self) -> None:
        """Test seam: runs between the existence check and the wait (see test_lock_races)."""

    async def _delete_stale(self, names: tuple[str, ...]) -> None:
        session = self._session
        ops = [delete_op(session.server_path(join(self.path, name))) for name in names]
        for name, result in zip(names, await session.pipeline(ops), strict=True):
            if isinstance(result, BaseException) and not isinstance(result, NoNodeError):
                self._janitor.delete(join(self.path, name), session.generation)
                self._retire_guid()

    # ---------------------------------------------------------------- release and cleanup

    async def _delete_own_node(self) -> None:
        """Delete our node: shielded; returns once it is gone (or its session is)."""
        node, generation = self._node, self._node_generation
        if node is None:
            return
        path = join(self.path, node)
        session = self._session
        with anyio.CancelScope(shield=True):
            while True:
                try:
                    await session.call(delete_op(session.server_path(path)), generation=generation)
                    return
                except (NoNodeError, SessionExpired, ClientClosed):
                    return  # gone, or its session is (and the server deletes it with it)
                except ConnectionLoss:
                    continue  # outcome unknown: repeat; NoNode then means it worked

    async def _abandon(self) -> None:
        """After a failed or cancelled acquire: leave nothing of ours in the queue."""
        node, generation = self._node, self._node_generation
        unresolved = self._create_unresolved
        self._node = None
        self._token = None
        self._create_unresolved = False
        if node is None and not unresolved:
            return
        session = self._session
        if node is None:
            generation = session.generation
        with anyio.CancelScope(shield=True):
            done = False
            if session.state is SessionState.CONNECTED and session.generation == generation:
                with anyio.move_on_after(session.timeout / 2):
                    try:
                        if node is not None:
                            await session.call(
                                delete_op(session.server_path(join(self.path, node))),
                                generation=generation,
                                wait_until=time.monotonic(),
                            )
                        else:
                            children = await self._list(generation, time.monotonic())
                            await self._delete_stale(tuple(nodes_of(children, self._guid)))
                        done = True
                    except (NoNodeError, SessionExpired):
                        done = True
                    except (AiozklockError, TimeoutError):  # ClientClosed included
                        pass
            elif session.generation != generation or session.state is SessionState.CLOSED:
                done = True  # the node's session is gone, and the node with it
        if not done:
            if node is not None:
                self._janitor.delete(join(self.path, node), generation)
            else:
                self._janitor.delete_guid(self.path, self._guid, generation)
            self._retire_guid()

    def _retire_guid(self) -> None:
        """Take a new GUID once a node of ours is left to the janitor: a later lost create
        reply must never find (and adopt) the node the janitor is about to delete, and a GUID
        sweep must never hit a node of a later attempt."""
        self._guid = uuid.uuid4().hex


def _contender(name: str, data: bytes, stat: Stat, is_holder: bool) -> Contender:
    try:
        identity = json.loads(data.decode()) if data else {}
        if not isinstance(identity, dict):
            identity = {}
    except ValueError:
        identity = {}
    return Contender(
        node=name,
        sequence=_sequence_of(name),
        is_holder=is_holder,
        fencing_token=stat.czxid,
        session_id=stat.ephemeral_owner,
        identifier=identity.get("identifier"),
        host=identity.get("host"),
        pid=identity.get("pid"),
        task=identity.get("task"),
        enqueued_at=identity.get("enqueued_at"),
    )


__all__ = ("Contender", "Holding", "HoldingRegistry", "Lock", "LockStatistics")
