"""multi (atomic transactions) and TTL nodes, against a real ZooKeeper, asyncio and trio.

multi: all or nothing, at one zxid (the reply header's, which is the created nodes' czxid),
with the failing operation reported by index. TTL nodes: created with CreateTTL, deleted by
the server once the TTL has passed (on a server that checks every 100 ms), refused with
Unimplemented by a server without extended types, and an out-of-range TTL refused before
anything is sent.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Iterator

import anyio
import pytest

import aiozklock
from aiozklock._exceptions import (
    BadVersionError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistencyError,
    UnimplementedError,
)
from aiozklock._wire import _protocol as proto
from aiozklock._wire._protocol import (
    CreateMode,
    EventType,
    MultiCheck,
    MultiCreate,
    MultiDelete,
    MultiSubOp,
    WatchedEvent,
    create_ttl_op,
    exists_op,
    multi_op,
)
from aiozklock.testing import ZooKeeperCluster, session_of

pytestmark = pytest.mark.timeout(60)

REAP_INTERVAL_MS = 100  # the server's TTL/container check interval on the reaping server
TTL_MS = 500


@pytest.fixture(scope="module")
def reaping_cluster() -> Iterator[ZooKeeperCluster]:
    """A standalone server that deletes expired TTL nodes every 100 ms (default: 60 s)."""
    jvm_properties = {"znode.container.checkIntervalMs": str(REAP_INTERVAL_MS)}
    with ZooKeeperCluster(jvm_properties=jvm_properties) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def no_ttl_cluster() -> Iterator[ZooKeeperCluster]:
    """A standalone server without extended types, hence without TTL nodes."""
    with ZooKeeperCluster(extra_config={"extendedTypesEnabled": "false"}) as cluster:
        yield cluster


async def persistent_parent(zk: aiozklock.ZooKeeperClient) -> str:
    """A persistent ``/t`` in the test's chroot: containers (``ensure_path``) may be reaped
    once emptied, and a test here empties its parent on purpose."""
    await zk.ensure_path("/")
    await zk.create("/t")
    return "/t"


def create_result_types(reply: bytes) -> list[int]:
    """The result types in a multi reply holding only create results (path, no stat)."""
    types: list[int] = []
    offset = proto.REPLY_HEADER_SIZE
    while True:
        result_type, done, _ = struct.unpack_from("!i?i", reply, offset)
        offset += 9
        if done:
            return types
        types.append(result_type)
        (size,) = struct.unpack_from("!i", reply, offset)
        offset += 4 + size


# ------------------------------------------------------------------ multi


@pytest.mark.anyio
async def test_multi_creates_all_nodes_at_the_reply_zxid(zk: aiozklock.ZooKeeperClient) -> None:
    session = session_of(zk)
    await persistent_parent(zk)
    mode = CreateMode.EPHEMERAL | CreateMode.SEQUENTIAL
    subops = [MultiCreate(session.server_path(f"/t/n{i}-"), b"x", mode) for i in range(3)]
    op = multi_op(subops, session.client_path)
    replies: list[bytes] = []
    parse = op.parse

    def capture(buf: bytes, offset: int) -> proto.MultiResult:
        replies.append(bytes(buf))
        return parse(buf, offset)

    op.parse = capture
    result = await session.call(op)

    assert result.ok
    assert result.failure is None
    # Plain creates: the server answers each with the path alone (type 1, no stat).
    assert create_result_types(replies[0]) == [proto.Opcode.CREATE] * 3
    # One transaction: the parent's child counter went 0, 1, 2 within it.
    assert result.results == ("/t/n0-0000000000", "/t/n1-0000000001", "/t/n2-0000000002")
    for path in result.results:
        assert isinstance(path, str)
        stat = await zk.exists(path)
        assert stat is not None
        assert stat.czxid == result.zxid  # the header zxid is the transaction's
        assert stat.ephemeral_owner == zk.session_id
    parent = await zk.exists("/t")
    assert parent is not None
    assert parent.pzxid == result.zxid


@pytest.mark.anyio
async def test_failed_multi_creates_nothing_and_names_the_failing_op(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    session = session_of(zk)
    await persistent_parent(zk)
    paths = ["/t/a", "/t/missing/b", "/t/c"]
    subops = [MultiCreate(session.server_path(path)) for path in paths]

    result = await session.call(multi_op(subops, session.client_path))

    assert not result.ok
    assert result.failure is not None
    index, error = result.failure
    assert index == 1
    assert isinstance(error, NoNodeError)
    assert error.path == "/t/missing/b"
    first, _, last = result.results
    assert isinstance(first, RolledBackError)
    assert first.path == "/t/a"
    assert isinstance(last, RuntimeInconsistencyError)
    assert last.path == "/t/c"
    for path in paths:
        assert await zk.exists(path) is None
    parent = await zk.exists("/t")
    assert parent is not None
    assert parent.cversion == 0  # no child was ever created, not even for a moment


@pytest.mark.anyio
async def test_multi_check_and_delete(zk: aiozklock.ZooKeeperClient) -> None:
    session = session_of(zk)
    await persistent_parent(zk)
    await zk.create("/t/d")
    await zk.create("/t/e")
    path = session.server_path

    done = await session.call(
        multi_op([MultiCheck(path("/t/e"), 0), MultiDelete(path("/t/d"))], session.client_path)
    )
    assert done.ok
    assert done.results == (None, None)
    assert await zk.exists("/t/d") is None
    parent = await zk.exists("/t")
    assert parent is not None
    assert parent.pzxid == done.zxid  # the deletion's zxid, from the reply header

    refused = await session.call(
        multi_op([MultiCheck(path("/t/e"), 7), MultiDelete(path("/t/e"))], session.client_path)
    )
    assert refused.failure is not None
    index, error = refused.failure
    assert index == 0
    assert isinstance(error, BadVersionError)
    assert isinstance(refused.results[1], RuntimeInconsistencyError)
    assert await zk.exists("/t/e") is not None

    versioned = await session.call(multi_op([MultiDelete(path("/t/e"), 0)], session.client_path))
    assert versioned.results == (None,)
    assert await zk.exists("/t/e") is None


@pytest.mark.anyio
async def test_multi_sees_its_own_earlier_operations(zk: aiozklock.ZooKeeperClient) -> None:
    """Create, check and delete the same node in one multi: each result parses by its type,
    and the node never shows."""
    session = session_of(zk)
    await persistent_parent(zk)
    node = session.server_path("/t/flash")
    subops: list[MultiSubOp] = [MultiCreate(node, b"data"), MultiCheck(node, 0), MultiDelete(node)]

    result = await session.call(multi_op(subops, session.client_path))

    assert result.results == ("/t/flash", None, None)
    assert await zk.exists("/t/flash") is None


@pytest.mark.anyio
async def test_empty_or_oversized_multi_is_refused_before_sending(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    with pytest.raises(aiozklock.InvalidArgument, match="at least one"):
        multi_op([], str)
    session = session_of(zk)
    await persistent_parent(zk)
    node = session.server_path("/t/big")
    # xid, opcode, multi header, path, data length, ACL, flags, end header: the rest is data.
    overhead = 4 + len(multi_op([MultiCreate(node, b"")], str).body)
    largest = session.max_request_bytes - overhead
    with pytest.raises(aiozklock.InvalidArgument, match="multi"):
        await session.call(multi_op([MultiCreate(node, b"x" * (largest + 1))], str))
    half = b"x" * (largest // 2 + 1)
    both = [MultiCreate(node, half), MultiCreate(node + "2", half)]
    with pytest.raises(aiozklock.InvalidArgument, match="multi"):
        await session.call(multi_op(both, str))
    assert await zk.get_children("/t") == []
    result = await session.call(multi_op([MultiCreate(node, b"x" * largest)], str))
    assert result.ok
    assert (await zk.get_data("/t/big"))[1].data_length == largest


# ------------------------------------------------------------------ TTL nodes


@pytest.mark.anyio
async def test_create_ttl_makes_a_persistent_node(zk: aiozklock.ZooKeeperClient) -> None:
    session = session_of(zk)
    await persistent_parent(zk)
    strip = session.client_path

    created = await session.call(create_ttl_op(session.server_path("/t/ttl"), b"v", 60_000, strip))
    assert created.path == "/t/ttl"
    assert created.stat.ephemeral_owner == 0  # the TTL is kept server-side, not shown
    assert created.stat.data_length == 1
    assert await zk.exists("/t/ttl") == created.stat

    longest = create_ttl_op(
        session.server_path("/t/seq-"), b"", proto.MAX_TTL_MS, strip, sequential=True
    )
    sequential = await session.call(longest)
    assert sequential.path == "/t/seq-0000000001"
    assert sequential.stat.ephemeral_owner == 0


@pytest.mark.anyio
async def test_ttl_node_is_deleted_by_the_server_after_its_ttl(
    reaping_cluster: ZooKeeperCluster,
) -> None:
    async with aiozklock.connect(reaping_cluster.hosts, session_timeout=4.0) as zk:
        session = session_of(zk)
        base = f"/ttl-{uuid.uuid4().hex[:12]}"
        await zk.create(base)
        node = f"{base}/node"
        deleted = anyio.Event()

        def on_event(event: WatchedEvent) -> None:
            if event.type is EventType.DELETED:
                deleted.set()

        started = time.monotonic()
        created = await session.call(create_ttl_op(node, b"", TTL_MS, session.client_path))
        stat = await session.call(exists_op(node, on_event))  # a watch, no write
        assert stat is not None
        assert stat.mzxid == created.stat.czxid  # untouched since its creation
        # Far below the default check interval (60 s): the JVM property took effect.
        with anyio.fail_after(TTL_MS / 1000 + 10):
            await deleted.wait()
        elapsed = time.monotonic() - started

        assert elapsed >= TTL_MS / 1000
        assert await zk.exists(node) is None


@pytest.mark.anyio
async def test_server_without_extended_types_answers_unimplemented(
    no_ttl_cluster: ZooKeeperCluster,
) -> None:
    async with aiozklock.connect(no_ttl_cluster.hosts, session_timeout=4.0) as zk:
        session = session_of(zk)
        path = f"/ttl-{uuid.uuid4().hex[:12]}"
        with pytest.raises(UnimplementedError) as excinfo:
            await session.call(create_ttl_op(path, b"", 1000, session.client_path))
        assert excinfo.value.code == -6
        assert excinfo.value.path == path
        assert await zk.exists(path) is None


@pytest.mark.parametrize("ttl_ms", [0, -1, proto.MAX_TTL_MS + 1, True, 1.5, "1000"])
def test_out_of_range_ttl_is_refused_before_sending(ttl_ms: object) -> None:
    # The builder raises: no request exists that could be sent.
    with pytest.raises(aiozklock.InvalidArgument, match="ttl_ms"):
        create_ttl_op("/a", b"", ttl_ms, str)  # type: ignore[arg-type]


def test_ttl_bounds_are_accepted() -> None:
    for ttl_ms in (1, proto.MAX_TTL_MS):
        assert create_ttl_op("/a", b"", ttl_ms, str).body.endswith(struct.pack("!q", ttl_ms))
