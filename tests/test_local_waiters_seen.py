"""Local queues in view, as other processes and peers see them (issue 33 item 4): two worker
processes' crowds read from a third, ``top``'s LOCAL column and its watch on a contender's
data, and peers that wait behind a node whose count is written (kazoo's Lock, Curator's
InterProcessMutex) still get their turns. The engine's own tests are
tests/test_local_waiters.py.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable

import anyio
import pytest

import aiozklock
from aiozklock import FindingKind
from aiozklock._top._watch import TreeWatch
from aiozklock.testing import session_of
from tests.conftest import ClientFactory, wait_for_queue
from tests.interop.peers import Changes, Interval, contend, overlaps, start_peer
from tests.test_cli import REPO, _env
from tests.test_compat_kazoo import in_thread, kazoo
from tests.test_interop import (  # noqa: F401 (curator: a fixture)
    BOTH_WAYS,
    GRANTS,
    HOLD_MICROS,
    _args,
    _directions,
    curator,
)
from tests.test_local_waiters import BOUND, PATH, PER_CLIENT, PREFIX, crowd, settled
from tests.test_top import row_of, top

pytestmark = [pytest.mark.anyio]


# A worker process: TASKS tasks on one lock object, each holding until a line on stdin.
WORKER = """
import sys, anyio, aiozklock

async def main(hosts, path, tasks):
    async with aiozklock.connect(hosts) as zk:
        lock, release = zk.lock(path), anyio.Event()

        async def one():
            async with lock:
                await release.wait()

        async with anyio.create_task_group() as tg:
            for _ in range(tasks):
                tg.start_soon(one)
            print("ready", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline)
            release.set()

anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
"""


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the workers run their own loops
async def test_two_worker_processes_show_their_local_waiters(
    zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    """The issue's case: 25 requests waiting in each of two worker processes. This process
    only reads: two nodes, 24 behind each, and the doctor's queue counts 49."""
    argv = [sys.executable, "-c", WORKER, hosts, PATH, str(PER_CLIENT)]
    with anyio.fail_after(BOUND * 2):
        async with await anyio.open_process(argv, cwd=REPO, env=_env()) as first:
            async with await anyio.open_process(argv, cwd=REPO, env=_env()) as second:
                queue = await settled(zk, PATH, [PER_CLIENT - 1, PER_CLIENT - 1])
                diagnosis = await zk.diagnose(PREFIX, queue_warning=49)
                for worker in (first, second):
                    assert worker.stdin is not None
                    await worker.stdin.send(b"go\n")
                assert await second.wait() == 0
            assert await first.wait() == 0
    assert len({c.pid for c in queue} - {os.getpid()}) == 2  # the workers' own
    (finding,) = diagnosis.of_kind(FindingKind.LONG_QUEUE)
    assert finding.count == 49


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # top runs in its own process
async def test_top_shows_the_local_waiters(
    open_client: ClientFactory, zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    client = await open_client()
    release = anyio.Event()
    with anyio.fail_after(BOUND * 3):
        async with crowd(client.lock(PATH), 6, release):
            await settled(zk, PATH, [5])
            status, out, err = await top("--once", "--hosts", hosts, PREFIX)
            release.set()
    assert status == 0, err
    assert row_of(out, PATH)[1:4] == ["lock", "1", "5"]
    assert "0 waiting (+5 local)" in out.splitlines()[1]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # peers in threads, processes
async def test_a_kazoo_waiter_behind_a_publishing_node_still_gets_the_lock(
    zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    """kazoo's Lock waits behind our node with a data watch, which our count write fires:
    it re-lists, waits again, and takes the lock once our holder lets go. Its node's data
    (its identifier) says nothing of local waiters: None."""
    path = "/kz/local"
    await zk.ensure_path(path)  # and the chroot, which kazoo wants
    lock = zk.lock(path, compat="kazoo")
    release = anyio.Event()
    got: list[bool] = []
    with kazoo(hosts) as client, anyio.fail_after(BOUND):
        peer = client.Lock(path, "kazoo")

        async def kazoo_turn() -> None:
            got.append(await in_thread(peer.acquire, True, BOUND))
            await in_thread(peer.release)

        async with crowd(lock, 1, release), anyio.create_task_group() as tg:
            await settled(zk, path, [0])
            tg.start_soon(kazoo_turn)
            await wait_for_queue(zk, path, 2)
            async with crowd(lock, 3, release):  # arrivals: a count write on our node
                await settled(zk, path, [3, None])
                release.set()
    assert got == [True]


async def _in_pairs(
    lock: aiozklock.Lock, who: str, out: list[Interval], changes: Changes, stop: anyio.Event
) -> None:
    """Two of our tasks arrive at once (a count that moves by 2: a write), each takes a
    section as ``_ours`` does, then two more."""
    while not stop.is_set():
        async with anyio.create_task_group() as tg:
            for _ in range(2):
                tg.start_soon(_ours_once, lock, who, out)
        changes.notify()


async def _ours_once(lock: aiozklock.Lock, who: str, out: list[Interval]) -> None:
    async with lock:
        start = time.monotonic_ns()
        while time.monotonic_ns() - start < HOLD_MICROS * 1000:
            pass
        out.append((start, time.monotonic_ns(), who))


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # peers in threads, processes
async def test_curators_mutex_beside_a_crowded_lock_that_publishes(
    curator: tuple[str, ...],  # noqa: F811 (the fixture)
    hosts: str,
    open_client: ClientFactory,
) -> None:
    """Curator's InterProcessMutex (two threads) beside two clients of ours whose tasks
    arrive two at a time on one lock object, so that counts are written while Curator's
    threads wait behind our nodes (its getData watch fires on each, and it lists again): no
    overlap, both sides progress, hand-offs both ways."""
    path = "/interop/crowded"
    clients = [await open_client() for _ in range(2)]
    await clients[0].ensure_path(path)  # the chroot too: Curator creates below it only
    ours: list[Interval] = []
    changes = Changes()
    async with start_peer("peer", [*curator, *_args(hosts, path, "mutex")], changes) as peer:

        def missing() -> list[str]:
            short = [n for n in (len(ours), len(peer.intervals)) if n < GRANTS]
            directions = _directions(ours + peer.intervals)
            return [f"{short} of {GRANTS}; {directions}"] if short or directions < BOTH_WAYS else []

        tasks = [
            functools.partial(_in_pairs, client.lock(path), f"aiozklock-{i}", ours, changes)
            for i, client in enumerate(clients)
            for _ in range(2)
        ]
        theirs = await contend(peer, tasks, missing)
    writes = sum(getattr(c.lock(path)._waiters, "writes", 0) for c in clients)
    history = ours + theirs
    assert overlaps(history) == []
    assert _directions(history) >= BOTH_WAYS
    assert writes > 0  # counts were written while Curator waited
    print(f"beside Curator: {len(ours)} of our sections, {len(theirs)} of its, {writes} setData")


async def test_tops_watches_hear_a_published_count(
    open_client: ClientFactory, zk: aiozklock.ZooKeeperClient
) -> None:
    """A count written on a contender's node changes no listing: top's exists watch on the
    node hears it, and the view is read again."""
    client = await open_client()
    changes = 0
    changed = anyio.Event()

    def on_change() -> None:
        nonlocal changes
        changes += 1
        changed.set()

    async def until(done: Callable[[], bool]) -> None:
        nonlocal changed
        while not done():
            await changed.wait()
            changed = anyio.Event()

    tree = TreeWatch(session_of(zk), PREFIX, on_change)
    release = anyio.Event()
    with anyio.fail_after(BOUND):
        async with crowd(client.lock(PATH), 1, release), anyio.create_task_group() as tg:
            await settled(zk, PATH, [0])
            tg.start_soon(tree.run)
            await until(lambda: tree.watched == 3)  # /lw, /lw/hot, the holder's node
            before = changes
            async with crowd(client.lock(PATH), 2, release):  # no node comes or goes
                await until(lambda: changes > before)  # the node's data watch fired
                (holder,) = await zk.lock(PATH).contenders()
                release.set()
            tg.cancel_scope.cancel()
    assert holder.local_waiters == 2
