"""The client's lifecycle: close() from inside the block, close() while disconnected."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
import pytest

import aiozklock
from aiozklock.testing import FaultProxy
from tests.conftest import wait_for_queue

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

PATH = "/locks/orders/157"
ClientFactory = Callable[..., Awaitable[aiozklock.ZooKeeperClient]]


async def test_close_inside_the_block_does_not_cancel_the_caller(hosts: str) -> None:
    reached_after_close = False
    async with aiozklock.connect(hosts) as zk:
        assert zk.session_password
        assert zk.negotiated_timeout > 0
        await zk.close()
        await anyio.lowlevel.checkpoint()  # a checkpoint: a stray cancellation would land here
        reached_after_close = True
        assert zk.state is aiozklock.SessionState.CLOSED
        with pytest.raises(aiozklock.ClientClosed):
            zk.lock(PATH)
        with pytest.raises(aiozklock.ClientClosed):
            await zk.exists("/")
    assert reached_after_close


async def test_close_while_suspended_closes_the_session_on_the_server(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy, session_timeout=10.0)
    lock = client.lock(PATH)
    await lock.acquire()
    suspended = anyio.Event()
    client.add_listener(
        lambda change: suspended.set() if change.state is aiozklock.SessionState.SUSPENDED else None
    )
    proxy.blackhole(True, new="hang")
    await proxy.drop_all()
    with anyio.fail_after(5):
        await suspended.wait()
    assert len(await zk.get_children(PATH)) == 1  # the server still has the session
    proxy.blackhole(False)
    with anyio.fail_after(2):
        await client.close()
    # Closed on the server: the node went with the session, long before its 10 s expiry.
    assert await zk.get_children(PATH) == []
    with anyio.fail_after(1):
        async with zk.lock(PATH):
            pass


async def test_close_while_a_background_job_runs_raises_nothing(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, chroot: str
) -> None:
    # A contended acquisition starts a best-effort background job (recording acquired_at);
    # closing the client while its request is in flight must not raise out of the block.
    holder = zk.lock(PATH)
    await holder.acquire()
    async with aiozklock.connect(proxy.address + chroot, session_timeout=4.0) as client:
        lock = client.lock(PATH)
        acquired = anyio.Event()

        async def waiter() -> None:
            await lock.acquire()
            acquired.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await wait_for_queue(zk, PATH, 2)
            await holder.release()
            with anyio.fail_after(5):
                await acquired.wait()
            proxy.set_delay(0.3)  # the background job's requests stay in flight
            proxy.reset_counters()
            await proxy.wait_for_request(4)  # its getData
    # Leaving the client closed it with the job in flight, and nothing was raised.
    assert client.state is aiozklock.SessionState.CLOSED
    assert await zk.get_children(PATH) == []
