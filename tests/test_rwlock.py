"""ReadWriteLock on real ZooKeeper: shared readers, exclusive writers, fair, no herd,
downgrade, no upgrade, and the faults every recipe survives (see also
tests/test_rwlock_decision.py for the pure decision functions)."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import anyio
import pytest
from kazoo.client import KazooClient  # type: ignore[import-untyped]

import aiozklock
from aiozklock.testing import FaultProxy, Opcode, expire_session, session_of
from tests._clocks import on_monotonic
from tests.conftest import ClientFactory, gone, on_wait, wait_for_queue
from tests.interop.peers import HANG, Changes, Lines, compiled_java, java_cache, running

pytestmark = [pytest.mark.anyio]

PATH = "/locks/rw"
Side = aiozklock.ReadLock | aiozklock.WriteLock


def side(rw: aiozklock.ReadWriteLock, mode: str) -> Side:
    return rw.read_lock if mode == "read" else rw.write_lock


async def hold(lock: Side, entered: anyio.Event, release: anyio.Event) -> None:
    async with lock:
        entered.set()
        await release.wait()


# A proxy delay that never runs out by itself: the test lifts it once the fault is in place.
HOLD = 3600.0

Exit = tuple[float, aiozklock.SessionState, float]  # when, the session's state, valid_until


async def hold_until_lost(
    lock: Side, entered: anyio.Event, client: aiozklock.ZooKeeperClient
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


# --- basics --------------------------------------------------------------------------------


async def test_factory_shares_objects_and_validates_before_any_traffic(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    proxy.reset_counters()
    rw = client.rw_lock(PATH)
    again = client.rw_lock(PATH)
    assert rw.read_lock is again.read_lock
    assert rw.write_lock is again.write_lock
    assert client.rw_lock(PATH, identifier="x").read_lock is not rw.read_lock
    assert (rw.path, rw.identifier) == (PATH, None)
    with pytest.raises(aiozklock.InvalidArgument):
        client.rw_lock("no-slash")
    with pytest.raises(aiozklock.InvalidArgument):
        client.rw_lock(PATH, identifier=3)
    with pytest.raises(TypeError):
        aiozklock.ReadLock()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        aiozklock.ReadWriteLock(rw.read_lock, rw.write_lock)
    assert proxy.count() == 0


@pytest.mark.parametrize("mode", ["read", "write"])
async def test_one_round_trip_when_free_and_release_without_one(
    proxy: FaultProxy, open_client: ClientFactory, mode: str
) -> None:
    client = await open_client(proxy)
    await client.ensure_path(PATH)
    lock = side(client.rw_lock(PATH), mode)
    proxy.reset_counters()
    await lock.acquire()
    # The create and the listing go out in one write: one round trip.
    assert proxy.count(Opcode.CREATE2) == 1
    assert proxy.count(Opcode.GET_CHILDREN) == 1
    assert proxy.count() == 2
    (child,) = await client.get_children(PATH)
    assert child.endswith(f"-__{'READ' if mode == 'read' else 'WRIT'}__0000000000")
    assert child == lock.statistics().node
    _, stat = await client.get_data(f"{PATH}/{child}")
    assert lock.fencing_token == stat.czxid
    proxy.reset_counters()
    await lock.release()
    await proxy.wait_for_request(Opcode.DELETE)  # written before release() returned
    assert proxy.count() == 1
    await gone(client, PATH)


async def test_many_readers_hold_at_once(open_client: ClientFactory) -> None:
    clients = [await open_client() for _ in range(3)]
    readers = [c.rw_lock(PATH, identifier=f"r{i}").read_lock for i, c in enumerate(clients)]
    release = anyio.Event()
    entered = [anyio.Event() for _ in readers]
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for reader, event in zip(readers, entered, strict=True):
                tg.start_soon(hold, reader, event, release)
            for event in entered:
                await event.wait()  # every reader inside at once
            contenders = await readers[0].contenders()
            assert [c.is_holder for c in contenders] == [True, True, True]
            assert {c.identifier for c in contenders} == {"r0", "r1", "r2"}
            release.set()
    await gone(clients[0], PATH)


async def test_writer_excludes_readers_and_writers(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    other = await open_client()
    mine, theirs = zk.rw_lock(PATH), other.rw_lock(PATH)
    with anyio.fail_after(10):
        async with mine.write_lock:
            assert mine.write_lock.is_held
            assert await theirs.read_lock.try_acquire() is False
            assert await theirs.write_lock.try_acquire() is False
            with pytest.raises(aiozklock.LockTimeout):
                await theirs.read_lock.acquire(timeout=0.2)
            # Nothing left by the attempts (their deletes are written, not awaited, once
            # their time is up: the attempts' own session sees them done).
            assert len(await other.get_children(PATH)) == 1
            assert session_of(other).watcher_count() == 0
        async with theirs.read_lock:  # readers exclude writers too
            assert await mine.write_lock.try_acquire() is False
            assert await mine.read_lock.try_acquire() is True
            await mine.read_lock.release()
    await gone(zk, PATH)


async def test_fair_a_reader_queued_after_a_waiting_writer_waits(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """R1 holds, W waits, R2 arrives: R2 waits for W (no writer starvation), and W is
    granted only once R1 is gone (pitfall 32: W1 held, R waits, W2 enqueues, W1 releases)."""
    c1, c2, c3 = zk, await open_client(), await open_client()
    r1, writer, r2 = c1.rw_lock(PATH).read_lock, c2.rw_lock(PATH).write_lock, c3.rw_lock(PATH)
    order: list[str] = []
    release_r1, release_w, w_entered = anyio.Event(), anyio.Event(), anyio.Event()

    async def take(name: str, lock: Side, release: anyio.Event | None) -> None:
        async with lock:
            order.append(name)
            if release is not None:
                w_entered.set()
                await release.wait()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            entered = anyio.Event()
            tg.start_soon(hold, r1, entered, release_r1)
            await entered.wait()
            tg.start_soon(take, "w", writer, release_w)
            await wait_for_queue(zk, PATH, 2)
            tg.start_soon(take, "r2", r2.read_lock, None)
            await wait_for_queue(zk, PATH, 3)
            assert await r2.write_lock.try_acquire() is False  # held by readers, W first
            assert order == []
            release_r1.set()
            await w_entered.wait()
            assert order == ["w"]  # R2 still waits, behind W
            release_w.set()
    assert order == ["w", "r2"]
    await gone(zk, PATH)


async def test_a_write_release_wakes_only_the_readers_behind_it(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """W1 held; readers E1..E3 queued; W2 queued; readers L1..L3 (one client, behind the
    proxy) queued after W2. W1's release grants E1..E3 and sends the late readers nothing
    to do: they watch W2 only (no herd)."""
    late_client = await open_client(proxy)
    w2_client = await open_client()
    early = [(await open_client()).rw_lock(PATH, identifier=f"e{i}").read_lock for i in range(3)]
    late = [late_client.rw_lock(PATH, identifier=f"l{i}").read_lock for i in range(3)]
    w1 = zk.rw_lock(PATH).write_lock
    granted = [anyio.Event() for _ in early]
    release = anyio.Event()
    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            await w1.acquire()
            for reader, event in zip(early, granted, strict=True):
                tg.start_soon(hold, reader, event, release)
            await wait_for_queue(zk, PATH, 4)
            tg.start_soon(hold, w2_client.rw_lock(PATH).write_lock, anyio.Event(), release)
            await wait_for_queue(zk, PATH, 5)
            proxy.reset_counters()
            for reader in late:
                tg.start_soon(hold, reader, anyio.Event(), release)
            await proxy.wait_for_request(Opcode.EXISTS, 3)  # each watches its predecessor
            await wait_for_queue(zk, PATH, 8)
            proxy.reset_counters()
            await w1.release()
            for event in granted:
                await event.wait()
            # A notification would reach the late client before these replies, and a woken
            # waiter lists the children at once: after two round trips, it would have.
            await late_client.exists("/")
            await late_client.exists("/")
            assert proxy.count(Opcode.GET_CHILDREN) == 0
            assert proxy.count(Opcode.EXISTS) == 2  # ours: no waiter re-armed a watch
            release.set()
    await gone(zk, PATH)


# --- downgrade and upgrade -----------------------------------------------------------------


async def test_downgrade_keeps_the_writers_place(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """The write holder takes the read lock at once, at its write node's sequence; after the
    write lock is released, a writer queued meanwhile still waits for the read lock."""
    waiter_client = await open_client(proxy)
    rw = zk.rw_lock(PATH)
    waiter = waiter_client.rw_lock(PATH).write_lock
    granted = anyio.Event()

    async def wait_for_write() -> None:
        async with waiter:
            granted.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await rw.write_lock.acquire()
            proxy.reset_counters()
            tg.start_soon(wait_for_write)
            await proxy.wait_for_request(Opcode.EXISTS)  # the waiter watches our write node
            await rw.read_lock.acquire(timeout=0)
            write_node, read_node = rw.write_lock.statistics().node, rw.read_lock.statistics().node
            assert write_node is not None
            assert read_node is not None
            assert read_node.endswith(write_node[-10:])  # the same place in the queue
            _, stat = await zk.get_data(f"{PATH}/{read_node}")
            assert stat.ephemeral_owner == zk.session_id
            assert rw.read_lock.fencing_token == stat.czxid
            await rw.write_lock.release()  # downgrade
            await proxy.wait_for_request(Opcode.EXISTS, 2)  # now watching our read node
            assert not granted.is_set()
            assert rw.read_lock.is_held
            assert write_node not in await zk.get_children(PATH)
            await rw.read_lock.release()
            await granted.wait()
    await gone(zk, PATH)


async def test_write_then_read_then_release_in_any_order(zk: aiozklock.ZooKeeperClient) -> None:
    rw = zk.rw_lock(PATH)
    with anyio.fail_after(10):
        async with rw.write_lock, rw.read_lock:  # read released first, then write
            assert rw.write_lock.is_held
            assert rw.read_lock.is_held
            async with rw.write_lock:  # reentrant while holding both: no upgrade
                pass
            place = rw.read_lock.statistics().node
        await gone(zk, PATH)
        async with rw.read_lock:  # and the read lock is an ordinary reader again
            node = rw.read_lock.statistics().node
            assert place is not None
            assert node is not None
            assert int(node[-10:]) > int(place[-10:])
    await gone(zk, PATH)


async def upgrade(lock: aiozklock.WriteLock, how: str) -> None:
    if how == "acquire":
        await lock.acquire()
    elif how == "timeout":
        await lock.acquire(timeout=1)
    elif how == "try":
        await lock.try_acquire()
    else:
        async with lock:
            pass


@pytest.mark.parametrize("how", ["acquire", "timeout", "try", "async_with"])
async def test_upgrade_raises_usage_error_before_any_traffic(
    proxy: FaultProxy, open_client: ClientFactory, how: str
) -> None:
    client = await open_client(proxy)
    rw = client.rw_lock(PATH)
    with anyio.fail_after(10):
        async with rw.read_lock:
            node = rw.read_lock.statistics().node
            proxy.reset_counters()
            with pytest.raises(aiozklock.UsageError, match="cannot upgrade"):
                await upgrade(rw.write_lock, how)
            assert proxy.count() == 0
            assert await client.get_children(PATH) == [node]
            assert rw.read_lock.is_held
        async with rw.write_lock:  # released: the write lock works
            pass
    await gone(client, PATH)


async def test_downgrade_while_another_task_waits_for_the_read_lock_raises(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    """The other task holds the read lock object's turn in this process and waits for our
    write lock: waiting behind it would never end, so the downgrade says so at once."""
    rw = zk.rw_lock(PATH)
    granted = anyio.Event()

    async def read_later() -> None:
        async with rw.read_lock:
            granted.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            async with rw.write_lock:
                tg.start_soon(read_later)
                await wait_for_queue(zk, PATH, 2)
                with pytest.raises(aiozklock.UsageError, match="own identifier"):
                    await rw.read_lock.acquire()
                assert len(await zk.get_children(PATH)) == 2
            await granted.wait()
    await gone(zk, PATH)


async def test_downgrade_after_the_write_lock_was_lost_raises_lock_lost(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    observer = await open_client()
    rw = client.rw_lock(PATH)
    with anyio.fail_after(10):
        await rw.write_lock.acquire()
        await proxy.drop_all()  # the loss policy marks the write lock lost
        await client.exists("/")  # reconnected in the same session
        with pytest.raises(aiozklock.LockLost):
            await rw.read_lock.acquire()
        with pytest.raises(aiozklock.LockLost):
            await rw.write_lock.release()
    await gone(observer, PATH)


# --- cancellation and faults ---------------------------------------------------------------


@pytest.mark.parametrize("mode", ["read", "write"])
async def test_cancelled_waiter_leaves_no_node(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory, mode: str
) -> None:
    other = await open_client()
    waiter = side(other.rw_lock(PATH), mode)
    waiting = anyio.Event()
    on_wait(waiter._queue, waiting.set)
    with anyio.fail_after(10):
        async with zk.rw_lock(PATH).write_lock:
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter.acquire)
                await waiting.wait()  # cancelled while waiting, its watch armed
                tg.cancel_scope.cancel()
            assert not waiter.statistics().locked
            assert len(await zk.get_children(PATH)) == 1
            assert session_of(other).watcher_count() == 0
        async with waiter.acquire(timeout=5):  # stays usable
            assert waiter.is_held
    await gone(zk, PATH)


@pytest.mark.parametrize("cancel_after", [0.0, 0.05, 0.15])
@pytest.mark.parametrize("mode", ["read", "write"])
async def test_cancelled_with_the_create_in_flight_leaves_nothing(
    proxy: FaultProxy, open_client: ClientFactory, cancel_after: float, mode: str
) -> None:
    client = await open_client(proxy)
    observer = await open_client()
    lock = side(client.rw_lock(PATH), mode)
    proxy.set_delay(0.1)
    with anyio.fail_after(10):
        with anyio.move_on_after(cancel_after) as scope:
            await lock.acquire()
        assert scope.cancelled_caught
        proxy.set_delay(0)
        await gone(observer, PATH)
        async with lock.acquire(timeout=5):
            assert lock.is_held
    await gone(observer, PATH)


@pytest.mark.parametrize("mode", ["read", "write"])
async def test_lost_create_reply_is_resolved_by_guid(
    proxy: FaultProxy, open_client: ClientFactory, mode: str
) -> None:
    client = await open_client(proxy)
    observer = await open_client()
    await client.ensure_path(PATH)
    lock = side(client.rw_lock(PATH), mode)
    proxy.arm_drop_after([Opcode.CREATE2], 1)  # executed by the server, reply lost
    with anyio.fail_after(10):
        async with lock:
            (child,) = await observer.get_children(PATH)  # no duplicate
            assert lock.statistics().node == child
            _, stat = await observer.get_data(f"{PATH}/{child}")
            assert lock.fencing_token == stat.czxid
    await gone(observer, PATH)


async def test_lost_reply_of_the_downgrade_create_is_resolved(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    """The read node at the write node's place is not sequential: a lost reply is resolved
    by its owner (the write lock survives the reconnect with loss_policy="expired")."""
    client = await open_client(proxy, loss_policy="expired")
    observer = await open_client()
    rw = client.rw_lock(PATH)
    with anyio.fail_after(10):
        async with rw.write_lock:
            proxy.arm_drop_after([Opcode.CREATE2], 1)
            async with rw.read_lock:
                write_node, read_node = (
                    rw.write_lock.statistics().node,
                    rw.read_lock.statistics().node,
                )
                assert sorted(await observer.get_children(PATH)) == sorted([write_node, read_node])
                assert rw.write_lock.is_held
    await gone(observer, PATH)


@pytest.mark.parametrize("mode", ["read", "write"])
async def test_connection_drop_cancels_the_body_and_nothing_stays(
    proxy: FaultProxy, open_client: ClientFactory, mode: str
) -> None:
    client = await open_client(proxy)
    observer = await open_client()
    lock = side(client.rw_lock(PATH), mode)
    reached = False

    async def body() -> None:
        nonlocal reached
        async with lock:
            await proxy.drop_all()
            await anyio.sleep(10)  # cancelled by the loss policy
            reached = True

    with anyio.fail_after(10), pytest.raises(aiozklock.LockLost):
        await body()
    assert not reached
    assert lock.statistics().losses == 1
    await gone(observer, PATH)  # the janitor deletes the node once reconnected
    async with observer.rw_lock(PATH).write_lock.acquire(timeout=5):
        pass


@pytest.mark.parametrize("mode", ["read", "write"])
async def test_session_expiry_cancels_the_body_and_works_in_the_new_session(
    proxy: FaultProxy, open_client: ClientFactory, zk_hosts: str, mode: str
) -> None:
    holder_client = await open_client(proxy, session_timeout=2.0)
    observer = await open_client()
    old_session, password = holder_client.session_id, session_of(holder_client).password
    lock = side(holder_client.rw_lock(PATH), mode)
    entered = anyio.Event()
    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold_until_lost, lock, entered, holder_client)
            await entered.wait()
            proxy.set_delay(HOLD)  # the reconnect must not re-attach before the expiry
            await expire_session(zk_hosts.split(",")[0], old_session, password)
            proxy.set_delay(0)
        async with observer.rw_lock(PATH).write_lock:  # the expired session's node is gone
            pass
        async with lock:
            (child,) = await observer.get_children(PATH)
            _, stat = await observer.get_data(f"{PATH}/{child}")
            assert stat.ephemeral_owner == holder_client.session_id != old_session
    assert lock.statistics().losses == 1
    await gone(observer, PATH)


@pytest.mark.parametrize("mode", ["read", "write"])
async def test_partition_longer_than_the_session_cancels_before_the_server_regrants(
    proxy: FaultProxy, open_client: ClientFactory, mode: str
) -> None:
    holder_client = await open_client(proxy, session_timeout=2.0)
    waiter_client = await open_client()
    timeout = session_of(holder_client).timeout
    holder = side(holder_client.rw_lock(PATH), mode)
    waiter = waiter_client.rw_lock(PATH).write_lock  # excluded by a reader and a writer
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
    # By the holder session's own clock: cancelled when it went SUSPENDED (not once given
    # up), before its valid_until (the send time of its newest answered request plus the
    # timeout, less 10 %), so well before the server could expire it, a whole timeout after
    # it last heard from it, and grant the lock to the waiter.
    assert state is aiozklock.SessionState.SUSPENDED
    assert exited < valid_until
    assert valid_until + 0.1 * timeout <= granted_at
    proxy.blackhole(False)


# --- foreign children ----------------------------------------------------------------------


async def test_unknown_children_are_ignored_and_foreign_lock_nodes_respected(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """A ``.keep`` child never blocks (Curator would hang on it); a kazoo write node
    (``__lock__``) blocks readers and writers, a kazoo read node (``__rlock__``) writers
    (with ``compat="kazoo"``: our default names are refused beside kazoo's, which kazoo's
    recipes do not see)."""
    foreign = await open_client()
    await zk.ensure_path(PATH)
    await zk.create(f"{PATH}/.keep")
    await zk.create(f"{PATH}/config", b"x")
    rw = zk.rw_lock(PATH, compat="kazoo")
    default = zk.rw_lock(PATH)
    with anyio.fail_after(10):
        async with rw.write_lock:
            pass
        async with rw.read_lock:
            pass
        kazoo_write = await foreign.create(
            f"{PATH}/{'ab' * 16}__lock__", ephemeral=True, sequential=True
        )
        assert await rw.read_lock.try_acquire() is False
        assert await rw.write_lock.try_acquire() is False
        for refused in (default.read_lock, default.write_lock):
            with pytest.raises(aiozklock.LayoutConflict, match='compat="kazoo"'):
                await refused.try_acquire()
        await foreign.delete(kazoo_write)
        kazoo_read = await foreign.create(
            f"{PATH}/{'cd' * 16}__rlock__", ephemeral=True, sequential=True
        )
        assert await rw.read_lock.try_acquire() is True
        await rw.read_lock.release()
        assert await rw.write_lock.try_acquire() is False
        await foreign.delete(kazoo_read)
        assert await rw.write_lock.try_acquire() is True
        await rw.write_lock.release()
    assert sorted(await zk.get_children(PATH)) == [".keep", "config"]


# --- history -------------------------------------------------------------------------------


@pytest.mark.parametrize("shared", [False, True], ids=["one lock per task", "per client"])
async def test_history_no_writer_ever_overlaps_anyone(
    open_client: ClientFactory, shared: bool
) -> None:
    """Tasks on 3 sessions take random read and write locks for a few seconds: the recorded
    intervals never show a writer together with anyone, and readers do share. Each task has
    its own identifier, or the 3 tasks of a client share its lock (its readers one node,
    its writers queued behind them)."""
    clients = [await open_client() for _ in range(3)]
    intervals: list[tuple[str, float, float]] = []  # mode, start, end
    inside: dict[str, int] = {"read": 0, "write": 0}
    max_readers = 0
    seed = random.Random(12)
    stop_at = time.monotonic() + 3.0
    # Readers are made to share, not hoped to: every worker reads until two readers have
    # been inside at once (no writer can queue before that, so the second reader is let in
    # while the first waits inside for it).
    shared = anyio.Event()
    wrote = anyio.Event()

    async def worker(index: int) -> None:
        nonlocal max_readers
        client = clients[index % 3]
        rw = client.rw_lock(PATH, identifier=f"t{index % 3 if shared else index}")
        rng = random.Random(seed.random())
        # Past stop_at, the workers stop once a write was recorded (the next one writes).
        while time.monotonic() < stop_at or not wrote.is_set():
            write = rng.random() < 0.3 or time.monotonic() >= stop_at
            mode = "write" if shared.is_set() and write else "read"
            async with side(rw, mode):
                inside[mode] += 1
                assert inside["write"] <= 1
                assert inside["write"] == 0 or inside["read"] == 0
                max_readers = max(max_readers, inside["read"])
                start = time.monotonic()
                if max_readers >= 2:
                    shared.set()
                await shared.wait()
                await anyio.sleep(rng.uniform(0, 0.01))
                intervals.append((mode, start, time.monotonic()))
                inside[mode] -= 1
                if mode == "write":
                    wrote.set()

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for index in range(9):
                tg.start_soon(worker, index)
    writes = [(s, e) for mode, s, e in intervals if mode == "write"]
    assert writes
    assert max_readers >= 2
    for mode, start, end in intervals:
        for w_start, w_end in writes:
            if (start, end) != (w_start, w_end):
                assert end <= w_start or w_end <= start, (mode, start, end, w_start, w_end)
    print(f"RWLOCK history: {len(intervals)} sections, {len(writes)} writes, {max_readers=}")


# --- kazoo on the same path ----------------------------------------------------------------

# Our tasks against a peer, on clients[index % 2]: tasks 1 and 3 share their client's lock
# (its readers hold together on one node).
OUR_IDENTIFIERS = ("a0", "a1", "a2", "a1")
EVERY_SIDE = {("a", "read"), ("a", "write"), ("k", "read"), ("k", "write")}
PER_SIDE = 30  # sections of each (library, mode) in a run, at least: it stops once all have them


def missing_sides(intervals: Iterable[tuple[str, str, float, float]]) -> list[str]:
    """(who, mode, start, end): the (library, mode) pairs with fewer than ``PER_SIDE``
    sections, "a" being ours and "k" the other library's."""
    counts = Counter((who[0], mode) for who, mode, _, _ in intervals)
    return [
        f"{side}: {counts[side]} of {PER_SIDE}"
        for side in sorted(EVERY_SIDE)
        if counts[side] < PER_SIDE
    ]


