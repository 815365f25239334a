"""Semaphores with ``compat="kazoo"`` / ``"curator"``: the peer's own algorithm and layout,
so that kazoo's ``Semaphore`` or Curator's ``InterProcessSemaphoreV2`` on the same path never
holds more than ``max_leases`` leases in total with ours. Live peers (as in test_interop.py),
then layouts, cancellation, loss and bad input against real ZooKeeper.
"""

from __future__ import annotations

import functools
import re
import sys
import time

import anyio
import anyio.abc
import pytest

import aiozklock
from aiozklock._recipes._core._names import Compat
from aiozklock.testing import FaultProxy, Opcode, expire_session, session_of
from tests.conftest import ClientFactory, gone, wait_for_children
from tests.interop.peers import (
    Changes,
    Interval,
    contend,
    curator_peer,
    max_concurrency,
    start_peer,
)

pytestmark = [pytest.mark.anyio]

PATH = "/semaphores/compat"
GRANTS = 50  # each side's leases, at least, in a run (it stops once both have them)
MAX_LEASES = 2
HOLD_MICROS = 2000
KAZOO = (sys.executable, "-m", "tests.interop.kazoo_peer")
COMPATS: list[Compat] = ["kazoo", "curator"]
PARKED = 60.0  # a proxy delay that the test lifts itself once the fault is in place


@pytest.fixture(scope="session")
def curator(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ...]:
    command = curator_peer(tmp_path_factory)
    if isinstance(command, str):
        pytest.skip(command)
    return command


def lease_parent(compat: Compat, path: str = PATH) -> str:
    return path if compat == "kazoo" else f"{path}/leases"


def mutex_path(compat: Compat, path: str = PATH) -> str:
    return f"{path}-__lock__" if compat == "kazoo" else f"{path}/locks"


# ---------------------------------------------------------------- live peers


async def _contend(open_client: ClientFactory, compat: Compat, peer: list[str]) -> list[Interval]:
    """Three sessions of ours and a peer process (three threads) on one semaphore, until
    each side had ``GRANTS`` leases, two of ours held leases at once and one of ours held
    with one of the peer's (so that the leases are used, not just a mutex, whatever the
    timing); returns the merged history, checked: never more than ``MAX_LEASES`` holders."""
    clients = [await open_client() for _ in range(3)]
    await clients[0].ensure_path("/interop")  # the chroot too: Curator creates below it only
    sems = [client.semaphore(peer_path(peer), MAX_LEASES, compat=compat) for client in clients]
    ours: list[Interval] = []
    first_held: set[int] = set()  # our sessions in or past their first section
    firsts_done: set[int] = set()  # and past it
    changes = Changes()

    async with start_peer("peer", peer, changes) as process:

        def first_until(i: int, start: int) -> bool:
            """How long session ``i``'s first section lasts: 0 and 1 hold until both hold;
            2 (which starts once they let go, or it would take the lease 1 waits for) until
            the peer holds a lease it took after 2's start."""
            return {0, 1} <= first_held if i < 2 else process.latest_start >= start

        async def loop(i: int, stop: anyio.Event) -> None:
            """Acquire → hold (sleeping, so that our tasks hold concurrently) → release."""
            if i == 2:
                await changes.until(lambda: {0, 1} <= firsts_done)
            while not stop.is_set():
                async with sems[i]:
                    start = time.monotonic_ns()
                    first = i not in first_held
                    first_held.add(i)
                    changes.notify()
                    await anyio.sleep(HOLD_MICROS / 1e6)
                    if first:
                        await changes.until(functools.partial(first_until, i, start))
                    ours.append((start, time.monotonic_ns(), f"aiozklock-{i}"))
                firsts_done.add(i)
                changes.notify()

        def missing() -> list[str]:
            counts = {"ours": len(ours), "the peer": len(process.intervals)}
            short = [f"{who}: {n} of {GRANTS} leases" for who, n in counts.items() if n < GRANTS]
            return short + [f"session {i}'s first lease" for i in range(3) if i not in firsts_done]

        tasks = [functools.partial(loop, i) for i in range(3)]
        theirs = await contend(process, tasks, missing)
    history = ours + theirs
    assert max_concurrency(history) <= MAX_LEASES
    assert len(ours) >= GRANTS
    assert len(theirs) >= GRANTS  # neither side starved
    assert max_concurrency(ours) == MAX_LEASES  # two of ours at once
    assert any(  # and one of ours with one of theirs
        a_start < b_end and b_start < a_end
        for a_start, a_end, _ in ours
        for b_start, b_end, _ in theirs
    )
    return history


