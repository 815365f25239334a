"""Revocation with Apache Curator, both ways (issue 33, item 1): our ``zk.revoke`` ends a
revocable Curator holder (``InterProcessMutex.makeRevocable``), and Curator's
``Revoker.attemptRevoke`` ends our revocable holder.

Curator runs in ``tests/interop/CuratorHolder.java``, compiled at test time as the other
interoperability tests compile their peers (without a JDK and Curator's jars these tests
skip and say why).
"""

from __future__ import annotations

import anyio
import pytest

import aiozklock
from aiozklock import LockRevoked
from tests.conftest import ClientFactory, node_gone
from tests.interop.peers import HERE, Lines, compiled_java, java_cache, running
from tests.test_revoke import Holder

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PATH = "/interop/revoke"
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
