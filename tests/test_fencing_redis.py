"""``aiozklock.fencing.RedisFence`` on a real ``redis-server`` (the plugin's ``redis_url``).

redis-py's client is asyncio-only, so these tests run on asyncio alone.
"""

from __future__ import annotations

import random
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis.asyncio
from redis.exceptions import ResponseError

import aiozklock
from aiozklock import InvalidArgument, StaleFencingToken
from aiozklock.fencing import RedisFence
from aiozklock.testing._server import _free_ports

pytestmark = [pytest.mark.anyio]

ROOT = Path(__file__).resolve().parent.parent
TOP = (1 << 63) - 1  # the greatest token: a zxid is a Java long


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


@pytest.fixture
def fence(client: redis.asyncio.Redis) -> RedisFence:
    return RedisFence(client)


@pytest.fixture
async def key(client: redis.asyncio.Redis) -> str:
    """A key of this test's own on the shared server, holding a new fence at token 0.

    A missing key refuses every token (``tests/test_fencing_redis_loss.py``): an
    application creates it with ``recover()``, at a floor read from ZooKeeper. These tests
    use small tokens of their own, and no holder of the key exists before them: the fence's
    documented layout, at token 0, is written directly."""
    name = f"aiozklock-test:{uuid.uuid4().hex[:12]}"
    await client.hset(name, "token", "0" * 19)
    return name


async def refused(write: Awaitable[object]) -> StaleFencingToken:
    with pytest.raises(StaleFencingToken) as caught:
        await write
    return caught.value


async def test_set_stores_the_value_with_its_token(
    fence: RedisFence, client: redis.asyncio.Redis, key: str
) -> None:
    assert await fence.get(key) is None
    await fence.set(key, b"first", 7)
    assert await fence.get(key) == (b"first", 7)
    # The documented layout: one hash, the token as 19 zero-padded digits.
    assert await client.hgetall(key) == {b"value": b"first", b"token": b"0000000000000000007"}
    await fence.set(key, "a str is utf-8", 8)
    assert await fence.get(key) == (b"a str is utf-8", 8)


async def test_advance_is_a_fenced_read_that_fences_older_holders_at_once(
    fence: RedisFence, client: redis.asyncio.Redis, key: str
) -> None:
    # The new holder reads before it writes: no value yet, and its token is registered.
    assert await fence.advance(key, 5 << 32) is None
    assert await client.hget(key, "token") == b"%019d" % (5 << 32)
    # A stale holder's write between that read and the new holder's first write is refused.
    error = await refused(fence.set(key, b"stale", (4 << 32) + 9))
    assert error.newer == 5 << 32
    await fence.set(key, b"counted", 5 << 32)
    assert await fence.advance(key, 5 << 32) == b"counted"  # an equal token reads again
    assert (await refused(fence.advance(key, 3))).newer == 5 << 32
    assert await fence.get(key) == (b"counted", 5 << 32)  # a read changes no value


async def test_a_stale_token_is_refused_and_nothing_is_written(
    fence: RedisFence, client: redis.asyncio.Redis, key: str
) -> None:
    await fence.set(key, b"the new holder", 200)
    before = await client.hgetall(key)
    error = await refused(fence.set(key, b"the stale holder", 100))
    assert (error.resource, error.token, error.newer) == (key, 100, 200)
    assert isinstance(error, aiozklock.LockLost)
    assert await client.hgetall(key) == before
    assert await fence.get(key) == (b"the new holder", 200)


async def test_an_equal_token_writes_again_and_a_newer_one_takes_over(
    fence: RedisFence, key: str
) -> None:
    await fence.set(key, b"one", 100)
    await fence.set(key, b"two", 100)  # the same holder writing again
    assert await fence.get(key) == (b"two", 100)
    await fence.set(key, b"next holder", 101)
    assert await fence.get(key) == (b"next holder", 101)
    await refused(fence.set(key, b"previous holder", 100))


