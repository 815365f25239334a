"""A re-join proven alone (``_enqueue.py``): a holder whose node was proven the only one of
its queue, released, joins again without listing when every transaction between its two
creates was a write of its own session that spared parents and its new node's sequence
follows the old one's by one. Other tasks cycling on the same session keep the proof;
a node created in between (by anyone: another session, or another task of ours), or a
parent deleted and created again (its sequence count restarted), is listed and waited for.
"""

from __future__ import annotations

import itertools

import anyio
import pytest

from aiozklock._recipes._core._alone import Backoff
from aiozklock.testing import FaultProxy, Opcode
from tests.conftest import ClientFactory, gone, wait_for_children, wait_for_queue

pytestmark = [pytest.mark.anyio]

PATH = "/locks/rejoin"
EXISTS, GET_CHILDREN = Opcode.EXISTS, Opcode.GET_CHILDREN
DELETE, CREATE2 = Opcode.DELETE, Opcode.CREATE2


@pytest.fixture(scope="module")
def zk_hosts(quiet_zk_hosts: str) -> str:
    """A quiet server (``quiet_zk_hosts``), for ``proxy`` and ``open_client``: any other
    session's transaction between a re-join's creates fails its proof."""
    return quiet_zk_hosts


async def test_an_uncontended_rejoin_is_proven_alone_without_a_listing(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    lock = client.lock(PATH)
    with anyio.fail_after(10):
        await lock.acquire()  # listed: ours is the only node
        first = lock.statistics().node
        proxy.reset_counters()
        for _ in range(3):
            await lock.release()  # written now; no other transaction before the create
            await lock.acquire()
        counts = (proxy.count(DELETE), proxy.count(CREATE2), proxy.count(GET_CHILDREN))
        assert (*counts, len(proxy.requests)) == (3, 3, 0, 6)
        assert lock.statistics().node != first
        await lock.release()
    await gone(client, PATH)


async def test_a_node_created_since_our_grant_is_seen_and_not_overtaken(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    observer = await open_client()
    lock, other = client.lock(PATH), (await open_client()).lock(PATH)
    order: list[str] = []
    other_held = anyio.Event()

    async def contend() -> None:
        async with other:
            order.append("other")
            other_held.set()
            # Held until our re-join has listed the queue and watches this node (the
            # existence watch is sent after the listing's reply): the listing sees it.
            await proxy.wait_for_request(EXISTS, 1)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await lock.acquire()  # alone, as listed (its listing's child watch kept)
            order.append("ours")
            proxy.reset_counters()
            tg.start_soon(contend)
            await wait_for_queue(observer, PATH, 2)
            # The newcomer fires our holding's watch: one listing, looking for a peer's node
            # (test_newcomers.py); counted before the release, not in it.
            await proxy.wait_for_request(GET_CHILDREN, 1)
            proxy.reset_counters()
            await lock.release()  # the new node's number is two past the old one's
            await lock.acquire()
            order.append("ours again")
            await lock.release()
    assert other_held.is_set()
    assert order == ["ours", "other", "ours again"]
    assert proxy.count(GET_CHILDREN) == 1  # not proven alone: listed


async def test_other_tasks_of_the_session_between_the_creates_leave_the_proof(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    a, b = client.lock(f"{PATH}/a"), client.lock(f"{PATH}/b")
    with anyio.fail_after(10):
        # A missing path's failed create is a transaction nobody can tell is ours: none.
        await client.ensure_path(f"{PATH}/a")
        await client.ensure_path(f"{PATH}/b")
        await a.acquire()  # listed: alone
        await b.acquire()
        proxy.reset_counters()
        for _ in range(3):
            # b's create and delete come between a's two creates: transactions of ours.
            await a.release()
            await b.release()
            await a.acquire()
            await b.acquire()
        counts = (proxy.count(DELETE), proxy.count(CREATE2), proxy.count(GET_CHILDREN))
        assert (*counts, len(proxy.requests)) == (6, 6, 0, 12)
        await a.release()
        await b.release()
    await gone(client, f"{PATH}/a", f"{PATH}/b")


async def test_a_node_of_our_session_created_between_the_creates_is_seen_and_waited_for(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    """Another lock object of the same client queues on our path while we hold: its create
    is a transaction of our own session, so only our new node's sequence (two past the old
    one's) tells that something was created in between."""
    client = await open_client(proxy)
    ours, theirs = client.lock(PATH), client.lock(PATH, identifier="theirs")
    order: list[str] = []
    released = anyio.Event()

    async def contend() -> None:
        async with theirs:
            order.append("theirs")
            await released.wait()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await ours.acquire()  # listed: alone
            tg.start_soon(contend)
            await wait_for_queue(client, PATH, 2)
            await ours.release()  # theirs is granted
            proxy.reset_counters()
            acquired = anyio.Event()

            async def again() -> None:
                async with ours:
                    order.append("ours again")
                acquired.set()

            tg.start_soon(again)
            await proxy.wait_for_request(GET_CHILDREN)  # the failed proof's listing
            await wait_for_queue(client, PATH, 2)
            assert not acquired.is_set()
            order.append("released")
            released.set()
            await acquired.wait()
    assert order == ["theirs", "released", "ours again"]
    await gone(client, PATH)


async def test_a_parent_created_again_by_another_session_is_listed(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    """Our node was the queue's first (sequence 0); after our release another session
    deletes the path, creates it again and takes the lock (its node numbered 0 again), so
    our new node is numbered 1, one past the old one's: the sequences alone would prove us
    alone. The other session's transactions between our creates make us list, and wait."""
    client, observer = await open_client(proxy), await open_client()
    lock, other = client.lock(PATH), observer.lock(PATH)
    acquired = anyio.Event()
    nodes: list[str] = []

    async def again() -> None:
        async with lock:
            nodes.append(lock.statistics().node or "")
        acquired.set()

    with anyio.fail_after(10):
        await observer.ensure_path(PATH)
        await lock.acquire()  # listed: alone, numbered 0
        assert lock.statistics().node.endswith("0000000000")
        await lock.release()
        await wait_for_children(observer, PATH, lambda children: not children)
        await observer.delete(PATH)
        await observer.create(PATH)
        await other.acquire()
        proxy.reset_counters()
        async with anyio.create_task_group() as tg:
            tg.start_soon(again)
            queue = await wait_for_queue(observer, PATH, 2)
            assert sorted(name[-10:] for name in queue) == ["0000000000", "0000000001"]
            await proxy.wait_for_request(GET_CHILDREN)  # listed: the proof failed
            assert not acquired.is_set()
            await other.release()
        assert nodes[0].endswith("0000000001")
    await gone(client, PATH)


def test_a_failed_proof_is_tried_again_on_every_2nd_4th_up_to_64th_chance() -> None:
    backoff = Backoff()
    assert backoff.tries()
    backoff.record(True)
    assert [backoff.tries() for _ in range(3)] == [True] * 3  # proven: every chance
    tried = []
    for chance in range(300):
        if backoff.tries():
            tried.append(chance)
            backoff.record(False)
    assert tried[:7] == [0, 2, 6, 14, 30, 62, 126]
    assert {b - a for a, b in itertools.pairwise(tried[5:])} == {64}  # at most every 64th
    backoff.record(True)
    assert [backoff.tries(), backoff.tries()] == [True, True]
