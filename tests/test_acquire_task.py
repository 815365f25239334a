"""An acquire run as a task of its own, which ends when it returns (``asyncio.wait_for`` on
Python 3.11, ``create_task``, ``gather``, ``shield``): the holding is the task's that called
``acquire()`` and awaits it, never the short-lived task's (which would leave an orphan,
released by the sweep with an ERROR). Plain asyncio, as a service writes it; on 3.12 and
later ``wait_for`` awaits in the caller's task, and the same assertions hold."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

import aiozklock

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(30)]

PATH = "/locks/orders/157"


async def held_by_me(lock: aiozklock.Lock) -> bool:
    """Held, by the calling task, with one level (not by an ended helper task)."""
    stats = lock.statistics()
    owner = stats.owner
    me = asyncio.current_task()
    return lock.is_held and owner is not None and owner.id == id(me) and stats.depth == 1


@pytest_asyncio.fixture
async def zk(zk_hosts: str) -> AsyncIterator[aiozklock.ZooKeeperClient]:
    async with aiozklock.connect(f"{zk_hosts}/task-{uuid.uuid4().hex[:12]}") as client:
        yield client


async def test_wait_for_around_acquire_holds_for_the_caller(
    zk: aiozklock.ZooKeeperClient, caplog: pytest.LogCaptureFixture
) -> None:
    lock = zk.lock(PATH)
    await asyncio.wait_for(lock.acquire(), 5)
    assert await held_by_me(lock)
    async with aiozklock.connect(zk.hosts) as other:
        assert not await other.lock(PATH).try_acquire()  # held on the server too
    await lock.release()
    assert not lock.statistics().locked
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_task_made_of_acquire_holds_for_the_task_that_awaits_it(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    lock = zk.lock(PATH)
    await asyncio.create_task(lock.acquire())
    assert await held_by_me(lock)
    async with lock:  # reentrant: the same owner
        assert lock.statistics().depth == 2
    await lock.release()
    assert not lock.statistics().locked


async def test_gather_and_shield_hold_for_the_caller(zk: aiozklock.ZooKeeperClient) -> None:
    first, second, third = (zk.lock(f"{PATH}-{i}") for i in range(3))
    await asyncio.gather(first.acquire(), second.acquire())
    await asyncio.shield(third.acquire())
    for lock in (first, second, third):
        assert await held_by_me(lock)
        await lock.release()


async def test_a_timed_out_wait_for_leaves_nothing_held(zk: aiozklock.ZooKeeperClient) -> None:
    async with aiozklock.connect(zk.hosts) as other:
        holder = other.lock(PATH)
        await holder.acquire()
        lock = zk.lock(PATH)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(lock.acquire(), 0.2)
        assert not lock.statistics().locked
        await holder.release()
    await asyncio.wait_for(lock.acquire(), 5)  # usable afterwards, for the caller
    assert await held_by_me(lock)
    await lock.release()
