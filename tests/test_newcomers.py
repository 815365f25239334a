"""A holder told of a peer that came after its grant and cannot order its nodes (issue 37,
item 8; ``aiozklock/_recipes/_core/_newcomers.py``), on real ZooKeeper, asyncio and trio.

A holding granted on its join's listing keeps that listing's child watch: a kazoo node
arriving then ends it (``LockLost`` from the ``LayoutConflict``, its body cancelled, its
node deleted), for every queue recipe with a layout. What it costs on a path without
foreign nodes, counted by a FaultProxy in front of the holder: one getChildren per arrival
behind a watched holder, nothing for a holder granted by a hand-off, nothing at its release;
a read holder's own listing (admitting a local reader) is checked too. kazoo's nodes are
written by hand (its names suffice: ``tests/test_compat_refusal.py``); with kazoo itself:
``tests/test_compat_kazoo.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

import aiozklock
from aiozklock.testing import FaultProxy, Opcode
from tests.conftest import ClientFactory, node_gone, wait_for_queue
from tests.test_compat_refusal import kazoo_prefix, peer_node

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PATH = "/mix/newcomer"
HANG = 20.0  # a hang bound, not a duration


@dataclass
class Holder:
    """A task holding ``primitive`` in ``async with`` until ``done`` or cancelled."""

    primitive: Any
    held: anyio.Event = field(default_factory=anyio.Event)
    told: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    cancelled: bool = False
    raised: BaseException | None = None

    async def hold(self) -> None:
        try:
            async with self.primitive:
                self.held.set()
                try:
                    await self.done.wait()
                except anyio.get_cancelled_exc_class():
                    self.cancelled = True
                    raise
        except aiozklock.LockLost as exc:
            self.raised = exc
        self.told.set()


def listings(proxy: FaultProxy) -> int:
    return proxy.count(Opcode.GET_CHILDREN)


RECIPES: dict[str, Callable[[aiozklock.ZooKeeperClient], Any]] = {
    "lock": lambda zk: zk.lock(PATH),
    "election": lambda zk: zk.election(PATH),
    "write_lock": lambda zk: zk.rw_lock(PATH).write_lock,
    "read_lock": lambda zk: zk.rw_lock(PATH).read_lock,
    "multi_lock": lambda zk: zk.multi_lock([PATH + "-a", PATH]),
}


@pytest.mark.parametrize("recipe", RECIPES)
async def test_a_kazoo_node_after_our_grant_ends_the_holding(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, open_client: ClientFactory, recipe: str
) -> None:
    client = await open_client(proxy)
    holder = Holder(RECIPES[recipe](client))
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(holder.hold)
            await holder.held.wait()
            ours = await zk.get_children(PATH)
            proxy.reset_counters()
            theirs = await peer_node(zk, PATH, f"{kazoo_prefix()}__lock__")
            await holder.told.wait()
        await node_gone(zk, f"{PATH}/{ours[0]}")  # deleted by the janitor
    assert holder.cancelled
    assert isinstance(holder.raised, aiozklock.LockLost)
    conflict = holder.raised.__cause__
    assert isinstance(conflict, aiozklock.LayoutConflict)
    assert theirs in str(conflict)
    assert 'compat="kazoo"' in str(conflict)
    assert listings(proxy) == 1  # told by one listing


async def test_our_own_contenders_arriving_cost_one_listing_each_and_end_nothing(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    """Behind a holder granted at once, each arrival of ours fires its watch once: one
    getChildren each (with a new watch), no loss; its release lists nothing."""
    client = await open_client(proxy)
    holder = Holder(client.lock(PATH))
    waiters = [Holder((await open_client()).lock(PATH)) for _ in range(3)]
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(holder.hold)
            await holder.held.wait()
            proxy.reset_counters()
            for count, waiter in enumerate(waiters, start=1):
                tg.start_soon(waiter.hold)
                await wait_for_queue(zk, PATH, count + 1)
                await proxy.wait_for_request(Opcode.GET_CHILDREN, count)
                await client.exists("/")  # answered after that listing: its watch is set
            assert listings(proxy) == len(waiters)
            assert not holder.told.is_set()
            proxy.reset_counters()
            holder.done.set()
            await holder.told.wait()
            for waiter in waiters:
                await waiter.held.wait()
                waiter.done.set()
    assert holder.raised is None
    assert [r.opcode for r in proxy.requests if r.opcode != Opcode.PING] == [Opcode.DELETE]


async def test_a_holder_granted_by_a_hand_off_lists_nothing_while_it_holds(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    """The contended path's grants: a hand-off (the predecessor's deletion) lists nothing,
    so it keeps no watch, and arrivals behind it cost it nothing."""
    first = Holder((await open_client()).lock(PATH))
    client = await open_client(proxy)
    holder = Holder(client.lock(PATH))
    late = Holder((await open_client()).lock(PATH))
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(first.hold)
            await first.held.wait()
            tg.start_soon(holder.hold)
            await wait_for_queue(zk, PATH, 2)
            first.done.set()
            await holder.held.wait()
            proxy.reset_counters()
            tg.start_soon(late.hold)
            await wait_for_queue(zk, PATH, 2)
            # A notification to it would come before this reply, and a listing it sent
            # then would reach the proxy before the next request.
            await client.exists("/")
            await client.exists("/")
            await proxy.wait_for_request(Opcode.EXISTS, 2)
            assert listings(proxy) == 0
            holder.done.set()
            await late.held.wait()
            late.done.set()
    assert holder.raised is None


async def test_a_read_holders_own_listing_tells_it_of_a_newcomer(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """A read holder granted by a hand-off keeps no watch; the listing it makes to admit
    a local reader is checked: a kazoo writer that came meanwhile ends the holding (on
    main the holder went on; the local reader queued and was refused)."""
    writer = await open_client()
    readers = await open_client()
    first = Holder(readers.rw_lock(PATH).read_lock)
    second = Holder(readers.rw_lock(PATH).read_lock)
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            await writer.rw_lock(PATH).write_lock.acquire()
            tg.start_soon(first.hold)
            await wait_for_queue(zk, PATH, 2)
            await writer.rw_lock(PATH).write_lock.release()
            await first.held.wait()  # granted by the hand-off: no watch kept
            await peer_node(writer, PATH, f"{kazoo_prefix()}__lock__")  # kazoo's WriteLock
            with pytest.raises(aiozklock.LayoutConflict):
                await second.primitive.acquire(timeout=HANG)  # lists: tells the holder
            await first.told.wait()
    assert first.cancelled
    assert isinstance(first.raised, aiozklock.LockLost)
    assert isinstance(first.raised.__cause__, aiozklock.LayoutConflict)


async def test_what_the_watch_costs_on_the_wire(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    """The same requests as without it. An uncontended cycle: one notification (our own
    release's delete fires the watch its listing set). A re-join after a contended grant
    lists without a watch: waiting behind another, it hears only its predecessor's
    deletion (one notification), as before."""
    client = await open_client(proxy)
    lock = client.lock(PATH)
    await zk.ensure_path(PATH)
    first, behind = Holder((await open_client()).lock(PATH)), Holder(zk.lock(PATH))
    granted, rejoined = anyio.Event(), anyio.Event()
    heard: list[int] = []

    async def cycles() -> None:
        await first.held.wait()
        await lock.acquire()  # behind first: granted by a hand-off
        granted.set()
        await wait_for_queue(zk, PATH, 2)  # behind queued after us
        await lock.release()  # to behind, by a hand-off
        proxy.reset_counters()
        await lock.acquire()  # a contended re-join, behind behind
        rejoined.set()
        await lock.release(confirm=True)
        await client.exists("/")
        heard.append(proxy.notifications)

    with anyio.fail_after(HANG):
        proxy.reset_counters()
        await lock.acquire()
        await lock.release(confirm=True)
        await client.exists("/")  # answered after the notification
        heard.append(proxy.notifications)
        uncontended = [r.opcode for r in proxy.requests if r.opcode != Opcode.PING]
        async with anyio.create_task_group() as tg:
            tg.start_soon(first.hold)
            tg.start_soon(cycles)
            await first.held.wait()
            await wait_for_queue(zk, PATH, 2)
            first.done.set()
            await granted.wait()
            tg.start_soon(behind.hold)
            await behind.held.wait()
            await wait_for_queue(zk, PATH, 2)  # our re-join queued
            await proxy.wait_for_request(Opcode.EXISTS)  # its watch on behind's node
            await client.exists("/")  # ... answered: set
            behind.done.set()
            await rejoined.wait()
    assert heard == [1, 1]
    assert uncontended == [Opcode.CREATE2, Opcode.GET_CHILDREN, Opcode.DELETE, Opcode.EXISTS]
    rejoin = [r.opcode for r in proxy.requests if r.opcode != Opcode.PING]
    if rejoin[0] == Opcode.DELETE:
        del rejoin[0]  # the release before (written at the call) reached the proxy late
    waits = [Opcode.CREATE2, Opcode.GET_CHILDREN, Opcode.EXISTS]  # join, watch behind
    assert rejoin == [*waits, Opcode.EXISTS, Opcode.DELETE, Opcode.EXISTS]


async def test_a_listing_lost_to_a_reconnect_is_sent_again_and_tells_the_holder(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    """The listing a newcomer's notification asks for loses its reply to a connection
    reset: once reconnected in the same session, it is sent again, and its newcomer told
    (``loss_policy="expired"``: the holding outlives the short disconnection)."""
    client = await open_client(proxy, loss_policy="expired")
    holder = Holder(client.lock(PATH))
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(holder.hold)
            await holder.held.wait()
            session_id = client.session_id
            proxy.reset_counters()
            proxy.arm_drop_after([Opcode.GET_CHILDREN], 1)
            theirs = await peer_node(zk, PATH, f"{kazoo_prefix()}__lock__")
            await holder.told.wait()
    assert client.session_id == session_id  # the same session, reconnected
    assert proxy.swallowed_replies == 1
    assert isinstance(holder.raised, aiozklock.LockLost)
    conflict = holder.raised.__cause__
    assert isinstance(conflict, aiozklock.LayoutConflict)
    assert theirs in str(conflict)
    # The one whose reply was lost, and the one sent again on the new connection (then
    # the janitor's delete of our node, if it came already).
    sent = [r for r in proxy.requests if r.opcode == Opcode.GET_CHILDREN]
    assert [r.connection_index for r in sent] == [0, 1]
