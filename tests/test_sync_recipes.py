"""``aiozklock.sync``'s other recipes, each through a real round trip against another
session (multi-lock, read/write lock, semaphore, TTL lease, non-fair lock, election with
``leader()`` and ``watch_leader()``), the znode API with ``guard=``, ``diagnose`` and the
session listeners."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

import aiozklock
import aiozklock.sync
from aiozklock.sync import SyncClient
from tests._sync_kit import BOUND, Worker, in_thread

PATH = "/recipes/sync"


def test_multi_lock(szk: SyncClient, szk2: SyncClient) -> None:
    paths = (PATH + "/a", PATH + "/b")
    with szk.multi_lock(iter(paths)) as both:  # an iterator: read once
        assert set(both.fencing_tokens) == set(paths)
        assert both.statistics().depth == 1
        assert not szk2.multi_lock(paths).try_acquire()
        assert not szk2.lock(paths[1]).try_acquire()
    with szk2.multi_lock(paths).acquire(timeout=BOUND):
        pass


def test_read_locks_are_shared_by_threads_and_exclude_writers(
    szk: SyncClient, szk2: SyncClient
) -> None:
    read = szk.rw_lock(PATH).read_lock
    entered, leave = threading.Event(), threading.Event()

    def hold_a_read() -> bool:
        with read:
            entered.set()
            leave.wait(BOUND)
            return read.is_held

    first = Worker(hold_a_read)
    assert entered.wait(BOUND)
    with read:  # while the other thread reads: together, on one node
        assert read.is_held
        assert read.statistics().locked
        assert not szk2.rw_lock(PATH).write_lock.try_acquire()
        assert len(szk2.get_children(PATH)) == 1
    leave.set()
    assert first.join() is True
    writer = szk2.rw_lock(PATH).write_lock
    with writer.acquire(timeout=BOUND):
        assert writer.statistics().locked
        assert not read.try_acquire()


def test_semaphore_lease_per_thread(
    szk: SyncClient, szk2: SyncClient, open_sync: Callable[..., SyncClient]
) -> None:
    sem = szk.semaphore(PATH, 2)
    entered, leave = threading.Event(), threading.Event()

    def take_one() -> None:
        with sem:
            entered.set()
            leave.wait(BOUND)

    worker = Worker(take_one)
    assert entered.wait(BOUND)
    with sem:  # the second lease, this thread's own
        assert sem.is_held
        assert sem.max_leases == 2
        assert len(sem.leases()) == 2
        assert sem.statistics().held == 2
        assert not szk2.semaphore(PATH, 2).try_acquire()
        assert in_thread(lambda: sem.is_held) is False
    leave.set()
    worker.join()
    with pytest.raises(aiozklock.MaxLeasesMismatch):
        open_sync().semaphore(PATH, 3).acquire(timeout=BOUND)


def test_lease_lock(szk: SyncClient, szk2: SyncClient) -> None:
    lease = szk.lease_lock(PATH, 30.0)
    with lease:
        assert lease.is_held
        assert lease.expires_at > 0
        lease.renew()
        assert lease.statistics().locked
        assert not szk2.lease_lock(PATH, 30.0).try_acquire()
        with pytest.raises(aiozklock.UsageError):  # a fixed node cannot guard
            szk.set_data(PATH, b"x", guard=lease)
    assert szk2.lease_lock(PATH, 30.0).try_acquire()


def test_non_fair_lock(szk: SyncClient, szk2: SyncClient) -> None:
    lock = szk.lock(PATH, fair=False)
    with lock:
        assert lock.statistics().locked
        assert len(lock.contenders()) == 1
        assert not szk2.lock(PATH, fair=False).try_acquire()
    with pytest.raises(aiozklock.InvalidArgument):
        szk.lock(PATH, fair=False, compat="kazoo")


def test_election_leader_and_watch(szk: SyncClient, szk2: SyncClient) -> None:
    one = szk.election(PATH, identifier="one")
    observer = szk2.election(PATH, identifier="two")
    with observer.watch_leader() as leaders:
        assert next(leaders) is None  # no candidate yet
        with one:
            assert one.is_leader
            assert next(leaders) == "one"
            assert observer.leader() == "one"
            assert [c.identifier for c in one.contenders()] == ["one"]
        assert next(leaders) is None  # resigned
    assert list(leaders) == []  # closed: the iteration is over


def test_znodes_with_guard(szk: SyncClient, szk2: SyncClient) -> None:
    lock = szk.lock("/locks/guard")
    szk.ensure_path(PATH)
    assert szk.exists(PATH) is not None
    with lock:
        created = szk.create(PATH + "/n", b"1", guard=lock)
        szk.set_data(created, b"2", guard=lock)
        assert szk.get_data(created)[0] == b"2"
        with pytest.raises(aiozklock.NotLockOwner):  # another thread does not hold it
            in_thread(lambda: szk.set_data(created, b"3", guard=lock))
        with pytest.raises(aiozklock.InvalidArgument):  # another client's object
            szk2.set_data(created, b"3", guard=lock)
        szk.delete(created, guard=lock)
    with pytest.raises(aiozklock.NotLockOwner):
        szk.create(PATH + "/m", guard=lock)
    assert szk.get_children(PATH) == []
    acl, stat = szk.get_acl(PATH)
    assert acl
    assert stat.version == 0
    with pytest.raises(aiozklock.NoNodeError):
        szk2.get_data(PATH + "/n")
    assert szk.diagnose("/").healthy


def test_listeners_see_every_session(hosts: str) -> None:
    changes: list[aiozklock.StateChange] = []
    zk = aiozklock.sync.connect(hosts)
    remove = zk.add_listener(changes.append)  # before it is opened: kept for it
    zk.open()
    other = zk.add_listener(lambda change: changes.append(change))
    other()
    zk.close()
    assert changes[-1].state is aiozklock.SessionState.CLOSED
    assert len([c for c in changes if c.state is aiozklock.SessionState.CLOSED]) == 1
    remove()
    with pytest.raises(aiozklock.ClientClosed):
        zk.add_listener(changes.append)


def test_lock_delay_is_passed_on(szk: SyncClient, szk2: SyncClient) -> None:
    lock = szk.lock(PATH, lock_delay=30.0)
    assert lock.lock_delay == 30.0
    with lock:  # a clean release hands over at once: no delay for the next holder
        assert lock.statistics().lock_delay_waited == 0.0
    with szk2.lock(PATH, lock_delay=30.0).acquire(timeout=BOUND) as theirs:
        assert theirs.statistics().lock_delay_waited == 0.0
    assert szk.multi_lock([PATH + "/a"], lock_delay=5.0).lock_delay == 5.0
    assert szk.election(PATH + "/e", lock_delay=5.0).lock_delay == 5.0
    with pytest.raises(aiozklock.InvalidArgument):
        szk.lock(PATH, lock_delay=-1.0)
    with pytest.raises(aiozklock.InvalidArgument):
        szk.lock(PATH, fair=False, lock_delay=5.0)


def test_a_revocable_sync_lock_lets_go_when_revoked(szk: SyncClient, szk2: SyncClient) -> None:
    """A thread cannot be cancelled: a revoke request sets ``lost`` (and ``check()`` raises
    ``LockRevoked``); the block's exit releases and raises it. A lock that did not opt in is
    not revocable (its node says so: nothing is written)."""
    called = threading.Event()
    lock = szk.lock(PATH, revocable=True, on_lost=called.set)

    def hold_until_revoked() -> str:
        with lock:
            (node,) = szk2.revoke(PATH, wait=0)
            assert lock.lost.wait(BOUND)
            assert called.is_set()
            with pytest.raises(aiozklock.LockRevoked):
                lock.check()
        return node

    with pytest.raises(aiozklock.LockRevoked):
        hold_until_revoked()
    assert szk2.lock(PATH).try_acquire()  # released at the exit
    with szk.lock(PATH + "/plain"), pytest.raises(aiozklock.NotRevoked) as refused:
        szk2.revoke(PATH + "/plain", wait=0)
    assert refused.value.reason == "not revocable"
