"""``RedisFence`` when its key is gone (issue 30, item 2): the fence fails closed, and only
``recover()``, at a floor read from ZooKeeper, lets writes in again, and never one with a
token issued before the floor. On a real ``redis-server`` and a real ZooKeeper."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import redis.asyncio
from redis.exceptions import ResponseError

import aiozklock
from aiozklock import StaleFencingToken
from aiozklock.fencing import RedisFence
from aiozklock.testing import RedisServer

pytestmark = [pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py has no trio client


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    # A database of this file's own: FLUSHDB below must not touch the other tests' keys.
    connection = redis.asyncio.from_url(redis_url, db=9)
    try:
        yield connection
    finally:
        await connection.aclose()


@pytest.fixture
def key() -> str:
    return f"aiozklock-test:{uuid.uuid4().hex[:12]}"


def stored(token: int, value: bytes = b"v") -> dict[str, bytes]:
    """The fence's documented layout (one hash: value, token as 19 digits)."""
    return {"value": value, "token": b"%019d" % token}


async def refused(write: Awaitable[object]) -> StaleFencingToken:
    with pytest.raises(StaleFencingToken) as caught:
        await write
    return caught.value


async def lose_by_del(client: redis.asyncio.Redis, key: str) -> None:
    await client.delete(key)


async def lose_by_flush(client: redis.asyncio.Redis, key: str) -> None:
    await client.flushdb()


LOSSES: dict[str, Callable[[redis.asyncio.Redis, str], Awaitable[None]]] = {
    "DEL": lose_by_del,
    "FLUSHDB": lose_by_flush,
}


@pytest.mark.parametrize("loss", list(LOSSES))
async def test_a_lost_key_refuses_every_token_until_recovered_at_a_zookeeper_floor(
    client: redis.asyncio.Redis, key: str, zk: aiozklock.ZooKeeperClient, loss: str
) -> None:
    fence = RedisFence(client)
    await client.hset(key, mapping=stored(200, b"the holder of 200"))
    await refused(fence.set(key, b"stale", 100))  # the fence works while its key is there
    await LOSSES[loss](client, key)

    # The report: after the loss, a write with 100 landed. Fail closed instead.
    for token in (100, 200, 300):
        error = await refused(fence.set(key, b"after the loss", token))
        assert (error.token, error.newer) == (token, None)
        await refused(fence.advance(key, token))
        await refused(fence.delete(key, token))
    assert await client.exists(key) == 0  # refusals write nothing, not even a token

    # A holder whose token was issued before the recovery: refused after it as well.
    async with zk.lock("/locks/orders/157") as before:
        floor = await fence.recover(key, zk)
        assert floor > before.fencing_token
        assert await fence.get(key) is None  # the value is gone with the key
        error = await refused(fence.set(key, b"issued before the floor", before.fencing_token))
        assert error.newer == floor
        await refused(fence.set(key, b"just below the floor", floor - 1))
    # A new grant's token is above the floor: accepted.
    async with zk.lock("/locks/orders/157") as after:
        new_token = after.fencing_token
        assert new_token > floor
        await fence.set(key, b"the new holder", new_token)
    assert await fence.get(key) == (b"the new holder", new_token)


async def test_the_refusal_says_what_happened_and_what_to_do(
    client: redis.asyncio.Redis, key: str
) -> None:
    error = await refused(RedisFence(client).set(key, b"v", 5))  # never written: missing
    assert isinstance(error, aiozklock.FenceMissing)
    assert isinstance(error, aiozklock.LockLost)  # leaving the lock's body is the answer
    assert (error.resource, error.token, error.newer) == (key, 5, None)
    message = str(error)
    for words in (key, "missing", "evict", "recover(", "acquire"):
        assert words in message, message
    # Pickled and rebuilt (multiprocessing) as itself, with its message.
    import pickle

    again = pickle.loads(pickle.dumps(error))
    assert type(again) is aiozklock.FenceMissing
    assert str(again) == message


async def test_recover_never_lowers_a_token_and_raises_an_older_one_to_the_floor(
    client: redis.asyncio.Redis, key: str, zk: aiozklock.ZooKeeperClient
) -> None:
    """The same call after a failover to a replica that had an older token: it fences
    every token issued before it, and leaves a newer one (and the value) alone."""
    fence = RedisFence(client)
    await zk.ensure_path("/")  # the test's chroot
    # A token of the past, as a replica that missed the newest writes would hold.
    earlier = await fence.recover(key + ":other", zk)
    await client.hset(key, mapping=stored(earlier, b"kept"))
    floor = await fence.recover(key, zk)
    assert floor > earlier
    assert await fence.get(key) == (b"kept", floor)
    await refused(fence.set(key, b"stale", earlier))
    newer = 1 << 62
    await fence.set(key, b"newest", newer)
    assert await fence.recover(key, zk) == newer  # a floor now is below it: unchanged
    assert await fence.get(key) == (b"newest", newer)


async def test_recover_reads_the_floor_under_the_given_path_and_leaves_no_node(
    client: redis.asyncio.Redis, key: str, zk: aiozklock.ZooKeeperClient
) -> None:
    await zk.ensure_path("/")  # the test's chroot
    await zk.create("/app")
    fence = RedisFence(client)
    first = await fence.recover(key, zk, under="/app")
    await client.delete(key)
    second = await fence.recover(key, zk, under="/app")
    assert second > first  # each recovery is a ZooKeeper write of its own
    assert await zk.get_children("/app") == []
    with pytest.raises(aiozklock.NoNodeError):
        await fence.recover(key, zk, under="/no/such/parent")
    with pytest.raises(aiozklock.InvalidArgument):
        await fence.recover(key, "zk1:2181")  # type: ignore[arg-type]


async def fill(connection: redis.asyncio.Redis, filler: bytes) -> None:
    """Write filler keys until the server refuses one (100 MB at most)."""
    for index in range(25_000):
        await connection.set(f"filler:{index}", filler)


async def test_eviction_under_maxmemory_is_a_loss_and_noeviction_keeps_the_fence() -> None:
    """A real eviction: a server of the test's own, its memory filled past maxmemory."""
    with RedisServer() as server:
        connection = redis.asyncio.from_url(server.url)
        try:
            fence = RedisFence(connection)
            await connection.hset("fenced", mapping=stored(200))
            await connection.config_set("maxmemory", str(4 << 20))
            await connection.config_set("maxmemory-policy", "allkeys-random")
            filler = b"x" * 4096
            index = 0
            while await connection.exists("fenced"):  # about 1000 writes evict it
                await connection.set(f"filler:{index}", filler)
                index += 1
            await refused(fence.set("fenced", b"stale", 100))

            await connection.flushall()
            await connection.hset("fenced", mapping=stored(200))
            await connection.config_set("maxmemory-policy", "noeviction")
            with pytest.raises(ResponseError, match="maxmemory"):  # refused, never evicted
                await fill(connection, filler)
            assert await connection.hgetall("fenced") == {
                b"value": b"v",
                b"token": b"%019d" % 200,
            }
            await refused(fence.set("fenced", b"stale", 100))  # still fenced
        finally:
            await connection.aclose()
