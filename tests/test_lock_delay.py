"""Lock-delay (issue 33 item 3): a grant after a holder whose node vanished without a release
comes no earlier than its ``lock_delay`` after it vanished; a release hands over at once.

The vanish instant is measured by a third session's watch (``DeletionWatch``): it can only
be later than the server's deletion, so ``grant - vanished >= S`` is a lower bound that
load cannot break (lateness only makes the gap larger). No test asserts a tight upper bound.
"""

from __future__ import annotations

import os
import signal
import time

import anyio
import pytest

import aiozklock
from aiozklock._recipes._core._delay_record import RECORD, TAG, holder_record, parse_record
from aiozklock.testing import FaultProxy, RawZooKeeperConnection, expire_session
from tests.conftest import ClientFactory, wait_for_queue
from tests.test_faults import PARKED, DeletionWatch, first_host, observer, report
from tests.test_pause import ChildLines, open_holder

pytestmark = [pytest.mark.anyio]

__all__ = ["observer"]  # a fixture, imported to be used here

PATH = "/locks/delay"
DELAY = 2.0  # S: short, and longer than the holders' session timeouts (no warning)
HOLDER_TIMEOUT = 1.0  # the child's session timeout: the server's minimum is 0.4 s
LONG = 60.0  # a delay no test waits for: a grant within BOUND proves none was applied
BOUND = 10.0


class Granted:
    """An acquisition in a task of its own: ``at`` is when it returned
    (``time.monotonic()``); it holds until ``release`` is set, then releases (confirmed)."""

    def __init__(self) -> None:
        self.at = 0.0
        self.done = anyio.Event()
        self.release = anyio.Event()

    async def hold(self, lock: aiozklock.Lock) -> None:
        await lock.acquire()
        self.at = time.monotonic()
        self.done.set()
        await self.release.wait()
        await lock.release(confirm=True)


async def expire(zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, hosts: str) -> None:
    """Expire ``zk``'s session (it runs through ``proxy``): its reconnect is parked in the
    proxy until the expiry is done (see test_faults' F6)."""
    session = (zk.session_id, zk.session_password)
    await zk.exists("/")
    proxy.set_delay(PARKED)
    await expire_session(first_host(hosts), *session)
    proxy.set_delay(0)


async def record_of(zk: aiozklock.ZooKeeperClient, path: str = PATH) -> str | None:
    """The node the path's lock-delay record names, None without a record."""
    try:
        data, _ = await zk.get_data(f"{path}/{RECORD}")
    except aiozklock.NoNodeError:
        return None
    record = parse_record(data, path)
    assert record is not None
    return record.holder


async def lock_nodes(zk: aiozklock.ZooKeeperClient, path: str = PATH) -> list[str]:
    """The contenders' nodes under ``path`` (the record is not one)."""
    return [c for c in await zk.get_children(path, missing_ok=True) if c != RECORD]


@pytest.mark.timeout(60)
async def test_a_sigkilled_holder_delays_the_next_grant(
    anyio_backend: str,
    zk_hosts: str,
    chroot: str,
    open_client: ClientFactory,
    observer: RawZooKeeperConnection,
) -> None:
    """The holder's process is SIGKILLed: the server expires its session and deletes its
    node; the waiter (queued behind it) is granted no earlier than S after the deletion."""
    process = await open_holder(
        "_delay_holder", zk_hosts + chroot, PATH, str(HOLDER_TIMEOUT), str(DELAY), anyio_backend
    )
    waiter = await open_client(session_timeout=DELAY)
    try:
        with anyio.fail_after(30):  # a hang bound: a Python process starts and acquires
            acquired = await ChildLines(process).next()
        node = acquired["node"]
        assert node.startswith(TAG)  # a lock-delay contender's node says so by its name
        assert await record_of(waiter) == node  # written before the grant returned
        deletion = DeletionWatch(observer, f"{chroot}{PATH}/{node}")
        await deletion.arm()
        granted = Granted()
        lock = waiter.lock(PATH, lock_delay=DELAY)
        async with anyio.create_task_group() as tg:
            tg.start_soon(granted.hold, lock)
            with anyio.fail_after(5):
                await wait_for_queue(waiter, PATH, 3)  # the record, the holder, the waiter
            os.kill(process.pid, signal.SIGKILL)
            killed_at = time.monotonic()
            with anyio.fail_after(BOUND + HOLDER_TIMEOUT + DELAY):  # a hang bound
                await deletion.run()
                await granted.done.wait()
            node_now = lock.statistics().node
            waited = lock.statistics().lock_delay_waited
            granted.release.set()
        gap = granted.at - deletion.deleted_at
        assert gap >= DELAY, gap
        assert waited > 0
        assert node_now is not None
        assert await record_of(waiter) is None  # the release deleted the waiter's record
        report(
            f"lock-delay after SIGKILL ({anyio_backend})",
            lock_delay=DELAY,
            expiry_after_kill=deletion.deleted_at - killed_at,
            grant_after_vanish=gap,
        )
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


