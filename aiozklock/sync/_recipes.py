"""The synchronous recipe objects: ``SyncHandle`` (``_handle.py``) for each lock-like
recipe, with what each async recipe offers beyond it (``statistics()``, ``contenders()``,
an election's ``leader()`` and ``watch_leader()``, ...), each a call of the async one."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING

from aiozklock._acl import ACL
from aiozklock._exceptions import ClientClosed
from aiozklock._recipes._core._contenders import Contender
from aiozklock._recipes._core._names import Compat
from aiozklock._recipes._election import Election
from aiozklock._recipes._lease import LeaseLock, LeaseStatistics
from aiozklock._recipes._lock import Lock, LockStatistics
from aiozklock._recipes._multilock import MultiLock, MultiLockStatistics
from aiozklock._recipes._nonfair import NonFairLock, NonFairLockStatistics
from aiozklock._recipes._rwlock import ReadLock, ReadLockStatistics, WriteLock
from aiozklock._recipes._semaphore import Semaphore, SemaphoreStatistics
from aiozklock.sync._handle import SyncHandle
from aiozklock.sync._proxy import Proxy

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

    from aiozklock._client import ZooKeeperClient


class SyncLock(SyncHandle[Lock]):
    """The fair, reentrant lock (``zk.lock(path)``) for threads: see ``aiozklock.Lock``
    for the recipe, ``SyncHandle`` for the synchronous contract."""

    __slots__ = ()

    @property
    def identifier(self) -> str | None:
        """The identifier its nodes carry (the async object's)."""
        return self._read(lambda lock: lock.identifier)

    @property
    def acl(self) -> tuple[ACL, ...]:
        """The ACL its nodes, and the containers it creates, are created with."""
        return self._read(lambda lock: lock.acl)

    @property
    def revocable(self) -> bool:
        """Whether a revoke request ends its holding (``revocable=True``)."""
        return self._read(lambda lock: lock.revocable)

    @property
    def path(self) -> str:
        """The lock's path."""
        return self._read(lambda lock: lock.path)

    @property
    def lock_delay(self) -> float | None:
        """Its lock-delay in seconds (``lock_delay=``), or None (see the async recipe)."""
        return self._read(lambda lock: lock.lock_delay)

    def statistics(self) -> LockStatistics:
        """Local state of this object (the async object's); sends nothing."""
        return self._read(lambda lock: lock.statistics())

    def contenders(self) -> list[Contender]:
        """The queue as ZooKeeper has it, holder first (see ``aiozklock.Lock``)."""
        return self._ask(lambda lock: lock.contenders())


class SyncNonFairLock(SyncHandle[NonFairLock]):
    """The non-fair lock (``zk.lock(path, fair=False)``) for threads: see
    ``aiozklock.NonFairLock``, and ``SyncHandle`` for the synchronous contract."""

    __slots__ = ()

    @property
    def identifier(self) -> str | None:
        """The identifier its nodes carry (the async object's)."""
        return self._read(lambda lock: lock.identifier)

    @property
    def acl(self) -> tuple[ACL, ...]:
        """The ACL its nodes, and the containers it creates, are created with."""
        return self._read(lambda lock: lock.acl)

    @property
    def node(self) -> str:
        """The one node whose creator holds it."""
        return self._read(lambda lock: lock.node)

    @property
    def path(self) -> str:
        """Its path (the async object's)."""
        return self._read(lambda lock: lock.path)

    def statistics(self) -> NonFairLockStatistics:
        """Local state of this object (the async object's); sends nothing."""
        return self._read(lambda lock: lock.statistics())

    def contenders(self) -> list[Contender]:
        """The holder as ZooKeeper has it, or ``[]`` (see ``aiozklock.NonFairLock``)."""
        return self._ask(lambda lock: lock.contenders())


class SyncMultiLock(SyncHandle[MultiLock]):
    """All-or-nothing lock of several paths (``zk.multi_lock(paths)``) for threads: see
    ``aiozklock.MultiLock``, and ``SyncHandle`` for the synchronous contract."""

    __slots__ = ()

    @property
    def paths(self) -> tuple[str, ...]:
        """The member paths, in locking order."""
        return self._read(lambda lock: lock.paths)

    @property
    def identifier(self) -> str | None:
        """The identifier its nodes carry (the async object's)."""
        return self._read(lambda lock: lock.identifier)

    @property
    def acl(self) -> tuple[ACL, ...]:
        """The ACL its nodes, and the containers it creates, are created with."""
        return self._read(lambda lock: lock.acl)

    @property
    def revocable(self) -> bool:
        """Whether a revoke request ends its holding (``revocable=True``)."""
        return self._read(lambda lock: lock.revocable)

    @property
    def lock_delay(self) -> float | None:
        """Its lock-delay in seconds (``lock_delay=``), or None (see the async recipe)."""
        return self._read(lambda lock: lock.lock_delay)

    @property
    def fencing_tokens(self) -> dict[str, int]:
        """Member path -> our node's czxid there; ``NotLockOwner`` if not held."""
        return self._read(lambda lock: lock.fencing_tokens)

    def statistics(self) -> MultiLockStatistics:
        """Local state of this object (the async object's); sends nothing."""
        return self._read(lambda lock: lock.statistics())

    def contenders(self) -> dict[str, list[Contender]]:
        """Each member's queue as ZooKeeper has it (see ``aiozklock.MultiLock``)."""
        return self._ask(lambda lock: lock.contenders())


class SyncWriteLock(SyncHandle[WriteLock]):
    """The write side of ``zk.rw_lock(path)`` for threads: see ``aiozklock.WriteLock``."""

    __slots__ = ()

    @property
    def identifier(self) -> str | None:
        """The identifier its nodes carry (the async object's)."""
        return self._read(lambda lock: lock.identifier)

    @property
    def acl(self) -> tuple[ACL, ...]:
        """The ACL its nodes, and the containers it creates, are created with."""
        return self._read(lambda lock: lock.acl)

    @property
    def compat(self) -> Compat:
        """Whose node names it writes (``compat=``)."""
        return self._read(lambda lock: lock.compat)

    @property
    def lock_delay(self) -> float | None:
        """Its lock-delay in seconds, or None (see the async recipe)."""
        return self._read(lambda lock: lock.lock_delay)

    @property
    def revocable(self) -> bool:
        """Whether a revoke request ends its holding (``revocable=True``)."""
        return self._read(lambda lock: lock.revocable)

    @property
    def path(self) -> str:
        """Its path (the async object's)."""
        return self._read(lambda lock: lock.path)

    def statistics(self) -> LockStatistics:
        """Local state of this object (the async object's); sends nothing."""
        return self._read(lambda lock: lock.statistics())

    def contenders(self) -> list[Contender]:
        """The queue as ZooKeeper has it (see ``aiozklock.WriteLock``)."""
        return self._ask(lambda lock: lock.contenders())


class SyncReadLock(SyncHandle[ReadLock]):
    """The read side of ``zk.rw_lock(path)`` for threads: see ``aiozklock.ReadLock`` (the
    threads of this process hold it together, on one node)."""

    __slots__ = ()

    @property
    def identifier(self) -> str | None:
        """The identifier its nodes carry (the async object's)."""
        return self._read(lambda lock: lock.identifier)

    @property
    def acl(self) -> tuple[ACL, ...]:
        """The ACL its nodes, and the containers it creates, are created with."""
        return self._read(lambda lock: lock.acl)

    @property
    def lock_delay(self) -> float | None:
        """Its lock-delay in seconds, or None (see the async recipe)."""
        return self._read(lambda lock: lock.lock_delay)

    @property
    def revocable(self) -> bool:
        """Whether a revoke request ends its holding (``revocable=True``)."""
        return self._read(lambda lock: lock.revocable)

    @property
    def path(self) -> str:
        """Its path (the async object's)."""
        return self._read(lambda lock: lock.path)

    def statistics(self) -> ReadLockStatistics:
        """Local state of this object (the async object's); sends nothing."""
        return self._read(lambda lock: lock.statistics())

    def contenders(self) -> list[Contender]:
        """The queue as ZooKeeper has it (see ``aiozklock.ReadLock``)."""
        return self._ask(lambda lock: lock.contenders())


class SyncReadWriteLock:
    """Many readers or one writer on ``path`` (``zk.rw_lock(path)``): ``read_lock`` and
    ``write_lock`` (see ``aiozklock.ReadWriteLock``)."""

    __slots__ = ("identifier", "path", "read_lock", "write_lock")

    def __init__(
        self, path: str, identifier: str | None, read: SyncReadLock, write: SyncWriteLock
    ) -> None:
        #: The lock's path, and the identifier its nodes carry.
        self.path = path
        self.identifier = identifier
        self.read_lock = read
        self.write_lock = write

    def __repr__(self) -> str:
        return f"<aiozklock.sync.SyncReadWriteLock {self.path!r}>"


class SyncSemaphore(SyncHandle[Semaphore]):
    """At most ``max_leases`` holders at once (``zk.semaphore(path, n)``) for threads: each
    thread takes its own lease (see ``aiozklock.Semaphore``, and ``SyncHandle``)."""

    __slots__ = ()

    @property
    def identifier(self) -> str | None:
        """The identifier its nodes carry (the async object's)."""
        return self._read(lambda sem: sem.identifier)

    @property
    def acl(self) -> tuple[ACL, ...]:
        """The ACL its nodes, and the containers it creates, are created with."""
        return self._read(lambda sem: sem.acl)

    @property
    def compat(self) -> Compat | None:
        """The peer's layout (``compat=``), or None: our queue of leases."""
        return self._read(lambda sem: sem.compat)

    @property
    def path(self) -> str:
        """Its path (the async object's)."""
        return self._read(lambda sem: sem.path)

    @property
    def max_leases(self) -> int:
        """The number of leases."""
        return self._read(lambda sem: sem.max_leases)

    def statistics(self) -> SemaphoreStatistics:
        """Local state of this object (the async object's); sends nothing."""
        return self._read(lambda sem: sem.statistics())

    def leases(self) -> list[Contender]:
        """The current lease holders as ZooKeeper has them (see ``aiozklock.Semaphore``)."""
        return self._ask(lambda sem: sem.leases())


class SyncLeaseLock(SyncHandle[LeaseLock]):
    """A lock held as a TTL lease (``zk.lease_lock(path, ttl)``) for threads: see
    ``aiozklock.LeaseLock``, and ``SyncHandle`` for the synchronous contract."""

    __slots__ = ()

    @property
    def identifier(self) -> str | None:
        """The identifier its nodes carry (the async object's)."""
        return self._read(lambda lease: lease.identifier)

    @property
    def acl(self) -> tuple[ACL, ...]:
        """The ACL its nodes, and the containers it creates, are created with."""
        return self._read(lambda lease: lease.acl)

    @property
    def ttl(self) -> float:
        """The lease's time to live, in seconds."""
        return self._read(lambda lease: lease.ttl)

    @property
    def holder_id(self) -> str:
        """Who holds the lease: the same ``holder_id`` re-attaches to it."""
        return self._read(lambda lease: lease.holder_id)

    @property
    def renew_automatically(self) -> bool:
        """Whether it is renewed in the background while held (``renew=``)."""
        return self._read(lambda lease: lease.renew_automatically)

    @property
    def node(self) -> str:
        """The lease's node (``{path}/lease``)."""
        return self._read(lambda lease: lease.node)

    @property
    def path(self) -> str:
        """Its path (the async object's)."""
        return self._read(lambda lease: lease.path)

    def renew(self) -> None:
        """Renew the lease now (see ``aiozklock.LeaseLock.renew``)."""
        self._ask(lambda lease: lease.renew())

    @property
    def expires_at(self) -> float:
        """When the server may delete our node (an ``aiozklock.clock()`` instant);
        ``NotLockOwner`` if not held."""
        return self._read(lambda lease: lease.expires_at)

    def statistics(self) -> LeaseStatistics:
        """Local state of this object (the async object's); sends nothing."""
        return self._read(lambda lease: lease.statistics())


class SyncElection(SyncHandle[Election]):
    """A leader election (``zk.election(path)``) for threads: ``with election:`` campaigns,
    then runs the block as leader (``LeadershipLost`` at its exit if leadership was lost
    meanwhile; ``lost``, ``check()`` and ``on_lost`` tell it sooner). See
    ``aiozklock.Election``, and ``SyncHandle`` for the synchronous contract."""

    __slots__ = ()

    @property
    def identifier(self) -> str | None:
        """The identifier its nodes carry (the async object's)."""
        return self._read(lambda election: election.identifier)

    @property
    def acl(self) -> tuple[ACL, ...]:
        """The ACL its nodes, and the containers it creates, are created with."""
        return self._read(lambda election: election.acl)

    @property
    def revocable(self) -> bool:
        """Whether a revoke request ends its holding (``revocable=True``)."""
        return self._read(lambda election: election.revocable)

    @property
    def path(self) -> str:
        """Its path (the async object's)."""
        return self._read(lambda election: election.path)

    @property
    def lock_delay(self) -> float | None:
        """Its lock-delay in seconds (``lock_delay=``), or None (see the async recipe)."""
        return self._read(lambda election: election.lock_delay)

    def resign(self) -> None:
        """Alias of ``release()``: give up leadership held by the calling thread."""
        self.release()

    @property
    def is_leader(self) -> bool:
        """True if this object leads (for any thread of this process) and leadership was
        not lost; see ``aiozklock.Election.is_leader``."""
        return self._read(lambda election: election.is_leader)

    def leader(self) -> str | None:
        """The current leader's identifier, or None if there is no candidate."""
        return self._ask(lambda election: election.leader())

    def contenders(self) -> list[Contender]:
        """The candidates as ZooKeeper has them, leader first."""
        return self._ask(lambda election: election.contenders())

    def watch_leader(self) -> LeaderWatch:
        """``for leader in election.watch_leader():`` the leader's identifier now, then each
        time it changes (None while there is no candidate); each step blocks the calling
        thread until then. See ``aiozklock.Election.watch_leader``. Close the iterator
        (``close()``, or ``with election.watch_leader() as leaders:``) to stop the watch;
        a step interrupted by a signal's exception ends it."""
        return LeaderWatch(self)


class LeaderWatch(Iterator[str | None]):
    """The iterator ``SyncElection.watch_leader()`` returns: each ``next()`` runs one step
    of the async ``watch_leader()`` in the calling thread's task."""

    def __init__(self, election: SyncElection) -> None:
        self._election = election
        self._agen: AsyncGenerator[str | None, None] | None = None
        self._of: ZooKeeperClient | None = None  # the client epoch it watches in
        self._done = False

    def __iter__(self) -> LeaderWatch:
        """The iterator itself."""
        return self

    def __next__(self) -> str | None:
        """The leader now (at the first step), or once it changes. Raises
        ``StopIteration`` once closed, ``ClientClosed`` once the client is closed."""
        if self._done:
            raise StopIteration
        step: tuple[bool, str | None] = self._election._call(self._step)
        ended, leader = step
        if ended:
            self._done = True
            raise StopIteration
        return leader

    async def _step(self, proxy: Proxy) -> tuple[bool, str | None]:
        if self._agen is None or self._of is not proxy.client:  # first, or in a new epoch
            self._agen = self._election._bind(proxy).watch_leader()
            self._of = proxy.client
        try:
            return False, await self._agen.__anext__()
        except StopAsyncIteration:
            return True, None

    def close(self) -> None:
        """Stop watching (the watch is removed at once). Idempotent; raises nothing once the
        client is closed (the watch went with it)."""
        self._done = True
        agen, self._agen = self._agen, None
        if agen is not None:

            async def shut(proxy: Proxy) -> None:
                if self._of is proxy.client:  # not an inherited one: it is not ours
                    await agen.aclose()

            with contextlib.suppress(ClientClosed):  # closed: the watch went with it
                self._election._call(shut)

    def __enter__(self) -> LeaderWatch:
        """The iterator itself; closed at the block's exit."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close it."""
        self.close()


__all__ = (
    "LeaderWatch",
    "SyncElection",
    "SyncLeaseLock",
    "SyncLock",
    "SyncMultiLock",
    "SyncNonFairLock",
    "SyncReadLock",
    "SyncReadWriteLock",
    "SyncSemaphore",
    "SyncWriteLock",
)
