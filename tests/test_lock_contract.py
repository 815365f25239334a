"""The Lock's public contract on a real ZooKeeper, on asyncio and trio."""

from __future__ import annotations

import collections.abc
import json
import math
import time

import anyio
import anyio.lowlevel
import pytest

import aiozklock
from aiozklock.testing import FaultProxy, FencedStore, History, Opcode, session_of
from tests.conftest import ClientFactory, gone, on_wait, wait_for_children, wait_for_queue

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

PATH = "/locks/orders/157"


async def test_async_with_holds_and_releases_one_node(zk: aiozklock.ZooKeeperClient) -> None:
    lock = zk.lock(PATH, identifier="worker-3")
    assert not lock.is_held
    async with lock as held:
        assert held is lock
        assert lock.is_held
        children = await zk.get_children(PATH)
        assert len(children) == 1
        stat = await zk.exists(f"{PATH}/{children[0]}")
        assert stat is not None
        assert lock.fencing_token == stat.czxid
        assert stat.ephemeral_owner == zk.session_id
    assert not lock.is_held
    await gone(zk, PATH)


async def test_awaitable_acquire_and_release(zk: aiozklock.ZooKeeperClient) -> None:
    lock = zk.lock(PATH)
    await lock.acquire()
    assert lock.is_held
    await lock.release()
    assert not lock.is_held
    await gone(zk, PATH)


async def test_acquire_with_timeout_as_context_manager(zk: aiozklock.ZooKeeperClient) -> None:
    lock = zk.lock(PATH)
    async with lock.acquire(timeout=1.0) as held:
        assert held.is_held
    await gone(zk, PATH)


