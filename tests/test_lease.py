"""The TTL lease lock, against a real ZooKeeper that reaps expired TTL nodes every 100 ms
(asyncio and trio).

Exclusion across sessions, 1 round trip when free, the lease outliving its holder's session
and re-attached by ``holder_id`` with the same fencing token, expiry by the server after the
TTL (never earlier), renewal beyond several TTLs, loss when the node is changed or deleted
by hand, a stale ex-holder that can neither renew nor delete the new holder's node, nothing
left behind by time-outs and cancellations, bad arguments and a server without TTL nodes
refused before any waiting; faults: lost create/renew/delete replies, a partition longer
than the TTL.
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack
from typing import Any

import anyio
import pytest

import aiozklock
from aiozklock import LockLost, LockTimeout, NotLockOwner, TTLNotSupported
from aiozklock._exceptions import UnimplementedError
from aiozklock._wire._protocol import EventType, WatchedEvent, exists_op, set_data_op
from aiozklock.testing import (
    FaultProxy,
    History,
    Opcode,
    ZooKeeperCluster,
    expire_session,
    session_of,
)
from tests._clocks import on_monotonic

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

REAP_INTERVAL = 0.1  # seconds: the server's TTL check interval (default 60 s)
PATH = "/leases/job"
NODE = f"{PATH}/lease"
# A proxy delay that never runs out by itself: the test lifts it once the fault is in place.
HOLD = 3600.0
# The TTL of the tests that release their leases (never wait for an expiry): long, so that
# no renewal deadline (0.9 of it) is at stake when a loaded machine stalls the keeper.
TTL = 10.0


@pytest.fixture(scope="module")
def lease_cluster() -> Iterator[ZooKeeperCluster]:
    """A standalone server that deletes expired TTL nodes every 100 ms."""
    jvm = {"znode.container.checkIntervalMs": str(int(REAP_INTERVAL * 1000))}
    with ZooKeeperCluster(size=1, jvm_properties=jvm) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def no_ttl_cluster() -> Iterator[ZooKeeperCluster]:
    """A standalone server without extended types, hence without TTL nodes."""
    with ZooKeeperCluster(size=1, extra_config={"extendedTypesEnabled": "false"}) as cluster:
        yield cluster


@pytest.fixture
async def lease_proxy(lease_cluster: ZooKeeperCluster) -> AsyncIterator[FaultProxy]:
    async with FaultProxy(lease_cluster.hosts) as fault_proxy:
        yield fault_proxy


Open = Callable[..., Any]


@pytest.fixture
async def open_client(lease_cluster: ZooKeeperCluster) -> AsyncIterator[Open]:
    """``await open_client(proxy=None)``: a client (its own session) in this test's chroot on
    the reaping server. Request ``lease_proxy`` before this fixture (teardown order)."""
    chroot = f"/lease-test-{uuid.uuid4().hex[:12]}"
    async with AsyncExitStack() as stack:

        async def factory(proxy: FaultProxy | None = None) -> aiozklock.ZooKeeperClient:
            address = proxy.address if proxy is not None else lease_cluster.hosts
            client = aiozklock.connect(address + chroot, session_timeout=4.0)
            return await stack.enter_async_context(client)

        yield factory


async def node_identity(zk: aiozklock.ZooKeeperClient) -> tuple[dict[str, Any], int, int]:
    """The lease node's data (JSON), czxid and version."""
    data, stat = await zk.get_data(NODE)
    return json.loads(data), stat.czxid, stat.version


async def wait_deleted(zk: aiozklock.ZooKeeperClient, path: str) -> None:
    """Wait for the server's deletion event on ``path`` (no polling)."""
    session = session_of(zk)
    deleted = anyio.Event()

    def on_event(event: WatchedEvent) -> None:
        if event.type is EventType.DELETED:
            deleted.set()

    if await session.call(exists_op(session.server_path(path), on_event)) is None:
        return
    await deleted.wait()


# ------------------------------------------------------------------ core behaviour


async def test_exclusion_across_sessions(open_client: Open) -> None:
    clients = [await open_client() for _ in range(3)]
    history = History()

    async def worker(name: str, zk: aiozklock.ZooKeeperClient) -> None:
        lease = zk.lease_lock(PATH, TTL, identifier=name)
        for _ in range(3):
            async with lease:
                with history.section(name, lease.fencing_token):
                    await anyio.sleep(0.01)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for i, zk in enumerate(clients):
                tg.start_soon(worker, f"c{i}", zk)

    report = history.check()
    assert report.ok, str(report)
    assert report.sections == 9
    assert await clients[0].exists(NODE) is None  # every grant was released


