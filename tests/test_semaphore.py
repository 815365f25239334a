"""The semaphore: its pure decision function (exhaustively, with a model of who is woken by
each change), and the recipe against real ZooKeeper: the limit is never exceeded, FIFO, no
herd, ``max_leases`` disagreement, reentrancy, ``leases()``, cancellation, lost replies and
session expiry."""

from __future__ import annotations

import contextlib
import itertools
import random
import time
from collections.abc import Callable, Iterator

import anyio
import anyio.abc
import pytest

import aiozklock
from aiozklock._recipes._core._names import node_prefix
from aiozklock._recipes._core._plan import Decision
from aiozklock._recipes._core._queue import Queue
from aiozklock._recipes._core._queued import QueuedPrimitive
from aiozklock._recipes._semaphore import LeaseBase, decide_leases, stored_limit
from aiozklock.testing import FaultProxy, Opcode, expire_session, session_of
from tests._clocks import on_monotonic
from tests.conftest import ClientFactory, gone, wait_for_children, wait_for_queue
from tests.conftest import on_wait as on_queue_wait

PATH = "/semaphores/s"

# ---------------------------------------------------------------- the decision function


def queue_of(size: int, start: int = 7) -> list[str]:
    """``size`` nodes of distinct contenders, in queue order (names not in that order)."""
    return [f"{node_prefix(f'g{99 - i:02d}')}{start + 3 * i:010d}" for i in range(size)]


def decisions(queue: list[str], max_leases: int) -> dict[str, Decision]:
    decide = decide_leases(max_leases)
    shuffled = random.Random(len(queue)).sample(queue, len(queue))
    return {node: decide(shuffled, node, node.split("-")[0]) for node in queue}


def states(max_size: int) -> Iterator[tuple[int, list[str]]]:
    for max_leases in range(1, 5):
        for size in range(max_size + 1):
            yield max_leases, queue_of(size)


def test_decision_examples() -> None:
    queue = queue_of(6)
    got = decisions(queue, 3)
    assert [got[n].held for n in queue] == [True, True, True, False, False, False]
    assert got[queue[3]].children
    assert got[queue[3]].predecessor is None
    assert got[queue[4]].predecessor == queue[3]
    assert got[queue[4]].mark
    assert got[queue[5]].predecessor == queue[4]
    assert [got[n].mark for n in queue[:3]] == [True, True, True]  # successors exist
    assert not decisions(queue[:2], 3)[queue[1]].mark  # the last node marks nothing
    # max_leases == 1 is the mutex: the first waiter watches the holder, nothing is marked.
    mutex = decisions(queue, 1)
    assert mutex[queue[1]].predecessor == queue[0]
    assert not mutex[queue[1]].children
    assert not any(d.mark for d in mutex.values())
    # Our node missing, and stale nodes of ours (same GUID), which still count.
    decide = decide_leases(2)
    assert decide(queue, "gone-lock-0000000001", "gone").missing
    ours = queue[2].split("-")[0]
    stale = f"{node_prefix(ours)}{1:010d}"
    with_stale = decide([*queue, stale], queue[2], ours)
    assert with_stale.stale == (stale,)  # it stays ahead of ours until deleted: 4th, not 3rd
    assert not with_stale.held
    assert with_stale.predecessor == queue[1]


def test_decision_exhaustive_holders_and_watches() -> None:
    """Every queue of up to 8 nodes, max_leases 1..4: exactly the first max_leases hold;
    each waiter waits on one thing: the children (first waiter, max_leases >= 2) or its
    immediate predecessor."""
    for max_leases, queue in states(8):
        got = decisions(queue, max_leases)
        for position, node in enumerate(queue):
            d = got[node]
            assert d.held == (position < max_leases)
            assert not d.missing
            assert d.stale == ()
            if d.held:
                assert d.predecessor is None
                assert not d.children
                assert d.mark == (max_leases > 1 and position + 1 < len(queue))
            elif position == max_leases and max_leases > 1:
                assert d.children
                assert d.predecessor is None
                assert d.ahead == position
            else:
                assert d.predecessor == queue[position - 1]
                assert not d.children
                assert d.mark == (max_leases > 1)