def kazoo_worker(
    hosts: str,
    name: str,
    seed: int,
    stop: threading.Event,
    intervals: list[tuple[str, str, float, float]],
    told: bool,
    changes: Changes,
) -> None:
    """A kazoo client (threads, blocking) taking kazoo's ReadLock/WriteLock at random until
    ``stop``, told of our Curator-style names by ``extra_lock_patterns`` if ``told`` (kazoo's
    own names we read as they are)."""
    client = KazooClient(hosts=hosts, timeout=4.0)
    client.start(timeout=10)
    try:
        rng = random.Random(seed)
        reads, writes = (["-__WRIT__"], ["-__WRIT__", "-__READ__"]) if told else ([], [])
        reader = client.ReadLock(PATH, name, extra_lock_patterns=reads)
        writer = client.WriteLock(PATH, name, extra_lock_patterns=writes)
        while not stop.is_set():
            mode = "write" if rng.random() < 0.4 else "read"
            lock = writer if mode == "write" else reader
            if not lock.acquire(timeout=10):
                raise AssertionError(f"{name}: kazoo {mode} lock not acquired in 10 s")
            try:
                start = time.monotonic()
                time.sleep(rng.uniform(0, 0.005))
                intervals.append((name, mode, start, time.monotonic()))
            finally:
                lock.release()
            anyio.from_thread.run_sync(changes.notify)
    finally:
        client.stop()
        client.close()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("told", [False, True], ids=["kazoo as is", "kazoo told of Curator's"])