async def test_free_lock_is_acquired_even_with_zero_timeout(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    # aiozk's lock fails on a free lock with timeouts <= 1 ms; the first round trip is never
    # abandoned here, only waiting is bounded.
    lock = zk.lock(PATH)
    async with lock.acquire(timeout=0):
        assert lock.is_held
    assert await lock.try_acquire()
    await lock.release()


async def test_timeout_raises_lock_timeout_and_leaves_no_node(
    zk: aiozklock.ZooKeeperClient, open_client: aiozklock.ZooKeeperClient
) -> None:
    other = await open_client()
    async with zk.lock(PATH):
        contender = other.lock(PATH)
        with pytest.raises(aiozklock.LockTimeout) as excinfo:
            await contender.acquire(timeout=0.3)
        assert isinstance(excinfo.value, TimeoutError)
        # Its time up, the contender wrote its delete without waiting for the reply: its own
        # session, whose next request is ordered after it, sees only the holder's node.
        assert len(await other.get_children(PATH)) == 1
        assert await contender.try_acquire() is False
        assert len(await other.get_children(PATH)) == 1
        assert not contender.is_held
    # The object stays usable after a timeout.
    async with contender.acquire(timeout=2.0):
        assert contender.is_held
    await gone(zk, PATH)


async def test_reentrant_in_the_same_task(zk: aiozklock.ZooKeeperClient) -> None:
    lock = zk.lock(PATH)
    async with lock:
        token = lock.fencing_token
        async with lock:
            assert lock.statistics().depth == 2
            assert lock.fencing_token == token
            assert len(await zk.get_children(PATH)) == 1
        assert lock.is_held
        assert lock.statistics().depth == 1
    await gone(zk, PATH)


async def test_other_tasks_of_the_process_wait_their_turn_fifo(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    lock = zk.lock(PATH)
    order: list[int] = []
    inside = 0

    async def worker(index: int, started: anyio.Event) -> None:
        nonlocal inside
        started.set()
        async with lock:
            inside += 1
            assert inside == 1
            order.append(index)
            await anyio.sleep(0.01)
            inside -= 1

    async with anyio.create_task_group() as tg:
        await lock.acquire()
        for index in range(5):
            started = anyio.Event()
            tg.start_soon(worker, index, started)
            await started.wait()
            # Each is queued (locally, where the order is decided) before the next starts.
            while lock.statistics().tasks_waiting < index + 1:
                await anyio.lowlevel.checkpoint()
        assert lock.statistics().tasks_waiting == 5
        await lock.release()
    assert order == [0, 1, 2, 3, 4]
    await gone(zk, PATH)


async def test_release_by_non_owner_raises(zk: aiozklock.ZooKeeperClient) -> None:
    lock = zk.lock(PATH)
    with pytest.raises(aiozklock.NotLockOwner) as excinfo:
        await lock.release()
    assert isinstance(excinfo.value, RuntimeError)
    await lock.acquire()
    result: list[BaseException] = []

    async def intruder() -> None:
        try:
            await lock.release()
        except aiozklock.NotLockOwner as exc:
            result.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(intruder)
    assert len(result) == 1
    assert lock.is_held
    await lock.release()
    with pytest.raises(aiozklock.NotLockOwner):
        _ = lock.fencing_token


async def test_fifo_across_sessions(
    zk: aiozklock.ZooKeeperClient, open_client: aiozklock.ZooKeeperClient
) -> None:
    clients = [await open_client() for _ in range(4)]
    order: list[int] = []
    holder = zk.lock(PATH)
    await holder.acquire()

    async def waiter(index: int) -> None:
        async with clients[index].lock(PATH, identifier=f"w{index}"):
            order.append(index)

    async with anyio.create_task_group() as tg:
        for index in range(4):
            tg.start_soon(waiter, index)
            # Wait until this waiter's node is queued, so the queue order is known.
            await wait_for_queue(zk, PATH, index + 2)
        contenders = await holder.contenders()
        assert [c.identifier for c in contenders] == [None, "w0", "w1", "w2", "w3"]
        assert contenders[0].is_holder
        assert not any(c.is_holder for c in contenders[1:])
        await holder.release()
    assert order == [0, 1, 2, 3]


async def test_contenders_report_identity_and_unicode_round_trips(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    lock = zk.lock(PATH, identifier="wörker-ß-錠")
    async with lock:
        (holder,) = await lock.contenders()
        assert holder.identifier == "wörker-ß-錠"
        assert holder.is_holder
        assert holder.fencing_token == lock.fencing_token
        assert holder.session_id == zk.session_id
        assert holder.pid is not None
        data, stat = await zk.get_data(f"{PATH}/{holder.node}")
        assert holder.enqueued_at == stat.ctime / 1000  # the server's clock, not written
        assert json.loads(data.decode())["identifier"] == "wörker-ß-錠"
    assert await lock.contenders() == []
    async with lock:  # the same task: the same data, encoded once
        (again,) = await lock.contenders()
        again_data, _ = await zk.get_data(f"{PATH}/{again.node}")
        assert again_data == data
        assert again.enqueued_at is not None
        assert again.enqueued_at >= stat.ctime / 1000


async def test_statistics_is_a_frozen_snapshot(zk: aiozklock.ZooKeeperClient) -> None:
    lock = zk.lock(PATH)
    before = lock.statistics()
    assert not before.locked
    assert before.acquisitions == 0
    async with lock:
        during = lock.statistics()
        assert during.locked
        assert during.owner is not None
        assert during.fencing_token == lock.fencing_token
        assert during.node is not None
    after = lock.statistics()
    assert after.acquisitions == 1
    assert not after.locked
    with pytest.raises(AttributeError):
        after.locked = True  # type: ignore[misc]


async def test_missing_parent_is_created_as_container(zk: aiozklock.ZooKeeperClient) -> None:
    lock = zk.lock("/a/b/c/d")
    async with lock:
        stat = await zk.exists("/a/b/c")
        assert stat is not None
    assert await zk.get_children("/a/b/c/d") == []


async def test_exclusion_with_many_sessions_checked_by_history(
    zk: aiozklock.ZooKeeperClient, open_client: aiozklock.ZooKeeperClient
) -> None:
    clients = 20
    cycles = 5
    history = History()
    store = FencedStore()
    sessions = [await open_client() for _ in range(clients)]

    async def worker(index: int) -> None:
        lock = sessions[index].lock(PATH, identifier=f"w{index}")
        for _ in range(cycles):
            async with lock:
                with history.section(f"w{index}", lock.fencing_token):
                    assert store.write(f"w{index}", lock.fencing_token, index)
                    await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        for index in range(clients):
            tg.start_soon(worker, index)
    report = history.check()
    assert report.ok, str(report)
    assert report.sections == clients * cycles
    assert not store.rejected
    await gone(zk, PATH)


async def test_waiter_cancelled_leaves_no_node_and_object_stays_usable(
    zk: aiozklock.ZooKeeperClient, open_client: aiozklock.ZooKeeperClient
) -> None:
    other = await open_client()
    waiter_lock = other.lock(PATH)
    waiting = anyio.Event()
    on_wait(waiter_lock._queue, waiting.set)
    async with zk.lock(PATH):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter_lock.acquire)
            await waiting.wait()  # cancelled while waiting, its watch armed
            tg.cancel_scope.cancel()
        assert not waiter_lock.statistics().locked
        assert len(await zk.get_children(PATH)) == 1
        assert session_of(other).watcher_count() == 0
    async with waiter_lock.acquire(timeout=2):
        assert waiter_lock.is_held
    await gone(zk, PATH)


async def test_infinite_timeout_means_wait_forever(zk: aiozklock.ZooKeeperClient) -> None:
    async with zk.lock(PATH).acquire(timeout=math.inf) as lock:
        assert lock.is_held


async def test_acquire_result_is_a_coroutine_and_a_context_manager(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    lock = zk.lock(PATH)
    unused = lock.acquire()
    assert isinstance(unused, collections.abc.Coroutine)
    unused.close()  # never driven: nothing to close, no "never awaited" warning
    results: list[bool] = []

    async def holder() -> None:
        await lock.acquire()
        results.append(lock.is_held)
        await lock.release()

    async with anyio.create_task_group() as tg:
        tg.start_soon(holder)
    assert results == [True]
    await gone(zk, PATH)


@pytest.mark.parametrize("fault", ["delete-reply-lost", "every-request-delayed"])
async def test_a_timeout_is_not_stretched_by_a_slow_or_silent_server(
    fault: str, zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    """Its time up, an acquire neither sends more nor waits for its cleanup: it took half the
    session timeout more when the reply to its delete was lost (a write of a session that
    moved to another server), and two round trips more when every request was slow."""
    session_timeout, timeout, delay = 10.0, 1.0, 2.0
    contender = (await open_client(proxy, session_timeout=session_timeout)).lock(PATH)
    async with zk.lock(PATH):
        if fault == "delete-reply-lost":
            proxy.arm_drop_after([Opcode.DELETE], reset=False)
            bound = timeout + session_timeout / 4
        else:
            proxy.set_delay(delay)
            bound = delay + timeout  # one round trip is needed: it finds the lock held
        started = time.monotonic()
        with anyio.fail_after(session_timeout + 5), pytest.raises(aiozklock.LockTimeout):
            await contender.acquire(timeout=timeout)
        elapsed = time.monotonic() - started
        proxy.set_delay(0)
        with anyio.fail_after(5):  # the contender's node is gone, the holder's stays
            await wait_for_children(zk, PATH, lambda children: len(children) == 1)
    assert elapsed < bound, elapsed
    assert proxy.count(Opcode.DELETE) == 1  # the cleanup: written once, not resent