def woken_by(queue: list[str], gone: str, max_leases: int) -> set[str]:
    """Who wakes when ``gone`` is deleted: the children watcher and the node watching
    ``gone``; then, in turn, the successor of each woken node that is now held and marks."""
    before = decisions(queue, max_leases)
    after_queue = [n for n in queue if n != gone]
    after = decisions(after_queue, max_leases)
    woken = {n for n, d in before.items() if n != gone and (d.children or d.predecessor == gone)}
    frontier = list(woken)
    while frontier:
        node = frontier.pop()
        if after[node].held and after[node].mark:
            successor = after_queue[after_queue.index(node) + 1]
            watch = before[successor]
            if watch.predecessor == node and watch.mark and successor not in woken:
                woken.add(successor)
                frontier.append(successor)
    return woken


def test_decision_exhaustive_no_missed_grant_and_no_herd() -> None:
    """Every queue of up to 9 nodes, max_leases 1..4, every deletion (release, cancel,
    expiry), on nodes that all waited as their decision said: every node whose decision
    changes is woken, and a release wakes at most 2 (the new holder and its successor, who
    becomes the first waiter) whatever the number of waiters."""
    for max_leases, queue in states(9):
        before = decisions(queue, max_leases)
        for deleted in queue:
            after_queue = [n for n in queue if n != deleted]
            after = decisions(after_queue, max_leases)
            woken = woken_by(queue, deleted, max_leases)
            for node in after_queue:
                b, a = before[node], after[node]
                changed = (b.held, b.children, b.predecessor) != (a.held, a.children, a.predecessor)
                assert not changed or node in woken, (max_leases, queue, deleted, node)
            if before[deleted].held:
                assert len(woken) <= 2, (max_leases, queue, deleted, woken)
            else:
                assert len(woken) <= 3, (max_leases, queue, deleted, woken)


def test_decision_never_more_holders_than_leases_over_any_history() -> None:
    """Random histories (creates at the back, deletions anywhere): every node's earliest
    listing that says held is a time when fewer than max_leases live nodes preceded it."""
    rng = random.Random(12)
    for max_leases in (1, 2, 3, 5):
        live: list[str] = []
        sequence = itertools.count(1)
        believed: set[str] = set()
        for _ in range(1000):  # queues of up to about 100 nodes
            if live and rng.random() < 0.45:
                live.remove(rng.choice(live))
            else:
                live.append(f"{node_prefix(f'h{next(sequence)}')}{next(sequence):010d}")
            decide = decide_leases(max_leases)
            for node in rng.sample(live, min(len(live), 3)):  # a few contenders list now
                if decide(live, node, node.split("-")[0]).held:
                    believed.add(node)
            assert len(believed & set(live)) <= max_leases


def test_stored_limit() -> None:
    assert stored_limit(b"5") == 5
    assert stored_limit(b"") is None
    assert stored_limit(b"five") is None
    assert stored_limit("\u0665".encode()) is None  # a non-ASCII digit is not a count
    assert stored_limit(b"\xff") is None


# ---------------------------------------------------------------- against ZooKeeper

anyio_tests = pytest.mark.anyio

# A proxy delay that never runs out by itself: the test lifts it once the fault is in place.
HOLD = 3600.0


def on_wait(sem: aiozklock.Semaphore, hook: Callable[[Queue], None]) -> None:
    """Call ``hook(queue)`` whenever a lease of ``sem`` is about to wait, its watch armed
    and its decision made (``tests.conftest.on_wait``), for leases made from now on."""
    make = sem._new_lease

    def new_lease() -> LeaseBase:
        lease = make()
        assert isinstance(lease, QueuedPrimitive)
        queue = lease._queue
        on_queue_wait(queue, lambda: hook(queue))
        return lease

    sem._new_lease = new_lease  # type: ignore[method-assign]


