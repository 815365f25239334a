"""What the lock puts on the wire, observed through a FaultProxy in front of the client:
input validation before any request, round trips per acquire and release, lost create replies
(F1, F2) and cancellation at every await point (F3). Real ZooKeeper, asyncio and trio."""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import aiozklock
from aiozklock._recipes._core._names import nodes_of
from aiozklock._wire._protocol import CreateMode, create_op, get_children_op
from aiozklock.testing import FaultProxy, session_of
from tests.conftest import gone, on_wait, wait_for_children, wait_for_queue

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(40)]

PATH = "/locks/orders/157"
ClientFactory = Callable[..., Awaitable[aiozklock.ZooKeeperClient]]

CREATE2 = 15
GET_CHILDREN = 8
EXISTS = 3
DELETE = 2
PING = 11
# How long the proxy holds each request in the tests that count round trips.
ROUND_TRIP = 0.4
# ... and in the one that times them: one round trip costs that, two at least twice that,
# which leaves a loaded machine as much again for everything else.
TIMED_ROUND_TRIP = 1.0


async def persistent_lock_path(zk: aiozklock.ZooKeeperClient) -> None:
    """Create PATH as a persistent node. The lock creates it as a container, which the server
    reaps when empty (every 60 s, at any moment of a test): the next acquire then pays the
    extra round trip that re-creates it, which tests counting round trips must not see."""
    await zk.ensure_path(PATH.rpartition("/")[0])
    await zk.create(PATH)


def requests_except_pings(proxy: FaultProxy) -> list[int]:
    return [r.opcode for r in proxy.requests if r.opcode != PING]


# ------------------------------------------------------------------ validation (F17)

BAD_LOCK_PATHS: list[Any] = [
    "no-slash",
    "/a//b",
    "/a/",
    "/a/./b",
    "/a/../b",
    "/a\x00b",
    "/a\x1fb",
    "/zookeeper/locks",
    "/zookeeper",
    "/",
    "",
    None,
    b"/bytes",
]


@pytest.mark.parametrize("path", BAD_LOCK_PATHS)
async def test_bad_lock_path_rejected_before_any_request(
    proxy: FaultProxy, open_client: ClientFactory, path: Any
) -> None:
    client = await open_client(proxy)
    proxy.reset_counters()
    with pytest.raises(aiozklock.InvalidArgument) as excinfo:
        client.lock(path)
    assert isinstance(excinfo.value, ValueError)
    assert requests_except_pings(proxy) == []