async def test_a_release_hands_over_at_once(open_client: ClientFactory) -> None:
    """A clean release deletes the record with the node (one transaction): the waiter is
    granted at once, though S is far longer than the test may take."""
    first, second = await open_client(), await open_client()
    holder = first.lock(PATH, lock_delay=LONG)
    waiter = second.lock(PATH, lock_delay=LONG)
    await holder.acquire()
    assert await record_of(first) == holder.statistics().node
    granted = Granted()
    async with anyio.create_task_group() as tg:
        tg.start_soon(granted.hold, waiter)
        with anyio.fail_after(5):
            await wait_for_queue(second, PATH, 3)
        released_at = time.monotonic()
        await holder.release()
        with anyio.fail_after(BOUND):  # BOUND < LONG: no delay was applied
            await granted.done.wait()
        assert waiter.statistics().lock_delay_waited == 0.0
        assert await record_of(second) == waiter.statistics().node
        granted.release.set()
    report("lock-delay after a clean release", grant_after_release=granted.at - released_at)
    assert await record_of(second) is None  # deleted with the node
    assert await lock_nodes(second) == []


@pytest.mark.timeout(40)
async def test_an_expired_holder_delays_late_contenders(
    anyio_backend: str,
    zk_hosts: str,
    chroot: str,
    proxy: FaultProxy,
    open_client: ClientFactory,
    observer: RawZooKeeperConnection,
) -> None:
    """The holder's session is expired (in-process): every contender that arrives after,
    with no predecessor to watch, still waits out the rest of the delay. ``try_acquire``
    says False and leaves no node; a cancelled wait leaves none; a contender without
    lock_delay honors the record too, and deletes it once granted."""
    holder_client = await open_client(proxy, session_timeout=DELAY)
    holder = holder_client.lock(PATH, lock_delay=DELAY)
    await holder.acquire()
    node = holder.statistics().node
    deletion = DeletionWatch(observer, f"{chroot}{PATH}/{node}")
    await deletion.arm()
    await expire(holder_client, proxy, zk_hosts)
    with anyio.fail_after(5):
        await deletion.run()

    late = await open_client(session_timeout=DELAY)
    assert await late.lock(PATH).try_acquire() is False
    assert await lock_nodes(late) == []  # its delete is ordered before this listing

    cancelled = late.lock(PATH, lock_delay=DELAY, identifier="cancelled")
    with anyio.move_on_after(0.3) as scope:
        await cancelled.acquire()
    assert scope.cancelled_caught
    assert await lock_nodes(late) == []

    with pytest.raises(aiozklock.LockTimeout, match="lock-delay"):
        await late.lock(PATH, identifier="hurried").acquire(timeout=0.1)

    plain = late.lock(PATH)  # no lock_delay of its own: honors the record all the same
    await plain.acquire()
    gap = time.monotonic() - deletion.deleted_at
    assert gap >= DELAY, gap
    assert plain.statistics().lock_delay_waited > 0
    assert await record_of(late) is None  # waited out, deleted: its own loss delays nobody
    report(f"lock-delay after expiry, late contender ({anyio_backend})", grant_after_vanish=gap)
    await plain.release()
    with pytest.raises(aiozklock.LockLost):
        await holder.release()