def child_watch_listing(queue: Queue) -> list[str] | None:
    """The listing a waiter's armed child watch came with (None: it watches a predecessor)."""
    armed = queue._waiting.armed
    return None if armed is None else armed.children


@anyio_tests
async def test_invalid_arguments_before_any_traffic(zk: aiozklock.ZooKeeperClient) -> None:
    for bad in (0, -1, True, 1.5, "3", None, 10**6):
        with pytest.raises(aiozklock.InvalidArgument):
            zk.semaphore(PATH, bad)  # type: ignore[arg-type]
    with pytest.raises(aiozklock.InvalidArgument):
        zk.semaphore("relative", 2)
    sem = zk.semaphore(PATH, 2)
    with pytest.raises(aiozklock.InvalidArgument):
        sem.acquire(timeout=-1)
    assert await zk.exists(PATH) is None
    with pytest.raises(aiozklock.NotLockOwner):
        await sem.release()
    with pytest.raises(aiozklock.NotLockOwner):
        _ = sem.fencing_token
    assert not sem.is_held


@anyio_tests
async def test_leases_are_held_concurrently_up_to_the_limit(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    sem = zk.semaphore(PATH, 3, identifier="svc")
    assert zk.semaphore(PATH, 3, identifier="svc") is sem
    with pytest.raises(aiozklock.UsageError, match="one layout and one limit per path"):
        zk.semaphore(PATH, 4, identifier="svc")  # another limit here would not count ours
    entered = anyio.Event()
    holding = 0
    release = anyio.Event()
    tokens: list[int] = []

    async def hold() -> None:
        nonlocal holding
        async with sem:
            assert sem.is_held
            tokens.append(sem.fencing_token)
            holding += 1
            if holding == 3:
                entered.set()
            await release.wait()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(hold)
            await entered.wait()
            assert (await zk.get_data(PATH))[0] == b"3"
            leases = await sem.leases()
            assert [c.fencing_token for c in leases] == sorted(tokens)
            assert all(c.identifier == "svc" and c.is_holder for c in leases)
            assert sem.statistics().held == 3
            assert not await sem.try_acquire()  # the 4th lease is not free
            assert len(await zk.get_children(PATH)) == 3  # and it left nothing behind
            with pytest.raises(aiozklock.LockTimeout):
                await sem.acquire(timeout=0.2)
            release.set()
    assert sem.statistics().held == 0
    assert sem.statistics().acquisitions == 3
    await gone(zk, PATH)


@anyio_tests
async def test_reentrant_per_task(zk: aiozklock.ZooKeeperClient) -> None:
    sem = zk.semaphore(PATH, 1)
    with anyio.fail_after(5):
        async with sem:
            token = sem.fencing_token
            async with sem:  # nests: no second lease (it would wait for itself)
                assert sem.fencing_token == token
                assert len(await zk.get_children(PATH)) == 1
            assert sem.is_held
            await sem.acquire()
            await sem.release()
            assert sem.is_held
        assert not sem.is_held
    await gone(zk, PATH)


@anyio_tests
async def test_never_more_holders_than_leases(open_client: ClientFactory) -> None:
    """3 sessions x 5 tasks on 2 leases, until every task has had 10 leases: recorded bodies
    never overlap more than 2 deep, 2 deep does happen, and every task gets leases."""
    max_leases, tasks, rounds = 2, 15, 10
    clients = [await open_client() for _ in range(3)]
    intervals: list[tuple[float, float, int]] = []
    grants: dict[str, int] = {}
    inside = 0
    deepest = 0
    # The first holders wait inside for each other until max_leases hold at once: the
    # overlap is made to happen, not hoped for within random holds.
    full = anyio.Event()
    # The workers keep contending until every task has had its leases (no time window: a
    # slow machine takes longer, the verdict is the same).
    everyone_served = anyio.Event()

    async def worker(client: aiozklock.ZooKeeperClient, name: str, seed: int) -> None:
        nonlocal inside, deepest
        rng = random.Random(seed)
        sem = client.semaphore(PATH, max_leases)
        while not everyone_served.is_set():
            async with sem:
                inside += 1
                deepest = max(deepest, inside)
                entered = time.monotonic()
                if inside == max_leases:
                    full.set()
                await full.wait()
                await anyio.sleep(rng.uniform(0.001, 0.01))
                inside -= 1
                intervals.append((entered, time.monotonic(), sem.fencing_token))
                grants[name] = grants.get(name, 0) + 1
                if len(grants) == tasks and min(grants.values()) >= rounds:
                    everyone_served.set()

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for c, client in enumerate(clients):
                for t in range(5):
                    tg.start_soon(worker, client, f"{c}/{t}", 10 * c + t)
    events = sorted([(s, 1) for s, _, _ in intervals] + [(e, -1) for _, e, _ in intervals])
    depth = most = 0
    for _, step in events:
        depth += step
        most = max(most, depth)
    print(f"SEMAPHORE grants={len(intervals)} deepest={most} per_task={sorted(grants.values())}")
    assert most == deepest == max_leases
    assert len(grants) == tasks  # no task starved
    assert min(grants.values()) >= rounds
    assert len({token for _, _, token in intervals}) == len(intervals)
    await gone(clients[0], PATH)


@anyio_tests
async def test_fifo_across_sessions(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    holders = zk.semaphore(PATH, 2)
    order: list[int] = []
    release = anyio.Event()
    held = anyio.Event()
    count = 0

    async def hold() -> None:
        nonlocal count
        async with holders:
            count += 1
            if count == 2:
                held.set()
            await release.wait()

    async def wait_in_line(client: aiozklock.ZooKeeperClient, index: int) -> None:
        async with client.semaphore(PATH, 2):
            order.append(index)
            await anyio.sleep(0.01)

    clients = [await open_client() for _ in range(5)]
    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold)
            tg.start_soon(hold)
            await held.wait()
            for index, client in enumerate(clients):
                tg.start_soon(wait_in_line, client, index)
                await wait_for_queue(zk, PATH, 3 + index)
            release.set()
    assert order == [0, 1, 2, 3, 4]
    await gone(zk, PATH)


@anyio_tests
async def test_no_herd_one_release_wakes_two_waiters_at_most(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """2 leases held, 8 waiters (each its own session through the proxy): one release makes
    the first waiter list (it is granted) and its successor list (the new first waiter);
    the other waiters are sent nothing and send nothing."""
    holders = [zk.semaphore(PATH, 2, identifier=f"h{i}") for i in range(2)]
    waiters = [await open_client(proxy) for _ in range(8)]
    granted = anyio.Event()
    release = [anyio.Event(), anyio.Event()]
    held = [anyio.Event(), anyio.Event()]
    # Set when a waiter waits: for the first waiter (a child watch), only once the listing
    # its watch came with is the one given (every node queued).
    settled: list[anyio.Event] = [anyio.Event() for _ in waiters]
    settled_on: list[int | None] = [None] * len(waiters)

    def hook(index: int) -> Callable[[Queue], None]:
        def waiting(queue: Queue) -> None:
            listing = child_watch_listing(queue)
            if listing is None or len(listing) == settled_on[index]:
                settled[index].set()

        return waiting

    async def hold(i: int) -> None:
        async with holders[i]:
            held[i].set()
            await release[i].wait()

    async def wait(client: aiozklock.ZooKeeperClient, index: int) -> None:
        sem = client.semaphore(PATH, 2)
        on_wait(sem, hook(index))
        async with sem:
            if index == 0:
                granted.set()
            await anyio.sleep_forever()

    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            for i in range(2):
                tg.start_soon(hold, i)
                await held[i].wait()
            settled_on[0] = 2 + len(waiters)
            for index, client in enumerate(waiters):
                tg.start_soon(wait, client, index)
                await wait_for_queue(zk, PATH, 3 + index)
            # Every waiter waits, and the first one's child watch was armed after the last
            # enqueue: nothing is in flight before the release.
            for event in settled:
                await event.wait()
            connection = {h.session_id: h.connection_index for h in proxy.connect_responses}
            others = waiters[2:]
            watchers = [session_of(client).watcher_count() for client in others]
            settled[1], settled_on[1] = anyio.Event(), 1 + len(waiters)
            proxy.reset_counters()
            release[1].set()  # the newer holder releases: a grant out of queue order
            await granted.wait()
            await settled[1].wait()  # the successor waits again, as the new first waiter
            # A notification the release caused would reach each other waiter before the
            # reply to this request (a session's replies come in order): none came, so
            # their watches are still armed, and none of them sent anything.
            for client in others:
                await client.get_acl("/")
            assert [session_of(client).watcher_count() for client in others] == watchers
            requests = [r for r in proxy.requests if r.opcode not in (Opcode.PING, Opcode.GET_ACL)]
            quiet = {connection[client.session_id] for client in others}
            assert [r for r in requests if r.connection_index in quiet] == []
            listers = {r.connection_index for r in requests if r.opcode == Opcode.GET_CHILDREN}
            listings = [r for r in requests if r.opcode != Opcode.SET_DATA]
            print(f"SEMAPHORE no-herd listers={sorted(listers)} requests={len(listings)}")
            assert len(listers) == 2, proxy.requests
            assert len(listings) <= 4  # 2 listings, the successor's child watch arm, and a mark
            assert session_of(waiters[1]).state is aiozklock.SessionState.CONNECTED
            tg.cancel_scope.cancel()
            release[0].set()
    await gone(zk, PATH)


@anyio_tests
async def test_max_leases_mismatch_raises_and_leaves_no_node(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    other = await open_client()
    with anyio.fail_after(10):
        async with zk.semaphore(PATH, 3):
            with pytest.raises(aiozklock.MaxLeasesMismatch) as caught:
                await other.semaphore(PATH, 4).acquire()
            assert caught.value.stored == 3
            assert caught.value.max_leases == 4
            assert "max_leases=3" in str(caught.value)
            assert len(await zk.get_children(PATH)) == 1  # ours only: theirs was removed
            assert isinstance(caught.value, ValueError)
        await gone(zk, PATH)
        # A path created without a limit is claimed by the first acquire.
        await zk.ensure_path("/semaphores/plain")
        async with other.semaphore("/semaphores/plain", 2):
            assert (await zk.get_data("/semaphores/plain"))[0] == b"2"
        # Data that is not a count is refused.
        await zk.create("/semaphores/data", b"config")
        with pytest.raises(aiozklock.MaxLeasesMismatch) as caught:
            await zk.semaphore("/semaphores/data", 2).acquire()
        assert caught.value.stored is None
        assert await zk.get_children("/semaphores/data") == []


async def hold_leases(
    tg: anyio.abc.TaskGroup, client: aiozklock.ZooKeeperClient, count: int, max_leases: int = 2
) -> anyio.Event:
    """``count`` tasks of ``client`` hold a lease each (one identifier each) until the
    returned event is set."""
    release = anyio.Event()

    async def hold(identifier: str, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with client.semaphore(PATH, max_leases, identifier=identifier):
            task_status.started()
            await release.wait()

    for i in range(count):
        await tg.start(hold, f"holder{i}")
    return release


@anyio_tests
async def test_cancelled_waiter_leaves_no_node(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    other = await open_client()
    sem = other.semaphore(PATH, 2)
    waiting = [anyio.Event()]
    on_wait(sem, lambda queue: waiting[0].set())
    with anyio.fail_after(10):
        async with anyio.create_task_group() as holders:
            release = await hold_leases(holders, zk, 2)
            for first_waiter in (True, False):
                waiting[0] = anyio.Event()
                async with anyio.create_task_group() as tg:
                    if not first_waiter:
                        tg.start_soon(other.semaphore(PATH, 2, identifier="x").acquire)
                        await wait_for_queue(zk, PATH, 3)
                    tg.start_soon(sem.acquire)
                    await waiting[0].wait()  # cancelled while waiting, its watch armed
                    tg.cancel_scope.cancel()
                assert len(await zk.get_children(PATH)) == 2  # the two holders only
                assert session_of(other).watcher_count() == 0
                assert other.semaphore(PATH, 2).statistics().nodes == ()
            release.set()
    await gone(zk, PATH)


@anyio_tests
async def test_lost_create_reply_leaves_one_node(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    sem = client.semaphore(PATH, 2)
    await zk.ensure_path(PATH)  # the limit is claimed on the first acquire
    proxy.arm_drop_after({Opcode.CREATE2})  # executed by the server, reply lost
    with anyio.fail_after(10):
        async with sem:
            children = await zk.get_children(PATH)
            assert children == list(sem.statistics().nodes)
            assert len(children) == 1
        await gone(zk, PATH)
        # A drop while waiting (same session): the waiter keeps its node and is granted.
        granted = anyio.Event()
        done = anyio.Event()

        async def wait_then_hold() -> None:
            async with sem:
                granted.set()
                await done.wait()

        async with anyio.create_task_group() as tg:
            release = await hold_leases(tg, zk, 2)
            tg.start_soon(wait_then_hold)
            await wait_for_queue(zk, PATH, 3)
            await proxy.drop_all()
            assert len(await zk.get_children(PATH)) == 3
            release.set()
            await granted.wait()
            assert await zk.get_children(PATH) == list(sem.statistics().nodes)
            done.set()
    await gone(zk, PATH)


@anyio_tests
async def test_one_round_trip_when_a_lease_is_free(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    """After the first acquire (which creates the path), an acquire with a free lease is one
    write: the limit's read, the create and the listing, pipelined; so is a release."""
    client = await open_client(proxy)
    sem = client.semaphore(PATH, 3)
    with pytest.raises(TypeError):
        aiozklock.Semaphore()  # type: ignore[call-arg]

    async def lift_once_listed() -> None:
        await proxy.wait_for_request(Opcode.GET_CHILDREN)
        proxy.blackhole(False)

    # Each acquire is sent into a partition, lifted only once its listing has arrived: all
    # its requests were written before any reply could come back (one write, no reply
    # awaited between). The task group is entered first: nothing yields between a release
    # and the next acquire.
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            async with sem:
                pass
            for _ in range(3):
                proxy.reset_counters()
                proxy.blackhole(True)
                tg.start_soon(lift_once_listed)
                async with sem:
                    # The last release's delete was written at its call, before the reset;
                    # this in-process proxy forwards it only when the loop next runs.
                    skipped = (Opcode.PING, Opcode.DELETE)
                    opcodes = [r.opcode for r in proxy.requests if r.opcode not in skipped]
                    assert opcodes[0] == Opcode.GET_DATA
                    # (MULTI: a guarded create)
                    assert opcodes[1] in (Opcode.CREATE2, Opcode.MULTI)
                    assert opcodes[2:] == [Opcode.GET_CHILDREN]


@anyio_tests
async def test_connection_drop_while_holding_cancels_the_body(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """loss_policy='suspended': a drop cancels the holder's body at once (the session may
    live, but the lease can no longer be trusted); the object then takes a lease again."""
    client = await open_client(proxy)
    sem = client.semaphore(PATH, 2)
    entered = anyio.Event()
    lost: list[BaseException] = []

    async def hold() -> None:
        try:
            async with sem:
                entered.set()
                await anyio.sleep_forever()
        except aiozklock.LockLost as exc:
            lost.append(exc)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold)
            await entered.wait()
            await proxy.drop_all()
        assert len(lost) == 1
        async with sem:
            assert sem.is_held
            assert len(await zk.get_children(PATH)) == 1  # the lost node was cleaned up
    await gone(zk, PATH)


@anyio_tests
async def test_a_task_that_ends_holding_a_lease_gives_it_back(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    sem = zk.semaphore(PATH, 1)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(sem.acquire)  # ends holding the lease: an orphan
        assert sem.statistics().held == 1
        async with sem:  # the sweeper releases the orphan (logged as an error)
            assert sem.statistics().held == 1
    await gone(zk, PATH)


@anyio_tests
@pytest.mark.timeout(60)
async def test_never_more_holders_than_leases_under_connection_faults(
    zk: aiozklock.ZooKeeperClient, zk_hosts: str, chroot: str
) -> None:
    """3 sessions (each behind its own fault proxy) x 4 tasks on 2 leases for ~4 s, while
    connections are dropped and replies to creates, deletes and listings are lost at random:
    bodies (cut short by the loss policy) never overlap more than 2 deep, every session keeps
    getting leases, and nothing is left once all have finished."""
    max_leases = 2
    rng = random.Random(2026)
    intervals: list[tuple[float, float]] = []
    grants: dict[int, int] = {}
    faults = 0
    stop = time.monotonic() + 4.0
    # The workers go on past ``stop`` until every session has had a lease (the faults end
    # at ``stop``): however slow the machine, the verdict does not depend on a time window.
    every_session_served = anyio.Event()

    async def worker(client: aiozklock.ZooKeeperClient, index: int) -> None:
        sem = client.semaphore(PATH, max_leases)
        while time.monotonic() < stop or not every_session_served.is_set():
            try:
                async with sem.acquire(timeout=5):
                    entered = time.monotonic()
                    try:
                        await anyio.sleep(rng.uniform(0.002, 0.02))
                    finally:
                        intervals.append((entered, time.monotonic()))
                grants[index] = grants.get(index, 0) + 1
                if len(grants) == 3:
                    every_session_served.set()
            except (aiozklock.LockLost, aiozklock.LockTimeout):
                await anyio.sleep(0.01)

    async def nemesis(proxies: list[FaultProxy]) -> None:
        nonlocal faults
        lost = {Opcode.CREATE2, Opcode.MULTI, Opcode.DELETE, Opcode.GET_CHILDREN}
        while time.monotonic() < stop - 0.5:
            await anyio.sleep(rng.uniform(0.15, 0.35))
            proxy = rng.choice(proxies)
            if rng.random() < 0.5:
                await proxy.drop_all()
            else:
                proxy.arm_drop_after(lost, rng.randint(1, 3))
            faults += 1

    with anyio.fail_after(45):
        async with contextlib.AsyncExitStack() as stack:
            proxies = [await stack.enter_async_context(FaultProxy(zk_hosts)) for _ in range(3)]
            clients = [
                await stack.enter_async_context(
                    aiozklock.connect(p.address + chroot, session_timeout=4.0)
                )
                for p in proxies
            ]
            async with anyio.create_task_group() as tg:
                tg.start_soon(nemesis, proxies)
                for c, client in enumerate(clients):
                    for _ in range(4):
                        tg.start_soon(worker, client, c)
            for proxy in proxies:
                proxy.disarm()
            await gone(zk, PATH, within=10)
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    depth = most = 0
    for _, step in events:
        depth += step
        most = max(most, depth)
    print(f"SEMAPHORE faults={faults} sections={len(intervals)} deepest={most} grants={grants}")
    assert most <= max_leases
    assert sorted(grants) == [0, 1, 2]


@anyio_tests
@pytest.mark.parametrize("cancel_after", [0.0, 0.05, 0.15, 0.3])
async def test_cancelled_with_the_enqueue_in_flight_leaves_nothing(
    proxy: FaultProxy,
    zk: aiozklock.ZooKeeperClient,
    open_client: ClientFactory,
    cancel_after: float,
) -> None:
    """The first use of the path (the create fails NoNode; the retry goes out with the
    path's container, carrying the limit), each request delayed: cancelled before the send,
    with either write in flight, or in the reply's wake, nothing of ours is left."""
    client = await open_client(proxy)
    sem = client.semaphore(PATH, 2)
    proxy.set_delay(0.1)
    with anyio.fail_after(10):
        with anyio.move_on_after(cancel_after) as scope:
            await sem.acquire()
        if not scope.cancelled_caught:  # granted before the cancel: release
            await sem.release()
        proxy.set_delay(0)
        await gone(zk, PATH)
        assert sem.statistics().nodes == ()
        async with sem.acquire(timeout=5):  # the object stays usable
            assert (await zk.get_data(PATH))[0] == b"2"
    await gone(zk, PATH)


@anyio_tests
async def test_partition_longer_than_the_session_cancels_before_the_server_regrants(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    holder_client = await open_client(proxy, session_timeout=2.0)
    session = session_of(holder_client)
    timeout = session.timeout
    holder = holder_client.semaphore(PATH, 2)
    entered = anyio.Event()
    exits: list[tuple[float, aiozklock.SessionState, float]] = []

    async def hold_until_lost() -> None:
        try:
            async with holder:
                entered.set()
                try:
                    await anyio.sleep_forever()
                finally:
                    exits.append(
                        (time.monotonic(), session.state, on_monotonic(session.valid_until))
                    )
        except aiozklock.LockLost:
            pass

    with anyio.fail_after(6 * timeout):
        async with anyio.create_task_group() as tg:
            release = await hold_leases(tg, zk, 1)  # the other lease stays taken
            tg.start_soon(hold_until_lost)
            await entered.wait()
            proxy.blackhole(True)
            async with zk.semaphore(PATH, 2, identifier="waiter"):  # once the session expired
                granted_at = time.monotonic()
            release.set()
    ((exited, state, valid_until),) = exits
    print(f"SEMAPHORE partition exit_before_valid_until={valid_until - exited:.3f}")
    assert_cancelled_in_time(state, exited, valid_until, granted_at, timeout)
    proxy.blackhole(False)
    await gone(zk, PATH, within=10)


def assert_cancelled_in_time(
    state: aiozklock.SessionState,
    exited: float,
    valid_until: float,
    granted_at: float,
    timeout: float,
) -> None:
    """A holder partitioned from the server was cancelled in time, by its session's own clock:
    when the session went SUSPENDED (half the timeout of silence, not when it was given up),
    before the session's ``valid_until`` (the send time of its newest answered request plus
    the timeout, less a 10 % margin), hence well before the server could expire the session
    (a whole timeout after it last heard from it) and grant the lease to the waiter."""
    assert state is aiozklock.SessionState.SUSPENDED
    assert exited < valid_until
    assert valid_until + 0.1 * timeout <= granted_at


@anyio_tests
async def test_waiters_session_expiry_requeues_them_in_the_new_session(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory, zk_hosts: str
) -> None:
    """The first waiter (child watch) and the next one (predecessor watch) lose their
    session while waiting: both queue again in the new session, nothing of the old one is
    left, and both are granted once the holders release."""
    client = await open_client(proxy, session_timeout=2.0)
    old_session = client.session_id
    granted = [anyio.Event(), anyio.Event()]
    done = anyio.Event()

    async def wait(index: int) -> None:
        async with client.semaphore(PATH, 2, identifier=f"w{index}"):
            granted[index].set()
            await done.wait()

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            release = await hold_leases(tg, zk, 2)
            tg.start_soon(wait, 0)
            await wait_for_queue(zk, PATH, 3)
            tg.start_soon(wait, 1)
            await wait_for_queue(zk, PATH, 4)
            # The client's reconnect must not re-attach first: held until the expiry is done.
            proxy.set_delay(HOLD)
            await expire_session(zk_hosts.split(",")[0], old_session, session_of(client).password)
            proxy.set_delay(0)
            # Both queue again in the new session (the old nodes went with the old one).
            children = await wait_for_children(
                zk, PATH, lambda names: len(names) == 4 and client.session_id != old_session
            )
            stats = [await zk.exists(f"{PATH}/{name}") for name in children]
            owners = {stat.ephemeral_owner for stat in stats if stat is not None}
            assert owners == {zk.session_id, client.session_id}  # the holders', the new one
            assert old_session not in owners
            release.set()
            for event in granted:
                await event.wait()
            done.set()
    await gone(zk, PATH)
