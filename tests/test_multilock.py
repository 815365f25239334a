"""MultiLock on real ZooKeeper: all or nothing, deadlock-free, one round trip when free."""

from __future__ import annotations

import random
import time
from contextlib import ExitStack

import anyio
import anyio.lowlevel
import pytest

import aiozklock
from aiozklock.testing import FaultProxy, History, Opcode, expire_session, session_of
from tests._clocks import on_monotonic
from tests.conftest import ClientFactory, gone, on_wait, wait_for_queue

pytestmark = [pytest.mark.anyio]

A, B, C, D = "/locks/a", "/locks/b", "/locks/c", "/locks/d"
# A proxy delay that never runs out by itself: the test lifts it once the fault is in place.
HOLD = 3600.0


async def children(zk: aiozklock.ZooKeeperClient, *paths: str) -> dict[str, list[str]]:
    result = {}
    for path in paths:
        try:
            result[path] = await zk.get_children(path)
        except aiozklock.NoNodeError:
            result[path] = []
    return result


async def assert_one_node_each(zk: aiozklock.ZooKeeperClient, lock: aiozklock.MultiLock) -> None:
    """A held multi-lock on A and B has exactly one node on each (no duplicate from a create
    whose outcome was unknown), and its token is their czxid."""
    listing = await children(zk, A, B)
    assert all(len(names) == 1 for names in listing.values())
    assert lock.statistics().nodes == {p: n[0] for p, n in listing.items()}
    _, stat = await zk.get_data(f"{A}/{listing[A][0]}")
    assert lock.fencing_token == stat.czxid