async def test_a_waiter_without_lock_delay_honors_it(
    chroot: str,
    zk_hosts: str,
    proxy: FaultProxy,
    open_client: ClientFactory,
    observer: RawZooKeeperConnection,
) -> None:
    """A waiter without lock_delay queued behind a lock-delay holder: woken by the holder's
    expiry as its only predecessor (a hand-off with no listing), it still waits out the
    delay: the listing it queued with showed a lock-delay node."""
    holder_client = await open_client(proxy, session_timeout=1.0)
    holder = holder_client.lock(PATH, lock_delay=1.0)
    await holder.acquire()
    deletion = DeletionWatch(observer, f"{chroot}{PATH}/{holder.statistics().node}")
    await deletion.arm()
    waiter_client = await open_client()
    waiter = waiter_client.lock(PATH)
    granted = Granted()
    async with anyio.create_task_group() as tg:
        tg.start_soon(granted.hold, waiter)
        with anyio.fail_after(5):
            await wait_for_queue(waiter_client, PATH, 3)
        await expire(holder_client, proxy, zk_hosts)
        with anyio.fail_after(BOUND):
            await deletion.run()
            await granted.done.wait()
        assert waiter.statistics().lock_delay_waited > 0
        granted.release.set()
    assert granted.at - deletion.deleted_at >= 1.0
    assert await lock_nodes(waiter_client) == []
    assert await record_of(waiter_client) is None


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_multi_lock_honors_every_member(
    zk_hosts: str, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    """A multi-lock holder with lock_delay writes a record on each member; after its
    expiry, a lock on one member waits out the delay; a release deletes every record."""
    paths = [PATH + "/a", PATH + "/b"]
    holder_client = await open_client(proxy, session_timeout=1.0)
    multi = holder_client.multi_lock(paths, lock_delay=1.0)
    await multi.acquire()
    nodes = multi.statistics().nodes
    assert [await record_of(holder_client, p) for p in paths] == [nodes[p] for p in paths]
    await expire(holder_client, proxy, zk_hosts)
    other = await open_client()
    single = other.lock(paths[1])
    await single.acquire()
    assert single.statistics().lock_delay_waited > 0
    await single.release()
    again = other.multi_lock(paths, lock_delay=1.0)
    await again.acquire()  # the record on b is gone; a's is waited out (over by now)
    await again.release(confirm=True)
    assert [await record_of(other, p) for p in paths] == [None, None]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_election_leader_takes_office_after_the_delay(
    chroot: str,
    zk_hosts: str,
    proxy: FaultProxy,
    open_client: ClientFactory,
    observer: RawZooKeeperConnection,
) -> None:
    leader_client = await open_client(proxy, session_timeout=1.0)
    leader = leader_client.election(PATH, lock_delay=1.0)
    await leader.acquire()
    (node,) = await lock_nodes(leader_client)
    assert await record_of(leader_client) == node
    deletion = DeletionWatch(observer, f"{chroot}{PATH}/{node}")
    await deletion.arm()
    await expire(leader_client, proxy, zk_hosts)
    with anyio.fail_after(5):
        await deletion.run()
    candidate = (await open_client()).election(PATH, lock_delay=LONG)
    await candidate.acquire()
    assert time.monotonic() - deletion.deleted_at >= 1.0
    await candidate.release()


# ---------------------------------------------------------------- what it costs

PING = 11
EXISTS = 3


async def _take_and_give_back(lock: aiozklock.Lock) -> None:
    await lock.acquire()
    await lock.release(confirm=True)


async def _cycle(proxy: FaultProxy, open_client: ClientFactory, **delay: float) -> list[int]:
    """The opcodes a client behind ``proxy`` sends for: an acquire and a release, again,
    then a hand-off to it from another client (pings left out)."""
    ours = await open_client(proxy)
    other = await open_client()
    lock = ours.lock(PATH, **delay)
    proxy.reset_counters()
    for _ in range(2):
        await lock.acquire()
        await lock.release()
    rival = other.lock(PATH, **delay)
    await rival.acquire()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_take_and_give_back, lock)
        with anyio.fail_after(5):
            await wait_for_queue(other, PATH, 2 + bool(delay))
            # Our watch on the rival's node is sent before it goes (else the listing finds
            # it gone, and the cycle has no exists: a verdict the load would decide).
            await proxy.wait_for_request(EXISTS)
        await rival.release()
    return [r.opcode for r in proxy.requests if r.opcode != PING]


