"""aiozklock for synchronous code: Django, Flask, Celery, scripts (kazoo's users).

with aiozklock.sync.connect("zk1:2181,zk2:2181/app") as zk:
    with zk.lock("/locks/orders/157") as lock:
        lock.check()  # LockLost if the lock was lost meanwhile
        store.write(data, fencing_token=lock.fencing_token)

The same recipes and options as the async API, driven by it: the client runs the async one
in a background event loop thread, and each thread that calls it gets a task of its own
there, so **a lock belongs to the thread that acquired it**: reentrant in that thread,
``release()`` from another raises ``NotLockOwner``, ``is_held`` is true in the owner only,
and what a thread still holds when it ends is released (and logged as an error).

**Loss.** A thread cannot be cancelled as an async body is. When a holding can no longer be
trusted (the client's ``loss_policy``), ``lock.lost`` is set at once, ``lock.check()``
raises ``LockLost``, a guarded write (``zk.set_data(..., guard=lock)``) is refused, the
``on_lost`` callback (optional, on every lock-like factory) is called, and leaving the
``with`` block raises ``LockLost``, unless the block raised an exception of its own (which
then passes unchanged). A long body should call ``lock.check()`` between its steps, and
pass ``lock.fencing_token`` to the resource it writes.

**Fork.** A client made before ``fork()`` (a module-level client in a gunicorn ``--preload``
app or a Celery prefork worker) works in the child: there it opens a session of its own on
first use, never sends anything on the parent's, and never holds the parent's locks (the
recipe objects made before the fork are made again in the child): a holding the parent had
is lost in the child at once (``lost`` set, ``check()`` raises ``LockLost``, and so does
leaving its ``with`` block there), nothing sent.

**Event loops.** Every blocking call from a thread that runs an event loop (asyncio or
trio) raises ``UsageError`` at once: use ``aiozklock.connect()`` there.

``import aiozklock`` does not import this module.
"""

from __future__ import annotations

from typing import Unpack

from aiozklock._settings import ConnectOptions
from aiozklock.sync._client import SyncClient as SyncClient
from aiozklock.sync._handle import Acquired as Acquired
from aiozklock.sync._handle import SyncHandle as SyncHandle
from aiozklock.sync._recipes import LeaderWatch as LeaderWatch
from aiozklock.sync._recipes import SyncElection as SyncElection
from aiozklock.sync._recipes import SyncLeaseLock as SyncLeaseLock
from aiozklock.sync._recipes import SyncLock as SyncLock
from aiozklock.sync._recipes import SyncMultiLock as SyncMultiLock
from aiozklock.sync._recipes import SyncNonFairLock as SyncNonFairLock
from aiozklock.sync._recipes import SyncReadLock as SyncReadLock
from aiozklock.sync._recipes import SyncReadWriteLock as SyncReadWriteLock
from aiozklock.sync._recipes import SyncSemaphore as SyncSemaphore
from aiozklock.sync._recipes import SyncWriteLock as SyncWriteLock


def connect(hosts: str, **options: Unpack[ConnectOptions]) -> SyncClient:
    """A synchronous client: ``with aiozklock.sync.connect("zk1,zk2/app") as zk:``.

    The arguments are ``aiozklock.connect()``'s, validated now (``InvalidArgument``); nothing
    is sent until the client is opened: by ``with``, ``open()``, or its first use.
    ``with`` closes it at the block's exit; a client used without ``with`` is closed at
    the interpreter's exit (or call ``close()``), unless threads still alive hold through
    it then: its session is left to end with the process (a WARNING names them). Opening
    raises ``ZooKeeperUnavailable`` if no server answers within ``connect_timeout``.
    """
    return SyncClient(hosts, **options)


__all__ = (
    "Acquired",
    "LeaderWatch",
    "SyncClient",
    "SyncElection",
    "SyncHandle",
    "SyncLeaseLock",
    "SyncLock",
    "SyncMultiLock",
    "SyncNonFairLock",
    "SyncReadLock",
    "SyncReadWriteLock",
    "SyncSemaphore",
    "SyncWriteLock",
    "connect",
)
