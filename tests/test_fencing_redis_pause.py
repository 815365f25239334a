"""Kleppmann's scenario on a real Redis: a holder process is SIGSTOPped past its ZooKeeper
session, the lock is granted to another, and the paused holder, resumed, writes with its old
token: ``RedisFence`` refuses every such write, and the new holder's data stays."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import AsyncIterator

import anyio
import pytest
import redis.asyncio

from aiozklock.fencing import RedisFence
from aiozklock.testing import RawZooKeeperConnection
from tests.conftest import ClientFactory, gone
from tests.test_faults import STEADY_TIMEOUT, TIMEOUT, DeletionWatch, observer, report
from tests.test_pause import ChildLines, open_holder

pytestmark = [pytest.mark.anyio]

__all__ = ["observer"]  # a fixture, imported to be used here

PATH = "/locks/redis-pause"
STALE_WRITES = 5


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py has no trio client


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    connection = redis.asyncio.from_url(redis_url)
    try:
        yield connection
    finally:
        await connection.aclose()


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_a_paused_holders_writes_are_refused_by_redis_after_a_new_grant(
    zk_hosts: str,
    chroot: str,
    open_client: ClientFactory,
    observer: RawZooKeeperConnection,
    redis_url: str,
    client: redis.asyncio.Redis,
) -> None:
    fence = RedisFence(client)
    key = f"aiozklock-test:{uuid.uuid4().hex[:12]}"
    other = await open_client(session_timeout=STEADY_TIMEOUT)
    await other.ensure_path("/")  # the test's chroot, where the floor's probe goes
    await fence.recover(key, other)  # a new key: created at a floor, before any grant
    process = await open_holder(
        "_redis_pause_holder",
        zk_hosts + chroot,
        PATH,
        str(TIMEOUT),
        redis_url,
        key,
        str(STALE_WRITES),
    )
    other_lock = other.lock(PATH, identifier="other")
    try:
        lines = ChildLines(process)
        with anyio.fail_after(30):  # a hang bound: a Python process starts, connects, acquires
            acquired = await lines.next()
            written = await lines.next()
        assert (acquired["event"], written["event"]) == ("acquired", "written")
        old_token: int = acquired["token"]
        assert await fence.get(key) == (b"before the pause", old_token)

        deletion = DeletionWatch(observer, f"{chroot}{PATH}/{acquired['node']}")
        await deletion.arm()
        os.kill(process.pid, signal.SIGSTOP)
        with anyio.fail_after(5 * TIMEOUT):  # a hang bound
            await deletion.run()  # the server expired the paused holder's session
        with anyio.fail_after(5):
            await other_lock.acquire()
        new_token = other_lock.fencing_token
        assert new_token > old_token
        await fence.set(key, b"the new holder", new_token)

        await process.stdin.send(b"\n")  # read by the child as soon as it runs again
        os.kill(process.pid, signal.SIGCONT)
        with anyio.fail_after(20):  # a hang bound
            writes = [await lines.next() for _ in range(STALE_WRITES)]
            assert (await lines.next())["event"] == "exit"
        assert [write["accepted"] for write in writes] == [False] * STALE_WRITES
        assert {write["newer"] for write in writes} == {new_token}
        assert await fence.get(key) == (b"the new holder", new_token)
        report("redis-fence-F9", stale_writes_refused=len(writes), stale_writes_accepted=0)
        await other_lock.release()
        with anyio.fail_after(20):  # a hang bound
            assert await process.wait() == 0
        await gone(other, PATH)
    finally:
        if process.returncode is None:
            os.kill(process.pid, signal.SIGCONT)
            process.kill()
            await process.wait()
