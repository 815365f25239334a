"""The reader's wake-ups on a real ZooKeeper (``_wire/_wake.py``): while a release's delete
(nobody awaits its reply) and the next acquire's create are in flight, the socket wakes the
reader only once both replies' worth of bytes are in; a holding or a watcher keeps it
woken for any byte; the end of the stream wakes it whatever the mark.

A FaultProxy holds the client's requests, so both are in flight for as long as the test
needs; the mark is the socket's own option (``SO_RCVLOWAT``), read back from the kernel.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Awaitable, Callable

import anyio
import pytest

import aiozklock
from aiozklock.testing import FaultProxy, Opcode, session_of
from tests.conftest import ClientFactory

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(60),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="epoll's low-water mark"),
]

PATH = "/reader-wakes"
LEAST_ANSWER = 20  # a frame's length and a reply header
HELD = 3600.0  # the proxy holds requests until told otherwise


@pytest.fixture(scope="module")
def zk_hosts(quiet_zk_hosts: str) -> str:
    """A quiet server (``quiet_zk_hosts``): the mark is raised only when the re-join is
    proven alone (no listing, no watch), which another session's transaction would fail."""
    return quiet_zk_hosts


def low_water(client: aiozklock.ZooKeeperClient) -> int:
    conn = session_of(client)._conn
    assert conn is not None
    return int(conn._socket.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT))


async def mark_in_flight(
    client: aiozklock.ZooKeeperClient,
    proxy: FaultProxy,
    lock: aiozklock.Lock,
    then: Callable[[], Awaitable[object]] | None = None,
) -> int:
    """Acquire ``lock``, then release it and acquire it again while the proxy holds both
    requests: the mark then. Runs ``then`` while they are still held, lets them through
    and returns once the second acquire was granted (and released)."""
    held: list[bool] = []

    async def cycle() -> None:
        await lock.acquire()
        proxy.set_delay(HELD)
        await lock.release()  # its delete is written; nobody awaits the reply
        proxy.reset_counters()
        released.set()
        await lock.acquire()
        held.append(lock.is_held)
        await lock.release()

    released = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(cycle)
        try:
            with anyio.fail_after(10):
                await released.wait()
                await proxy.wait_for_request(Opcode.CREATE2)
            mark = low_water(client)
            if then is not None:
                await then()
        finally:
            proxy.set_delay(0)
    assert held == [True]
    return mark


async def test_a_release_then_an_acquire_wake_the_reader_once(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    lock = client.lock(f"{PATH}/alone")
    async with lock:
        assert low_water(client) == 1  # a holding: every answer is read at once
    assert await mark_in_flight(client, proxy, lock) == 2 * LEAST_ANSWER
    assert low_water(client) == 1  # both read: nothing in flight


@pytest.mark.parametrize("needs", ["a holding", "a watcher"])
async def test_a_holding_or_a_watcher_keeps_the_reader_woken_for_any_byte(
    needs: str,
    proxy: FaultProxy,
    open_client: ClientFactory,
    zk: aiozklock.ZooKeeperClient,
) -> None:
    """A holding's proof needs the delete's answer when it comes, not one commit later; a
    waiter's notification may be shorter than the mark."""
    client = await open_client(proxy)
    lock = client.lock(f"{PATH}/cycled")
    async with anyio.create_task_group() as tg:
        if needs == "a holding":
            other = client.lock(f"{PATH}/held")
            async with other:
                pass
            await other.acquire()  # a re-join proven alone: no watch (``_alone.py``)
            assert not session_of(client)._watches.watching()
        else:
            await zk.lock(f"{PATH}/waited").acquire()
            waiter = client.lock(f"{PATH}/waited")
            tg.start_soon(waiter.acquire)
            await proxy.wait_for_request(Opcode.CREATE2)
        assert await mark_in_flight(client, proxy, lock) == 1
        tg.cancel_scope.cancel()
    if needs == "a holding":
        await other.release()


@pytest.mark.parametrize("rst", [False, True], ids=["fin", "rst"])
async def test_the_end_of_the_stream_wakes_a_reader_waiting_for_more_bytes(
    rst: bool, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    """The proxy closes the connection while the mark waits for two replies: the session
    sees the end at once (a connection error), not after half its timeout of silence, and
    the acquire completes on the next connection."""
    client = await open_client(proxy, session_timeout=20.0)
    reasons: list[str] = []
    client.add_listener(lambda change: reasons.append(change.reason))
    lock = client.lock(f"{PATH}/dropped")
    with anyio.fail_after(30):
        # What the proxy held is discarded with the connection.
        mark = await mark_in_flight(client, proxy, lock, then=lambda: proxy.drop_all(rst=rst))
    assert mark == 2 * LEAST_ANSWER
    assert reasons, "the session never saw the connection end"
    assert reasons[0].startswith("connection error"), reasons
