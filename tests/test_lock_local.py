"""The local side of a lock object: who owns it (statistics' ``owner``, an anyio ``TaskInfo``
built only when asked), its local queue of this process's tasks (FIFO, counted in
``tasks_waiting``, back to its cheap uncontended form once nobody waits), and the body
scopes of several tasks (one that released inside its body, then another's)."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

import aiozklock

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

PATH = "/test/lock-local"


async def test_statistics_owner_is_the_holding_tasks_task_info(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    lock = zk.lock(PATH)
    held, done = anyio.Event(), anyio.Event()
    holder: list[anyio.TaskInfo] = []

    async def hold() -> None:
        async with lock:
            holder.append(anyio.get_current_task())
            held.set()
            await done.wait()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(hold, name="the-holder")
        await held.wait()
        owner = lock.statistics().owner  # asked from another task: still the holder
        assert isinstance(owner, anyio.TaskInfo)
        assert owner == holder[0]
        assert owner.id == holder[0].id
        assert owner.name == holder[0].name
        assert owner != anyio.get_current_task()
        done.set()
    assert lock.statistics().owner is None


async def test_local_waiters_are_counted_and_served_in_order(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    lock = zk.lock(PATH)
    order: list[int] = []

    async def waiter(index: int) -> None:
        async with lock:
            order.append(index)

    await lock.acquire()
    async with anyio.create_task_group() as tasks:
        for index in range(3):
            tasks.start_soon(waiter, index)
            while lock.statistics().tasks_waiting < index + 1:
                await anyio.lowlevel.checkpoint()
        assert lock.statistics().tasks_waiting == 3
        await lock.release()
    assert order == [0, 1, 2]
    assert lock.statistics().tasks_waiting == 0
    assert await lock.try_acquire()  # free again, and taken at once (no local wait)
    assert lock.statistics().owner == anyio.get_current_task()
    await lock.release()
    assert lock.statistics().acquisitions == 5


async def test_a_body_left_after_its_release_does_not_touch_the_next_holders_body(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    lock = zk.lock(PATH)
    released, entered, left = anyio.Event(), anyio.Event(), anyio.Event()
    outcome: list[str] = []

    async def body() -> None:
        async with lock:
            await lock.release()
            released.set()
            await entered.wait()  # the second task is inside its own body now

    async def first() -> None:
        with pytest.raises(aiozklock.NotLockOwner):
            await body()
        left.set()

    async def second() -> None:
        await released.wait()
        async with lock:
            entered.set()
            await left.wait()
            assert lock.is_held  # its body was neither cancelled nor left for it
            outcome.append("held through")
        outcome.append("released")

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(first)
            tasks.start_soon(second)
    assert outcome == ["held through", "released"]
    assert not lock.statistics().locked
    assert await zk.get_children(PATH) == []