async def test_concurrent_writers_with_shuffled_tokens_end_with_the_highest(
    redis_url: str, key: str
) -> None:
    """200 writers over 4 connection pools, in random order, tokens on both sides of 2**53:
    whatever the interleaving, the last state is the greatest token's, and every refusal
    names a token newer than the writer's."""
    rng = random.Random(20)
    tokens = rng.sample(range(1 << 40), 100) + rng.sample(range(1 << 54, 1 << 62), 100)
    rng.shuffle(tokens)
    accepted: list[int] = []
    refusals: list[StaleFencingToken] = []
    clients = [redis.asyncio.from_url(redis_url) for _ in range(4)]
    try:
        fences = [RedisFence(client) for client in clients]

        async def write(index: int, token: int) -> None:
            try:
                await fences[index % 4].set(key, f"written with {token}", token)
            except StaleFencingToken as exc:
                refusals.append(exc)
            else:
                accepted.append(token)

        async with anyio.create_task_group() as group:
            for index, token in enumerate(tokens):
                group.start_soon(write, index, token)
        assert await fences[0].get(key) == (f"written with {max(tokens)}".encode(), max(tokens))
    finally:
        for client in clients:
            await client.aclose()
    assert sorted(accepted + [error.token for error in refusals]) == sorted(tokens)
    assert max(tokens) in accepted
    assert refusals, "200 shuffled writers were all in increasing order"
    assert all(error.newer > error.token for error in refusals if error.token is not None)
    assert all(error.newer is not None for error in refusals)


# (stored, stale): equal as doubles (what tonumber() makes of them) in each pair
PRECISION_PAIRS = [
    (2**60 + 1, 2**60),
    (2**53 + 1, 2**53),
    (TOP, TOP - 1),
    ((2**22 << 32) + 1, 2**22 << 32),  # a zxid of epoch 2**22 (the high 32 bits)
    (10**18, 10**18 - 1),  # the halves differ: 1000000000|000000000 vs 0999999999|999999999
]

NAIVE_SET = """
local stored = redis.call('HGET', KEYS[1], 'token')
if stored and tonumber(ARGV[1]) < tonumber(stored) then return {0, stored} end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return {1}
"""


@pytest.mark.parametrize(("stored", "stale"), PRECISION_PAIRS)
async def test_tokens_above_2_53_are_compared_exactly(
    fence: RedisFence, client: redis.asyncio.Redis, key: str, stored: int, stale: int
) -> None:
    await fence.set(key, b"newer", stored)
    error = await refused(fence.set(key, b"stale", stale))
    assert (error.token, error.newer) == (stale, stored)
    assert await fence.get(key) == (b"newer", stored)
    # The pitfall is real on this server: a script comparing tonumber()s lets it through.
    naive = client.register_script(NAIVE_SET)
    naive_key = key + ":naive"
    assert await naive(keys=[naive_key], args=[stored, b"newer"]) == [1]
    assert float(stored) == float(stale)
    assert await naive(keys=[naive_key], args=[stale, b"stale"]) == [1]


async def test_delete_leaves_a_tombstone_that_still_refuses_stale_writers(
    fence: RedisFence, client: redis.asyncio.Redis, key: str
) -> None:
    assert await fence.delete(key, 5) is False  # nothing there: the token is recorded
    await fence.set(key, b"value", 10)
    await refused(fence.delete(key, 9))
    assert await fence.get(key) == (b"value", 10)
    assert await fence.delete(key, 11) is True
    assert await fence.get(key) is None
    assert await client.hgetall(key) == {b"token": b"0000000000000000011"}
    error = await refused(fence.set(key, b"stale", 10))
    assert error.newer == 11
    await fence.set(key, b"back", 11)
    assert await fence.get(key) == (b"back", 11)


async def test_a_key_that_is_not_a_fence_is_an_error_and_stays_as_it_was(
    fence: RedisFence, client: redis.asyncio.Redis, key: str
) -> None:
    await client.set(key + ":string", b"plain")
    await client.hset(key + ":hash", mapping={"field": b"x"})
    await client.hset(key + ":bad-token", mapping={"token": b"12", "value": b"v"})
    for other in ("string", "hash", "bad-token"):
        with pytest.raises(ResponseError):
            await fence.set(f"{key}:{other}", b"v", 1)
    assert await client.get(key + ":string") == b"plain"
    assert await client.hgetall(key + ":hash") == {b"field": b"x"}
    await client.hset(key + ":hash", "value", b"not fenced")
    with pytest.raises(ValueError, match="no fencing token"):
        await fence.get(key + ":hash")


async def test_the_script_is_loaded_again_after_script_flush(
    fence: RedisFence, client: redis.asyncio.Redis, key: str
) -> None:
    """EVALSHA first; NOSCRIPT (a restarted or failed-over server) loads it again."""
    await fence.set(key, b"one", 1)
    await client.script_flush()
    await fence.set(key, b"two", 2)
    await refused(fence.set(key, b"stale", 1))
    assert await fence.get(key) == (b"two", 2)


