"""Local queues in view (issue 33 item 4): the tasks a process queues behind its one node per
lock object are published in that node's data (``local_waiters``), so other processes see
them: ``contenders()`` and ``contenders --json``, the doctor's queue warning, ``top``'s LOCAL
column; and the telemetry's ``aiozklock.lock.local_waiters``.

The publication's cost is counted on the wire (a ``FaultProxy`` sees every request): a lone
task writes nothing, a crowd's arrivals cost a few coalesced ``setData``, not one each; and a
foreign write on the node (a revoker's ``__REVOKE__``) is never overwritten. Across
processes, ``top`` and beside kazoo's and Curator's waiters: tests/test_local_waiters_seen.py.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

import aiozklock
from aiozklock import FindingKind
from aiozklock._recipes._core._contenders import contender_of
from aiozklock._wire._protocol import Stat
from aiozklock.testing import FaultProxy
from aiozklock.testing._proxy import Opcode
from tests.conftest import ClientFactory, wait_for_queue
from tests.test_cli import _cli
from tests.test_otel import Recorded, recorded  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.anyio]

PREFIX = "/lw"
PATH = "/lw/hot"
BOUND = 20.0  # a hang guard, not a duration
PER_CLIENT = 25  # tasks per client in the crowd: 1 with a node, 24 queued behind it
# Coalesced writes: a burst of arrivals behind a node costs the write of the first arrival
# and the write of the count once its reply came (and, rarely, one more if arrivals span
# two replies); never one per arrival.
WRITES_PER_BURST = 3


def counts(contenders: list[aiozklock.Contender]) -> list[int | None]:
    return [c.local_waiters for c in contenders]


async def settled(
    zk: aiozklock.ZooKeeperClient, path: str, expected: list[int | None]
) -> list[aiozklock.Contender]:
    """Read ``path``'s contenders until their published counts are ``expected`` (the writes
    are coalesced and asynchronous: the reader polls, bounded)."""
    with anyio.fail_after(BOUND):
        while True:
            contenders = await zk.lock(path).contenders()
            if counts(contenders) == expected:
                return contenders
            await anyio.sleep(0.02)


@asynccontextmanager
async def crowd(lock: Any, size: int, release: anyio.Event) -> AsyncIterator[Callable[[], int]]:
    """``size`` tasks on ``lock`` (one object): each holds until ``release`` is set (the body
    sets it: leaving waits for every task). Yields how many have been through."""
    through = 0

    async def one() -> None:
        nonlocal through
        async with lock:
            await release.wait()
        through += 1

    async with anyio.create_task_group() as tg:
        for _ in range(size):
            tg.start_soon(one)
        yield lambda: through


async def test_a_crowd_in_two_sessions_shows_its_local_waiters(
    proxy: FaultProxy, open_client: ClientFactory, zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    """Two clients (sessions), each with 25 tasks on one lock: two nodes, 48 tasks queued
    inside the process. ``contenders()`` shows 24 behind each node, ``contenders --json``
    in another process too, the doctor counts 1 waiting node + 48 local waiters, and the
    arrivals cost a few writes, not 48."""
    a, b = await open_client(proxy), await open_client(proxy)
    await zk.ensure_path(PATH)
    release = anyio.Event()
    proxy.reset_counters()
    with anyio.fail_after(BOUND):
        async with crowd(a.lock(PATH), PER_CLIENT, release):
            await wait_for_queue(zk, PATH, 1)
            async with crowd(b.lock(PATH), PER_CLIENT, release):
                queue = await settled(zk, PATH, [PER_CLIENT - 1, PER_CLIENT - 1])
                arrivals = proxy.count(Opcode.SET_DATA)
                requests = Counter(r.opcode for r in proxy.requests)
                listed = await _cli("contenders", "--json", "--hosts", hosts, PATH)
                warned = await zk.diagnose(PREFIX, queue_warning=1 + 2 * (PER_CLIENT - 1))
                quiet = await zk.diagnose(PREFIX, queue_warning=2 + 2 * (PER_CLIENT - 1))
                release.set()
        drained = proxy.count(Opcode.SET_DATA)
    assert [c.session_id for c in queue] == [a.session_id, b.session_id]
    report = json.loads(listed.stdout)
    assert [c["local_waiters"] for c in report["contenders"]] == [24, 24]
    assert [c["pid"] for c in report["contenders"]] == [os.getpid()] * 2
    # The doctor: 1 waiting node alone is far below the threshold; with the local waiters,
    # 49 wait, at the threshold.
    (finding,) = warned.of_kind(FindingKind.LONG_QUEUE)
    assert finding.count == 49
    assert "49 waiting on /lw/hot (1 node + 48 queued in their processes)" in finding.message
    assert set(finding.sessions) == {a.session_id, b.session_id}
    assert not quiet.of_kind(FindingKind.LONG_QUEUE)
    # Each object's arrivals: a few coalesced writes. The drain: each next node is created
    # with the count of then in its data (no write), and counts only fall between nodes.
    assert arrivals <= 2 * WRITES_PER_BURST, arrivals
    assert drained == arrivals, (arrivals, drained)
    print(f"crowd of 2x{PER_CLIENT}: setData {arrivals} for the arrivals, {drained} in all;")
    print(f"  requests until settled: {requests}")


async def take_once(lock: aiozklock.Lock) -> None:
    async with lock:
        pass


async def test_a_lone_task_writes_nothing(
    proxy: FaultProxy, open_client: ClientFactory, zk: aiozklock.ZooKeeperClient
) -> None:
    """One task at a time on an object, however many take turns: no setData at all, and the
    node says 0 (published: not None)."""
    client = await open_client(proxy)
    lock = client.lock(PATH)
    proxy.reset_counters()
    with anyio.fail_after(BOUND):
        for _ in range(10):
            async with lock:
                pass
        for _ in range(3):  # tasks in turn, never two at once: no local waiter
            async with anyio.create_task_group() as tg:
                tg.start_soon(take_once, lock)
        async with lock:
            (holder,) = await zk.lock(PATH).contenders()
    assert proxy.count(Opcode.SET_DATA) == 0
    assert holder.local_waiters == 0


async def test_tasks_looping_on_one_lock_write_nothing(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    """Three tasks in a loop on one object: each grant's releaser queues again behind the
    next node, a change of one task during each node's life, which is not written (``STEP``);
    each node is created with the count of then."""
    client = await open_client(proxy)
    lock = client.lock(PATH)
    proxy.reset_counters()

    async def loop() -> None:
        for _ in range(15):
            await take_once(lock)

    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(loop)
    assert proxy.count(Opcode.SET_DATA) == 0
    assert proxy.count(Opcode.CREATE2) >= 45  # a node per grant (and its containers)


async def test_a_burst_of_arrivals_costs_a_few_writes(
    proxy: FaultProxy, open_client: ClientFactory, zk: aiozklock.ZooKeeperClient
) -> None:
    """200 tasks arrive behind a holder: the count is coalesced (one write in flight, the
    latest count after it), and the drain writes nothing more."""
    size = 200
    client = await open_client(proxy)
    await zk.ensure_path(PATH)
    release = anyio.Event()
    with anyio.fail_after(BOUND):
        async with crowd(client.lock(PATH), 1, release):
            await wait_for_queue(zk, PATH, 1)
            proxy.reset_counters()
            async with crowd(client.lock(PATH), size - 1, release) as through:
                await settled(zk, PATH, [size - 1])
                arrivals = proxy.count(Opcode.SET_DATA)
                release.set()
        assert through() == size - 1
    assert 1 <= arrivals <= WRITES_PER_BURST, arrivals
    assert proxy.count(Opcode.SET_DATA) == arrivals
    print(f"burst of {size - 1} arrivals: setData {arrivals}; drain: 0 more")


async def test_a_foreign_write_is_never_overwritten(
    proxy: FaultProxy, open_client: ClientFactory, zk: aiozklock.ZooKeeperClient
) -> None:
    """Someone else writes the holder's node (a revoker's ``__REVOKE__``): the count's next
    write carries the version we wrote, fails, and publishing stops on that node."""
    client = await open_client(proxy)
    lock = client.lock(PATH)
    release = anyio.Event()
    with anyio.fail_after(BOUND):
        async with crowd(lock, 2, release):
            (holder,) = await settled(zk, PATH, [1])
            node = f"{PATH}/{holder.node}"
            await zk.set_data(node, b"__REVOKE__")
            proxy.reset_counters()
            async with crowd(lock, 3, release):
                await proxy.wait_for_request(Opcode.SET_DATA)
                await client.exists(PATH)  # after its reply: the same session, in order
                data, _ = await zk.get_data(node)
                release.set()
    assert data == b"__REVOKE__"
    assert proxy.count(Opcode.SET_DATA) == 1  # refused (BadVersion), and not tried again


async def test_a_multi_lock_publishes_on_every_member(
    open_client: ClientFactory, zk: aiozklock.ZooKeeperClient
) -> None:
    client = await open_client()
    release = anyio.Event()
    with anyio.fail_after(BOUND):
        async with crowd(client.multi_lock([PATH, f"{PATH}-b"]), 4, release):
            await settled(zk, PATH, [3])
            await settled(zk, f"{PATH}-b", [3])
            release.set()


async def test_an_election_does_not_publish(
    open_client: ClientFactory, zk: aiozklock.ZooKeeperClient
) -> None:
    """A Curator LeaderLatch behind our node would miss its deletion after a data change
    (its one-shot watch acts on deletions only), and our followers watch the leader's data:
    an election never writes its node; its nodes say nothing (None)."""
    client = await open_client()
    await zk.ensure_path(PATH)
    release = anyio.Event()
    with anyio.fail_after(BOUND):
        async with crowd(client.election(PATH), 3, release):
            await wait_for_queue(zk, PATH, 1)
            (leader,) = await zk.election(PATH).contenders()
            release.set()
    assert leader.local_waiters is None


async def test_the_telemetry_counts_local_waiters(
    recorded: Recorded,  # noqa: F811 (the fixture)
    open_client: ClientFactory,
) -> None:
    client = await open_client(telemetry=recorded.telemetry)
    name = {"aiozklock.recipe": "lock", "aiozklock.lock.name": "/lw/*"}
    release = anyio.Event()
    with anyio.fail_after(BOUND):
        async with crowd(client.lock(PATH), 5, release):
            await settled(client, PATH, [4])  # counted before published
            during = recorded.point("aiozklock.lock.local_waiters", name).value
            release.set()
    after = recorded.point("aiozklock.lock.local_waiters", name).value
    assert (during, after) == (4, 0)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"task": "t", "local_waiters": 3}', 3),
        (b'{"task": "t", "local_waiters": 0}', 0),
        (b'{"task": "t"}', None),  # a recipe that does not publish it, an older aiozklock
        (b"10.0.0.7", None),  # Curator's default data
        (b"kazoo-worker", None),  # kazoo's identifier
        (b'{"local_waiters": -1}', None),
        (b'{"local_waiters": true}', None),
        (b'{"local_waiters": "3"}', None),
        (b'{"local_waiters": 2.5}', None),
    ],
)
def test_a_published_count_is_read_only_when_it_is_one(data: bytes, expected: int | None) -> None:
    stat = Stat(1, 1, 0, 0, 0, 0, 0, 0, len(data), 0, 1)
    contender = contender_of("x-lock-0000000001", data, stat, is_holder=True)
    assert contender.local_waiters == expected