async def test_free_acquire_is_one_round_trip(lease_proxy: FaultProxy, open_client: Open) -> None:
    zk = await open_client(lease_proxy)
    await zk.ensure_path(PATH)
    lease = zk.lease_lock(PATH, TTL)

    def sent() -> list[int]:
        return [r.opcode for r in lease_proxy.requests if r.opcode != Opcode.PING]

    with anyio.fail_after(10):
        lease_proxy.reset_counters()
        await lease.acquire()
        assert sent() == [Opcode.CREATE_TTL]
        token = lease.fencing_token
        lease_proxy.reset_counters()
        await lease.release()
        assert sent() == [Opcode.DELETE]
    stat = await zk.exists(NODE)
    assert stat is None
    assert token > 0


async def test_reentrant_with_czxid_token_and_json_data(open_client: Open) -> None:
    zk = await open_client()
    lease = zk.lease_lock(PATH, TTL, holder_id="worker-7", identifier="billing")
    with anyio.fail_after(10):
        async with lease:
            async with lease:
                assert lease.statistics().depth == 2
                assert lease.is_held
                data, czxid, _ = await node_identity(zk)
                assert lease.fencing_token == czxid
                assert data["holder_id"] == "worker-7"
                assert data["identifier"] == "billing"
                assert data["ttl"] == TTL
                assert isinstance(data["pid"], int)
                assert "host" in data
                now = aiozklock.clock()
                assert now < lease.valid_until < lease.expires_at <= now + TTL
            assert lease.statistics().depth == 1
            assert await zk.exists(NODE) is not None
    assert await zk.exists(NODE) is None
    stats = lease.statistics()
    assert (stats.locked, stats.acquisitions, stats.fencing_token) == (False, 1, None)


async def test_lease_survives_the_holders_session_and_is_reattached(open_client: Open) -> None:
    first = await open_client()
    lease = first.lease_lock(PATH, TTL, holder_id="worker-1")
    observer = await open_client()
    restarted = await open_client()  # clients are entered outside fail_after's scope
    with anyio.fail_after(15):
        await lease.acquire()
        token = lease.fencing_token
        expires_at = lease.expires_at  # as last known here: the node cannot go earlier
        await first.close()  # no release: the lease is not bound to the session
        assert not lease.is_held  # nobody can renew it here any more
        with pytest.raises(LockLost):
            await lease.release()

        data, czxid, _ = await node_identity(observer)
        assert (data["holder_id"], czxid) == ("worker-1", token)
        assert not await observer.lease_lock(PATH, TTL).try_acquire()

        again = restarted.lease_lock(PATH, TTL, holder_id="worker-1")
        await again.acquire()
        # Re-attached, not waited for the TTL: the same node, renewed by a write sent (the
        # lease's own clock: its expiry less the TTL) before the old lease could expire.
        assert again.fencing_token == token
        assert again.expires_at - again.ttl < expires_at
        _, _, version = await node_identity(observer)
        assert version == 1  # renewed at once on re-attach
        await again.release()
    assert await observer.exists(NODE) is None


async def test_unrenewed_lease_is_deleted_by_the_server_after_its_ttl(open_client: Open) -> None:
    ttl = 1.0
    holder = await open_client()
    lease = holder.lease_lock(PATH, ttl, renew=False)
    waiter_client = await open_client()
    waiter = waiter_client.lease_lock(PATH, ttl)
    with anyio.fail_after(ttl + 10):
        sent = time.monotonic()  # the create's send time is the last "renewal"
        await lease.acquire()
        await holder.close()
        await waiter.acquire()
        waited = time.monotonic() - sent
        assert waiter.fencing_token != lease.statistics().fencing_token
        await waiter.release()
    assert waited >= ttl  # never before the TTL from the last write
    assert waited < ttl + 3.0  # the server reaps every 100 ms


async def test_renewal_keeps_the_lease_beyond_several_ttls(open_client: Open) -> None:
    # A renewal is due every ttl/3 and the lease is given up at 0.9 ttl: a keeper may be
    # 0.57 ttl late (a loaded machine's event loop) before the lease is lost for real.
    ttl = 1.5
    holder = await open_client()
    lease = holder.lease_lock(PATH, ttl)
    other = (await open_client()).lease_lock(PATH, ttl)
    with anyio.fail_after(20):
        async with lease:
            with pytest.raises(LockTimeout):
                await other.acquire(timeout=3 * ttl)
            assert lease.is_held
            assert lease.statistics().renewals >= 5  # every ttl/3: about 9 in 3 TTLs
            _, czxid, version = await node_identity(holder)
            assert czxid == lease.fencing_token
            assert version >= 5
        await other.acquire()
        await other.release()


