"""Fail closed beside peers that cannot order our nodes (issue 30, item 5), on real
ZooKeeper: an acquisition that lists Curator's or kazoo's contender whose recipe does not see
the names we write (``compat=``) refuses with ``LayoutConflict`` naming the fix, and leaves
no node of ours. A holder told of such a contender that comes after it:
``tests/test_newcomers.py`` (see docs/mixed-fleets.md).

Peers' nodes are written by hand where the names are enough (``/work/shared/
interop-formats.md``: Curator's ``_c_<uuid>-<marker><seq>``, kazoo's ``<32 hex>__lock__<seq>``),
from another session, on asyncio and trio; with kazoo itself: ``tests/test_compat_kazoo.py``."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest

import aiozklock
from tests.conftest import ClientFactory

pytestmark = [pytest.mark.anyio]

HANG = 30.0  # a hang bound, not a duration: a refusal is immediate


def curator_prefix() -> str:
    return f"_c_{uuid.uuid4()}-"


def kazoo_prefix() -> str:
    return uuid.uuid4().hex


async def peer_node(client: aiozklock.ZooKeeperClient, path: str, name: str) -> str:
    """A peer's contender at ``path``: ``name`` + ZooKeeper's sequence, ephemeral."""
    await client.ensure_path(path)
    created = await client.create(f"{path}/{name}", ephemeral=True, sequential=True)
    return created.rpartition("/")[2]


async def refused(primitive: Any) -> aiozklock.LayoutConflict:
    with anyio.fail_after(HANG), pytest.raises(aiozklock.LayoutConflict) as caught:
        await primitive.acquire(timeout=HANG)
    assert not primitive.is_held
    return caught.value


@pytest.mark.parametrize(
    ("peer", "make", "fix"),
    [
        # kazoo's Lock does not see our default '-lock-' names.
        ("kazoo-lock", lambda zk, p: zk.lock(p), 'compat="kazoo"'),
        ("kazoo-rlock", lambda zk, p: zk.rw_lock(p).write_lock, 'compat="kazoo"'),
        ("kazoo-lock", lambda zk, p: zk.election(p), 'compat="kazoo"'),
        # Curator orders kazoo-style names by the whole name.
        ("curator-lock", lambda zk, p: zk.lock(p, compat="kazoo"), 'compat="curator"'),
        ("curator-latch", lambda zk, p: zk.election(p, compat="kazoo"), 'compat="curator"'),
        # Curator's mutex does not order our election's names, nor its latch our lock's.
        ("curator-lock", lambda zk, p: zk.election(p), "zk.election() beside LeaderLatch"),
        ("curator-latch", lambda zk, p: zk.lock(p), "zk.lock() beside InterProcessMutex"),
        ("curator-lock", lambda zk, p: zk.rw_lock(p).read_lock, "zk.rw_lock() beside"),
    ],
)
async def test_a_peer_that_cannot_order_our_nodes_is_refused_and_nothing_is_left(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory, peer: str, make: Any, fix: str
) -> None:
    path = "/mix/refused"
    peers = await open_client()
    library, marker = peer.split("-")
    name = (
        f"{curator_prefix()}{marker}-" if library == "curator" else f"{kazoo_prefix()}__{marker}__"
    )
    theirs = await peer_node(peers, path, name)
    error = await refused(make(zk, path))
    assert fix in str(error)
    assert theirs in str(error)
    assert await zk.get_children(path) == [theirs]  # our node removed: no orphan


async def test_curator_and_kazoo_on_one_path_are_refused_whatever_the_compat(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    path = "/mix/both"
    peers = await open_client()
    theirs = {
        await peer_node(peers, path, f"{curator_prefix()}lock-"),
        await peer_node(peers, path, f"{kazoo_prefix()}__lock__"),
    }
    for compat in ("curator", "kazoo"):
        error = await refused(zk.lock(path, compat=compat))
        assert "never share a path between Curator and kazoo" in str(error)
    assert set(await zk.get_children(path)) == theirs


async def test_a_multi_lock_refused_on_one_member_leaves_no_node_on_any(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    peers = await open_client()
    await zk.ensure_path("/mix/m/a")
    theirs = await peer_node(peers, "/mix/m/b", f"{kazoo_prefix()}__lock__")
    error = await refused(zk.multi_lock(["/mix/m/a", "/mix/m/b"]))
    assert "/mix/m/b" in str(error)
    assert await zk.get_children("/mix/m/a") == []
    assert await zk.get_children("/mix/m/b") == [theirs]


async def test_peers_that_order_our_nodes_are_queued_behind_not_refused(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    peers = await open_client()
    # Curator's mutex orders our default names; kazoo's Lock our compat="kazoo" ones.
    for path, name, compat in (
        ("/mix/c", f"{curator_prefix()}lock-", "curator"),
        ("/mix/k", f"{kazoo_prefix()}__lock__", "kazoo"),
    ):
        theirs = await peer_node(peers, path, name)
        lock = zk.lock(path, compat=compat)
        with anyio.fail_after(HANG), pytest.raises(aiozklock.LockTimeout):
            await lock.acquire(timeout=0.3)  # queued behind the peer's node
        await peers.delete(f"{path}/{theirs}")
        with anyio.fail_after(HANG):
            async with lock:
                assert lock.is_held
