"""The non-fair lock (one fixed node, ``zk.lock(path, fair=False)``) on a real ZooKeeper, on
asyncio and trio: its contract, its round trips counted on the wire, and its faults."""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

import aiozklock
from aiozklock.testing import (
    FaultProxy,
    FencedStore,
    History,
    Opcode,
    four_letter_word,
    session_of,
)
from tests.conftest import ClientFactory, gone, node_gone, wait_for_children

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PATH = "/locks/nonfair"
NODE = f"{PATH}/lock"
# A proxy delay that never runs out by itself: the test lifts it once the fault is in place.
HOLD = 3600.0


def requests_sent(proxy: FaultProxy) -> int:
    """Requests seen by the proxy, pings left out (they are timer-driven)."""
    return sum(1 for request in proxy.requests if request.opcode != Opcode.PING)


@dataclass
class Holder:
    """A task that holds a lock in ``async with`` until ``release`` is set."""

    entered: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    token: int = 0
    body_cancelled: bool = False
    error: BaseException | None = None


async def hold(lock: aiozklock.NonFairLock, holder: Holder) -> None:
    try:
        async with lock:
            holder.token = lock.fencing_token
            holder.entered.set()
            try:
                await holder.release.wait()
            except anyio.get_cancelled_exc_class():
                holder.body_cancelled = True
                raise
    except aiozklock.AiozklockError as exc:
        holder.error = exc
    finally:
        holder.done.set()


# ---------------------------------------------------------------- API and contract