@pytest.mark.parametrize("meddling", ["deleted", "changed"])
async def test_node_deleted_or_changed_by_hand_loses_the_lease(
    open_client: Open, meddling: str
) -> None:
    ttl = 1.5  # the next renewal may be 0.57 ttl late before the deadline takes over
    holder = await open_client()
    admin = await open_client()
    lease = holder.lease_lock(PATH, ttl)
    seen: dict[str, int] = {}

    async def body() -> None:
        async with lease:
            if meddling == "deleted":
                await admin.delete(NODE)
            else:
                session = session_of(admin)
                await session.call(set_data_op(session.server_path(NODE), b"{}", -1))
            seen["meddled"] = lease.statistics().renewals
            try:
                await anyio.sleep_forever()
            finally:
                seen["cancelled"] = lease.statistics().renewals

    # Lost by a renewal's write ("changed or deleted"), not by the renewal deadline: the next
    # renewal found it (only one already on its way when we meddled may have succeeded).
    with anyio.fail_after(10), pytest.raises(LockLost, match="changed or deleted"):
        await body()
    assert seen["cancelled"] <= seen["meddled"] + 1
    assert lease.statistics().losses == 1
    assert not lease.is_held


async def test_stale_ex_holder_can_neither_renew_nor_delete_the_new_holders_node(
    open_client: Open,
) -> None:
    ttl = 0.5
    stale_client = await open_client()
    stale = stale_client.lease_lock(PATH, ttl, renew=False)
    new_client = await open_client()
    # The new holder keeps its lease through the test: a TTL that a late keeper (a loaded
    # machine's event loop) does not outrun.
    new = new_client.lease_lock(PATH, 3.0)
    with anyio.fail_after(15):
        await stale.acquire()
        await new.acquire()  # after the stale lease's expiry
        assert not stale.is_held
        before = await node_identity(new_client)
        assert before[0]["holder_id"] == new.holder_id
        with pytest.raises(LockLost):
            await stale.renew()
        with pytest.raises(LockLost):
            await stale.release()
        data, czxid, _ = await node_identity(new_client)
        assert (data, czxid) == (before[0], new.fencing_token)

        # A competitor (another holder_id) can neither renew nor release ours.
        competitor = stale_client.lease_lock(PATH, ttl)
        with pytest.raises(NotLockOwner):
            await competitor.renew()
        with pytest.raises(NotLockOwner):
            await competitor.release()
        assert not await competitor.try_acquire()
        data, czxid, _ = await node_identity(new_client)
        assert (data["holder_id"], czxid) == (new.holder_id, new.fencing_token)
        await new.release()


async def test_timeout_try_acquire_and_cancel_leave_no_node(
    lease_proxy: FaultProxy, open_client: Open
) -> None:
    holder = await open_client()
    lease = holder.lease_lock(PATH, TTL)
    waiter_client = await open_client(lease_proxy)
    waiter = waiter_client.lease_lock(PATH, TTL)
    with anyio.fail_after(15):
        async with lease:
            expected = await node_identity(holder)
            assert not await waiter.try_acquire()
            with pytest.raises(LockTimeout):
                await waiter.acquire(timeout=0.3)
            lease_proxy.reset_counters()
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter.acquire)
                await lease_proxy.wait_for_request(Opcode.GET_DATA)  # the read with a watch
                await waiter_client.exists("/")  # answered after it: the waiter now waits
                tg.cancel_scope.cancel()
            assert not waiter.statistics().locked
            data, czxid, _ = await node_identity(holder)
            assert (data, czxid) == expected[:2]
            assert session_of(waiter_client).watcher_count() == 0
            assert await waiter_client.get_children(PATH) == ["lease"]
            assert waiter.statistics().acquisitions == 0
        await waiter.acquire()  # the waiter still works, and gets the lease once released
        await waiter.release()
    assert await holder.exists(NODE) is None