async def test_bad_arguments_rejected_before_any_request(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    lock = client.lock(PATH)
    proxy.reset_counters()
    checks: list[Callable[[], object]] = [
        lambda: client.lock(PATH, identifier=42),  # type: ignore[arg-type]
        lambda: client.lock(PATH, identifier="x" * 5000),
        lambda: lock.acquire(timeout=-1),
        lambda: lock.acquire(timeout=float("nan")),
        lambda: lock.acquire(timeout="1"),  # type: ignore[arg-type]
    ]
    for check in checks:
        with pytest.raises(aiozklock.InvalidArgument):
            check()
    with pytest.raises(aiozklock.InvalidArgument):
        await client.create("/big", b"x" * (1024 * 1024))
    with pytest.raises(aiozklock.InvalidArgument):
        await client.create("relative", b"")
    assert requests_except_pings(proxy) == []
    # Unicode paths are valid and round-trip.
    async with client.lock("/locks/ü-錠") as unicode_lock:
        assert unicode_lock.is_held
        assert len(await client.get_children("/locks/ü-錠")) == 1


@pytest.mark.parametrize(
    ("hosts", "kwargs"),
    [
        ("", {}),
        ("host:notaport", {}),
        ("host:70000", {}),
        ("h1:2181,,h2:2181", {}),
        ("h1:2181/chroot/", {}),
        ("h1:2181/a//b", {}),
        ("h1:2181", {"session_timeout": 0}),
        ("h1:2181", {"session_timeout": float("inf")}),
        ("h1:2181", {"connect_timeout": -1}),
        ("h1:2181", {"loss_policy": "sometimes"}),
    ],
)
def test_bad_connect_arguments_raise_at_once(hosts: str, kwargs: dict[str, Any]) -> None:
    with pytest.raises(aiozklock.InvalidArgument):
        aiozklock.connect(hosts, **kwargs)


# ------------------------------------------------------------------ round trips


async def test_uncontended_acquire_and_release_take_one_round_trip_each(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    lock = client.lock(PATH)
    await persistent_lock_path(client)

    proxy.reset_counters()
    await lock.acquire()
    assert requests_except_pings(proxy) == [CREATE2, GET_CHILDREN]
    create, listing = (r for r in proxy.requests if r.opcode != PING)
    assert create.connection_index == listing.connection_index
    proxy.reset_counters()
    # Confirmed: a re-acquire before its reply would skip the listing (a proof alone).
    await lock.release(confirm=True)
    assert requests_except_pings(proxy) == [DELETE]

    # Pipelined, not sequential: with every request held by the proxy, a request sent after
    # a reply reaches the proxy at least that long after the one before it, and the acquire's
    # requests reach it together; the whole costs one round trip, not two.
    proxy.set_delay(TIMED_ROUND_TRIP)
    proxy.reset_counters()
    started = time.monotonic()
    await lock.acquire()
    acquired_in = time.monotonic() - started
    assert requests_except_pings(proxy) == [CREATE2, GET_CHILDREN]
    assert _bursts(proxy, TIMED_ROUND_TRIP) == 1
    proxy.reset_counters()
    started = time.monotonic()
    await lock.release()
    released_in = time.monotonic() - started
    await proxy.wait_for_request(DELETE)
    assert requests_except_pings(proxy) == [DELETE]
    assert acquired_in < 2 * TIMED_ROUND_TRIP, acquired_in
    assert released_in < 2 * TIMED_ROUND_TRIP, released_in


async def test_missing_parent_costs_one_extra_round_trip(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    # Persistent, so the server never reaps it (a container that never had a child is not
    # reaped either: the chroot is safe until then).
    await zk.ensure_path("/")
    await zk.create("/existing")
    lock = client.lock("/existing/lock")
    proxy.set_delay(ROUND_TRIP)  # round trips apart, for _bursts
    proxy.reset_counters()
    await lock.acquire()
    # Attempt 1: create2 + getChildren (NoNode). Attempt 2, one write: the lock path's
    # container (only: its parent exists), then create2 + getChildren again.
    assert requests_except_pings(proxy) == [CREATE2, GET_CHILDREN, 19, CREATE2, GET_CHILDREN]
    assert _bursts(proxy) == 2
    await lock.release()


async def test_missing_ancestors_cost_two_extra_round_trips(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    lock = client.lock("/fresh/parent/lock")
    proxy.set_delay(ROUND_TRIP)  # round trips apart, for _bursts
    proxy.reset_counters()
    await lock.acquire()
    opcodes = requests_except_pings(proxy)
    # Attempt 2 tries the lock path's container alone; it fails NoNode, so attempt 3
    # creates the whole chain (chroot included) in one write with the create.
    assert opcodes[:5] == [CREATE2, GET_CHILDREN, 19, CREATE2, GET_CHILDREN]
    assert opcodes[-2:] == [CREATE2, GET_CHILDREN]
    assert set(opcodes[5:-2]) == {19}  # createContainer
    assert len(opcodes[5:-2]) >= 4  # the chroot, /fresh, /fresh/parent, the lock path
    assert _bursts(proxy) == 3
    await lock.release()


def _bursts(proxy: FaultProxy, round_trip: float = ROUND_TRIP) -> int:
    """Writes the client made: requests that reached the proxy together form one. With the
    proxy holding each request ``round_trip``, a request sent after a reply comes at least
    that long after the previous one; requests of one write, within a scheduling delay of the
    proxy's frame loop (far less than half of it even on a loaded machine)."""
    times = [r.t for r in proxy.requests if r.opcode != PING]
    return 1 + sum(1 for a, b in itertools.pairwise(times) if b - a > round_trip / 2)


# ------------------------------------------------------------------ lost create reply (F1, F2)


async def _our_nodes(zk: aiozklock.ZooKeeperClient, lock: aiozklock.Lock) -> list[str]:
    return nodes_of(await zk.get_children(PATH), lock._queue.guid)


async def test_lost_create_reply_uncontended_yields_exactly_one_node(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    lock = client.lock(PATH)
    await persistent_lock_path(zk)
    session_id = client.session_id
    proxy.arm_drop_after([CREATE2], 1)
    with anyio.fail_after(10):
        await lock.acquire()
    assert proxy.swallowed_replies == 1
    assert client.session_id == session_id  # same session: the node was adopted, not redone
    assert proxy.count(CREATE2) == 1  # never resent blindly
    assert len(await _our_nodes(zk, lock)) == 1
    assert len(await zk.get_children(PATH)) == 1
    await lock.release()
    await gone(zk, PATH)
    # Another client acquires at once.
    with anyio.fail_after(1):
        async with zk.lock(PATH):
            pass


async def test_lost_create_reply_contended_keeps_one_node_in_the_queue(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    lock = client.lock(PATH)
    holder = zk.lock(PATH)
    await holder.acquire()
    proxy.arm_drop_after([CREATE2], 1)
    acquired = anyio.Event()
    waiting = anyio.Event()  # set once the waiter watches its predecessor (after adoption)
    on_wait(lock._queue, waiting.set)

    async def waiter() -> None:
        async with lock:
            acquired.set()
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        with anyio.fail_after(10):
            await waiting.wait()
        assert lock.statistics().node is not None
        assert len(await _our_nodes(zk, lock)) == 1
        assert len(await zk.get_children(PATH)) == 2
        await holder.release()
        with anyio.fail_after(5):
            await acquired.wait()
    assert proxy.swallowed_replies == 1
    assert proxy.count(CREATE2) == 1
    await gone(zk, PATH)


async def test_lost_create_reply_then_timeout_leaves_no_node(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    lock = client.lock(PATH)
    async with zk.lock(PATH):
        guid = lock._queue.guid  # retired by the timeout: a later attempt names nodes anew
        proxy.arm_drop_after([CREATE2], 1)
        with pytest.raises(aiozklock.LockTimeout):
            await lock.acquire(timeout=1.0)
        assert proxy.swallowed_replies == 1
        # Its time up, the attempt waits for nothing: its node is deleted by a write it does
        # not await or, if the create's outcome was still unknown, by the janitor (by GUID).
        with anyio.fail_after(5):
            remaining = await wait_for_children(
                client, PATH, lambda children: not nodes_of(children, guid)
            )
        assert len(remaining) == 1  # the holder's
    async with lock.acquire(timeout=2):  # reusable
        assert lock.is_held
    await gone(zk, PATH)


# ZooKeeper may not answer a write yet answer the requests written after it (a write of a
# session that moved to another server); the proxy swallows the reply the same way
# (arm_drop_after(reset=False)) and the connection goes on.


async def test_a_skipped_reply_in_a_pipeline_fails_with_connection_loss(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    session = session_of(client)
    await persistent_lock_path(zk)
    create = create_op(
        session.server_path(f"{PATH}/n-"),
        b"",
        CreateMode.EPHEMERAL | CreateMode.SEQUENTIAL,
        session.client_path,
    )
    listing = get_children_op(session.server_path(PATH))
    proxy.arm_drop_after([CREATE2], 1, reset=False)
    with anyio.fail_after(10):
        created, children = await session.pipeline([create, listing])
    assert proxy.swallowed_replies == 1
    # The outcome is unknown (the server did create it): never a missing result.
    assert isinstance(created, aiozklock.ConnectionLoss)
    assert isinstance(children, list)
    assert len(children) == 1
    assert client.state is aiozklock.SessionState.CONNECTED  # the connection went on
    await client.delete(f"{PATH}/{children[0]}")
    await gone(zk, PATH)


async def test_a_skipped_reply_fails_its_caller_once_a_later_request_is_answered(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    session = session_of(client)
    await persistent_lock_path(zk)
    node = f"{PATH}/node"
    create = create_op(session.server_path(node), b"", CreateMode.EPHEMERAL, session.client_path)
    proxy.arm_drop_after([CREATE2], 1, reset=False)
    failed: list[BaseException] = []

    async def create_node() -> None:
        with pytest.raises(aiozklock.ConnectionLoss) as lost:
            await session.call(create)
        failed.append(lost.value)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(create_node)
            await proxy.wait_for_request(CREATE2)
            # Another task's request, written after the create, is answered first.
            assert await client.exists(node) is not None
    assert len(failed) == 1
    assert proxy.swallowed_replies == 1
    await client.delete(node)
    await gone(zk, PATH)


# ------------------------------------------------------------------ cancellation (F3)


async def _cancel_when(
    run: Callable[[], Awaitable[None]], trigger: Callable[[], Awaitable[None]]
) -> bool:
    """Run ``run`` in a scope, cancel it once ``trigger`` returns; True if it was cancelled
    (and no other exception replaced the cancellation)."""
    scope = anyio.CancelScope()
    finished = anyio.Event()

    async def runner() -> None:
        with scope:
            await run()
        finished.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(runner)
        await trigger()
        scope.cancel()
        with anyio.fail_after(5):
            await finished.wait()
    return scope.cancelled_caught


@pytest.mark.parametrize("point", ["create-in-flight", "exists-in-flight", "waiting", "relist"])
async def test_cancelled_acquire_leaves_nothing_behind(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, open_client: ClientFactory, point: str
) -> None:
    client = await open_client(proxy)
    lock = client.lock(PATH)
    await persistent_lock_path(zk)
    holder = zk.lock(PATH)
    await holder.acquire()
    async with anyio.create_task_group() as tg:
        # For "relist", a node queues between the holder and ours: when it goes, ours is
        # not at the head yet, so the waiter lists the queue again.
        middle = anyio.CancelScope()
        if point == "relist":

            async def queue_in_the_middle() -> None:
                with middle:
                    await zk.lock(PATH, identifier="middle").acquire()  # another contender

            tg.start_soon(queue_in_the_middle)
            await wait_for_queue(zk, PATH, 2)
        baseline_watchers = session_of(client).watcher_count()
        proxy.set_delay(0.3)  # every request stays in flight 0.3 s
        waiting = anyio.Event()
        on_wait(lock._queue, waiting.set)

        async def trigger() -> None:
            if point == "create-in-flight":
                await proxy.wait_for_request(CREATE2)
            elif point == "exists-in-flight":
                await proxy.wait_for_request(EXISTS)
            elif point == "waiting":
                await waiting.wait()
            else:  # the node ahead of ours went; the waiter's getChildren is in flight
                await waiting.wait()
                proxy.reset_counters()
                middle.cancel()
                await proxy.wait_for_request(GET_CHILDREN)

        cancelled = await _cancel_when(lock.acquire, trigger)
    assert cancelled, "the cancellation must propagate, not be swallowed"
    assert not lock.is_held
    proxy.set_delay(0)
    assert await _our_nodes(zk, lock) == []
    assert session_of(client).watcher_count() == baseline_watchers
    await holder.release()
    async with lock.acquire(timeout=2):  # the object stays usable
        assert lock.is_held
    await gone(zk, PATH)


async def test_next_in_line_is_granted_by_the_notification_alone(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    # Nothing can queue ahead of a node later: when the only node ahead of ours is deleted,
    # ours is at the head, and no listing is needed to know it.
    client = await open_client(proxy)
    lock = client.lock(PATH)
    await persistent_lock_path(zk)
    holder = zk.lock(PATH)
    await holder.acquire()
    waiting = anyio.Event()
    on_wait(lock._queue, waiting.set)
    sent_for_the_grant: list[int] = []

    async def wait_then_release() -> None:
        async with lock:
            sent_for_the_grant.extend(requests_except_pings(proxy))
            (node,) = await zk.get_children(PATH)
            assert node == lock.statistics().node

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait_then_release)
        await waiting.wait()
        proxy.reset_counters()
        await holder.release()
    assert sent_for_the_grant == []  # granted by the NodeDeleted event alone
    await gone(zk, PATH)


async def test_cancelled_release_still_deletes_the_node(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    lock = client.lock(PATH)
    await persistent_lock_path(zk)
    held = anyio.Event()

    async def acquire_then_release() -> None:
        await lock.acquire()
        proxy.set_delay(0.3)
        proxy.reset_counters()
        held.set()
        await lock.release(confirm=True)  # the only release that waits, so can be cancelled

    async def trigger() -> None:
        await held.wait()
        await proxy.wait_for_request(DELETE)

    cancelled = await _cancel_when(acquire_then_release, trigger)
    # A confirmed release is shielded: it finished deleting, then the cancellation came.
    assert cancelled
    assert not lock.is_held
    await gone(zk, PATH)
    proxy.set_delay(0)
    async with lock.acquire(timeout=2):
        assert lock.is_held


async def test_cancelled_async_with_body_releases(zk: aiozklock.ZooKeeperClient) -> None:
    lock = zk.lock(PATH)
    entered = anyio.Event()

    async def body() -> None:
        async with lock:
            entered.set()
            await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        tg.start_soon(body)
        await entered.wait()
        tg.cancel_scope.cancel()
    await gone(zk, PATH)
    assert lock.statistics().locked is False


async def test_a_caller_cancelled_before_its_request_sends_nothing(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    # Requests are written without yielding; an already cancelled caller must not get a
    # side effect it cannot see (an ephemeral node it never learns about).
    client = await open_client(proxy)
    proxy.reset_counters()
    with anyio.CancelScope() as scope:
        scope.cancel()
        await client.create("/cancelled", ephemeral=True)
    assert scope.cancelled_caught
    await client.exists("/")  # a later request: the cancelled one would have gone first
    assert requests_except_pings(proxy) == [EXISTS]
    assert await zk.exists("/cancelled") is None