async def test_a_decoding_client_reads_str(redis_url: str, key: str) -> None:
    client = redis.asyncio.from_url(redis_url, decode_responses=True)
    try:
        fence = RedisFence(client)
        await fence.set(key, "text", TOP)
        assert await fence.get(key) == ("text", TOP)
        assert (await refused(fence.set(key, "stale", TOP - 1))).newer == TOP
    finally:
        await client.aclose()


BAD_CALLS: list[tuple[str, Callable[[RedisFence], Awaitable[object]]]] = [
    ("empty key", lambda f: f.set("", b"v", 1)),
    ("bytes key", lambda f: f.set(b"k", b"v", 1)),  # type: ignore[arg-type]
    ("None key", lambda f: f.set(None, b"v", 1)),  # type: ignore[arg-type]
    ("int value", lambda f: f.set("k", 5, 1)),  # type: ignore[arg-type]
    ("None value", lambda f: f.set("k", None, 1)),  # type: ignore[arg-type]
    ("bytearray value", lambda f: f.set("k", bytearray(b"v"), 1)),  # type: ignore[arg-type]
    ("str token", lambda f: f.set("k", b"v", "5")),  # type: ignore[arg-type]
    ("float token", lambda f: f.set("k", b"v", 5.0)),  # type: ignore[arg-type]
    ("bool token", lambda f: f.set("k", b"v", True)),
    ("None token", lambda f: f.set("k", b"v", None)),  # type: ignore[arg-type]
    ("negative token", lambda f: f.set("k", b"v", -1)),
    ("token 2**63", lambda f: f.set("k", b"v", 1 << 63)),
    ("delete: empty key", lambda f: f.delete("", 1)),
    ("delete: negative token", lambda f: f.delete("k", -1)),
    ("delete: str token", lambda f: f.delete("k", "1")),  # type: ignore[arg-type]
    ("get: empty key", lambda f: f.get("")),
    ("get: int key", lambda f: f.get(1)),  # type: ignore[arg-type]
]


def command_calls(stats: dict[str, Any]) -> dict[str, int]:
    return {name: int(stat["calls"]) for name, stat in stats.items() if name != "cmdstat_info"}


@pytest.mark.parametrize("call", [call for _, call in BAD_CALLS], ids=[n for n, _ in BAD_CALLS])
async def test_bad_input_is_refused_before_any_command(
    client: redis.asyncio.Redis, call: Callable[[RedisFence], Awaitable[object]]
) -> None:
    # Nothing listens on this port: a command would fail with ConnectionError instead.
    [port] = _free_ports(1)
    nowhere = redis.asyncio.Redis(port=port, socket_connect_timeout=1)
    try:
        with pytest.raises(InvalidArgument):
            await call(RedisFence(nowhere))
    finally:
        await nowhere.aclose()
    # And a real server saw no command of it (INFO itself aside).
    before = command_calls(await client.info("commandstats"))
    with pytest.raises(InvalidArgument):
        await call(RedisFence(client))
    assert command_calls(await client.info("commandstats")) == before


async def test_a_synchronous_client_or_a_pipeline_is_refused(client: redis.asyncio.Redis) -> None:
    import redis as sync_redis

    with pytest.raises(InvalidArgument, match=r"redis\.asyncio"):
        RedisFence(sync_redis.Redis())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="Pipeline"):
        RedisFence(client.pipeline())
    with pytest.raises(InvalidArgument, match=r"not builtins\.str"):
        RedisFence("redis://localhost")  # type: ignore[arg-type]


LAZY_CHECK = """
import sys
import aiozklock
import aiozklock.fencing
import aiozklock.testing
import aiozklock.testing.pytest_plugin
assert "redis" not in sys.modules, sorted(m for m in sys.modules if m.startswith("redis"))
from aiozklock.fencing import RedisFence
print(RedisFence.__module__, "redis" in sys.modules)
"""


def test_importing_aiozklock_and_its_fencing_package_loads_no_redis() -> None:
    result = subprocess.run(
        [sys.executable, "-c", LAZY_CHECK],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    # Even the fence's module loads redis-py only when a fence is made.
    assert result.stdout.split() == ["aiozklock.fencing._redis", "False"]


async def test_the_cost_benchmark_measures_both_variants(redis_url: str) -> None:
    from benchmarks import redis_fence_cost

    measured = await redis_fence_cost.measure(redis_url, ops=100, rounds=2)
    assert {variant: len(times) for variant, times in measured.rounds.items()} == {
        "set": 2,
        "fenced": 2,
    }
    assert all(wall > 0 for times in measured.rounds.values() for wall, _ in times)
    assert set(measured.server_us) == {"set", "fenced"}
    assert "fenced" in redis_fence_cost.report(measured)