async def test_timeout_before_the_create_is_sent_has_nothing_to_clean_up(
    lease_proxy: FaultProxy, open_client: Open, caplog: pytest.LogCaptureFixture
) -> None:
    # A create that was never sent made nothing: the acquire does not wait (for half the
    # session timeout) to delete a node of ours, nor warn that it could not.
    caplog.set_level(logging.WARNING, logger="aiozklock._recipes._lease")
    zk = await open_client(lease_proxy)
    lease = zk.lease_lock(PATH, TTL)
    suspended = anyio.Event()
    zk.add_listener(
        lambda change: suspended.set() if change.state is aiozklock.SessionState.SUSPENDED else None
    )
    with anyio.fail_after(15):
        lease_proxy.blackhole(True)
        await lease_proxy.drop_all()
        await suspended.wait()
        with pytest.raises(LockTimeout):
            await lease.acquire(timeout=0.2)
        assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        lease_proxy.blackhole(False)
        async with lease:  # the object stays usable
            assert lease.is_held
    assert lease.statistics().acquisitions == 1


@pytest.mark.parametrize(
    "ttl", [0, -1.0, math.nan, math.inf, True, "1", None, 0.0001, float(2**40)]
)
async def test_bad_ttl_is_refused_before_any_request(
    lease_proxy: FaultProxy, open_client: Open, ttl: object
) -> None:
    zk = await open_client(lease_proxy)
    lease_proxy.reset_counters()
    with pytest.raises(aiozklock.InvalidArgument, match="ttl"):
        zk.lease_lock(PATH, ttl)
    assert lease_proxy.count() - lease_proxy.count(Opcode.PING) == 0


async def test_bad_holder_id_and_renew_flag_are_refused(open_client: Open) -> None:
    zk = await open_client()
    for kwargs in ({"holder_id": ""}, {"holder_id": 7}, {"renew": "yes"}, {"identifier": 1}):
        with pytest.raises(aiozklock.InvalidArgument):
            zk.lease_lock(PATH, 1.0, **kwargs)
    with pytest.raises(aiozklock.InvalidArgument):
        zk.lease_lock("/zookeeper/x", 1.0)
    lease = zk.lease_lock(PATH, 1.0)
    with pytest.raises(NotLockOwner):
        await lease.renew()
    with pytest.raises(NotLockOwner):
        _ = lease.expires_at


async def test_server_without_ttl_nodes_raises_a_clear_error(
    no_ttl_cluster: ZooKeeperCluster,
) -> None:
    async with aiozklock.connect(no_ttl_cluster.hosts, session_timeout=4.0) as zk:
        lease = zk.lease_lock(f"/t-{uuid.uuid4().hex[:12]}", 1.0)
        with anyio.fail_after(5), pytest.raises(TTLNotSupported) as excinfo:
            await lease.acquire()  # no timeout: it must not wait
        assert "extendedTypesEnabled=true" in str(excinfo.value)
        assert isinstance(excinfo.value, UnimplementedError)
        assert isinstance(excinfo.value, aiozklock.AiozklockError)
        assert await zk.exists(lease.path) is None  # nothing created, not even the parent
        assert not lease.statistics().locked


# ------------------------------------------------------------------ faults


async def test_cancel_with_the_create_in_flight_leaves_no_node(
    lease_proxy: FaultProxy, open_client: Open
) -> None:
    zk = await open_client(lease_proxy)
    observer = await open_client()
    await zk.ensure_path(PATH)
    lease = zk.lease_lock(PATH, 5.0)
    lease_proxy.reset_counters()
    lease_proxy.set_delay(HOLD)  # the create reaches the server only after we are cancelled
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lease.acquire)
            await lease_proxy.wait_for_request(Opcode.CREATE_TTL)
            tg.cancel_scope.cancel()
            lease_proxy.set_delay(0)
        # The cleanup ran shielded: it read the node back (ours) and deleted it.
        assert await observer.exists(NODE) is None  # (its emptied container may go too)
    assert lease_proxy.count(Opcode.DELETE) == 1
    assert lease.statistics().acquisitions == 0


async def test_lost_create_reply_is_resolved_by_holder_id(
    lease_proxy: FaultProxy, open_client: Open
) -> None:
    zk = await open_client(lease_proxy)
    await zk.ensure_path(PATH)  # so the create whose reply is lost is the one that succeeds
    lease = zk.lease_lock(PATH, TTL)
    lease_proxy.reset_counters()
    lease_proxy.arm_drop_after({Opcode.CREATE_TTL})
    with anyio.fail_after(15):
        await lease.acquire()
        assert lease_proxy.swallowed_replies == 1
        data, czxid, _ = await node_identity(zk)
        assert (data["holder_id"], czxid) == (lease.holder_id, lease.fencing_token)
        assert await zk.get_children(PATH) == ["lease"]
        assert lease_proxy.count(Opcode.CREATE_TTL) == 1  # never resent blindly
        await lease.release()
    assert await zk.exists(NODE) is None


