"""The doctor with other libraries' live peers on real ZooKeeper: unsafe mixes flagged (a
Curator and a kazoo lock on one path, a default-layout semaphore beside kazoo's), and a
deadlock between our lock and kazoo's.

kazoo runs in threads of this process (its API blocks); Curator's holder,
``tests/interop/CuratorHolder.java``, is compiled at test time as the interoperability
tests compile their peer (without a JDK and Curator's jars its test skips and says why).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import pytest
from kazoo.client import KazooClient  # type: ignore[import-untyped]
from kazoo.exceptions import CancelledError as KazooCancelled  # type: ignore[import-untyped]

import aiozklock
from aiozklock import FindingKind, Severity
from tests.conftest import ClientFactory, wait_for_queue
from tests.interop.peers import HERE, Lines, compiled_java, java_cache, running
from tests.test_cli import _cli

pytestmark = [pytest.mark.anyio]

HANG = 60.0  # a hang bound, not a duration


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the peers are processes and threads: the backend changes nothing


@pytest.fixture(scope="session")
def curator_holder(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ...]:
    command = compiled_java(
        java_cache(tmp_path_factory), HERE / "CuratorHolder.java", "CuratorHolder"
    )
    if isinstance(command, str):
        pytest.skip(command)
    return command


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


@asynccontextmanager
async def curator_holding(command: tuple[str, ...], hosts: str, *args: str) -> AsyncIterator[int]:
    """Curator holding a lock (``mutex PATH`` or ``semaphore PATH N``); yields its session."""
    recipe, path, *rest = args
    async with running([*command, hosts, path, recipe, *rest]) as process:
        assert process.stdout is not None
        assert process.stdin is not None
        with anyio.fail_after(HANG):
            line = await Lines(process.stdout).next()
        assert line.startswith("held 0x"), line
        yield int(line.removeprefix("held "), 16)
        await process.stdin.send(b"release\n")
        with anyio.fail_after(HANG):
            assert await process.wait() == 0


async def test_a_curator_lock_and_a_kazoo_lock_on_one_path_are_an_unsafe_mix(
    curator_holder: tuple[str, ...], zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    path = "/mix/orders"
    await zk.ensure_path(path)  # the chroot too: Curator creates below it only
    async with curator_holding(curator_holder, hosts, "mutex", path) as curator_session:
        with kazoo(hosts) as client:
            kazoo_session = client.client_id[0]
            lock = client.Lock(path, "kazoo")
            # kazoo does not see Curator's node: it holds at once, beside Curator.
            assert await in_thread(lock.acquire, True, HANG)
            diagnosis = await zk.diagnose("/mix")
            text = (await _cli("doctor", "--hosts", hosts, "/mix")).stdout.decode()
            await in_thread(lock.release)
    (finding,) = diagnosis.of_kind(FindingKind.UNSAFE_MIX)
    assert finding.severity is Severity.CRITICAL
    assert finding.paths == (path,)
    assert set(finding.sessions) == {curator_session, kazoo_session}
    assert "Curator's and kazoo's contenders share /mix/orders" in finding.message
    assert "never share a path between Curator and kazoo" in finding.action
    assert not diagnosis.healthy
    print(f"\n$ aiozklock doctor /mix   # Curator + kazoo on {path}\n{text}")
    assert "CRITICAL unsafe mix" in text


async def test_a_default_semaphore_beside_kazoos_is_an_unsafe_mix(
    zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    path = "/mix/pool"
    async with zk.semaphore(path, 2):
        with kazoo(hosts) as client:
            semaphore = client.Semaphore(path, "kazoo", max_leases=2)
            # kazoo counts our node as one of 2 leases and takes the other: it holds.
            assert await in_thread(semaphore.acquire, True, HANG)
            diagnosis = await zk.diagnose("/mix")
            await in_thread(semaphore.release)
    (finding,) = diagnosis.of_kind(FindingKind.UNSAFE_MIX)
    assert finding.severity is Severity.CRITICAL
    assert finding.paths == (path,)
    assert "default-layout semaphore and kazoo's Semaphore" in finding.message
    assert 'compat="kazoo" to zk.semaphore()' in finding.action
    assert zk.session_id in finding.sessions


async def test_kazoo_holding_beside_our_default_lock_is_a_critical_double_hold(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory, hosts: str
) -> None:
    path = "/mix/k"
    first = (await open_client()).lock(path)
    ours = zk.lock(path)
    # Ours is granted by a hand-off (no listing, so no watch: a holder granted on a listing
    # would be told of kazoo and let go, see docs/mixed-fleets.md).
    holding = anyio.Event()

    async def hold_first() -> None:
        async with first:
            holding.set()
            await wait_for_queue(zk, path, 2)  # ours queued behind

    async with anyio.create_task_group() as tg:
        tg.start_soon(hold_first)
        await holding.wait()
        await ours.acquire()
    try:
        with kazoo(hosts) as client:
            lock = client.Lock(path, "kazoo")
            assert await in_thread(lock.acquire, True, HANG)  # it ignores our "-lock-" node
            diagnosis = await zk.diagnose("/mix")
            await in_thread(lock.release)
    finally:
        await ours.release()
    (finding,) = diagnosis.of_kind(FindingKind.UNSAFE_MIX)
    # Ours holds, and kazoo's node is the first of those kazoo sees: a live double hold.
    assert finding.severity is Severity.CRITICAL
    assert "kazoo's Lock does not see aiozklock's 'lock-' nodes on /mix/k" in finding.message
    assert "both hold now" in finding.message
    assert 'pass compat="kazoo"' in finding.action
    assert zk.session_id in finding.sessions


async def test_a_fair_and_a_non_fair_lock_on_one_path_are_an_unsafe_mix(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    other = await open_client()
    async with zk.lock("/mix/f", fair=False), other.lock("/mix/f"):  # both hold
        diagnosis = await zk.diagnose("/mix")
    (finding,) = diagnosis.of_kind(FindingKind.UNSAFE_MIX)
    assert finding.severity is Severity.CRITICAL
    assert "fair=False everywhere or nowhere" in finding.action
    assert set(finding.sessions) == {zk.session_id, other.session_id}


async def test_a_deadlock_between_our_lock_and_kazoos(
    zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    # kazoo holds /kz/a and waits for /kz/b; we hold /kz/b and wait for /kz/a (kazoo's
    # names, so that each sees the other).
    kazoo_took, we_took = threading.Event(), threading.Event()
    await zk.ensure_path("/kz")  # the chroot too: kazoo wants it there
    with kazoo(hosts) as client, anyio.fail_after(HANG):
        kazoo_session = client.client_id[0]
        first, second = client.Lock("/kz/a", "kazoo"), client.Lock("/kz/b", "kazoo")

        def kazoo_side() -> None:
            first.acquire()
            kazoo_took.set()
            we_took.wait(HANG)
            try:
                second.acquire()
            except KazooCancelled:  # the test is done
                pass
            finally:
                first.release()

        async def our_side() -> None:
            async with zk.lock("/kz/b", compat="kazoo"):
                we_took.set()
                await in_thread(kazoo_took.wait, HANG)
                async with zk.lock("/kz/a", compat="kazoo"):
                    raise AssertionError("no deadlock")

        async with anyio.create_task_group() as tg:
            tg.start_soon(in_thread, kazoo_side)
            tg.start_soon(our_side)
            await in_thread(kazoo_took.wait, HANG)
            await in_thread(we_took.wait, HANG)
            await wait_for_queue(zk, "/kz/a", 2)
            await wait_for_queue(zk, "/kz/b", 2)
            diagnosis = await zk.diagnose("/kz")
            second.cancel()
            tg.cancel_scope.cancel()
    (finding,) = diagnosis.of_kind(FindingKind.DEADLOCK)
    waits = sorted((w.party.session_id, w.path, w.party.library) for w in finding.cycle)
    assert waits == sorted(
        [(zk.session_id, "/kz/a", "aiozklock"), (kazoo_session, "/kz/b", "kazoo")]
    )
    assert diagnosis.of_kind(FindingKind.UNSAFE_MIX) == ()  # kazoo's names on both sides
