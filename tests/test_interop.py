"""Mixed fleets: our recipes and other libraries' on one path, each in its own process,
against real ZooKeeper, with a history check of every critical section (a mutex or an
election allows no overlap; hand-offs go both ways; neither side starves).

Apache Curator's peer is compiled at test time (Debian's ``libcurator-recipes-java`` and a
JDK, which ``.ci/run`` installs); without them its tests skip and say why. kazoo's runs in
a Python process of its own (kazoo is in the test dependencies).
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import aiozklock
from tests.conftest import ClientFactory
from tests.interop.peers import (
    Changes,
    Interval,
    contend,
    curator_peer,
    hand_offs,
    overlaps,
    start_peer,
)

pytestmark = [pytest.mark.anyio]

GRANTS = 50  # each side's sections, at least, in a run (they stop once both have them)
HOLD_MICROS = 300
KAZOO = (sys.executable, "-m", "tests.interop.kazoo_peer")
BOTH_WAYS = {("aiozklock", "peer"), ("peer", "aiozklock")}
Make = Callable[[aiozklock.ZooKeeperClient, str], Any]


@pytest.fixture(scope="session")
def curator(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ...]:
    command = curator_peer(tmp_path_factory)
    if isinstance(command, str):
        pytest.skip(command)
    return command


async def _ours(
    primitive: Any, who: str, out: list[Interval], changes: Changes, stop: anyio.Event
) -> None:
    """Our side of the loop: acquire → hold (a busy wait, as the peers do) → release."""
    while not stop.is_set():
        async with primitive:
            start = time.monotonic_ns()
            while time.monotonic_ns() - start < HOLD_MICROS * 1000:
                pass
            out.append((start, time.monotonic_ns(), who))
        changes.notify()
        await anyio.lowlevel.checkpoint()


def _directions(history: list[Interval]) -> set[tuple[str, str]]:
    return {(a.split("-")[0], b.split("-")[0]) for a, b in hand_offs(history)}


async def _contend(
    open_client: ClientFactory, hosts: str, path: str, make: Make, command: Sequence[str]
) -> None:
    """Two sessions of ours and a peer process (two threads) on ``path``, until each side
    had ``GRANTS`` sections and the holder passed from one side to the other both ways (a
    fair queue makes that happen; a side starved fails at the hang bound); checks the
    merged history."""
    clients = [await open_client() for _ in range(2)]
    await clients[0].ensure_path(path)  # the chroot too: Curator creates below it only
    ours: list[Interval] = []
    changes = Changes()
    async with start_peer("peer", command, changes) as peer:

        def missing() -> list[str]:
            counts = {"ours": len(ours), "the peer": len(peer.intervals)}
            short = [f"{who}: {n} of {GRANTS} sections" for who, n in counts.items() if n < GRANTS]
            if short:  # (the hand-offs are looked for once enough sections are there)
                return short
            directions = _directions(ours + peer.intervals)
            return [] if directions >= BOTH_WAYS else [f"hand-offs both ways; seen {directions}"]

        tasks = [
            functools.partial(_ours, make(client, path), f"aiozklock-{i}", ours, changes)
            for i, client in enumerate(clients)
        ]
        theirs = await contend(peer, tasks, missing)
    history = ours + theirs
    assert overlaps(history) == []
    assert len(ours) >= GRANTS
    assert len(theirs) >= GRANTS  # neither side starved
    assert _directions(history) >= BOTH_WAYS


def _args(hosts: str, path: str, recipe: str, *extra: str) -> list[str]:
    return [hosts, path, recipe, "2", str(HOLD_MICROS), *extra]


async def test_our_lock_and_curators_mutex_share_a_path(
    curator: tuple[str, ...], hosts: str, open_client: ClientFactory
) -> None:
    path = "/interop/mutex"
    peer = [*curator, *_args(hosts, path, "mutex")]
    await _contend(open_client, hosts, path, lambda zk, p: zk.lock(p), peer)


async def test_our_election_and_curators_leader_latch_share_a_path(
    curator: tuple[str, ...], hosts: str, open_client: ClientFactory
) -> None:
    path = "/interop/latch"
    peer = [*curator, *_args(hosts, path, "latch")]
    await _contend(open_client, hosts, path, lambda zk, p: zk.election(p), peer)


async def test_our_kazoo_compatible_lock_and_kazoos_lock_share_a_path(
    hosts: str, open_client: ClientFactory
) -> None:
    path = "/interop/kazoo-lock"
    peer = [*KAZOO, *_args(hosts, path, "lock")]
    await _contend(open_client, hosts, path, lambda zk, p: zk.lock(p, compat="kazoo"), peer)


async def test_a_kazoo_lock_told_of_curators_names_shares_a_path_with_compat_kazoo(
    hosts: str, open_client: ClientFactory
) -> None:
    # Told of "-lock-" (extra_lock_patterns), kazoo would order our default names too; but
    # they are kazoo's own names either way, and we refuse the default beside them (a
    # kazoo peer that was not told holds beside us): compat="kazoo" serves both.
    path = "/interop/kazoo-extra"
    peer = [*KAZOO, *_args(hosts, path, "lock", "-lock-")]
    await _contend(open_client, hosts, path, lambda zk, p: zk.lock(p, compat="kazoo"), peer)


async def test_our_kazoo_compatible_election_and_kazoos_election_share_a_path(
    hosts: str, open_client: ClientFactory
) -> None:
    path = "/interop/kazoo-election"
    peer = [*KAZOO, *_args(hosts, path, "election")]
    await _contend(open_client, hosts, path, lambda zk, p: zk.election(p, compat="kazoo"), peer)


async def test_compat_is_validated_before_any_traffic(zk: aiozklock.ZooKeeperClient) -> None:
    with pytest.raises(aiozklock.InvalidArgument, match="compat"):
        zk.lock("/interop/x", compat="zookeeper")  # type: ignore[call-overload]
    with pytest.raises(aiozklock.InvalidArgument, match="non-fair"):
        zk.lock("/interop/x", fair=False, compat="kazoo")
    with pytest.raises(aiozklock.InvalidArgument, match="compat"):
        zk.election("/interop/x", compat=["kazoo"])  # type: ignore[arg-type]
    assert await zk.get_children("/", missing_ok=True) == []


async def test_a_mutex_and_a_read_write_lock_on_one_path_exclude_each_other(
    open_client: ClientFactory,
) -> None:
    path = "/interop/mixed"
    reader_client, mutex_client = await open_client(), await open_client()
    read_lock, mutex = reader_client.rw_lock(path).read_lock, mutex_client.lock(path)
    with anyio.fail_after(10):
        async with read_lock:
            with pytest.raises(aiozklock.LockTimeout):
                await mutex.acquire(timeout=0.3)  # the mutex sees the read node
        async with mutex:
            with pytest.raises(aiozklock.LockTimeout):
                await read_lock.acquire(timeout=0.3)  # and the reader the mutex's node
        async with read_lock:
            assert read_lock.is_held


async def test_a_kazoo_compatible_multi_lock_is_seen_by_kazoo_on_every_path(
    zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    from kazoo.client import KazooClient  # type: ignore[import-untyped]

    def kazoo_contenders(paths: list[str]) -> list[int]:
        client = KazooClient(hosts=hosts, timeout=4.0)
        client.start(timeout=10)
        try:
            return [len(client.Lock(path).contenders()) for path in paths]
        finally:
            client.stop()
            client.close()

    paths = ["/interop/multi/a", "/interop/multi/b"]
    with anyio.fail_after(20):
        async with zk.multi_lock(paths, compat="kazoo"):
            for path in paths:
                (name,) = await zk.get_children(path)
                assert "__lock__" in name
            assert await anyio.to_thread.run_sync(kazoo_contenders, paths) == [1, 1]
