"""Plain asyncio, as an asyncio service uses it (pytest-asyncio, strict mode): Task.cancel(),
asyncio.wait_for, asyncio.timeout and gather, with no anyio in the test itself."""

from __future__ import annotations

import asyncio
import uuid

import pytest

import aiozklock
from aiozklock.testing import FencedStore, History, session_of
from tests.conftest import gone, wait_for_queue

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(30)]

PATH = "/locks/orders/157"


def chrooted(zk_hosts: str) -> str:
    return f"{zk_hosts}/asyncio-{uuid.uuid4().hex[:12]}"


async def test_task_cancel_of_a_waiter_leaves_no_node(zk_hosts: str) -> None:
    hosts = chrooted(zk_hosts)
    async with aiozklock.connect(hosts) as a, aiozklock.connect(hosts) as b:
        holder = a.lock(PATH)
        await holder.acquire()
        waiter = b.lock(PATH)
        task = asyncio.create_task(waiter.acquire())
        await wait_for_queue(a, PATH, 2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(await a.get_children(PATH)) == 1
        assert session_of(b).watcher_count() == 0
        await holder.release()
        async with waiter:  # still usable
            assert waiter.is_held
        await gone(a, PATH)


async def test_wait_for_and_timeout_leave_no_node(zk_hosts: str) -> None:
    hosts = chrooted(zk_hosts)
    async with aiozklock.connect(hosts) as a, aiozklock.connect(hosts) as b, a.lock(PATH):
        waiter = b.lock(PATH)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(waiter.acquire(), timeout=0.2)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await waiter.acquire()
        with pytest.raises(aiozklock.LockTimeout):
            await waiter.acquire(timeout=0.2)
        # A timed-out acquire writes its delete without waiting for it: its own session,
        # ordered after it, sees only the holder's node.
        assert len(await b.get_children(PATH)) == 1


async def test_gathered_tasks_are_mutually_excluded(zk_hosts: str) -> None:
    hosts = chrooted(zk_hosts)
    history = History()
    store = FencedStore()
    async with aiozklock.connect(hosts) as a, aiozklock.connect(hosts) as b:

        async def worker(name: str, client: aiozklock.ZooKeeperClient) -> None:
            lock = client.lock(PATH, identifier=name)
            for _ in range(5):
                async with lock:
                    with history.section(name, lock.fencing_token):
                        assert store.write(name, lock.fencing_token, name)
                        await asyncio.sleep(0)

        await asyncio.gather(*(worker(f"t{i}", a if i % 2 else b) for i in range(6)))
        report = history.check()
        assert report.ok, str(report)
        assert report.sections == 30
        await gone(a, PATH)


async def test_native_cancel_never_leaks_a_watcher(zk_hosts: str) -> None:
    # Task.cancel() is not stopped by anyio's shields: it can land right after a request was
    # written. Before the fix, about 1 cancel in 6 left a watcher registered; 40 cycles.
    hosts = chrooted(zk_hosts)
    async with aiozklock.connect(hosts) as a, aiozklock.connect(hosts) as b:
        holder = a.lock(PATH)
        await holder.acquire()
        for _ in range(40):
            task = asyncio.create_task(b.lock(PATH).acquire())
            await wait_for_queue(a, PATH, 2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert session_of(b).watcher_count() == 0
            assert len(await a.get_children(PATH)) == 1