# What a lock sent for _cycle before lock-delay existed (main at 83e779b, measured): the
# first join finds no path (create2 and getChildren fail NoNode; the containers go with the
# next create, the member first, then its whole chain), a delete (the release), the
# re-acquire proven alone (create2, no listing), its delete, then the join behind the rival
# (create2, getChildren), the existence watch on the rival's node, the confirmed delete.
BEFORE = [15, 8, 19, 15, 8, 19, 19, 19, 15, 8, 2, 15, 2, 15, 8, 3, 2]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_lock_without_lock_delay_sends_what_it_sent_before(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    assert await _cycle(proxy, open_client) == BEFORE


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_what_lock_delay_costs(proxy: FaultProxy, open_client: ClientFactory) -> None:
    """The same cycle with lock_delay: each grant creates the record (create2), each release
    deletes it with the node (one multi); no re-acquire is proven alone (the record's writes
    come between), and the hand-off from a lock-delay holder creates the record at once."""
    sent = await _cycle(proxy, open_client, lock_delay=LONG)
    report("lock-delay requests for the cycle", before=str(BEFORE), with_lock_delay=str(sent))
    assert sent == [*BEFORE[:10], 15, 14, 15, 8, 15, 14, 15, 8, 3, 15, 14]


# ---------------------------------------------------------------- two leaders' clocks

E1, E2 = 7 << 32, 8 << 32  # zxids of two leader epochs


def _marked(data: bytes, mtime: int, zxid: int) -> bytes:
    record = parse_record(data, PATH)
    assert record is not None
    return record.marked_gone(mtime, zxid)


def test_server_times_of_two_leaders_are_never_compared() -> None:
    """The arithmetic of a late contender's wait (pure): reckoned from the mark's mtime when
    one leader wrote both times; the full delay from its own write when the mark's time was
    written by another leader (whose clock may be ahead by any skew), however the record
    carries it. The first contender to see the vanish waits the full delay either way."""
    held = holder_record("n", 2.0)
    first = parse_record(held, PATH)
    assert first is not None
    assert first.remaining((1_000, E1 + 1), (1_500, E2 + 1)) == 2.0
    marked = _marked(held, 1_000, E1 + 1)  # "gone by this version's mtime"
    late = parse_record(marked, PATH)
    assert late is not None
    assert late.remaining((10_000, E1 + 2), (11_500, E1 + 3)) == 0.5  # one leader: the rest
    assert late.remaining((10_000, E1 + 2), (11_500, E2 + 1)) == 2.0  # two: all of it
    carried = parse_record(_marked(marked, 10_000, E1 + 2), PATH)  # gone_by, and its epoch
    assert carried is not None
    assert (carried.gone_by, carried.gone_epoch) == (10_000, 7)
    assert carried.remaining((11_000, E1 + 3), (11_500, E1 + 4)) == 0.5
    assert carried.remaining((11_000, E2 + 1), (11_500, E2 + 2)) == 2.0
    unknown = parse_record(b'{"holder":"n","delay":2.0,"gone_by":10000}', PATH)
    assert unknown is not None  # a time of no known epoch: never compared either
    assert unknown.remaining((11_000, E1 + 3), (11_500, E1 + 4)) == 2.0


# ---------------------------------------------------------------- arguments


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_lock_delay_arguments(
    zk: aiozklock.ZooKeeperClient, caplog: pytest.LogCaptureFixture
) -> None:
    for bad in (0, -1.0, float("nan"), float("inf"), "2", True):
        with pytest.raises(aiozklock.InvalidArgument, match="lock_delay"):
            zk.lock(PATH, lock_delay=bad)  # type: ignore[arg-type]
    with pytest.raises(aiozklock.InvalidArgument, match="fair=True"):
        zk.lock(PATH, fair=False, lock_delay=DELAY)
    assert zk.lock(PATH).lock_delay is None
    assert zk.lock(PATH, lock_delay=LONG).lock_delay == LONG
    assert zk.lock(PATH, lock_delay=LONG) is not zk.lock(PATH)  # another contender
    assert "shorter than the session timeout" not in caplog.text
    short = zk.negotiated_timeout / 2
    zk.election(PATH, lock_delay=short)
    assert "shorter than the session timeout" in caplog.text
