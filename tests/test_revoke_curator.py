"""Revocation with Apache Curator, both ways (issue 33, item 1): our ``zk.revoke`` ends a
revocable Curator holder (``InterProcessMutex.makeRevocable``), and Curator's
``Revoker.attemptRevoke`` ends our revocable holder. On a read/write path (issue 37, item 7)
``zk.revoke`` asks every holding reader (Curator's revocable readers) and waits for all of
them, or names the readers that still hold (ours: a read lock is not revocable).

Curator runs in ``tests/interop/CuratorHolder.java``, compiled at test time as the other
interoperability tests compile their peers (without a JDK and Curator's jars these tests
skip and say why).
"""

from __future__ import annotations

import anyio
import pytest

import aiozklock
from aiozklock import LockRevoked, NotRevoked
from tests.conftest import ClientFactory, node_gone
from tests.interop.peers import HERE, Lines, compiled_java, java_cache, running
from tests.test_revoke import Holder

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PATH = "/interop/revoke"
RW_PATH = "/interop/revoke-rw"
HANG = 60.0  # a hang bound, not a duration (a JVM starts slowly on a loaded machine)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Curator is a process: the backend changes nothing


@pytest.fixture(scope="session")
def curator_holder(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ...]:
    command = compiled_java(
        java_cache(tmp_path_factory), HERE / "CuratorHolder.java", "CuratorHolder"
    )
    if isinstance(command, str):
        pytest.skip(command)
    return command


async def test_our_revoke_ends_a_revocable_curator_holder(
    curator_holder: tuple[str, ...], zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    await zk.ensure_path(PATH)  # the chroot too: Curator creates below it only
    async with running([*curator_holder, hosts, PATH, "revocable"]) as process:
        assert process.stdout is not None
        lines = Lines(process.stdout)
        with anyio.fail_after(HANG):
            assert (await lines.next()).startswith("held 0x")
            [curator] = await zk.lock(PATH).contenders()
            assert curator.revocable is None  # empty data: perhaps (it is)
            asked = await zk.revoke(PATH, wait=HANG)  # returns once its node is gone
            assert asked == (f"{PATH}/{curator.node}",)
            assert await lines.next() == "revoke requested"
            assert await lines.next() == "released"
            assert await process.wait() == 0
            async with zk.lock(PATH) as lock:
                assert lock.is_held


async def test_curators_revoker_ends_our_revocable_holder(
    curator_holder: tuple[str, ...], open_client: ClientFactory, hosts: str
) -> None:
    zk = await open_client()
    holder = Holder(zk.lock(PATH, revocable=True))
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(holder.hold)
            await holder.held.wait()
            async with running([*curator_holder, hosts, PATH, "revoke"]) as process:
                assert process.stdout is not None
                assert await Lines(process.stdout).next() == f"revoked {holder.node}"
                assert await process.wait() == 0
        assert holder.cancelled
        assert isinstance(holder.raised, LockRevoked)
        await node_gone(zk, holder.node)


async def _held(lines: Lines) -> str:
    """The session (``0x...``) of a CuratorHolder that said it holds."""
    line = await lines.next()
    assert line.startswith("held 0x"), line
    return line.removeprefix("held ")


async def _readers(zk: aiozklock.ZooKeeperClient) -> dict[str, str]:
    """The nodes at RW_PATH, as paths, by their session (``0x...``); every one a holder."""
    queue = await zk.rw_lock(RW_PATH).read_lock.contenders()
    assert all(c.is_holder for c in queue), queue  # readers only: they all hold
    return {f"0x{c.session_id:x}": f"{RW_PATH}/{c.node}" for c in queue}


async def test_our_revoke_asks_every_curator_reader_and_waits_for_all(
    curator_holder: tuple[str, ...], zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    await zk.ensure_path(RW_PATH)
    command = [*curator_holder, hosts, RW_PATH, "revocable-read"]
    async with running(command) as first, running(command) as second:
        assert first.stdout is not None
        assert second.stdout is not None
        said = Lines(first.stdout), Lines(second.stdout)
        with anyio.fail_after(HANG):
            sessions = [await _held(lines) for lines in said]
            nodes = await _readers(zk)
            assert sorted(nodes) == sorted(sessions)
            asked = await zk.revoke(RW_PATH, wait=HANG)  # returns once every node is gone
            left = await zk.get_children(RW_PATH)
            assert (sorted(asked), left) == (sorted(nodes.values()), [])
            for lines in said:
                assert await lines.next() == "revoke requested"
                assert await lines.next() == "released"
            assert await first.wait() == 0
            assert await second.wait() == 0


async def test_mixed_readers_revoke_names_the_reader_that_still_holds(
    curator_holder: tuple[str, ...],
    zk: aiozklock.ZooKeeperClient,
    open_client: ClientFactory,
    hosts: str,
) -> None:
    await zk.ensure_path(RW_PATH)
    ours = Holder(await _read_lock(open_client))
    with anyio.fail_after(HANG):
        async with (
            running([*curator_holder, hosts, RW_PATH, "revocable-read"]) as curator,
            anyio.create_task_group() as tg,
        ):
            assert curator.stdout is not None
            said = Lines(curator.stdout)
            session = await _held(said)  # Curator's reader first, then ours beside it
            tg.start_soon(ours.hold)
            await ours.held.wait()
            nodes = await _readers(zk)
            assert nodes.keys() == {session, f"0x{ours.lock._session.session_id:x}"}
            with pytest.raises(NotRevoked) as caught:
                await zk.revoke(RW_PATH, wait=HANG)
            assert await said.next() == "revoke requested"
            assert await said.next() == "released"
            assert await curator.wait() == 0
            assert ours.lock.statistics().locked  # not revocable: not written to, holds
            ours.done.set()
    refusal = caught.value
    assert refusal.reason == "not revocable"
    assert refusal.asked == (nodes[session],)  # Curator's reader: asked, and gone
    assert refusal.held == (ours.node,)  # ours: named as still holding
    assert set(refusal.nodes) == set(nodes.values())
    assert "1 of 2 holders" in str(refusal)
    assert ours.node in str(refusal)
    assert ours.raised is None


async def _read_lock(open_client: ClientFactory) -> aiozklock.ReadLock:
    client = await open_client()
    return client.rw_lock(RW_PATH).read_lock