async def test_kazoo_read_and_write_locks_share_the_queue(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory, hosts: str, told: bool
) -> None:
    """kazoo readers and writers and ours on one path, until both libraries read and wrote
    ``PER_SIDE`` times (a fair queue makes that happen): no writer ever overlaps anyone.
    With ``compat="kazoo"`` kazoo reads ours as its own, whether or not it was also told of
    Curator's markers (``extra_lock_patterns``); our default names are refused beside
    kazoo's (``tests/test_compat_refusal.py``)."""
    compat = "kazoo"
    await zk.ensure_path(PATH)  # and the chroot, which kazoo expects to exist
    clients = [zk, await open_client()]
    intervals: list[tuple[str, str, float, float]] = []  # who, mode, start, end
    stop = threading.Event()  # read by our tasks and by kazoo's threads
    changes = Changes()

    async def ours(index: int) -> None:
        client, identifier = clients[index % 2], OUR_IDENTIFIERS[index]
        rw = client.rw_lock(PATH, identifier=identifier, compat=compat)  # type: ignore[arg-type]
        rng = random.Random(index)
        while not stop.is_set():
            mode = "write" if rng.random() < 0.4 else "read"
            async with side(rw, mode).acquire(timeout=10):
                start = time.monotonic()
                await anyio.sleep(rng.uniform(0, 0.005))
                intervals.append((f"a{index}", mode, start, time.monotonic()))
            changes.notify()

    async def theirs(index: int) -> None:
        await anyio.to_thread.run_sync(
            kazoo_worker, hosts, f"k{index}", index, stop, intervals, told, changes
        )

    async with anyio.create_task_group() as tg:
        for index in range(len(OUR_IDENTIFIERS)):
            tg.start_soon(ours, index)
        for index in range(2):
            tg.start_soon(theirs, index)
        with anyio.move_on_after(HANG):  # the threads cannot be cancelled: they see stop
            try:
                await changes.until(lambda: not missing_sides(intervals))
            finally:
                stop.set()
    assert missing_sides(intervals) == [], f"not done within {HANG} s"
    assert_no_writer_overlaps(intervals)
    done = {(who[0], mode) for who, mode, _, _ in intervals}
    assert done == EVERY_SIDE
    print(f"RWLOCK kazoo: {len(intervals)} sections")
    await gone(zk, PATH)


