"""The holder's promise on a real 3-node ensemble whose servers are cut off from each other:
a holder connected to a server that cannot reach the leader is stopped **before** another
session is granted its lock (``aiozklock.testing.measure_cut``: holder and waiter in this
process, on one clock, the instants taken after the cut).

The ensemble keeps a cut-off follower serving its clients for ``syncLimit x tickTime`` =
4 s, twice the session timeout: the leader expires the holder's session while its server
still answers it. The negative control runs the same cut with the holder on the rule every
other client follows (an answered request proves the session alive) and must overlap: the
scenario does open the gap the protection closes.

The same ensemble proves two promises first proven on one server: a **sync** holder (a
thread in ``with zk.lock(...)``) on a cut-off follower is told (``lost``, ``on_lost``)
before the majority's grant, and raises ``LockLost`` at the block's exit; and
**lock-delay** holds across a leader SIGKILLed between the vanish and the grant, also for
a contender that arrives under the next leader (it never compares two leaders' clocks).
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest

import aiozklock
from aiozklock._recipes._core._delay_record import RECORD, parse_record
from aiozklock.testing import (
    FaultProxy,
    RawZooKeeperConnection,
    WatchEventType,
    ZooKeeperCluster,
    expire_session,
    measure_cut,
    wait_for_children,
)

pytestmark = pytest.mark.anyio

T = 2.0  # session timeout; tick 200 ms: the leader pings every 0.1 s
DELAY = 2.5  # lock-delay: >= the sessions' timeouts (no warning)
BOUND = 10.0  # a hang guard only
LONGEST = 30.0  # the ensemble's maxSessionTimeout: a session that outlives an election
PARKED = 60.0  # a proxy delay that holds a reconnect back until the expiry has landed


@pytest.fixture(scope="module")
def ensemble() -> Iterator[ZooKeeperCluster]:
    config = {"syncLimit": "20", "minSessionTimeout": "100", "maxSessionTimeout": "30000"}
    with ZooKeeperCluster(3, partitionable=True, extra_config=config) as cluster:
        yield cluster


# One backend per fault (both are covered; the suite's time is shared): the mechanism is
# the session's, below the event loop's differences.
@pytest.mark.parametrize(
    ("anyio_backend", "fault", "how"),
    [
        ("asyncio", "isolate-follower", "silent"),
        ("trio", "isolate-leader", "silent"),
        ("trio", "split-follower", "reset"),
    ],
)
async def test_a_holder_cut_off_from_the_leader_stops_before_the_next_grant(
    ensemble: ZooKeeperCluster, fault: str, how: str
) -> None:
    result = await measure_cut(ensemble, fault, session_timeout=T, how=how)  # type: ignore[arg-type]
    assert not result.overlap, result
    # Stopped within the proof's bounds: a probe late by T/6 after at most T/8 of waiting.
    assert result.stopped < T, result


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("fault", ["isolate-follower", "isolate-leader"])
async def test_with_loss_policy_expired_the_holding_is_lost_before_the_next_grant(
    ensemble: ZooKeeperCluster, fault: str
) -> None:
    result = await measure_cut(
        ensemble,
        fault,  # type: ignore[arg-type]
        session_timeout=T,
        loss_policy="expired",
        phase=T / 2,  # a session in its steady state: its proof is a probe, not the handshake
    )
    assert not result.overlap, result


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_negative_control_without_the_leader_proof_the_holder_overlaps(
    ensemble: ZooKeeperCluster,
) -> None:
    result = await measure_cut(ensemble, "isolate-follower", session_timeout=T, protect=False)
    # Its server answers its pings until syncLimit x tickTime = 4 s after the cut; the leader
    # expired the session about T after it, and the waiter was granted then.
    assert result.overlap, result
    assert result.stopped > 3.0, result


# ---------------------------------------------------------------- the synchronous face


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the test's loop; sync runs its own
async def test_a_sync_holder_cut_off_is_told_lost_before_the_next_grant(
    ensemble: ZooKeeperCluster,
) -> None:
    """A thread holds in ``with zk.lock(...)`` through a client connected only to a follower
    that is then cut off from the others: ``lost`` is set and ``on_lost`` called (the
    instant the callback records, on this machine's monotonic clock) before a session on
    the majority is granted the lock; leaving the block raises ``LockLost``."""
    import aiozklock.sync

    target = ensemble.followers()[0]
    others = ",".join(m.address for m in ensemble.members if m is not target)
    path = f"/sync-cut/{uuid.uuid4().hex}"
    times: dict[str, float] = {}
    told_set: list[bool] = []
    locks: list[aiozklock.sync.SyncLock] = []
    events: list[threading.Event] = []  # the holder thread's ``lost``
    held, granted = anyio.Event(), anyio.Event()

    def on_lost() -> None:  # in the client's loop thread, right after ``lost`` was set
        times["lost"] = time.monotonic()
        told_set.append(events[0].is_set())

    def hold(zk: aiozklock.sync.SyncClient) -> BaseException | None:
        locks.append(zk.lock(path, on_lost=on_lost))
        try:
            with locks[0]:
                events.append(locks[0].lost)
                anyio.from_thread.run_sync(held.set)
                assert events[0].wait(BOUND)
        except aiozklock.LockLost as exc:
            return exc
        return None

    async def wait(waiter: aiozklock.ZooKeeperClient) -> None:
        async with waiter.lock(path):
            times["granted"] = time.monotonic()
            granted.set()

    result: list[BaseException | None] = []

    async def holder() -> None:
        result.append(await anyio.to_thread.run_sync(hold, sync_zk))

    sync_zk = aiozklock.sync.connect(target.address, session_timeout=T)
    await anyio.to_thread.run_sync(sync_zk.open)
    try:
        async with aiozklock.connect(others, session_timeout=T) as waiter:
            with anyio.fail_after(2 * BOUND):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(holder)
                    await held.wait()
                    tg.start_soon(wait, waiter)
                    # Its server may not have applied the holder's writes yet.
                    await wait_for_children(
                        waiter, path, lambda c: len(c) >= 2, await_creation=True
                    )
                    times["cut"] = time.monotonic()
                    ensemble.isolate(target)
                    await granted.wait()
                    ensemble.heal()
    finally:
        ensemble.heal()
        await anyio.to_thread.run_sync(sync_zk.close)
        await ensemble.await_serving(120.0)
    cut = times["cut"]
    report = {k: round(v - cut, 3) for k, v in times.items()}
    print(f"ENSEMBLE sync holder cut off (after the cut, s): {report}")
    assert told_set == [True]  # on_lost came after ``lost`` was set
    assert times["lost"] < times["granted"], report
    assert isinstance(result[0], aiozklock.LockLost), result


# ---------------------------------------------------------------- lock-delay


def _epoch(zxid: int) -> int:
    """The leader epoch a zxid was written in (its high 32 bits)."""
    return zxid >> 32


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("late", [False, True], ids=["waiter", "late-contender"])
async def test_lock_delay_holds_across_a_leader_kill(
    ensemble: ZooKeeperCluster, late: bool
) -> None:
    """A lock-delay holder's session ends without a release (expired for real); the waiter,
    on another member, writes its "gone" mark, and the leader is SIGKILLed right then (the
    mark seen by a third session's data watch). The grant, written under the next leader,
    still comes no earlier than the delay after the vanish (the third session's NodeDeleted:
    a lower bound that load only makes larger).

    ``waiter``: that waiter is granted; its wait runs on its own clock from its mark.
    ``late-contender``: that waiter gives up (its session expired), and a contender that
    arrives once the next leader serves is granted: the mark's time was written by the
    killed leader's clock, its own by the next one's, so it waits the full delay from its
    own write (it cannot tell their skew): granted no earlier than the delay after it began.
    """
    leader = ensemble.leader()
    near, far = (m for m in ensemble.members if m is not leader)  # holder's, waiter's
    path = f"/delay-leader/{uuid.uuid4().hex}"
    record_path = f"{path}/{RECORD}"
    granted, release = anyio.Event(), anyio.Event()
    times: dict[str, float] = {}
    first = anyio.CancelScope()  # the waiter's, cancelled in the late-contender case
    try:
        async with contextlib.AsyncExitStack() as stack:
            proxy = await stack.enter_async_context(FaultProxy(near.address))
            holder_zk = await stack.enter_async_context(
                aiozklock.connect(proxy.address, session_timeout=T)
            )
            waiter_proxy = await stack.enter_async_context(FaultProxy(far.address))
            waiter_zk = await stack.enter_async_context(
                aiozklock.connect(waiter_proxy.address, session_timeout=DELAY)
            )
            # On the holder's member: it has applied what the holder was answered.
            observer = await stack.enter_async_context(
                await RawZooKeeperConnection.open(near.address)
            )
            holder = holder_zk.lock(path, lock_delay=DELAY)
            await holder.acquire()
            node = holder.statistics().node
            assert await observer.exists(f"{path}/{node}", watch=True) is not None
            await observer.get_data(record_path, watch=True)  # the holder's record

            async def wait(lock: aiozklock.Lock, scope: anyio.CancelScope) -> None:
                with scope:
                    async with lock:
                        times["granted"] = time.monotonic()
                        granted.set()
                        await release.wait()

            waiter = winner = waiter_zk.lock(path, lock_delay=DELAY)
            winner_zk = waiter_zk
            with anyio.fail_after(4 * BOUND):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(wait, waiter, first)
                    await wait_for_children(waiter_zk, path, lambda c: len(c) >= 3)
                    # Expire the holder's session; its reconnect is parked until it has.
                    session = (holder_zk.session_id, holder_zk.session_password)
                    proxy.set_delay(PARKED)
                    await expire_session(near.address, *session)
                    deleted = await observer.wait_for_event(type=WatchEventType.NODE_DELETED)
                    times["vanished"] = deleted.t
                    await observer.wait_for_event(type=WatchEventType.NODE_DATA_CHANGED)
                    times["marked"] = time.monotonic()
                    data, stat = await observer.get_data(record_path)
                    if late:  # the waiter gives up, its session ended for real
                        first.cancel()
                        session = (waiter_zk.session_id, waiter_zk.session_password)
                        waiter_proxy.set_delay(PARKED)
                        await expire_session(far.address, *session)
                    await anyio.to_thread.run_sync(leader.kill)
                    times["killed"] = time.monotonic()
                    if late:  # connected once its server serves under the next leader
                        # The election takes 3-6 s here, more on a loaded machine: the
                        # connect waits for it (its bound is a hang guard, not a verdict).
                        winner_zk = await stack.enter_async_context(
                            aiozklock.connect(
                                far.address, session_timeout=DELAY, connect_timeout=3 * BOUND
                            )
                        )
                        times["began"] = time.monotonic()
                        winner = winner_zk.lock(path, lock_delay=DELAY)
                        tg.start_soon(wait, winner, anyio.CancelScope())
                    await granted.wait()
                    mine, after = await winner_zk.get_data(record_path)  # the winner's
                    winner_node = winner.statistics().node
                    waited = winner.statistics().lock_delay_waited
                    release.set()
            assert deleted.path == f"{path}/{node}"
            mark = parse_record(data, record_path)
            assert mark is not None, data
            assert (mark.holder, mark.gone) == (node, True), data
            record = parse_record(mine, record_path)
            assert record is not None, mine
            assert record.holder == winner_node, mine
            proxy.set_delay(0)
            waiter_proxy.set_delay(0)
    finally:
        if not leader.running:
            await leader.astart()
        await ensemble.await_serving(120.0)
    vanished = times["vanished"]
    report = {k: round(v - vanished, 3) for k, v in times.items()} | {"waited": waited}
    print(f"ENSEMBLE lock-delay across a leader kill, {late=} (after the vanish, s): {report}")
    # The mark was written under the killed leader, the grant's record under the next one.
    assert _epoch(after.mzxid) > _epoch(stat.mzxid), (hex(stat.mzxid), hex(after.mzxid))
    assert times["granted"] - vanished >= DELAY, report
    if late:
        assert times["granted"] - times["began"] >= DELAY, report
    assert waited > 0


# ---------------------------------------------------------------- a re-join's proof


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_rejoin_across_a_leader_kill_and_a_recreated_path_waits(
    ensemble: ZooKeeperCluster,
) -> None:
    """A re-join proven alone (``_enqueue.py``) must not trust the sequence numbers alone:
    our node was its queue's first (numbered 0) and was released; the leader is SIGKILLed;
    under the next leader another session deletes the path, creates it again and takes the
    lock (numbered 0 again), so our new node is numbered one past our old one. Our session
    outlives the election (its timeout is the ensemble's longest), so its re-join may try
    the proof: another session's transactions and the epoch change between our two creates
    must make it list, and wait for the other holder. (Were our session to expire all the
    same, its re-join would list anyway: the verdict is the same.)"""
    leader = ensemble.leader()
    path = f"/rejoin-leader/{uuid.uuid4().hex}"
    held, release = anyio.Event(), anyio.Event()
    order: list[str] = []
    nodes: list[str] = []
    try:
        async with (
            aiozklock.connect(ensemble.hosts, session_timeout=LONGEST) as ours_zk,
            aiozklock.connect(ensemble.hosts, session_timeout=LONGEST) as other_zk,
        ):
            await other_zk.ensure_path(path)  # a plain node: ours to delete and create again
            ours = ours_zk.lock(path)
            await ours.acquire()  # listed: alone
            assert (ours.statistics().node or "").endswith("0000000000")
            await ours.release()
            await wait_for_children(other_zk, path, lambda c: not c)
            await anyio.to_thread.run_sync(leader.kill)
            with anyio.fail_after(4 * BOUND):  # the election: a hang guard only
                # The election may drop the connection under a write (its outcome then
                # unknown): written again, what it already did is no error.
                await _until_answered(lambda: other_zk.delete(path), aiozklock.NoNodeError)
                await _until_answered(lambda: other_zk.create(path), aiozklock.NodeExistsError)

                async def other() -> None:
                    async with other_zk.lock(path):
                        order.append("other")
                        held.set()
                        await release.wait()

                async def again() -> None:
                    async with ours:
                        order.append("ours")
                        nodes.append(ours.statistics().node or "")

                async with anyio.create_task_group() as tg:
                    tg.start_soon(other)
                    await held.wait()
                    tg.start_soon(again)
                    queue = await wait_for_children(other_zk, path, lambda c: len(c) == 2)
                    assert sorted(c[-10:] for c in queue) == ["0000000000", "0000000001"]
                    order.append("released")
                    release.set()
    finally:
        if not leader.running:
            await leader.astart()
        await ensemble.await_serving(120.0)
    assert order == ["other", "released", "ours"]
    assert nodes[0].endswith("0000000001")


async def _until_answered(write: Callable[[], Awaitable[object]], done: type[Exception]) -> None:
    """``await write()``, called again after a ``ConnectionLoss`` (the client waits for its
    reconnect), until answered; ``done``: the error saying an earlier attempt did it."""
    while True:
        try:
            await write()
            return
        except done:
            return
        except aiozklock.ConnectionLoss:
            continue
