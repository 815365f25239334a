"""The synchronous recipe objects: ``SyncHandle`` (``_handle.py``) for each lock-like
recipe, with what each async recipe offers beyond it (``statistics()``, ``contenders()``,
an election's ``leader()``, ...): each a call of the async one, generated from the async
class into a mixin (``_mirrors.py``, by ``.ci/gen_sync.py``). What is written here by hand
does more than pass a call through: ``resign()`` and ``watch_leader()`` of an election, the
read/write pair, and the leader watch's iterator."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING

from aiozklock._exceptions import ClientClosed
from aiozklock._recipes._election import Election
from aiozklock._recipes._lease import LeaseLock
from aiozklock._recipes._lock import Lock
from aiozklock._recipes._multilock import MultiLock
from aiozklock._recipes._nonfair import NonFairLock
from aiozklock._recipes._rwlock import ReadLock, WriteLock
from aiozklock._recipes._semaphore import Semaphore
from aiozklock.sync._handle import SyncHandle
from aiozklock.sync._mirrors import (
    ElectionMirror,
    LeaseLockMirror,
    LockMirror,
    MultiLockMirror,
    NonFairLockMirror,
    ReadLockMirror,
    SemaphoreMirror,
    WriteLockMirror,
)
from aiozklock.sync._proxy import Proxy

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

    from aiozklock._client import ZooKeeperClient


class SyncLock(SyncHandle[Lock], LockMirror):
    """The fair, reentrant lock (``zk.lock(path)``) for threads: see ``aiozklock.Lock``
    for the recipe, ``SyncHandle`` for the synchronous contract."""

    __slots__ = ()


class SyncNonFairLock(SyncHandle[NonFairLock], NonFairLockMirror):
    """The non-fair lock (``zk.lock(path, fair=False)``) for threads: see
    ``aiozklock.NonFairLock``, and ``SyncHandle`` for the synchronous contract."""

    __slots__ = ()


class SyncMultiLock(SyncHandle[MultiLock], MultiLockMirror):
    """All-or-nothing lock of several paths (``zk.multi_lock(paths)``) for threads: see
    ``aiozklock.MultiLock``, and ``SyncHandle`` for the synchronous contract."""

    __slots__ = ()


class SyncWriteLock(SyncHandle[WriteLock], WriteLockMirror):
    """The write side of ``zk.rw_lock(path)`` for threads: see ``aiozklock.WriteLock``."""

    __slots__ = ()


class SyncReadLock(SyncHandle[ReadLock], ReadLockMirror):
    """The read side of ``zk.rw_lock(path)`` for threads: see ``aiozklock.ReadLock`` (the
    threads of this process hold it together, on one node)."""

    __slots__ = ()


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


class SyncSemaphore(SyncHandle[Semaphore], SemaphoreMirror):
    """At most ``max_leases`` holders at once (``zk.semaphore(path, n)``) for threads: each
    thread takes its own lease (see ``aiozklock.Semaphore``, and ``SyncHandle``)."""

    __slots__ = ()


class SyncLeaseLock(SyncHandle[LeaseLock], LeaseLockMirror):
    """A lock held as a TTL lease (``zk.lease_lock(path, ttl)``) for threads: see
    ``aiozklock.LeaseLock``, and ``SyncHandle`` for the synchronous contract."""

    __slots__ = ()


class SyncElection(SyncHandle[Election], ElectionMirror):
    """A leader election (``zk.election(path)``) for threads: ``with election:`` campaigns,
    then runs the block as leader (``LeadershipLost`` at its exit if leadership was lost
    meanwhile; ``lost``, ``check()`` and ``on_lost`` tell it sooner). See
    ``aiozklock.Election``, and ``SyncHandle`` for the synchronous contract."""

    __slots__ = ()

    def resign(self) -> None:
        """Alias of ``release()``: give up leadership held by the calling thread."""
        self.release()

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