# --- Curator on the same path --------------------------------------------------------------

CURATOR_SOURCE = Path(__file__).parent / "interop" / "CuratorReadWrite.java"


@pytest.fixture(scope="module")
def curator_command(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ...]:
    """The Curator driver (tests/interop/CuratorReadWrite.java), compiled now; skipped with
    the reason without a JDK or Curator's jars."""
    command = compiled_java(java_cache(tmp_path_factory), CURATOR_SOURCE, "rw")
    if isinstance(command, str):
        pytest.skip(command)
    return command


def assert_no_writer_overlaps(intervals: Iterable[tuple[str, str, float, float]]) -> None:
    """(who, mode, start, end): a write section never overlaps another section."""
    sections = list(intervals)
    writes = [(who, s, e) for who, mode, s, e in sections if mode == "write"]
    for who, mode, start, end in sections:
        for writer, w_start, w_end in writes:
            if (who, start) != (writer, w_start):
                assert end <= w_start or w_end <= start, (who, mode, writer)


@pytest.mark.timeout(120)
async def test_curator_read_write_locks_share_the_queue(
    zk: aiozklock.ZooKeeperClient,
    open_client: ClientFactory,
    hosts: str,
    curator_command: tuple[str, ...],
) -> None:
    """Curator's InterProcessReadWriteLock (3 threads) and ours on one path, both with their
    default configuration, until both libraries read and wrote ``PER_SIDE`` times (a fair
    queue makes that happen): Curator orders our nodes by their suffix, we order its; no
    writer ever overlaps anyone."""
    await zk.ensure_path(PATH)
    clients = [zk, await open_client()]
    intervals: list[tuple[str, str, float, float]] = []  # who, mode, start, end
    stop = anyio.Event()
    changes = Changes()

    async def ours(index: int) -> None:
        rw = clients[index % 2].rw_lock(PATH, identifier=OUR_IDENTIFIERS[index])
        rng = random.Random(index)
        while not stop.is_set():
            mode = "write" if rng.random() < 0.4 else "read"
            async with side(rw, mode).acquire(timeout=10):
                start = time.monotonic()
                await anyio.sleep(rng.uniform(0, 0.005))
                intervals.append((f"a{index}", mode, start, time.monotonic()))
            changes.notify()

    async def curator(lines: Lines) -> None:
        while (line := await lines.next()) != "done":
            assert not line.startswith("error"), line
            who, mode, start, end = line.split(" ")
            intervals.append((f"k{who}", mode, int(start) / 1e9, int(end) / 1e9))
            changes.notify()

    async with running([*curator_command, hosts, PATH, "3"]) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        lines = Lines(process.stdout)
        with anyio.move_on_after(HANG) as bound:
            assert await lines.next() == "connected"
            async with anyio.create_task_group() as tg:
                tg.start_soon(curator, lines)
                for index in range(len(OUR_IDENTIFIERS)):
                    tg.start_soon(ours, index)
                await changes.until(lambda: not missing_sides(intervals))
                stop.set()
                await process.stdin.send(b"stop\n")
            assert await process.wait() == 0
        assert not bound.cancelled_caught, f"not done within {HANG} s: {missing_sides(intervals)}"
    assert_no_writer_overlaps(intervals)
    done = {(who[0], mode) for who, mode, _, _ in intervals}
    assert done == EVERY_SIDE
    curator_sections = sum(1 for who, *_ in intervals if who.startswith("k"))
    print(f"RWLOCK curator: {len(intervals)} sections, {curator_sections} by Curator")
    await gone(zk, PATH)