def peer_path(peer: list[str]) -> str:
    return next(arg for arg in peer if arg.startswith("/interop/"))


def _args(hosts: str, path: str) -> list[str]:
    return [hosts, path, "semaphore", "3", str(HOLD_MICROS), str(MAX_LEASES)]


async def test_kazoo_compatible_semaphore_and_kazoos_share_a_path(
    hosts: str, open_client: ClientFactory
) -> None:
    history = await _contend(open_client, "kazoo", [*KAZOO, *_args(hosts, "/interop/ksem")])
    assert max_concurrency(history) == MAX_LEASES  # the leases were used, not just a mutex


async def test_curator_compatible_semaphore_and_curators_share_a_path(
    curator: tuple[str, ...], hosts: str, open_client: ClientFactory
) -> None:
    peer = [*curator, *_args(hosts, "/interop/csem")]
    history = await _contend(open_client, "curator", peer)
    assert max_concurrency(history) == MAX_LEASES


def test_max_concurrency() -> None:
    assert max_concurrency([]) == 0
    assert max_concurrency([(0, 2, "a"), (2, 4, "b")]) == 1  # a hand-off is no overlap
    assert max_concurrency([(0, 5, "a"), (1, 2, "b"), (3, 6, "c"), (4, 7, "d")]) == 3


# ---------------------------------------------------------------- layouts and bad input


async def test_invalid_compat_before_any_traffic(zk: aiozklock.ZooKeeperClient) -> None:
    for compat in ("zookeeper", 1, ""):
        with pytest.raises(aiozklock.InvalidArgument, match="compat"):
            zk.semaphore(PATH, 2, compat=compat)  # type: ignore[arg-type]
    assert await zk.exists(PATH) is None
    kept = zk.semaphore(PATH, 2, compat="kazoo")
    assert kept is zk.semaphore(PATH, 2, compat="kazoo")
    assert zk.semaphore(PATH, 2, compat="kazoo", identifier="other") is not kept
    # Another layout or limit on the path would not count these leases: refused.
    for other in ({"max_leases": 2}, {"max_leases": 3, "compat": "kazoo"}):
        with pytest.raises(aiozklock.UsageError, match="one layout and one limit per path"):
            zk.semaphore(PATH, **other)  # type: ignore[arg-type]
    curator = zk.semaphore("/other", 2, compat="curator")
    with pytest.raises(aiozklock.UsageError, match="max_leases=2"):
        zk.semaphore("/other", 5, compat="curator")  # Curator stores no limit to compare
    assert curator is zk.semaphore("/other", 2, compat="curator")
    assert await zk.exists(PATH) is None  # nothing was sent


async def test_kazoo_layout(zk: aiozklock.ZooKeeperClient) -> None:
    sem = zk.semaphore(PATH, 2, compat="kazoo", identifier="me")
    with anyio.fail_after(10):
        async with sem:
            (lease,) = await zk.get_children(PATH)
            assert re.fullmatch("[0-9a-f]{32}", lease)
            assert sem.statistics().nodes == (lease,)
            assert (await zk.get_data(PATH))[0] == b"2"  # kazoo's stored limit
            assert await zk.get_children(f"{PATH}-__lock__") == []  # the lock is released
            (holder,) = await sem.leases()
            assert (holder.node, holder.identifier) == (lease, "me")
        assert await zk.get_children(PATH) == []


