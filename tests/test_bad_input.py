"""Bad input never harms other work (issue 18, item 3).

An oversized request makes ZooKeeper drop the connection (its jute.maxbuffer, 1 MiB - 1 by
default, bounds every frame it reads), and with it every holding of the session. Each test
holds an unrelated ("innocent") lock on the same client, sends something too large beside
it, and checks that the call fails with ``InvalidArgument`` before anything is sent, that
nothing was created, that the innocent lock is still held (same session, its node there, its
body not cancelled), and that the next normal request works. Real ZooKeeper, through a
FaultProxy that counts what reaches the server; asyncio and trio.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import aiozklock
from aiozklock._wire._protocol import (
    CreateMode,
    Op,
    create_op,
    exists_op,
    get_children_op,
    set_data_op,
    set_watches_frames,
)
from aiozklock._wire._validation import MAX_PATH_BYTES, validate_path
from aiozklock.testing import FaultProxy, RawZooKeeperConnection, expire_session, session_of
from aiozklock.testing._rawclient_records import RawConnectionClosed
from tests.conftest import ClientFactory, gone

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

INNOCENT = "/locks/innocent"
DEFAULT_LIMIT = 1048575  # ZooKeeper's default jute.maxbuffer (0xfffff)
SHORT = 600  # characters: what a message with a shortened value stays under
PING = 11
#: The session of a client that is handed megabytes to check (200 paths of 6 KB, a 1.1 MB
#: path): checking them holds the event loop, seconds on a machine at load 30, and the
#: innocent lock's "no state change" must not hinge on that: the silence it would take to
#: suspend this session (half of it) is far beyond any such check.
BIG_INPUT_SESSION_TIMEOUT = 20.0


def requests_except_pings(proxy: FaultProxy) -> list[int]:
    return [r.opcode for r in proxy.requests if r.opcode != PING]


@dataclass
class Innocent:
    """A lock held by a task whose body waits until ``done``: what bad input must not harm.
    The body then checks, as the holder, that it still holds the lock."""

    zk: aiozklock.ZooKeeperClient
    held: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    cancelled: bool = False
    still_held: bool = False
    error: BaseException | None = None
    session_id: int = 0
    nodes: list[str] = field(default_factory=list)
    changes: list[aiozklock.StateChange] = field(default_factory=list)

    async def hold(self) -> None:
        try:
            async with self.zk.lock(INNOCENT) as lock:
                self.nodes = await self.zk.get_children(INNOCENT)
                self.held.set()
                try:
                    await self.done.wait()
                except anyio.get_cancelled_exc_class():
                    self.cancelled = True
                    raise
                self.still_held = lock.is_held
                assert await self.zk.get_children(INNOCENT) == self.nodes  # its node is there
        except Exception as exc:  # e.g. LockLost
            self.error = exc
            self.held.set()


@contextlib.asynccontextmanager
async def innocent_lock(zk: aiozklock.ZooKeeperClient) -> AsyncIterator[Innocent]:
    """Hold INNOCENT on ``zk`` around the block; then check it was never disturbed: held
    all along (same session, no state change, body not cancelled, its node still there)."""
    innocent = Innocent(zk)
    async with anyio.create_task_group() as tg:
        tg.start_soon(innocent.hold)
        with anyio.fail_after(10):
            await innocent.held.wait()
        assert innocent.error is None, repr(innocent.error)
        assert len(innocent.nodes) == 1
        innocent.session_id = zk.session_id
        remove = zk.add_listener(innocent.changes.append)
        try:
            yield innocent
        finally:
            innocent.done.set()
    remove()
    assert innocent.error is None, f"the innocent lock failed: {innocent.error!r}"
    assert not innocent.cancelled
    assert innocent.still_held
    assert zk.session_id == innocent.session_id
    assert zk.state is aiozklock.SessionState.CONNECTED
    assert innocent.changes == []


async def next_request_works(zk: aiozklock.ZooKeeperClient) -> None:
    with anyio.fail_after(10):
        async with zk.lock("/locks/next") as lock:
            assert lock.is_held
        await zk.ensure_path("/t/next")
        assert await zk.exists("/t/next") is not None


def _long(prefix: str, size: int) -> str:
    return prefix + "p" * (size - len(prefix))


# Each case: (what it does to the client, the parent to list afterwards, the limit its
# message must name).
Attempt = Callable[[aiozklock.ZooKeeperClient], Awaitable[object]]


async def _acquire(lock: Any) -> None:
    async with lock:
        raise AssertionError("acquired")


async def _lock_huge(zk: aiozklock.ZooKeeperClient) -> None:
    await _acquire(zk.lock(_long("/locks/", 1_100_000)))


async def _lock_500k(zk: aiozklock.ZooKeeperClient) -> None:
    await _acquire(zk.lock(_long("/locks/", 500_000)))


async def _create_500k_path(zk: aiozklock.ZooKeeperClient) -> None:
    await zk.create(_long("/t/", 500_000))


async def _children_500k_path(zk: aiozklock.ZooKeeperClient) -> None:
    await zk.get_children(_long("/t/", 500_000))


async def _create_path_plus_data(zk: aiozklock.ZooKeeperClient) -> None:
    # Each part within its own old bound (data at most 1 MiB - 4 KiB), the frame above 1 MiB.
    await zk.create(_long("/t/", 8000), b"x" * (1024 * 1024 - 4096))


async def _create_1mib_data(zk: aiozklock.ZooKeeperClient) -> None:
    await zk.create("/t/data", b"x" * (1024 * 1024))


async def _multi_lock_total(zk: aiozklock.ZooKeeperClient) -> None:
    # 200 paths of 6 KB each: each small, their one transaction 1.2 MB.
    paths = [_long(f"/locks/m{i}/", 6000) for i in range(200)]
    await _acquire(zk.multi_lock(paths))


CASES: dict[str, tuple[Attempt, str, int]] = {
    "lock path 1.1 MB": (_lock_huge, "/locks", MAX_PATH_BYTES),
    "lock path 500 KB": (_lock_500k, "/locks", MAX_PATH_BYTES),
    "create path 500 KB": (_create_500k_path, "/t", MAX_PATH_BYTES),
    "get_children path 500 KB": (_children_500k_path, "/t", MAX_PATH_BYTES),
    "create path 8 KB + data 1 MiB - 4 KiB": (_create_path_plus_data, "/t", DEFAULT_LIMIT),
    "create data 1 MiB": (_create_1mib_data, "/t", DEFAULT_LIMIT),
    "multi-lock of 200 paths of 6 KB": (_multi_lock_total, "/locks", DEFAULT_LIMIT),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_an_oversized_request_is_refused_and_harms_nothing(
    proxy: FaultProxy, open_client: ClientFactory, case: str
) -> None:
    attempt, parent, limit = CASES[case]
    zk = await open_client(proxy, session_timeout=BIG_INPUT_SESSION_TIMEOUT)
    await zk.ensure_path("/t")
    async with innocent_lock(zk):
        before = sorted(await zk.get_children(parent))
        proxy.reset_counters()
        with anyio.fail_after(10), pytest.raises(aiozklock.InvalidArgument) as excinfo:
            await attempt(zk)
        assert requests_except_pings(proxy) == []  # nothing was sent
        message = str(excinfo.value)
        assert len(message) < SHORT, message[:2000]
        assert str(limit) in message
        assert sorted(await zk.get_children(parent)) == before  # nothing was created
    await next_request_works(zk)


async def test_a_multi_lock_release_and_create_too_large_together_go_apart(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    # 40 paths of 14 KB: their creates fit one request (~570 KB), and so do their deletes,
    # but not both: the release and the re-acquire must go apart.
    zk = await open_client(proxy)
    paths = [_long(f"/locks/f{i}/", 14_000) for i in range(40)]
    multi = zk.multi_lock(paths)
    async with innocent_lock(zk):
        with anyio.fail_after(20):
            async with multi:
                first = {path: await zk.get_children(path) for path in paths}
            async with multi:  # at once: the release is not written yet
                assert multi.is_held
                second = {path: await zk.get_children(path) for path in paths}
    for path in paths:
        assert len(second[path]) == 1
        assert second[path] != first[path]
    await gone(zk, *paths)  # the last release was written: nothing of ours is left


# ---------------------------------------------------------------- the exact boundary


async def test_the_largest_request_is_accepted_and_one_byte_more_is_refused(
    zk_hosts: str, chroot: str, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    zk = await open_client(proxy)
    await zk.ensure_path("/t")
    session = session_of(zk)
    server_path = session.server_path("/t/edge")
    empty = create_op(server_path, b"", CreateMode.PERSISTENT, session.client_path)
    # The frame ZooKeeper compares with jute.maxbuffer: xid + opcode + request record.
    largest = DEFAULT_LIMIT - (4 + len(empty.body))
    async with innocent_lock(zk):
        proxy.reset_counters()
        with pytest.raises(aiozklock.InvalidArgument, match=f"{DEFAULT_LIMIT + 1} bytes"):
            await zk.create("/t/edge", b"x" * (largest + 1))
        assert requests_except_pings(proxy) == []
        with anyio.fail_after(20):
            assert await zk.create("/t/edge", b"x" * largest) == "/t/edge"
        data, stat = await zk.get_data("/t/edge")
        assert stat.data_length == len(data) == largest
    # The server's own limit is that one: one byte more and it drops the connection.
    async with await RawZooKeeperConnection.open(zk_hosts) as raw:
        with anyio.fail_after(20), pytest.raises(RawConnectionClosed):
            await raw.create(server_path + "2", b"x" * (largest + 1))


async def test_a_smaller_max_request_bytes_is_honoured(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    limit = 200_000
    zk = await open_client(proxy, max_request_bytes=limit)
    assert zk.max_request_bytes == limit
    await zk.ensure_path("/t")
    session = session_of(zk)
    empty = create_op(session.server_path("/t/a"), b"", CreateMode.PERSISTENT, str)
    largest = limit - (4 + len(empty.body))
    async with innocent_lock(zk):
        proxy.reset_counters()
        with pytest.raises(aiozklock.InvalidArgument, match=f"max_request_bytes={limit}"):
            await zk.create("/t/a", b"x" * (largest + 1))
        assert requests_except_pings(proxy) == []
        assert await zk.create("/t/a", b"x" * largest) == "/t/a"


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "1048575", None, 1024, 2**31, float("inf")])
def test_a_bad_max_request_bytes_is_refused(value: Any) -> None:
    with pytest.raises(aiozklock.InvalidArgument, match="max_request_bytes"):
        aiozklock.connect("localhost:2181", max_request_bytes=value)


def test_credentials_too_large_for_a_request_are_refused() -> None:
    with pytest.raises(aiozklock.InvalidArgument, match="max_request_bytes"):
        aiozklock.connect("localhost:2181", auth=[("digest", "user:" + "p" * 2_000_000)])


# ---------------------------------------------------------------- every way to send


async def test_every_way_to_send_refuses_an_oversized_request_and_sends_nothing(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    zk = await open_client(proxy)
    await zk.ensure_path("/t")
    session = session_of(zk)
    small = session.server_path("/t")
    huge = session.server_path(_long("/t/", 1_100_000))

    def woken(event: object) -> None:
        raise AssertionError("a refused request's watch fired")

    def told(result: object, error: object) -> None:
        raise AssertionError("a refused request's callback was called")

    ops: list[Op[Any]] = [exists_op(small), set_data_op(small, b"x" * DEFAULT_LIMIT)]
    async with innocent_lock(zk):
        watchers = session.watcher_count()
        generation = session.generation
        proxy.reset_counters()
        with pytest.raises(aiozklock.InvalidArgument, match="getChildren"):
            await session.call(get_children_op(huge, woken))
        with pytest.raises(aiozklock.InvalidArgument, match="setData"):
            await session.pipeline(ops)
        with pytest.raises(aiozklock.InvalidArgument, match="exists"):
            session.send([exists_op(huge)], generation=generation, on_done=told)
        with pytest.raises(aiozklock.InvalidArgument, match="setData"):
            session.send_soon(ops, generation=generation, on_done=told)
        await anyio.lowlevel.checkpoint()  # what send_soon queued would be written now
        assert session.watcher_count() == watchers
        assert session.generation == generation
        assert await zk.exists("/t") is not None
        assert requests_except_pings(proxy) == [3]  # that exists only


# ---------------------------------------------------------------- paths and messages


def test_a_path_is_bounded_in_utf8_bytes() -> None:
    assert validate_path(_long("/", MAX_PATH_BYTES))
    assert validate_path("/" + "é" * ((MAX_PATH_BYTES - 1) // 2))  # two bytes each
    for path in (_long("/", MAX_PATH_BYTES + 1), "/" + "é" * (MAX_PATH_BYTES // 2)):
        with pytest.raises(aiozklock.InvalidArgument, match=f"{MAX_PATH_BYTES}") as excinfo:
            validate_path(path)
        assert len(str(excinfo.value)) < SHORT


def test_set_watches_frames_fit_the_limit() -> None:
    limit = 128 * 1024
    paths = [_long(f"/w{i}/", 30_000) for i in range(12)]
    frames = set_watches_frames(0, paths[:4], paths[4:8], paths[8:], limit)
    assert len(frames) > 1
    for frame in frames:
        assert len(frame) - 4 <= limit  # without the length prefix, as the server counts


def test_an_invalid_argument_shortens_a_huge_path() -> None:
    with pytest.raises(aiozklock.InvalidArgument) as excinfo:
        validate_path(_long("/locks/", 1_200_000))
    assert len(str(excinfo.value)) < SHORT


async def test_messages_and_reprs_shorten_long_paths(
    zk_hosts: str, open_client: ClientFactory
) -> None:
    path = _long("/locks/", MAX_PATH_BYTES - 100)  # valid: the longest kind of path
    holder = await open_client()
    waiter = await open_client()
    lock = waiter.lock(path)
    assert len(repr(lock)) < SHORT
    with anyio.fail_after(20):
        async with holder.lock(path):
            with pytest.raises(aiozklock.LockTimeout) as timeout:
                await lock.acquire(timeout=0.2)
    assert len(str(timeout.value)) < SHORT, str(timeout.value)[:300]
    assert "not acquired" in str(timeout.value)
    session = session_of(waiter)

    async def hold_until_lost() -> None:
        async with lock:
            await expire_session(zk_hosts, session.session_id, session.password)
            await anyio.sleep_forever()

    with anyio.fail_after(20), pytest.raises(aiozklock.LockLost) as lost:
        await hold_until_lost()
    assert len(str(lost.value)) < SHORT, str(lost.value)[:300]
    assert "was lost" in str(lost.value)


def test_exception_messages_are_capped() -> None:
    huge = "/p" * 600_000
    for exc in (
        aiozklock.LockTimeout(f"lock {huge} not acquired in time"),
        aiozklock.InvalidArgument(f"bad {huge}"),
        aiozklock.NoNodeError(huge),
    ):
        assert len(str(exc)) < 2 * SHORT
