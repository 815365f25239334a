"""The doctor's deadlock detection (``zk.diagnose()``) on real ZooKeeper: real deadlocks made
with events (each party takes its first lock, then all wait for their second; the doctor runs
once every queue shows the waits), across sessions and between tasks of one process, with
mutexes, multi-lock members, read/write sides, semaphores and other libraries' nodes; and
the waits that are not deadlocks."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

import aiozklock
from aiozklock import Diagnosis, Finding, FindingKind, Severity
from tests.conftest import ClientFactory, wait_for_queue

pytestmark = [pytest.mark.anyio]

HANG = 30.0  # a hang bound, not a duration


@asynccontextmanager
async def deadlocked(
    zk: aiozklock.ZooKeeperClient,
    parties: Sequence[tuple[Any, Any]],
    queues: Sequence[tuple[str, int]],
) -> AsyncIterator[None]:
    """Each party (first, second) takes ``first``; once all have, each waits for
    ``second``; the body runs once every (path, size) in ``queues`` has that many nodes."""
    taken = [anyio.Event() for _ in parties]

    async def party(index: int, first: Any, second: Any) -> None:
        async with first:
            taken[index].set()
            for event in taken:
                await event.wait()
            async with second:
                raise AssertionError(f"party {index} got its second lock: no deadlock")

    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            for index, (first, second) in enumerate(parties):
                tg.start_soon(party, index, first, second, name=f"party-{index}")
            for event in taken:  # the paths exist from then on
                await event.wait()
            for path, size in queues:
                await wait_for_queue(zk, path, size)
            yield
            tg.cancel_scope.cancel()


def only_deadlock(diagnosis: Diagnosis) -> Finding:
    (finding,) = diagnosis.of_kind(FindingKind.DEADLOCK)
    assert finding.severity is Severity.CRITICAL
    assert not diagnosis.healthy
    return finding


def chain(finding: Finding) -> list[tuple[int, str]]:
    """The cycle as (session, path where it waits) pairs."""
    return [(wait.party.session_id, wait.path) for wait in finding.cycle]


async def test_a_two_session_deadlock_is_found_with_both_paths_and_sessions(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    one, two = await open_client(), await open_client()
    parties = [(one.lock("/dl/a"), one.lock("/dl/b")), (two.lock("/dl/b"), two.lock("/dl/a"))]
    async with deadlocked(zk, parties, [("/dl/a", 2), ("/dl/b", 2)]):
        diagnosis = await zk.diagnose("/dl")
    finding = only_deadlock(diagnosis)
    assert finding.paths == ("/dl/a", "/dl/b")
    assert finding.sessions == tuple(sorted([one.session_id, two.session_id]))
    # Each waits where the other holds: one → /dl/b → two → /dl/a → one.
    assert sorted(chain(finding)) == sorted([(one.session_id, "/dl/b"), (two.session_id, "/dl/a")])
    assert {wait.party.library for wait in finding.cycle} == {"aiozklock"}
    assert f"0x{one.session_id:x}" in finding.message
    assert f"0x{two.session_id:x}" in finding.message
    assert "multi_lock" in finding.action
    assert diagnosis.counts[FindingKind.DEADLOCK] == 1
    assert diagnosis.clock == "server"


async def test_a_three_party_cycle_is_one_deadlock_of_three(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    clients = [await open_client() for _ in range(3)]
    paths = ["/dl3/a", "/dl3/b", "/dl3/c"]
    parties = [
        (client.lock(paths[i]), client.lock(paths[(i + 1) % 3])) for i, client in enumerate(clients)
    ]
    async with deadlocked(zk, parties, [(path, 2) for path in paths]):
        diagnosis = await zk.diagnose("/dl3")
    finding = only_deadlock(diagnosis)
    assert finding.paths == tuple(paths)
    assert len(finding.cycle) == 3
    waits = dict(chain(finding))
    assert waits == {clients[i].session_id: paths[(i + 1) % 3] for i in range(3)}
    # The chain follows the waits: who waits at a path is followed by that path's holder.
    holder_of = {paths[i]: clients[i].session_id for i in range(3)}
    cycle = chain(finding)
    for (_, path), (following, _) in zip(cycle, cycle[1:] + cycle[:1], strict=True):
        assert holder_of[path] == following


async def test_a_multi_lock_member_and_a_read_side_in_a_cycle(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    one, two = await open_client(), await open_client()
    multi = one.multi_lock(["/mx/m1", "/mx/m2"])
    parties = [
        (multi, one.rw_lock("/mx/rw").write_lock),  # holds both members, waits to write
        (two.rw_lock("/mx/rw").read_lock, two.lock("/mx/m2")),  # reads, waits for a member
    ]
    async with deadlocked(zk, parties, [("/mx/rw", 2), ("/mx/m2", 2)]):
        diagnosis = await zk.diagnose("/mx")
    finding = only_deadlock(diagnosis)
    assert sorted(chain(finding)) == sorted(
        [(one.session_id, "/mx/rw"), (two.session_id, "/mx/m2")]
    )
    kinds = {queue.path: queue.kind for queue in diagnosis.queues}
    assert kinds == {"/mx/m1": "lock", "/mx/m2": "lock", "/mx/rw": "rwlock"}


async def test_two_tasks_of_one_process_in_a_cycle_are_a_deadlock(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    # One session; the tasks' names (in our nodes' identity) tell them apart.
    parties = [
        (zk.lock("/dt/a"), zk.lock("/dt/b", identifier="2")),
        (zk.lock("/dt/b"), zk.lock("/dt/a", identifier="2")),
    ]
    async with deadlocked(zk, parties, [("/dt/a", 2), ("/dt/b", 2)]):
        diagnosis = await zk.diagnose("/dt")
    finding = only_deadlock(diagnosis)
    assert finding.sessions == (zk.session_id,)
    assert sorted((w.party.task, w.path) for w in finding.cycle) == [
        ("party-0", "/dt/b"),
        ("party-1", "/dt/a"),
    ]
    assert finding.message.startswith(f"2 tasks of session 0x{zk.session_id:x}")


async def test_a_semaphore_whose_holders_wait_for_its_waiter_is_a_deadlock(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    one, two, three = [await open_client() for _ in range(3)]
    parties = [
        (one.semaphore("/ds/s", 2), one.lock("/ds/l")),  # both leases are taken ...
        (two.semaphore("/ds/s", 2), two.lock("/ds/l")),
        (three.lock("/ds/l"), three.semaphore("/ds/s", 2)),  # ... by those who wait for it
    ]
    async with deadlocked(zk, parties, [("/ds/s", 3), ("/ds/l", 3)]):
        diagnosis = await zk.diagnose("/ds")
    finding = only_deadlock(diagnosis)
    assert sorted(chain(finding)) == sorted(
        [(one.session_id, "/ds/l"), (three.session_id, "/ds/s")]
    )
    assert "1 more stuck with them" in finding.message  # the other lease holder
    semaphore = next(q for q in diagnosis.queues if q.path == "/ds/s")
    assert (semaphore.kind, len(semaphore.holders), len(semaphore.waiters)) == ("semaphore", 2, 1)


async def test_no_deadlock_while_a_lease_holder_outside_the_cycle_can_let_go(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    # The cycle one → /dn/l → three → /dn/s → one is there, but two holds the other lease
    # and waits for nothing: once it lets go, three gets a lease, and everyone proceeds.
    one, two, three = [await open_client() for _ in range(3)]
    async with two.semaphore("/dn/s", 2):
        parties = [
            (one.semaphore("/dn/s", 2), one.lock("/dn/l")),
            (three.lock("/dn/l"), three.semaphore("/dn/s", 2)),
        ]
        async with deadlocked(zk, parties, [("/dn/s", 3), ("/dn/l", 2)]):
            diagnosis = await zk.diagnose("/dn")
    assert diagnosis.of_kind(FindingKind.DEADLOCK) == ()
    assert diagnosis.healthy


async def test_a_waiting_queue_is_not_a_deadlock(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    other = await open_client()
    with anyio.fail_after(HANG):
        async with zk.lock("/q/a", identifier="holder"), anyio.create_task_group() as tg:

            async def wait() -> None:
                async with other.lock("/q/a", identifier="waiter"):
                    pass

            tg.start_soon(wait)
            await wait_for_queue(zk, "/q/a", 2)
            diagnosis = await zk.diagnose("/q")
            tg.cancel_scope.cancel()
    assert diagnosis.findings == ()
    assert diagnosis.healthy
    (queue,) = diagnosis.queues
    assert [c.identifier for c in queue.holders] == ["holder"]
    assert [c.identifier for c in queue.waiters] == ["waiter"]
    assert queue.holders[0].session_id == zk.session_id
    assert queue.holders[0].is_holder
    assert not queue.waiters[0].is_holder
    assert diagnosis.longest_wait >= 0.0


def curator_name() -> str:
    return f"_c_{uuid.uuid4()}-lock-"


async def test_curators_nodes_in_a_cycle_are_a_deadlock(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    # Curator's InterProcessMutex nodes, as Curator names them (its data: the host's IP),
    # queued by two sessions in opposite orders.
    one, two = await open_client(), await open_client()
    for path in ("/dc/a", "/dc/b"):
        await zk.ensure_path(path)
    for client, path in ((one, "/dc/a"), (two, "/dc/b"), (two, "/dc/a"), (one, "/dc/b")):
        await client.create(
            f"{path}/{curator_name()}", b"10.0.0.7", ephemeral=True, sequential=True
        )
    diagnosis = await zk.diagnose("/dc")
    finding = only_deadlock(diagnosis)
    assert sorted(chain(finding)) == sorted([(one.session_id, "/dc/b"), (two.session_id, "/dc/a")])
    assert {wait.party.library for wait in finding.cycle} == {"curator"}
    assert {wait.party.task for wait in finding.cycle} == {None}
    assert "threads of a Curator or kazoo session" in finding.action


async def test_a_session_waiting_behind_its_own_node_is_not_a_deadlock(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    # Two threads of one Curator session queue on one path: they cannot be told apart, so
    # the session is not said to wait for itself. With another session holding elsewhere
    # and waiting here, nothing is circular either.
    one, two = await open_client(), await open_client()
    for path in ("/do/a", "/do/b"):
        await zk.ensure_path(path)
    for client, path in ((one, "/do/a"), (one, "/do/a"), (two, "/do/b"), (two, "/do/a")):
        await client.create(
            f"{path}/{curator_name()}", b"10.0.0.7", ephemeral=True, sequential=True
        )
    diagnosis = await zk.diagnose("/do")
    assert diagnosis.of_kind(FindingKind.DEADLOCK) == ()
    queue = next(q for q in diagnosis.queues if q.path == "/do/a")
    assert [c.session_id for c in queue.holders] == [one.session_id]
    assert [c.session_id for c in queue.waiters] == [one.session_id, two.session_id]