async def test_kazoo_leases_have_no_sequence(zk: aiozklock.ZooKeeperClient) -> None:
    """A kazoo lease is named with 32 hex digits: even when the last ten are decimal, it
    has no sequence number (0), as every kazoo lease."""
    sem = zk.semaphore(PATH, 2, compat="kazoo")
    with anyio.fail_after(10):
        async with sem:  # the path exists from now on
            pass
        peer = "0123456789abcdef0123456789012345"  # as kazoo names it (uuid4().hex)
        await zk.create(f"{PATH}/{peer}", b"peer", ephemeral=True)
        (holder,) = await sem.leases()
        assert (holder.node, holder.sequence) == (peer, 0)
        await zk.delete(f"{PATH}/{peer}")


async def test_curator_layout(zk: aiozklock.ZooKeeperClient) -> None:
    sem = zk.semaphore(PATH, 2, compat="curator", identifier="me")
    with anyio.fail_after(10):
        async with sem:
            (lease,) = await zk.get_children(f"{PATH}/leases")
            assert re.fullmatch("_c_[0-9a-f-]{36}-lease-[0-9]{10}", lease)
            assert await zk.get_children(f"{PATH}/locks") == []
            assert (await zk.get_data(PATH))[0] == b""  # Curator stores no limit
            (holder,) = await sem.leases()
            assert (holder.node, holder.identifier) == (lease, "me")
        assert await zk.get_children(f"{PATH}/leases") == []


