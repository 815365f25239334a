"""The client's lifecycle: close() from inside the block, close() while disconnected."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
import pytest

import aiozklock
from aiozklock.testing import FaultProxy

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
