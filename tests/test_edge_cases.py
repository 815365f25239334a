"""Edge cases found in review, each pinned by a test against real ZooKeeper."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import anyio.abc
import pytest

import aiozklock
from aiozklock._recipes._core._names import nodes_of
from aiozklock.testing import FaultProxy, session_of
from tests.conftest import gone, on_wait

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

PATH = "/locks/orders/157"
ClientFactory = Callable[..., Awaitable[aiozklock.ZooKeeperClient]]
CLOSE = -11
CREATE2 = 15


async def test_acquire_in_an_already_cancelled_scope_is_just_cancelled(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    lock = zk.lock(PATH)
    # An existing lock path: the cleanup then lists it, finds nothing of ours, and must
    # cope with deleting nothing.
    await zk.ensure_path(PATH.rpartition("/")[0])
    await zk.create(PATH)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await lock.acquire()
    assert scope.cancelled_caught
    await gone(zk, PATH)
    async with lock.acquire(timeout=2):
        assert lock.is_held


async def test_cancelled_waiter_whose_cleanup_meets_close_is_still_just_cancelled(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    waiter = client.lock(PATH)
    await zk.lock(PATH).acquire()
    queued = anyio.Event()
    on_wait(waiter._queue, queued.set)
    waiter_scope = anyio.CancelScope()

    async def wait() -> None:
        with waiter_scope:
            await waiter.acquire()

    # A ClientClosed leaking out of the waiter would fail this task group.
    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        await queued.wait()
        proxy.set_delay(0.3)  # the cleanup delete stays in flight...
        proxy.reset_counters()
        waiter_scope.cancel()
        await proxy.wait_for_request(2)  # the cleanup's delete
        await client.close()  # ...while the client closes
    assert waiter_scope.cancelled_caught
    assert len(await zk.get_children(PATH)) == 1  # only the holder's node


async def test_connection_dying_during_close_still_closes_the_session(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy, session_timeout=10.0)
    session = session_of(client)
    await client.lock(PATH).acquire()
    proxy.set_delay(0.2)
    proxy.reset_counters()
    async with anyio.create_task_group() as tg:
        tg.start_soon(client.close)
        await proxy.wait_for_request(CLOSE)
        await proxy.drop_all()  # the close request dies with its connection
    proxy.set_delay(0)
    await gone(zk, PATH, within=10)
    # The session was closed by re-attaching, long before its 10 s expiry: before its own
    # valid_until, earlier than the server could expire it.
    assert aiozklock.clock() < session.valid_until


@pytest.fixture
async def garbage_server() -> AsyncIterator[str]:
    """A TCP server that answers any handshake with a truncated frame."""

    async def answer(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            try:
                await stream.receive()
                await stream.send(struct.pack(">i", 4) + b"\x00\x00\x00\x00")
                await anyio.sleep(5)
            except anyio.get_cancelled_exc_class():
                raise
            except Exception:
                pass

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, answer)
        yield f"127.0.0.1:{port}"
        tg.cancel_scope.cancel()


async def test_garbled_handshake_answer_is_a_failed_attempt(
    garbage_server: str, zk_hosts: str, chroot: str, proxy: FaultProxy
) -> None:
    with pytest.raises(aiozklock.ZooKeeperUnavailable):
        async with aiozklock.connect(garbage_server, connect_timeout=0.5):
            pass
    # With a real server in the list too, the client connects and survives reconnects that
    # try the garbage server first.
    async with aiozklock.connect(
        f"{proxy.address},{garbage_server}{chroot}", session_timeout=4.0
    ) as client:
        reconnected = anyio.Event()
        client.add_listener(
            lambda change: (
                reconnected.set() if change.state is aiozklock.SessionState.CONNECTED else None
            )
        )
        await proxy.drop_all()
        with anyio.fail_after(5):
            await reconnected.wait()
        await client.ensure_path("/probe")
        assert await client.exists("/probe") is not None


async def test_release_inside_the_block_does_not_corrupt_another_task(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    lock = zk.lock(PATH)
    b_inside = anyio.Event()
    a_may_exit = anyio.Event()
    b_done = anyio.Event()
    a_exited = anyio.Event()
    a_released = anyio.Event()
    errors: list[BaseException] = []

    async def task_a() -> None:
        try:
            async with lock:
                await lock.release()  # misuse: released by hand inside the block
                a_released.set()
                await a_may_exit.wait()
        except aiozklock.NotLockOwner as exc:
            errors.append(exc)
        finally:
            a_exited.set()

    async def task_b() -> None:
        await a_released.wait()  # B takes the lock only after A gave it up by hand
        async with lock:
            b_inside.set()
            await b_done.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(task_a)
        tg.start_soon(task_b)
        await b_inside.wait()
        a_may_exit.set()  # A leaves its block while B holds the lock
        await a_exited.wait()
        assert lock.statistics().locked  # B still holds it, unharmed
        b_done.set()
    assert len(errors) == 1  # A's misuse surfaced as NotLockOwner
    await gone(zk, PATH)


async def test_node_left_to_the_janitor_retires_the_guid(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy, session_timeout=6.0)
    waiter = client.lock(PATH)
    holder = zk.lock(PATH)
    await holder.acquire()
    queued = anyio.Event()
    on_wait(waiter._queue, queued.set)
    old_guid = waiter._queue.guid

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter.acquire)
        await queued.wait()
        proxy.blackhole(True, new="hang")
        await proxy.drop_all()  # disconnected: the cleanup cannot happen now
        tg.cancel_scope.cancel()
    assert waiter._queue.guid != old_guid
    assert len(nodes_of(await zk.get_children(PATH), old_guid)) == 1  # janitor's job now
    proxy.blackhole(False)
    await holder.release()
    async with waiter.acquire(timeout=5):
        assert waiter.is_held
    with anyio.fail_after(5):
        await gone(zk, PATH)  # the janitor deleted the old node too
