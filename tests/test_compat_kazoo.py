"""Our default layout beside kazoo's Lock itself (issue 30, item 5; issue 37, item 8), on
real ZooKeeper: kazoo cannot see our ``-lock-`` nodes. Taking the lock while we hold, kazoo
holds beside us (a double hold we cannot prevent); a holder granted on a listing is told
(``LockLost`` from the ``LayoutConflict``, its body cancelled), one granted without a
listing is not (see docs/mixed-fleets.md); each of our acquisitions that lists kazoo's node
refuses (``LayoutConflict`` naming ``compat="kazoo"``) and leaves no node, and the doctor
calls the double hold CRITICAL. kazoo runs in threads of this process (its API blocks)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from kazoo.client import KazooClient  # type: ignore[import-untyped]

import aiozklock
from aiozklock import FindingKind, Severity
from aiozklock.testing import FaultProxy, Opcode
from tests.conftest import ClientFactory, node_gone, wait_for_queue

pytestmark = [pytest.mark.anyio]

HANG = 30.0  # a hang bound, not a duration: a refusal is immediate
# A hang bound for our holder to be told of kazoo: one getChildren round trip after the
# notification that kazoo's create fires (sent before kazoo's acquire returns).
TOLD = 10.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # kazoo is threads: the backend changes nothing


@contextmanager
def kazoo(hosts: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=hosts, timeout=4.0)
    client.start(timeout=20)
    try:
        yield client
    finally:
        client.stop()
        client.close()


async def in_thread(function: Any, *args: Any) -> Any:
    return await anyio.to_thread.run_sync(functools.partial(function, *args))


@dataclass
class Holder:
    """A task holding ``lock`` in ``async with`` until cancelled: whether its body was
    cancelled, and what its block raised."""

    lock: aiozklock.Lock
    held: anyio.Event = field(default_factory=anyio.Event)
    told: anyio.Event = field(default_factory=anyio.Event)
    node: str = ""
    cancelled: bool = False
    raised: BaseException | None = None

    async def hold(self) -> None:
        try:
            async with self.lock:
                self.node = f"{self.lock.path}/{self.lock.statistics().node}"
                self.held.set()
                try:
                    await anyio.sleep_forever()
                except anyio.get_cancelled_exc_class():
                    self.cancelled = True
                    raise
        except aiozklock.LockLost as exc:
            self.raised = exc
        self.told.set()


async def test_kazoo_arriving_after_our_holder_ends_our_holding(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory, proxy: FaultProxy, hosts: str
) -> None:
    """Issue 37, item 8: kazoo's Lock takes the lock beside our default-layout holder (it
    ignores our node); our holder, granted on its join's listing, keeps that listing's child
    watch: kazoo's create fires it, one getChildren shows kazoo's node, and the holding is
    lost (``LockLost`` from the ``LayoutConflict``), its body cancelled, its node deleted.
    On main the holder was never told (it held beside kazoo until it released)."""
    path = "/kz/late"
    holder = Holder((await open_client(proxy)).lock(path))
    with kazoo(hosts) as client, anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(holder.hold)
            await holder.held.wait()
            proxy.reset_counters()
            peer = client.Lock(path, "kazoo")
            assert await in_thread(peer.acquire, True, HANG)  # it ignores our node
            with anyio.fail_after(TOLD):
                await holder.told.wait()
        sent = [r.opcode for r in proxy.requests if r.opcode != Opcode.PING]
        await node_gone(zk, holder.node)  # by the janitor, in the background
        theirs = await zk.get_children(path)
        with pytest.raises(aiozklock.LayoutConflict):
            await zk.lock(path).acquire(timeout=HANG)  # refused, as before
        await in_thread(peer.release)
    assert holder.cancelled
    assert isinstance(holder.raised, aiozklock.LockLost)
    conflict = holder.raised.__cause__
    assert isinstance(conflict, aiozklock.LayoutConflict)
    assert 'pass compat="kazoo" to zk.lock()' in str(conflict)
    assert theirs[0] in str(conflict)  # kazoo's node, named
    assert "came after our grant" in str(holder.raised)
    assert "lost: kazoo's Lock node" in str(conflict)
    assert sent[:1] == [Opcode.GET_CHILDREN]  # one listing told it: no other request first
    assert sent.count(Opcode.GET_CHILDREN) == 1
    assert holder.lock.statistics().losses == 1


async def test_kazoo_after_a_holder_granted_by_a_hand_off_is_not_told_until_listed(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory, hosts: str
) -> None:
    """What is not detected (docs/mixed-fleets.md): a holder granted by a direct hand-off
    (its predecessor's deletion; no listing, so no watch) holds beside kazoo's Lock; the
    doctor calls the double hold CRITICAL, and our next acquisition that lists refuses."""
    path = "/kz/orders"
    first, other = await open_client(), await open_client()
    holder = Holder((await open_client()).lock(path))
    with kazoo(hosts) as client, anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            await first.lock(path).acquire()
            tg.start_soon(holder.hold)  # queued behind first's node
            await wait_for_queue(zk, path, 2)
            await first.lock(path).release()
            await holder.held.wait()  # granted by the hand-off
            ours = await zk.get_children(path)
            peer = client.Lock(path, "kazoo")
            assert await in_thread(peer.acquire, True, HANG)  # it ignores our node
            diagnosis = await zk.diagnose("/kz")
            with pytest.raises(aiozklock.LayoutConflict) as caught:
                await other.lock(path).acquire(timeout=HANG)
            children = await zk.get_children(path)
            assert holder.lock.statistics().locked  # not told: no listing since its grant
            assert not holder.told.is_set()
            await in_thread(peer.release)
            tg.cancel_scope.cancel()
    assert 'compat="kazoo"' in str(caught.value)
    assert len(children) == 2  # ours and kazoo's: the refused acquisition left nothing
    assert set(ours) < set(children)
    (finding,) = diagnosis.of_kind(FindingKind.UNSAFE_MIX)
    assert finding.severity is Severity.CRITICAL  # a live double hold
    assert "both hold now" in finding.message
    assert 'compat="kazoo"' in finding.action
    assert not diagnosis.healthy


async def test_kazoo_holding_first_our_acquire_refuses_before_holding(
    zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    path = "/kz/invoices"
    with kazoo(hosts) as client, anyio.fail_after(HANG):
        peer = client.Lock(path, "kazoo")
        assert await in_thread(peer.acquire, True, HANG)
        theirs = await zk.get_children(path)
        lock = zk.lock(path)
        with pytest.raises(aiozklock.LayoutConflict) as caught:
            await lock.acquire(timeout=HANG)  # on main: queued behind kazoo, then LockTimeout
        left = await zk.get_children(path)
        await in_thread(peer.release)
    assert not lock.is_held
    assert left == theirs  # no orphan node of ours
    assert "kazoo's Lock node" in str(caught.value)
    assert 'pass compat="kazoo" to zk.lock()' in str(caught.value)


async def test_with_compat_kazoo_kazoo_waits_for_us_and_we_for_it(
    zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    path = "/kz/fixed"
    with kazoo(hosts) as client, anyio.fail_after(HANG):
        peer = client.Lock(path, "kazoo")
        async with zk.lock(path, compat="kazoo"):
            assert not await in_thread(peer.acquire, False)  # it sees our node
        assert await in_thread(peer.acquire, True, HANG)
        with pytest.raises(aiozklock.LockTimeout):
            await zk.lock(path, compat="kazoo").acquire(timeout=0.3)  # we see its node
        await in_thread(peer.release)


async def test_contenders_name_each_other_across_the_libraries(
    zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    """A fleet moving from kazoo: our ``contenders()`` reads a kazoo node's identifier (its
    plain-text data), and kazoo's ``contenders()`` lists our node by its data as it is."""
    path = "/kz/who"
    with kazoo(hosts) as client, anyio.fail_after(HANG):
        peer = client.Lock(path, "legacy-billing")
        assert await in_thread(peer.acquire, True, HANG)
        ours = zk.lock(path, identifier="billing-2", compat="kazoo")
        waiting = await ours.try_acquire()
        assert not waiting
        [holder] = await ours.contenders()
        assert (holder.identifier, holder.is_holder, holder.pid) == ("legacy-billing", True, None)
        await in_thread(peer.release)
        async with ours:
            [listed] = await in_thread(peer.contenders)
            assert '"identifier": "billing-2"' in listed
