"""Our default layout beside kazoo's Lock itself (issue 30, item 5), on real ZooKeeper: kazoo
cannot see our ``-lock-`` nodes. Taking the lock while we hold, kazoo holds beside us (a
double hold we cannot prevent: our holder is not cancelled, see docs/mixed-fleets.md); from
then on each of our acquisitions that lists kazoo's node refuses (``LayoutConflict`` naming
``compat="kazoo"``) and leaves no node, and the doctor calls the double hold CRITICAL.
kazoo runs in threads of this process (its API blocks)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
from kazoo.client import KazooClient  # type: ignore[import-untyped]

import aiozklock
from aiozklock import FindingKind, Severity
from tests.conftest import ClientFactory

pytestmark = [pytest.mark.anyio]

HANG = 30.0  # a hang bound, not a duration: a refusal is immediate


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


async def test_kazoo_taking_the_lock_while_we_hold_then_our_next_acquire_refuses(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory, hosts: str
) -> None:
    path = "/kz/orders"
    other = await open_client()
    lock = zk.lock(path)
    with kazoo(hosts) as client, anyio.fail_after(HANG):
        async with lock:
            ours = await zk.get_children(path)
            peer = client.Lock(path, "kazoo")
            assert await in_thread(peer.acquire, True, HANG)  # it ignores our node
            diagnosis = await zk.diagnose("/kz")
            with pytest.raises(aiozklock.LayoutConflict) as caught:
                await other.lock(path).acquire(timeout=HANG)
            children = await zk.get_children(path)
            assert lock.is_held  # our holder is not cancelled (see docs/mixed-fleets.md)
            await in_thread(peer.release)
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