async def test_kazoo_max_leases_mismatch_raises_and_leaves_nothing(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    other = await open_client()
    with anyio.fail_after(10):
        async with zk.semaphore(PATH, 3, compat="kazoo"):
            with pytest.raises(aiozklock.MaxLeasesMismatch) as caught:
                await other.semaphore(PATH, 4, compat="kazoo").acquire()
            assert (caught.value.stored, caught.value.max_leases) == (3, 4)
            assert len(await zk.get_children(PATH)) == 1  # ours only
            assert await zk.get_children(f"{PATH}-__lock__") == []
            assert other.semaphore(PATH, 4, compat="kazoo").statistics().nodes == ()
        await gone(zk, PATH)


# ---------------------------------------------------------------- cancellation and loss


async def hold_leases(
    tg: anyio.abc.TaskGroup, client: aiozklock.ZooKeeperClient, compat: Compat, count: int
) -> anyio.Event:
    """``count`` tasks of ``client`` hold a lease each until the returned event is set."""
    release = anyio.Event()

    async def hold(identifier: str, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        sem = client.semaphore(PATH, 2, identifier=identifier, compat=compat)
        async with sem:
            task_status.started()
            await release.wait()

    for i in range(count):
        await tg.start(hold, f"holder{i}")
    return release


@pytest.mark.parametrize("compat", COMPATS)
async def test_cancelled_waiter_leaves_no_lease_and_frees_the_mutex(
    compat: Compat, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    other = await open_client()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as holders:
            release = await hold_leases(holders, zk, compat, 2)
            sem = other.semaphore(PATH, 2, compat=compat)
            async with anyio.create_task_group() as tg:
                tg.start_soon(sem.acquire)
                # Waiting: it holds the mutex (and, Curator's way, has a lease node too).
                await wait_for_children(zk, mutex_path(compat), lambda c: len(c) == 1)
                if compat == "curator":
                    await wait_for_children(zk, lease_parent(compat), lambda c: len(c) == 3)
                await anyio.sleep(0.05)
                tg.cancel_scope.cancel()
            assert len(await zk.get_children(lease_parent(compat))) == 2  # the holders only
            assert sem.statistics().nodes == ()
            await gone(zk, mutex_path(compat))  # the mutex was released
            # A timed-out waiter likewise.
            with pytest.raises(aiozklock.LockTimeout):
                await sem.acquire(timeout=0.2)
            assert len(await zk.get_children(lease_parent(compat))) == 2
            await gone(zk, mutex_path(compat))
            release.set()
    await gone(zk, lease_parent(compat))


@pytest.mark.parametrize("compat", COMPATS)
async def test_a_release_grants_the_waiter(
    compat: Compat, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    other = await open_client()
    sem = other.semaphore(PATH, 2, compat=compat)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as holders:
            release = await hold_leases(holders, zk, compat, 2)
            assert not await sem.try_acquire()
            async with anyio.create_task_group() as tg:
                granted = anyio.Event()

                async def wait() -> None:
                    async with sem:
                        granted.set()

                tg.start_soon(wait)
                await wait_for_children(zk, mutex_path(compat), lambda c: len(c) == 1)
                release.set()
                await granted.wait()
    await gone(zk, lease_parent(compat), mutex_path(compat))


@pytest.mark.parametrize("compat", [None, *COMPATS])
async def test_session_expiry_cancels_the_body(
    compat: Compat | None,
    proxy: FaultProxy,
    zk: aiozklock.ZooKeeperClient,
    open_client: ClientFactory,
    zk_hosts: str,
) -> None:
    client = await open_client(proxy, session_timeout=2.0)
    sem = client.semaphore(PATH, 2, compat=compat)
    entered = anyio.Event()
    outcome: list[BaseException] = []
    cancelled = False

    async def hold() -> None:
        nonlocal cancelled
        try:
            async with sem:
                entered.set()
                try:
                    await anyio.sleep_forever()
                except anyio.get_cancelled_exc_class():
                    cancelled = True
                    raise
        except aiozklock.LockLost as exc:
            outcome.append(exc)

    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold)
            await entered.wait()
            # The holder's reconnect must not re-attach before the expiry is done: its
            # requests wait in the proxy until then, however long the expiry takes.
            proxy.set_delay(PARKED)
            host = zk_hosts.split(",")[0]
            await expire_session(host, client.session_id, session_of(client).password)
            proxy.set_delay(0)
        assert cancelled
        assert isinstance(outcome[0], aiozklock.LockLost)
        assert not sem.is_held
        async with sem:  # a lease again, in the new session
            assert sem.is_held
    await gone(zk, *([PATH] if compat is None else [lease_parent(compat), mutex_path(compat)]))


@pytest.mark.parametrize("compat", COMPATS)
async def test_lost_create_reply_leaves_one_lease(
    compat: Compat, proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """The lease's create executed, its reply lost (the connection drops, so the mutex is
    lost too and taken again): the lease is found by its token, not made twice."""
    client = await open_client(proxy)
    sem = client.semaphore(PATH, 2, compat=compat)
    with anyio.fail_after(10):
        async with sem:  # the paths exist from now on
            pass
        await gone(zk, lease_parent(compat), mutex_path(compat))
        proxy.arm_drop_after({Opcode.CREATE2}, n=2)  # the mutex's node, then our lease's
        async with sem:
            children = await zk.get_children(lease_parent(compat))
            assert children == list(sem.statistics().nodes)
            assert len(children) == 1
        assert proxy.count(Opcode.CREATE2) >= 3  # the mutex was taken again
    await gone(zk, lease_parent(compat), mutex_path(compat))


@pytest.mark.parametrize("compat", COMPATS)
@pytest.mark.parametrize("cancel_after", [0.0, 0.05, 0.12, 0.2, 0.3, 0.45])
async def test_cancelled_at_any_await_leaves_nothing(
    compat: Compat,
    cancel_after: float,
    proxy: FaultProxy,
    zk: aiozklock.ZooKeeperClient,
    open_client: ClientFactory,
) -> None:
    """Every request delayed, the acquire cancelled at points across its requests (path,
    mutex, listing, create): no lease and no mutex node of ours is left."""
    client = await open_client(proxy)
    sem = client.semaphore(PATH, 2, compat=compat)
    proxy.set_delay(0.05)
    with anyio.fail_after(10):
        with anyio.move_on_after(cancel_after) as scope:
            await sem.acquire()
        if not scope.cancelled_caught:  # granted before the cancel: release
            await sem.release()
        proxy.set_delay(0)
        await gone(zk, lease_parent(compat), mutex_path(compat))
        assert sem.statistics().nodes == ()
        async with sem.acquire(timeout=5):  # the object stays usable
            assert len(await zk.get_children(lease_parent(compat))) == 1
    await gone(zk, lease_parent(compat), mutex_path(compat))


@pytest.mark.parametrize("compat", COMPATS)
async def test_connection_drop_while_waiting_under_the_mutex(
    compat: Compat, proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """The waiter's connection drops (loss_policy="suspended": its mutex is given up and
    taken again); it is still granted once a lease is free, with one lease node."""
    client = await open_client(proxy)
    sem = client.semaphore(PATH, 2, compat=compat)
    with anyio.fail_after(15):
        async with anyio.create_task_group() as holders:
            release = await hold_leases(holders, zk, compat, 2)
            granted = anyio.Event()
            done = anyio.Event()

            async def wait_then_hold() -> None:
                async with sem:
                    granted.set()
                    await done.wait()

            async with anyio.create_task_group() as tg:
                tg.start_soon(wait_then_hold)
                await wait_for_children(zk, mutex_path(compat), lambda c: len(c) == 1)
                await proxy.drop_all()
                release.set()
                await granted.wait()
                ours = set(await zk.get_children(lease_parent(compat)))
                assert ours == set(sem.statistics().nodes)
                assert len(ours) == 1
                done.set()
    await gone(zk, lease_parent(compat), mutex_path(compat))


EXPECTED = {  # after the first acquire; the mutex's create and listing are pipelined
    # kazoo's lease: created in one multi with a check that our mutex node still exists
    "kazoo": [Opcode.CREATE2, Opcode.GET_CHILDREN, Opcode.GET_CHILDREN, Opcode.MULTI],
    "curator": [Opcode.CREATE2, Opcode.GET_CHILDREN, Opcode.CREATE2, Opcode.GET_CHILDREN],
}


@pytest.mark.parametrize("compat", COMPATS)
async def test_requests_when_a_lease_is_free(
    compat: Compat, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    """The peer's algorithm costs 3 round trips: the mutex, then (kazoo) list and create or
    (Curator) create and list. The releases (lease, mutex) are deletes sent without waiting."""
    client = await open_client(proxy)
    sem = client.semaphore(PATH, 3, compat=compat)
    with anyio.fail_after(10):
        async with sem:
            pass
        for _ in range(2):
            proxy.reset_counters()
            async with sem:
                sent = [r.opcode for r in proxy.requests if r.opcode != Opcode.PING]
                assert [op for op in sent if op != Opcode.DELETE] == EXPECTED[compat]


async def test_kazoo_lease_is_not_created_once_the_mutex_node_is_gone(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """The count is made under the mutex: if our mutex node went meanwhile (the loss policy
    gave it up and the janitor deleted it; here another session deletes it), a kazoo peer
    may have counted since, so the lease's create fails its check and the mutex is taken
    again before counting anew."""
    client = await open_client(proxy)
    sem = client.semaphore(PATH, 1, compat="kazoo")
    with anyio.fail_after(15):
        async with sem:  # the path and the lock's sibling exist from now on
            pass
        await gone(zk, PATH, mutex_path("kazoo"))  # that release is applied
        proxy.reset_counters()
        # Our requests reach the server late, so that the node is deleted between our
        # create and our count; released once it is (only the deletion's round trips have
        # to fit in the delay, with room for a loaded machine).
        proxy.set_delay(1.5)
        granted, done = anyio.Event(), anyio.Event()

        async def hold() -> None:
            async with sem:
                granted.set()
                await done.wait()

        async with anyio.create_task_group() as tg:
            tg.start_soon(hold)
            (node,) = await wait_for_children(zk, mutex_path("kazoo"), lambda c: len(c) == 1)
            await zk.delete(f"{mutex_path('kazoo')}/{node}")
            proxy.set_delay(0)
            await granted.wait()
            # The lease's multi is final when it succeeds: two means the first failed its
            # check (then the mutex was released, its delete failing on the node gone,
            # and taken again with a create of its own).
            assert proxy.count(Opcode.MULTI) == 2
            assert len(await zk.get_children(PATH)) == 1
            done.set()
    await gone(zk, PATH, mutex_path("kazoo"))
