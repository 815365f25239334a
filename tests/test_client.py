"""The client's lifecycle: close() from inside the block, close() while disconnected."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
import pytest

import aiozklock
from aiozklock.testing import FaultProxy, Opcode, session_of
from tests.conftest import gone, node_gone

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
    session = session_of(client)
    with anyio.fail_after(10):
        await client.close()
    # Closed on the server: the node went with the session, long before its 10 s expiry
    # (before the session's own valid_until, earlier than the server could expire it).
    await gone(zk, PATH, within=10)
    assert aiozklock.clock() < session.valid_until
    with anyio.fail_after(10):
        async with zk.lock(PATH):
            pass


async def test_close_while_a_background_job_runs_raises_nothing(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, chroot: str
) -> None:
    # A lock lost to a dropped connection leaves its node to the janitor, which deletes it
    # once reconnected; closing the client while that delete is in flight must not raise
    # out of the block.
    async with aiozklock.connect(proxy.address + chroot, session_timeout=4.0) as client:
        lock = client.lock(PATH)
        await lock.acquire()
        proxy.set_delay(0.3)  # the janitor's delete stays in flight after the reconnect
        proxy.reset_counters()
        await proxy.drop_all()
        with anyio.fail_after(5):
            await proxy.wait_for_request(Opcode.DELETE)
        assert not lock.statistics().locked  # lost, and left to the janitor
    # Leaving the client closed it with the job in flight, and nothing was raised.
    assert client.state is aiozklock.SessionState.CLOSED
    await gone(zk, PATH)


async def test_entered_in_one_task_and_exited_in_another(
    hosts: str, zk: aiozklock.ZooKeeperClient
) -> None:
    # What pytest-asyncio does with an async generator fixture (setup and teardown run in two
    # tasks): the client keeps no cancel scope of the entering task open meanwhile.
    client = aiozklock.connect(hosts)
    async with anyio.create_task_group() as tg:
        tg.start_soon(client.__aenter__)
    lock = client.lock(PATH)
    await lock.acquire()  # the entering task has ended
    node = await client.create("/entered", ephemeral=True)
    assert len(await zk.get_children(PATH)) == 1
    async with anyio.create_task_group() as tg:
        tg.start_soon(client.__aexit__, None, None, None)
    assert client.state is aiozklock.SessionState.CLOSED
    await node_gone(zk, node)  # closed on the server: its ephemerals went at once
    await gone(zk, PATH)
