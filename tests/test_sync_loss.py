"""``aiozklock.sync``: what a thread, which cannot be cancelled, learns of a loss (``lost``,
``check()``, guarded writes, ``on_lost``, ``LockLost`` at the block's exit), and the
``UsageError`` of a thread that must not block (one that runs an event loop, or the
client's own loop thread)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
import trio

import aiozklock
import aiozklock.sync
from aiozklock.sync import SyncClient, SyncElection, SyncLock
from aiozklock.testing import FaultProxy, expire_session
from tests._sync_kit import BOUND

PATH = "/locks/loss"


HOLD = 3600.0  # the proxy parks the client's reconnect until the expiry has landed


@pytest.fixture
def anyio_backend() -> str:
    """The observer's loop; the sync client runs its own (asyncio) in its thread."""
    return "asyncio"


@pytest.fixture
async def behind_proxy(proxy: FaultProxy, chroot: str) -> AsyncIterator[SyncClient]:
    """A sync client whose connection goes through the proxy (opened in a worker thread:
    this test's thread runs an event loop)."""
    client = aiozklock.sync.connect(proxy.address + chroot, session_timeout=4.0)
    await anyio.to_thread.run_sync(client.open)
    try:
        yield client
    finally:
        await anyio.to_thread.run_sync(client.close)


def expire_from_thread(zk: SyncClient, proxy: FaultProxy, zk_hosts: str) -> None:
    """From a worker thread: expire the client's session for real, its reconnect held back
    by the proxy until the server has closed the session."""
    session_id, password = zk.session_id, zk.session_password

    async def expire() -> None:
        proxy.set_delay(HOLD)
        await expire_session(zk_hosts, session_id, password)
        proxy.set_delay(0)

    anyio.from_thread.run(expire)


@pytest.mark.anyio
async def test_a_loss_is_told_to_the_body_and_raised_at_exit(
    proxy: FaultProxy, behind_proxy: SyncClient, zk_hosts: str
) -> None:
    zk = behind_proxy
    told: list[str] = []
    refused: list[BaseException] = []
    locks: list[SyncLock] = []

    def on_lost() -> None:
        told.append(threading.current_thread().name)
        try:
            locks[0].check()  # the client's own thread must not block on it
        except aiozklock.UsageError as exc:
            refused.append(exc)

    def body() -> None:
        lock = zk.lock(PATH, on_lost=on_lost)
        locks.append(lock)
        zk.ensure_path("/data")
        with pytest.raises(aiozklock.LockLost):
            hold_through_a_loss(zk, lock)
        zk.set_data("/data", b"again")  # the client works on, in a new session
        with lock:  # and takes the lock again, with a new loss event
            assert not lock.lost.is_set()

    def hold_through_a_loss(zk: SyncClient, held: SyncLock) -> None:
        with held:
            assert not held.lost.is_set()
            held.check()
            zk.set_data("/data", b"before", guard=held)
            expire_from_thread(zk, proxy, zk_hosts)
            assert held.lost.wait(BOUND)  # set the moment the core marks it lost
            with pytest.raises(aiozklock.LockLost):
                held.check()
            assert not held.is_held
            with pytest.raises(aiozklock.StaleFencingToken):
                zk.set_data("/data", b"after", guard=held)

    await anyio.to_thread.run_sync(body)
    assert len(told) == 1
    assert told[0].startswith("aiozklock-sync")  # the loop thread
    assert len(refused) == 1
    assert "on_lost" in str(refused[0])


@pytest.mark.anyio
async def test_the_body_exception_wins_over_the_loss(
    proxy: FaultProxy, behind_proxy: SyncClient, zk_hosts: str
) -> None:
    zk = behind_proxy
    error = ValueError("the body's own")

    def lead_then_fail(election: SyncElection) -> None:
        with election:
            expire_from_thread(zk, proxy, zk_hosts)
            assert election.lost.wait(BOUND)
            with pytest.raises(aiozklock.LeadershipLost):
                election.check()
            raise error

    def body() -> BaseException | None:
        election = zk.election(PATH, identifier="me")
        try:
            lead_then_fail(election)
        except BaseException as exc:
            return exc
        return None

    assert await anyio.to_thread.run_sync(body) is error


def test_check_outside_a_holding_raises_not_owner(szk: SyncClient) -> None:
    lock = szk.lock(PATH)
    with pytest.raises(aiozklock.NotLockOwner):
        lock.check()
    assert not lock.lost.is_set()


def test_blocking_in_an_asyncio_loop_raises_usage_error(szk: SyncClient) -> None:
    lock = szk.lock(PATH)

    async def main() -> None:
        with pytest.raises(aiozklock.UsageError, match=r"aiozklock\.connect"):
            lock.acquire()
        with pytest.raises(aiozklock.UsageError):
            szk.exists("/")
        with pytest.raises(aiozklock.UsageError):
            szk.close()

    asyncio.run(main())
    assert not lock.is_held  # nothing was acquired meanwhile
    szk.ensure_path(PATH)  # and the client still works
    assert szk.exists(PATH) is not None


def test_blocking_in_trio_raises_usage_error(szk: SyncClient) -> None:
    lock = szk.lock(PATH)

    async def main() -> None:
        with pytest.raises(aiozklock.UsageError, match=r"aiozklock\.connect"):
            lock.try_acquire()
        with pytest.raises(aiozklock.UsageError):
            szk.lock(PATH)

    trio.run(main)
    assert lock.try_acquire()
    lock.release()