async def test_lost_renewal_and_delete_replies(lease_proxy: FaultProxy, open_client: Open) -> None:
    zk = await open_client(lease_proxy)
    observer = await open_client()
    lease = zk.lease_lock(PATH, TTL, renew=False)
    with anyio.fail_after(15):
        await lease.acquire()
        lease_proxy.arm_drop_after({Opcode.SET_DATA})
        await lease.renew()  # applied, reply lost: read back, not counted as lost
        assert lease_proxy.swallowed_replies == 1
        _, _, version = await node_identity(observer)
        assert version == lease.statistics().version == 1
        await lease.renew()  # the version we track is the server's
        assert lease.statistics().version == 2
        lease_proxy.arm_drop_after({Opcode.DELETE})
        await lease.release()
        assert lease_proxy.swallowed_replies == 2
    assert await observer.exists(NODE) is None


async def test_disconnection_does_not_lose_the_lease(
    lease_proxy: FaultProxy, open_client: Open
) -> None:
    ttl = 1.5
    zk = await open_client(lease_proxy)
    lease = zk.lease_lock(PATH, ttl)
    with anyio.fail_after(15):
        async with lease:
            await lease_proxy.drop_all()
            renewals = lease.statistics().renewals
            seen = lease_proxy.count(Opcode.SET_DATA)
            await lease_proxy.wait_for_request(Opcode.SET_DATA, seen + 2)
            await lease.renew()
            assert lease.statistics().renewals >= renewals + 2
            assert lease.is_held
        assert lease.statistics().losses == 0


async def test_session_expiry_does_not_lose_the_lease(
    lease_cluster: ZooKeeperCluster, lease_proxy: FaultProxy, open_client: Open
) -> None:
    zk = await open_client(lease_proxy)
    lease = zk.lease_lock(PATH, TTL)
    with anyio.fail_after(15):
        async with lease:
            old_session = zk.session_id
            # Hold the holder's reconnect back until the expiry is done, so that it is not
            # pre-empted by the holder re-attaching first (a race of the injection, not of
            # the library).
            lease_proxy.set_delay(HOLD)
            await expire_session(lease_cluster.hosts, old_session, zk.session_password)
            lease_proxy.set_delay(0)
            assert await zk.exists(NODE) is not None  # a persistent node: not the session's
            await lease.renew()  # in the new session
            assert zk.session_id != old_session
            assert lease.is_held
            _, czxid, _ = await node_identity(zk)
            assert czxid == lease.fencing_token
        assert lease.statistics().losses == 0
    assert await zk.exists(NODE) is None


async def test_partition_longer_than_the_ttl_loses_the_lease_before_expiry(
    lease_proxy: FaultProxy, open_client: Open
) -> None:
    # The lease is given up 10 % of the TTL before the server may delete it: that much is
    # what a late keeper (a loaded machine's event loop) may take to cancel the body.
    ttl = 5.0
    history = History()
    partitioned_client = await open_client(lease_proxy)
    partitioned = partitioned_client.lease_lock(PATH, ttl)
    other = (await open_client()).lease_lock(PATH, ttl)
    acquired = anyio.Event()
    seen: dict[str, float] = {}

    async def body() -> None:
        async with partitioned:
            with history.section("partitioned", partitioned.fencing_token):
                acquired.set()
                lease_proxy.blackhole(True)
                try:
                    await anyio.sleep_forever()
                finally:
                    seen["cancelled"] = time.monotonic()
                    seen["expires_at"] = on_monotonic(partitioned.expires_at)

    async def hold() -> None:
        with pytest.raises(LockLost, match="not renewed in time"):
            await body()

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold)
            await acquired.wait()
            async with other:  # once the server has deleted the unrenewed node
                with history.section("other", other.fencing_token):
                    seen["other"] = time.monotonic()
    # The holder's body was cancelled before the server could delete its node.
    print(f"LEASE partition cancelled_before_expiry={seen['expires_at'] - seen['cancelled']:.3f}")
    assert seen["cancelled"] < seen["expires_at"] <= seen["other"]
    report = history.check()
    assert report.ok, str(report)
    assert report.sections == 2