async def test_fair_is_the_default_and_fair_false_gives_a_non_fair_lock(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    assert type(zk.lock(PATH)) is aiozklock.Lock
    assert type(zk.lock(PATH, fair=True)) is aiozklock.Lock
    lock = zk.lock(PATH, fair=False)
    assert type(lock) is aiozklock.NonFairLock
    assert lock.node == NODE
    assert "NonFairLock" in aiozklock.__all__
    assert "NonFairLockStatistics" in aiozklock.__all__


@pytest.mark.parametrize(
    "kwargs",
    [
        {"path": PATH, "fair": "yes"},
        {"path": PATH, "fair": 0},
        {"path": PATH, "fair": None},
        {"path": "relative", "fair": False},
        {"path": "/", "fair": False},
        {"path": "/zookeeper/x", "fair": False},
        {"path": PATH + "/", "fair": False},
        {"path": PATH, "fair": False, "identifier": 5},
    ],
)
async def test_bad_input_raises_before_any_traffic(
    proxy: FaultProxy, open_client: ClientFactory, kwargs: dict[str, object]
) -> None:
    client: aiozklock.ZooKeeperClient = await open_client(proxy)
    proxy.reset_counters()
    with pytest.raises(aiozklock.InvalidArgument):
        client.lock(**kwargs)  # type: ignore[call-overload]
    lock = client.lock(PATH, fair=False)
    with pytest.raises(aiozklock.InvalidArgument):
        lock.acquire(timeout=-1)
    with pytest.raises(aiozklock.NotLockOwner):
        await lock.release()
    assert requests_sent(proxy) == 0


async def test_acquire_is_one_create_and_release_one_delete(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    await zk.ensure_path("/locks")
    await zk.create(PATH)
    lock = client.lock(PATH, identifier="w1", fair=False)
    proxy.reset_counters()
    await lock.acquire()
    assert proxy.count(Opcode.CREATE2) == 1
    assert proxy.count(Opcode.GET_CHILDREN) + proxy.count(Opcode.GET_CHILDREN2) == 0
    assert requests_sent(proxy) == 1  # 1 round trip
    data, stat = await zk.get_data(NODE)
    assert stat.ephemeral_owner == client.session_id
    assert stat.czxid == lock.fencing_token
    assert json.loads(data)["identifier"] == "w1"
    proxy.reset_counters()
    await lock.release()
    await proxy.wait_for_request(Opcode.DELETE)  # written before release() returned
    assert proxy.count(Opcode.DELETE) == 1
    assert requests_sent(proxy) == 1
    await node_gone(zk, NODE)


@pytest.mark.parametrize(("existing", "creates"), [("/locks", 2), (None, 3)])
async def test_missing_path_is_created_as_a_container(
    proxy: FaultProxy,
    zk: aiozklock.ZooKeeperClient,
    open_client: ClientFactory,
    existing: str | None,
    creates: int,
) -> None:
    if existing is not None:
        await zk.ensure_path(existing)
    client = await open_client(proxy)
    lock = client.lock(PATH, fair=False)
    proxy.reset_counters()
    async with lock:
        # Lock path missing, its parent there: 1 extra round trip (container + create).
        # Parent missing too: 1 more, with the whole chain.
        assert proxy.count(Opcode.CREATE2) == creates
        assert proxy.count(Opcode.CREATE_CONTAINER) >= 1
        stat = await zk.exists(PATH)
        assert stat is not None
        assert stat.ephemeral_owner == 0
    await gone(zk, PATH)


async def test_exclusion_across_sessions(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    clients, cycles = 5, 6
    history = History()
    store = FencedStore()
    sessions = [await open_client() for _ in range(clients)]

    async def worker(index: int) -> None:
        lock = sessions[index].lock(PATH, identifier=f"w{index}", fair=False)
        for _ in range(cycles):
            async with lock:
                with history.section(f"w{index}", lock.fencing_token):
                    assert store.write(f"w{index}", lock.fencing_token, index)
                    await anyio.lowlevel.checkpoint()

    with anyio.fail_after(40):
        async with anyio.create_task_group() as tg:
            for index in range(clients):
                tg.start_soon(worker, index)
    report = history.check()
    assert report.ok, str(report)
    assert report.sections == clients * cycles
    assert not store.rejected
    await gone(zk, PATH)


async def test_reentrant_per_task(zk: aiozklock.ZooKeeperClient) -> None:
    lock = zk.lock(PATH, fair=False)
    async with lock:
        token = lock.fencing_token
        async with lock:
            assert lock.statistics().depth == 2
            assert lock.fencing_token == token
        await lock.acquire()
        assert lock.statistics().depth == 2
        await lock.release()
        assert lock.is_held
        assert (await zk.exists(NODE)) is not None
    assert not lock.is_held
    await node_gone(zk, NODE)


async def test_tasks_of_one_object_take_turns(zk: aiozklock.ZooKeeperClient) -> None:
    lock = zk.lock(PATH, fair=False)
    inside = 0
    entries = 0

    async def worker() -> None:
        nonlocal inside, entries
        async with lock:
            inside += 1
            entries += 1
            assert inside == 1
            await anyio.lowlevel.checkpoint()
            inside -= 1

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(worker)
    assert entries == 4
    await node_gone(zk, NODE)


async def test_timeout_leaves_nothing_and_object_stays_usable(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    other = await open_client(proxy)
    holder = Holder()
    async with anyio.create_task_group() as tg:
        tg.start_soon(hold, zk.lock(PATH, fair=False), holder)
        with anyio.fail_after(5):
            await holder.entered.wait()
        contender = other.lock(PATH, fair=False)
        baseline = session_of(other).watcher_count()
        with anyio.fail_after(5), pytest.raises(aiozklock.LockTimeout):
            await contender.acquire(timeout=0.3)
        stat = await zk.exists(NODE)
        assert stat is not None
        assert stat.czxid == holder.token  # still the holder's node
        assert session_of(other).watcher_count() == baseline
        proxy.reset_counters()
        assert await contender.try_acquire() is False
        assert requests_sent(proxy) == 1  # one create, NodeExists: no read, no watch
        assert contender.statistics().races_lost >= 2
        holder.release.set()
    with anyio.fail_after(5):
        async with contender.acquire(timeout=2.0):
            assert contender.is_held
            assert contender.fencing_token > holder.token
    await node_gone(zk, NODE)


async def test_try_acquire(zk: aiozklock.ZooKeeperClient, open_client: ClientFactory) -> None:
    other = await open_client()
    lock = zk.lock(PATH, fair=False)
    assert await lock.try_acquire() is True
    assert lock.is_held
    assert await other.lock(PATH, fair=False).try_acquire() is False
    await lock.release()
    assert await lock.try_acquire() is True
    await lock.release()
    await node_gone(zk, NODE)


async def test_cancel_while_waiting_leaves_no_node_and_no_watcher(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    waiter_client = await open_client(proxy)
    baseline = session_of(waiter_client).watcher_count()
    holder = Holder()
    lock = waiter_client.lock(PATH, fair=False)
    async with anyio.create_task_group() as tg:
        tg.start_soon(hold, zk.lock(PATH, fair=False), holder)
        with anyio.fail_after(5):
            await holder.entered.wait()
        proxy.reset_counters()
        async with anyio.create_task_group() as waiters:
            waiters.start_soon(lock.acquire)
            with anyio.fail_after(5):
                await proxy.wait_for_request(Opcode.GET_DATA)  # the watch is set
            assert session_of(waiter_client).watcher_count() == baseline + 1
            waiters.cancel_scope.cancel()
        assert session_of(waiter_client).watcher_count() == baseline
        assert not lock.is_held
        holder.release.set()
    # The holder released; the cancelled waiter must not take the lock behind our back.
    await node_gone(zk, NODE)
    assert await lock.try_acquire() is True  # and the object stays usable
    await lock.release()


async def test_contenders_and_statistics(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    other = await open_client()
    lock = zk.lock(PATH, identifier="me", fair=False)
    assert await lock.contenders() == []
    stats = lock.statistics()
    assert (stats.locked, stats.fencing_token, stats.acquisitions) == (False, None, 0)
    async with lock:
        (holder,) = await other.lock(PATH, fair=False).contenders()
        assert holder.is_holder
        assert holder.node == "lock"
        assert holder.identifier == "me"
        assert holder.fencing_token == lock.fencing_token
        assert holder.session_id == zk.session_id
        stats = lock.statistics()
        assert stats.locked
        assert stats.depth == 1
        assert stats.fencing_token == lock.fencing_token
    assert lock.statistics().acquisitions == 1
    assert await lock.contenders() == []


# ---------------------------------------------------------------- herd (measured)


async def sessions_watching(
    zk_hosts: str, server_node: str, clients: list[aiozklock.ZooKeeperClient]
) -> int:
    """How many sessions the server says watch ``server_node`` (``wchp``), once the
    watches ``clients`` have sent are set: a session's requests run in order, so one more
    round trip on each means its earlier ones are done."""
    for client in clients:
        await client.exists("/")
    report = await anyio.to_thread.run_sync(four_letter_word, zk_hosts.split(",")[0], "wchp")
    lines = report.splitlines()
    if server_node not in lines:
        return 0
    watchers = itertools.takewhile(
        lambda line: line[:1].isspace(), lines[lines.index(server_node) + 1 :]
    )
    return sum(1 for _ in watchers)


async def test_release_wakes_every_waiter_and_one_wins(
    proxy: FaultProxy,
    zk_hosts: str,
    chroot: str,
    zk: aiozklock.ZooKeeperClient,
    open_client: ClientFactory,
) -> None:
    waiters = 5
    clients = [await open_client(proxy) for _ in range(waiters)]
    holder = Holder()
    anyone_in = anyio.Event()  # shared: set by whichever waiter wins
    outcomes = [Holder(entered=anyone_in) for _ in range(waiters)]
    async with anyio.create_task_group() as tg:
        tg.start_soon(hold, zk.lock(PATH, fair=False), holder)
        with anyio.fail_after(5):
            await holder.entered.wait()
        proxy.reset_counters()
        for client, outcome in zip(clients, outcomes, strict=True):
            tg.start_soon(hold, client.lock(PATH, fair=False), outcome)
        with anyio.fail_after(5):
            await proxy.wait_for_request(Opcode.GET_DATA, waiters)  # all are watching
        # Every waiter's session watches the node: the release notifies each of them.
        assert await sessions_watching(zk_hosts, chroot + NODE, clients) == waiters
        proxy.reset_counters()
        holder.release.set()
        with anyio.fail_after(5):
            await proxy.wait_for_request(Opcode.GET_DATA, waiters - 1)  # losers watch again
            await anyone_in.wait()
        winners = [o for o in outcomes if o.token]
        assert len(winners) == 1
        # The herd, on the wire: each waiter got the deletion, each tried to create.
        assert proxy.count(Opcode.CREATE2) == waiters
        assert proxy.count(Opcode.GET_DATA) == waiters - 1
        assert await sessions_watching(zk_hosts, chroot + NODE, clients) == waiters - 1
        for outcome in outcomes:
            outcome.release.set()
    assert all(o.error is None and o.token for o in outcomes)
    await node_gone(zk, NODE)


# ---------------------------------------------------------------- faults


async def test_lost_create_reply_is_adopted(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    await zk.ensure_path("/locks")
    await zk.create(PATH)
    client = await open_client(proxy)
    lock = client.lock(PATH, fair=False)
    proxy.reset_counters()
    proxy.arm_drop_after([Opcode.CREATE2], 1)
    with anyio.fail_after(10):
        await lock.acquire()
    assert proxy.swallowed_replies == 1
    assert proxy.count(Opcode.CREATE2) == 1  # never resent
    assert proxy.count(Opcode.GET_DATA) == 1  # the read-back that adopted it
    assert await zk.get_children(PATH) == ["lock"]
    stat = await zk.exists(NODE)
    assert stat is not None
    assert stat.ephemeral_owner == client.session_id
    assert lock.fencing_token == stat.czxid
    await lock.release()
    await node_gone(zk, NODE)


async def test_lost_delete_reply_never_deletes_the_next_holders_node(
    proxy: FaultProxy,
    zk_hosts: str,
    chroot: str,
    zk: aiozklock.ZooKeeperClient,
    open_client: ClientFactory,
) -> None:
    client = await open_client(proxy)
    ours, competitor = Holder(), Holder()
    async with (
        FaultProxy(zk_hosts) as observed,  # shows when the competitor waits
        aiozklock.connect(observed.address + chroot, session_timeout=4.0) as rival,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(hold, client.lock(PATH, fair=False), ours)
        with anyio.fail_after(5):
            await ours.entered.wait()
        tg.start_soon(hold, rival.lock(PATH, fair=False), competitor)
        with anyio.fail_after(5):
            await observed.wait_for_request(Opcode.GET_DATA)  # the competitor waits
        # Our reconnect (and re-check) is held back until the competitor holds the node: we
        # are partitioned from the moment the lost reply drops our connection.
        partitioned = partition_on_suspend(client, proxy)
        proxy.reset_counters()
        proxy.arm_drop_after([Opcode.DELETE], 1)
        ours.release.set()
        with anyio.fail_after(10):
            await proxy.wait_for_request(Opcode.DELETE)
            await competitor.entered.wait()
            await ours.done.wait()  # our release has returned (it did not wait for the reply)
            await partitioned.wait()  # our client saw its connection drop
        proxy.blackhole(False)
        with anyio.fail_after(10):
            # The unknown outcome is the janitor's: it re-checks the node's czxid.
            await proxy.wait_for_request(Opcode.EXISTS)
        for _ in range(2):  # round trips ordered after the re-check: the janitor has decided
            await client.exists("/")
        assert ours.error is None
        assert proxy.swallowed_replies == 1
        assert proxy.count(Opcode.DELETE) == 1  # the re-check saw another czxid: no retry
        assert proxy.count(Opcode.EXISTS) == 3  # the re-check, and our two
        stat = await zk.exists(NODE)
        assert stat is not None
        assert stat.czxid == competitor.token
        assert stat.ephemeral_owner == rival.session_id
        competitor.release.set()
    assert competitor.error is None
    await node_gone(zk, NODE)


async def test_connection_drop_while_holding_cancels_the_body_and_frees_the_lock(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    holder = Holder()
    history = History()
    async with anyio.create_task_group() as tg:
        tg.start_soon(hold, client.lock(PATH, fair=False), holder)
        with anyio.fail_after(5):
            await holder.entered.wait()
        enter = time.monotonic()
        await proxy.drop_all()
        with anyio.fail_after(5):
            await holder.done.wait()
        history.record("holder", holder.token, enter, time.monotonic())
    assert holder.body_cancelled
    assert isinstance(holder.error, aiozklock.LockLost), holder.error
    other = zk.lock(PATH, fair=False)
    with anyio.fail_after(10):
        async with other:  # the janitor removed the node once the session was back
            with history.section("other", other.fencing_token):
                assert other.fencing_token > holder.token
    report = history.check()
    assert report.ok, str(report)
    await node_gone(zk, NODE)


def partition_on_suspend(client: aiozklock.ZooKeeperClient, proxy: FaultProxy) -> anyio.Event:
    """Partition ``client`` from the moment its connection first drops: the listener runs in
    the session's task as the state changes, so its reconnect cannot slip in first. Returns
    an event set once partitioned: heal only after it (healing first would let the drop
    partition the client for good).

    Only that first drop: a reconnect attempt the partition held back reaches the server
    when it heals, possibly after the attempt that succeeded, and takes the session over
    (the server then closes the newer connection). Partitioning again on that drop would
    cut the client off for good, until its clock gives the session up."""
    partitioned = anyio.Event()

    def on_change(change: aiozklock.StateChange) -> None:
        if change.state is aiozklock.SessionState.SUSPENDED and not partitioned.is_set():
            partitioned.set()
            proxy.blackhole(True, new="hang")

    client.add_listener(on_change)
    return partitioned


async def test_cancel_with_create_outcome_unknown_leaves_no_node(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    await zk.ensure_path("/locks")
    await zk.create(PATH)
    client = await open_client(proxy)
    lock = client.lock(PATH, fair=False)
    partitioned = partition_on_suspend(client, proxy)
    proxy.reset_counters()
    proxy.arm_drop_after([Opcode.CREATE2], 1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lock.acquire)
        with anyio.fail_after(5):
            await proxy.wait_for_request(Opcode.CREATE2)
            # The create ran on the server and its reply was lost: the node is ours.
            await wait_for_children(zk, PATH, lambda children: children == ["lock"])
            await partitioned.wait()  # our client saw its connection drop
        tg.cancel_scope.cancel()  # while the outcome is unknown and there is no connection
    assert not lock.is_held
    proxy.blackhole(False)
    with anyio.fail_after(5):  # the janitor reads the node back, finds ours, deletes it
        await wait_for_children(zk, PATH, lambda children: children == [])
    assert proxy.count(Opcode.CREATE2) == 1
    assert proxy.count(Opcode.DELETE) == 1
    assert await lock.try_acquire() is True  # and the object stays usable
    await lock.release()


async def test_cancel_while_the_create_is_in_flight_deletes_our_node_at_once(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    await zk.ensure_path("/locks")
    await zk.create(PATH)
    client = await open_client(proxy)
    lock = client.lock(PATH, fair=False)
    proxy.reset_counters()
    proxy.set_delay(HOLD)  # the create reaches the server only after we are cancelled
    async with anyio.create_task_group() as tg:
        tg.start_soon(lock.acquire)
        with anyio.fail_after(5):
            await proxy.wait_for_request(Opcode.CREATE2)
        tg.cancel_scope.cancel()
        proxy.set_delay(0)
    # The cancelled acquire resolved the create (read back) and deleted its node before
    # returning: nothing is left, and nothing went to the background.
    await node_gone(zk, NODE)
    assert proxy.count(Opcode.GET_DATA) == 1
    assert proxy.count(Opcode.DELETE) == 1


@pytest.mark.slow
async def test_lost_create_reply_then_new_session_never_adopts_the_old_node(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    await zk.ensure_path("/locks")
    await zk.create(PATH)
    client = await open_client(proxy)
    old_session = client.session_id
    lock = client.lock(PATH, fair=False)
    partition_on_suspend(client, proxy)

    async def heal_once_expired() -> None:
        # The server expired the old session while partitioned (its node went with it); our
        # clock never gives a session up: the server says so at the reconnect.
        name = NODE.rpartition("/")[2]
        await wait_for_children(zk, PATH, lambda children: name in children)  # created
        await node_gone(zk, NODE, within=15)  # expired with its session
        proxy.blackhole(False)

    proxy.arm_drop_after([Opcode.CREATE2], 1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(heal_once_expired)
        with anyio.fail_after(15):
            await lock.acquire()
    # Acquired in the new session, on a node of its own: the old session's node was waited
    # out (or already gone), never adopted.
    assert client.session_id != old_session
    stat = await zk.exists(NODE)
    assert stat is not None
    assert stat.ephemeral_owner == client.session_id
    assert lock.fencing_token == stat.czxid
    assert lock.is_held
    await lock.release()
    await node_gone(zk, NODE)