async def test_holds_every_member_with_one_transaction_and_releases_all(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    lock = zk.multi_lock([A, B, C])
    async with lock:
        assert lock.is_held
        listing = await children(zk, A, B, C)
        assert all(len(names) == 1 for names in listing.values())
        tokens = lock.fencing_tokens
        assert set(tokens) == {A, B, C}
        for path, (name,) in listing.items():
            _, stat = await zk.get_data(f"{path}/{name}")
            assert tokens[path] == stat.czxid == lock.fencing_token  # one transaction
        assert lock.statistics().nodes == {p: n[0] for p, n in listing.items()}
    assert not lock.is_held
    await gone(zk, A, B, C)


async def test_one_round_trip_when_free_and_one_to_release(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    await client.ensure_path(A)
    await client.ensure_path(B)
    await client.ensure_path(C)
    lock = client.multi_lock([A, B, C])
    proxy.reset_counters()
    await lock.acquire()
    # The multi and the three listings go out in one write: one round trip.
    assert proxy.count(Opcode.MULTI) == 1
    assert proxy.count(Opcode.GET_CHILDREN) == 3
    assert proxy.count() == 4
    proxy.reset_counters()
    await lock.release()
    await proxy.wait_for_request(Opcode.MULTI)  # written before release() returned
    assert proxy.count(Opcode.MULTI) == 1
    assert proxy.count() == 1


async def test_missing_member_paths_cost_one_more_round_trip(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    await client.ensure_path(A)  # /locks exists, /locks/b and /locks/c do not
    lock = client.multi_lock([A, B, C])
    proxy.reset_counters()
    async with lock:
        assert proxy.count(Opcode.MULTI) == 2  # failed NoNode, then retried with containers
        assert proxy.count(Opcode.CREATE_CONTAINER) == 2  # /locks/b and /locks/c only
    await gone(client, A, B, C)


async def test_paths_are_validated_and_deduplicated_before_any_traffic(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    proxy.reset_counters()
    with pytest.raises(aiozklock.InvalidArgument):
        client.multi_lock("/locks/a")  # a str is not a list of paths
    with pytest.raises(aiozklock.InvalidArgument):
        client.multi_lock([])
    with pytest.raises(aiozklock.InvalidArgument):
        client.multi_lock([A, "relative"])
    with pytest.raises(aiozklock.InvalidArgument):
        client.multi_lock([A, "/zookeeper/quota"])
    with pytest.raises(aiozklock.InvalidArgument):
        client.multi_lock([f"/l/{i}" for i in range(1000)])
    with pytest.raises(aiozklock.InvalidArgument):
        await client.multi_lock([A]).acquire(timeout=-1)
    assert proxy.count() == 0
    assert client.multi_lock([B, A, B, A]).paths == (B, A)


async def test_timeout_leaves_nothing_on_any_member(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    other = await open_client()
    async with zk.lock(B):
        contender = other.multi_lock([A, B, C])
        with pytest.raises(aiozklock.LockTimeout):
            await contender.acquire(timeout=0.3)
        # Its time up, it wrote its deletes without waiting: its own session sees them done.
        listing = await children(other, A, B, C)
        assert listing[A] == []
        assert listing[C] == []
        assert len(listing[B]) == 1
        assert await contender.try_acquire() is False
        assert session_of(other).watcher_count() == 0
    async with contender.acquire(timeout=2):
        assert contender.is_held
    await gone(zk, A, B, C)


async def test_cancelled_waiter_leaves_nothing_and_stays_usable(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    other = await open_client()
    waiter = other.multi_lock([C, A])
    waiting = anyio.Event()
    on_wait(waiter._queue, waiting.set)
    async with zk.multi_lock([A, B]):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter.acquire)
            await waiting.wait()  # cancelled while waiting, its watches armed
            tg.cancel_scope.cancel()
        assert not waiter.statistics().locked
        assert await children(zk, A, C) == {A: [(await zk.get_children(A))[0]], C: []}
        assert session_of(other).watcher_count() == 0
    async with waiter.acquire(timeout=2):
        assert waiter.is_held
    await gone(zk, A, B, C)


async def test_excludes_the_plain_lock_on_a_shared_path(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    other = await open_client()
    multi = other.multi_lock([A, B])
    plain = zk.lock(B)
    await plain.acquire()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(multi.acquire)
            await wait_for_queue(zk, B, 2)
            assert not multi.statistics().locked
            assert len(await zk.get_children(A)) == 1  # queued on A too, and first there
            assert not await zk.lock(A).try_acquire()  # so A is taken for everyone else
            await plain.release()
    assert multi.statistics().locked  # the plain lock was released: it holds both
    with pytest.raises(aiozklock.NotLockOwner):
        await multi.release()  # acquired by the task group's task, not this one


async def test_reentrant_in_the_same_task(zk: aiozklock.ZooKeeperClient) -> None:
    lock = zk.multi_lock([A, B])
    async with lock:
        async with lock:
            assert lock.statistics().depth == 2
        assert lock.is_held
    await gone(zk, A, B)


async def test_overlapping_sets_in_every_order_never_deadlock(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """Curator's multi-lock acquires members one by one in the caller's order, so {A, B}
    against {B, A} without timeouts deadlocks. Ours enqueues on all members atomically:
    clients lock random overlapping sets in random orders, with no timeout, and every path
    has at most one holder at a time (one History per path)."""
    paths = [A, B, C, D]
    histories = {path: History() for path in paths}
    clients = [await open_client() for _ in range(6)]
    rounds = 8
    rng = random.Random(7)
    plans = [
        [rng.sample(paths, rng.randint(2, 4)) for _ in range(rounds)] for _ in range(len(clients))
    ]

    async def worker(index: int) -> None:
        for members in plans[index]:
            lock = clients[index].multi_lock(members)
            async with lock:
                with ExitStack() as stack:
                    for path in members:
                        stack.enter_context(
                            histories[path].section(f"c{index}", lock.fencing_token)
                        )
                    await anyio.lowlevel.checkpoint()
                    await anyio.lowlevel.checkpoint()

    with anyio.fail_after(40):  # a deadlock would hang here
        async with anyio.create_task_group() as tg:
            for index in range(len(clients)):
                tg.start_soon(worker, index)
    for path, history in histories.items():
        report = history.check()
        assert report.ok, f"{path}: {report}"
    assert sum(h.check().sections for h in histories.values()) == sum(
        len(m) for plan in plans for m in plan
    )
    await gone(zk, *paths)


async def test_lost_multi_reply_is_resolved_by_guid(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    zk = await open_client()
    await client.ensure_path(A)
    await client.ensure_path(B)
    lock = client.multi_lock([A, B])
    proxy.arm_drop_after([Opcode.MULTI], 1)  # executed by the server, reply lost
    with anyio.fail_after(10):
        async with lock:
            await assert_one_node_each(zk, lock)
    await gone(zk, A, B)


async def test_multi_reply_skipped_while_the_listings_are_answered_is_resolved_by_guid(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    """ZooKeeper may not answer a write yet answer the reads written after it (a write of a
    session that moved to another server: the nemesis, seed 2258). The multi's outcome is then
    unknown, as after a lost reply: resolved by GUID, never taken for a result."""
    client = await open_client(proxy)
    zk = await open_client()
    await client.ensure_path(A)
    await client.ensure_path(B)
    lock = client.multi_lock([A, B])
    proxy.reset_counters()
    # Executed by the server; its reply is lost, the listings' replies come.
    proxy.arm_drop_after([Opcode.MULTI], 1, reset=False)
    with anyio.fail_after(10):
        async with lock:
            assert proxy.swallowed_replies == 1
            assert proxy.count(Opcode.MULTI) == 1  # never resent blindly
            assert proxy.connections_accepted == 0  # the connection went on
            await assert_one_node_each(zk, lock)
    await gone(zk, A, B)


async def test_connection_drop_cancels_the_body_and_nothing_stays(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    zk = await open_client()
    lock = client.multi_lock([A, B])
    reached = False

    async def hold() -> None:
        nonlocal reached
        async with lock:
            await proxy.drop_all()
            await anyio.sleep(10)  # cancelled by the loss policy
            reached = True

    with anyio.fail_after(10), pytest.raises(aiozklock.LockLost):
        await hold()
    assert not reached
    assert lock.statistics().losses == 1
    # The session came back: the janitor deletes both nodes, and another session can lock.
    with anyio.fail_after(10):
        async with zk.multi_lock([B, A]):
            pass


async def test_release_when_one_member_node_was_deleted_by_hand(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    other = await open_client()
    lock = zk.multi_lock([A, B])
    await lock.acquire()
    (name,) = await other.get_children(A)
    await other.delete(f"{A}/{name}")
    await lock.release()  # the multi delete fails; single deletes finish the job
    await gone(zk, A, B)


async def test_a_member_lost_while_waiting_requeues_all_members_together(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """Our node on one member deleted (by hand) while we wait: it is seen at the next
    wake-up, all of ours are deleted and every member is enqueued again in one transaction
    (never one member alone), so the body never runs without every member held."""
    other = await open_client()
    waiter = other.multi_lock([A, B])
    holder = zk.lock(B)
    await holder.acquire()
    waiting = anyio.Event()
    # Its nodes are known to it (not just created on the server) once it waits.
    on_wait(waiter._queue, waiting.set)
    held, done = anyio.Event(), anyio.Event()

    async def wait_then_hold() -> None:  # a live holder (one that ended would be reaped)
        async with waiter:
            held.set()
            await done.wait()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_then_hold)
            await waiting.wait()
            before = waiter.statistics().nodes
            await zk.delete(f"{A}/{before[A]}")
            await holder.release()
            await held.wait()
            after = waiter.statistics().nodes
            assert waiter.statistics().locked
            assert after[A] != before[A]
            assert after[B] != before[B]
            assert await children(zk, A, B) == {A: [after[A]], B: [after[B]]}
            done.set()
    await gone(zk, A, B)


Exit = tuple[float, aiozklock.SessionState, float]  # when, the session's state, valid_until


async def hold_until_lost(
    lock: aiozklock.MultiLock, entered: anyio.Event, client: aiozklock.ZooKeeperClient
) -> Exit:
    """Hold ``lock`` until the loss policy cancels the body; returns when that happened, with
    the state and the ``valid_until`` of ``client``'s session then."""
    session = session_of(client)
    exited: Exit | None = None

    async def body() -> None:
        nonlocal exited
        async with lock:
            entered.set()
            try:
                await anyio.sleep(30)
            finally:
                exited = (time.monotonic(), session.state, on_monotonic(session.valid_until))

    with pytest.raises(aiozklock.LockLost):
        await body()
    assert exited is not None
    return exited


async def test_partition_longer_than_the_session_cancels_before_the_server_regrants(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    holder_client = await open_client(proxy, session_timeout=2.0)
    waiter_client = await open_client()
    timeout = session_of(holder_client).timeout
    holder, waiter = holder_client.multi_lock([A, B]), waiter_client.multi_lock([B, A])
    entered = anyio.Event()
    exits: list[Exit] = []

    async def run_holder() -> None:
        exits.append(await hold_until_lost(holder, entered, holder_client))

    with anyio.fail_after(6 * timeout):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_holder)
            await entered.wait()
            proxy.blackhole(True)
            async with waiter:  # granted once the server expired the holder's session
                granted_at = time.monotonic()
    ((exited, state, valid_until),) = exits
    # By the holder session's own clock: cancelled when it went SUSPENDED (half the timeout
    # of silence; not once given up), before its valid_until (the send time of its newest
    # answered request plus the timeout, less 10 %), so well before the server could expire
    # it, a whole timeout after it last heard from it, and grant both members to the waiter.
    assert state is aiozklock.SessionState.SUSPENDED
    assert exited < valid_until
    assert valid_until + 0.1 * timeout <= granted_at
    proxy.blackhole(False)


async def test_session_expiry_cancels_the_body_and_the_lock_works_in_the_new_session(
    proxy: FaultProxy, open_client: ClientFactory, zk_hosts: str
) -> None:
    holder_client = await open_client(proxy, session_timeout=2.0)
    observer = await open_client()
    old_session, password = holder_client.session_id, session_of(holder_client).password
    holder = holder_client.multi_lock([A, B])
    entered = anyio.Event()
    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold_until_lost, holder, entered, holder_client)
            await entered.wait()
            proxy.set_delay(HOLD)  # the client's reconnect must not re-attach before the expiry
            await expire_session(zk_hosts.split(",")[0], old_session, password)
            proxy.set_delay(0)
        async with observer.multi_lock([A, B]):  # the expired session's nodes are gone
            pass
        async with holder:  # queued again in the client's new session
            listing = await children(observer, A, B)
            _, stat = await observer.get_data(f"{A}/{listing[A][0]}")
            assert stat.ephemeral_owner == holder_client.session_id != old_session
            assert holder.fencing_token == stat.czxid
    assert holder.statistics().losses == 1
    await gone(observer, A, B)


@pytest.mark.parametrize("cancel_after", [0.0, 0.05, 0.2])
async def test_cancelled_with_the_multi_in_flight_leaves_nothing(
    proxy: FaultProxy, open_client: ClientFactory, cancel_after: float
) -> None:
    """Cancelled before the send, while the multi (or its retry with containers) is in
    flight, or in the reply's wake: the shielded cleanup resolves what the server did."""
    client = await open_client(proxy)
    observer = await open_client()
    await client.ensure_path(A)  # B is missing: the first multi fails, the retry creates it
    lock = client.multi_lock([A, B])
    proxy.set_delay(0.1)
    with anyio.fail_after(10):
        with anyio.move_on_after(cancel_after) as scope:
            await lock.acquire()
        assert scope.cancelled_caught
        proxy.set_delay(0)
        await gone(observer, A, B)
        assert not lock.statistics().locked
        async with lock.acquire(timeout=5):  # the object stays usable
            assert lock.is_held
    await gone(observer, A, B)


@pytest.mark.parametrize("kind", ["lock", "multi_lock"])
async def test_lost_reply_to_the_retry_with_containers_is_resolved(
    proxy: FaultProxy, open_client: ClientFactory, kind: str
) -> None:
    """The first use of a path: the create fails NoNode, the retry goes out with the
    path's container in the same write, and that write's replies are lost (the connection
    drops after the container's). The outcome is resolved by GUID: held, exactly one node,
    no ConnectionLoss for the caller (the queue engine serves both recipes)."""
    client = await open_client(proxy)
    observer = await open_client()
    await client.ensure_path("/locks")
    lock = client.lock(A) if kind == "lock" else client.multi_lock([A, B])
    paths = [A] if kind == "lock" else [A, B]
    proxy.arm_drop_after([Opcode.CREATE_CONTAINER], 1)
    with anyio.fail_after(10):
        async with lock:
            listing = await children(observer, *paths)
            assert all(len(names) == 1 for names in listing.values()), listing
    await gone(observer, *paths)
