"""Misuse is loud (issue 8): a forgotten await warns, another event loop or thread is refused
before any traffic, a holder task that ends without releasing is released and logged, and one
client has one lock object per path (reentrancy across call sites, local queueing, no
self-deadlock)."""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import anyio
import pytest

import aiozklock
from tests.conftest import MYPY_CACHE, wait_for_children, wait_for_queue

pytestmark = [pytest.mark.anyio]

P = "/locks/misuse"

RECIPES: dict[str, Callable[[aiozklock.ZooKeeperClient], Any]] = {
    "lock": lambda zk: zk.lock(P),
    "nonfair": lambda zk: zk.lock(P, fair=False),
    "multilock": lambda zk: zk.multi_lock([P + "/a", P + "/b"]),
    "election": lambda zk: zk.election(P),
}


async def nothing_under(zk: aiozklock.ZooKeeperClient, path: str) -> bool:
    """No ephemeral node (a contender's) anywhere under ``path``."""
    for child in await zk.get_children(path, missing_ok=True):
        stat = await zk.exists(f"{path}/{child}")
        if stat is not None and (
            stat.ephemeral_owner or not await nothing_under(zk, f"{path}/{child}")
        ):
            return False
    return True


# ---------------------------------------------------------------- a forgotten await


@pytest.mark.parametrize("recipe", sorted(RECIPES))
async def test_an_acquire_never_awaited_warns_with_path_and_place(
    zk: aiozklock.ZooKeeperClient, recipe: str
) -> None:
    lock = RECIPES[recipe](zk)
    with pytest.warns(RuntimeWarning, match=r"was never awaited") as caught:
        lock.acquire(timeout=2)  # the mistake: no await; freed at once, so it warns here
    message = str(caught[0].message)
    assert lock._label in message
    assert f"{__file__}:" in message  # where acquire() was called
    assert await nothing_under(zk, P)


async def test_an_acquire_awaited_entered_or_started_does_not_warn(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    lock = zk.lock(P)
    with anyio.fail_after(10), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await lock.acquire(timeout=2)
        await lock.release()
        async with lock.acquire(timeout=2):
            pass
        async with anyio.create_task_group() as tg:
            tg.start_soon(lock.acquire)  # a task made of the acquisition itself
        lock.acquire().close()  # closed on purpose, as a coroutine may be
        gc.collect()
    assert [w for w in caught if "never awaited" in str(w.message)] == []


# ---------------------------------------------------------------- another thread or loop


async def test_another_thread_is_refused_before_any_traffic(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    lock = zk.lock(P)
    owned_elsewhere = lock.try_acquire()  # a coroutine made here, run in another loop

    def worker() -> list[str]:
        errors = []
        for attempt in (
            lambda: asyncio.run(lock.acquire(timeout=1)),  # acquire() itself refuses
            lambda: asyncio.run(owned_elsewhere),
            lambda: asyncio.run(zk.get_children("/")),
            lambda: zk.lock(P + "/other"),
        ):
            with pytest.raises(aiozklock.UsageError) as caught:
                attempt()
            errors.append(str(caught.value))
        return errors

    with anyio.fail_after(10):
        errors = await anyio.to_thread.run_sync(worker)
    assert all("belongs to the event loop of thread" in e for e in errors)
    assert all("anyio.from_thread.run" in e for e in errors)
    assert not lock.statistics().locked
    assert lock.statistics().node is None
    assert await nothing_under(zk, P)
    assert await lock.try_acquire()  # the client still works in its own loop
    await lock.release()


# ---------------------------------------------------------------- a holder task that ends


async def test_a_holder_task_that_ended_is_released_on_next_use(
    zk: aiozklock.ZooKeeperClient, caplog: pytest.LogCaptureFixture
) -> None:
    lock = zk.lock(P)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lock.acquire, name="forgetful")
        assert lock.statistics().locked  # held by a task that is gone
        async with lock:  # the next use finds the orphan and releases it first
            assert lock.statistics().acquisitions == 2
            assert len(await zk.get_children(P)) == 1
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert P in errors[0].getMessage()
    assert "'forgetful'" in errors[0].getMessage()
    assert await nothing_under(zk, P)


async def test_a_holder_task_that_ended_is_released_without_any_use(
    zk: aiozklock.ZooKeeperClient, caplog: pytest.LogCaptureFixture
) -> None:
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(zk.lock(P).acquire)  # no reference is kept either
        assert zk.lock(P).statistics().locked
        await wait_for_children(zk, P, lambda children: children == [])  # the sweep
    assert not zk.lock(P).statistics().locked
    assert any(r.levelno == logging.ERROR and P in r.getMessage() for r in caplog.records)


async def test_acquire_and_release_from_sync_code_in_two_tasks(
    zk: aiozklock.ZooKeeperClient, caplog: pytest.LogCaptureFixture, anyio_backend: str
) -> None:
    lock = zk.lock(P)

    def sync_code() -> str:
        anyio.from_thread.run(lock.acquire)
        try:
            anyio.from_thread.run(lock.release)
        except aiozklock.NotLockOwner as exc:
            return str(exc)
        return "released"

    with anyio.fail_after(10):
        outcome = await anyio.to_thread.run_sync(sync_code)
    if anyio_backend == "trio":
        # trio runs both calls in the task that started the thread: one owner, no misuse.
        assert outcome == "released"
    else:  # asyncio: each call is a new task, which ends holding
        assert "ended without releasing it: released now" in outcome
        assert any(r.levelno == logging.ERROR for r in caplog.records)
    assert not lock.statistics().locked
    assert await nothing_under(zk, P)


async def test_sync_code_holds_a_lock_through_a_portal(zk: aiozklock.ZooKeeperClient) -> None:
    """The documented way: the portal runs enter and exit in one task of the owning loop."""
    lock = zk.lock(P)

    def sync_code(portal: anyio.from_thread.BlockingPortal) -> tuple[int, int]:
        with portal.wrap_async_context_manager(lock) as held:
            token = held.fencing_token
            nodes = len(portal.call(zk.get_children, P))
        return token, nodes

    with anyio.fail_after(10):
        async with anyio.from_thread.BlockingPortal() as portal:
            token, nodes = await anyio.to_thread.run_sync(sync_code, portal)
    assert token > 0
    assert nodes == 1
    assert lock.statistics().acquisitions == 1
    assert not lock.statistics().locked
    assert await nothing_under(zk, P)


# ---------------------------------------------------------------- one object per path


async def test_the_same_arguments_give_the_same_object(zk: aiozklock.ZooKeeperClient) -> None:
    assert zk.lock(P) is zk.lock(P)
    assert zk.lock(P, identifier="a") is zk.lock(P, identifier="a")
    assert zk.lock(P, identifier="a") is not zk.lock(P)
    assert zk.lock(P, fair=False) is zk.lock(P, fair=False)
    assert zk.lock(P, fair=False) is not zk.lock(P)
    assert zk.multi_lock([P, "/b"]) is zk.multi_lock([P, "/b"])
    assert zk.election(P) is zk.election(P)
    lock = zk.lock(P + "/gone")
    ref = weakref.ref(lock)
    del lock
    gc.collect()
    assert ref() is None  # unreferenced and not held: not kept (per-request paths)


async def test_a_held_lock_is_kept_without_a_reference(zk: aiozklock.ZooKeeperClient) -> None:
    with anyio.fail_after(10):
        await zk.lock(P).acquire()
        gc.collect()
        assert zk.lock(P).statistics().locked
        await zk.lock(P).release()
    assert await nothing_under(zk, P)


async def test_reentrant_across_call_sites(zk: aiozklock.ZooKeeperClient) -> None:
    async def helper() -> int:
        async with zk.lock(P) as inner:
            depth: int = inner.statistics().depth
            return depth

    with anyio.fail_after(10):
        async with zk.lock(P):
            assert await helper() == 2
            assert len(await zk.get_children(P)) == 1
    assert await nothing_under(zk, P)


@pytest.mark.parametrize(
    "other",
    [
        lambda zk: zk.lock(P, identifier="someone else"),
        lambda zk: zk.lock(P, fair=False),
        lambda zk: zk.multi_lock([P, "/locks/misuse-b"]),
    ],
    ids=["identifier", "nonfair", "multilock"],
)
async def test_a_second_object_on_a_held_path_raises_instead_of_deadlocking(
    zk: aiozklock.ZooKeeperClient, other: Callable[[aiozklock.ZooKeeperClient], Any]
) -> None:
    with anyio.fail_after(10):
        async with zk.lock(P):
            before = await zk.get_children(P)
            with pytest.raises(aiozklock.UsageError, match="would wait for itself forever"):
                await other(zk).acquire()
            assert await zk.get_children(P) == before  # nothing was sent
            if not isinstance(other(zk), aiozklock.NonFairLock):  # a different node: no queue
                assert not await other(zk).try_acquire()  # bounded: just not acquired
                with pytest.raises(aiozklock.LockTimeout):
                    await other(zk).acquire(timeout=0.1)
    assert await nothing_under(zk, P)


async def test_concurrent_requests_share_one_node(zk: aiozklock.ZooKeeperClient) -> None:
    seen: list[int] = []
    lock = zk.lock(P)  # kept, to read its statistics at the end

    async def request() -> None:
        async with zk.lock(P) as mine:  # a new call per request, as a web handler does
            assert mine is lock
            seen.append(len(await zk.get_children(P)))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(request)
    assert seen == [1] * 20
    assert lock.statistics().acquisitions == 20


async def test_local_waiters_do_not_starve_another_process(
    zk: aiozklock.ZooKeeperClient, open_client: Any
) -> None:
    other = await open_client()
    lock = zk.lock(P)
    order: list[str] = []
    release_first = anyio.Event()

    async def local(name: str) -> None:
        async with lock:
            order.append(name)
            if name == "a0":
                await release_first.wait()

    async def remote() -> None:
        async with other.lock(P):
            order.append("b")

    await zk.ensure_path(P)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(local, "a0")
            await wait_for_queue(zk, P, 1)
            for i in range(1, 5):
                tg.start_soon(local, f"a{i}")
            await anyio.wait_all_tasks_blocked()
            assert lock.statistics().tasks_waiting == 4
            tg.start_soon(remote)
            await wait_for_queue(zk, P, 2)  # b's node is queued behind a0's
            release_first.set()
    assert order[:2] == ["a0", "b"]  # b was queued first on the server: it goes next
    assert sorted(order[2:]) == ["a1", "a2", "a3", "a4"]  # trio starts tasks in any order


# ---------------------------------------------------------------- small ones


class Mistake(Exception):
    pass


@pytest.mark.parametrize("recipe", sorted(RECIPES))
async def test_a_body_exception_leaves_every_recipe_unchanged(
    zk: aiozklock.ZooKeeperClient, recipe: str
) -> None:
    raised = Mistake("from the body")
    with anyio.fail_after(10), pytest.raises(Mistake) as caught:
        async with RECIPES[recipe](zk):
            raise raised
    assert caught.value is raised
    with anyio.fail_after(10), pytest.raises(Mistake) as caught:
        async with RECIPES[recipe](zk).acquire(timeout=5):
            raise raised
    assert caught.value is raised
    assert await nothing_under(zk, P)


def test_recipe_classes_have_no_public_constructor() -> None:
    for cls in (aiozklock.Lock, aiozklock.NonFairLock, aiozklock.MultiLock, aiozklock.Election):
        with pytest.raises(TypeError, match=r"zk\.lock\(\)"):
            cls("/locks/x")
        assert str(inspect.signature(cls)) == "()"  # help() shows no private signature


def test_mypy_sees_a_return_inside_async_with(tmp_path: Any) -> None:
    """``__aexit__`` returns None, so mypy knows the body's exceptions are not swallowed
    and does not report a false 'Missing return statement'."""
    api = pytest.importorskip("mypy.api")
    program = tmp_path / "program.py"
    program.write_text(
        "import aiozklock\n\n\n"
        "async def read(zk: aiozklock.ZooKeeperClient) -> int:\n"
        "    async with zk.lock('/a').acquire(timeout=1) as lock:\n"
        "        return lock.fencing_token\n\n\n"
        "async def read2(zk: aiozklock.ZooKeeperClient) -> int:\n"
        "    async with zk.lock('/a') as lock:\n"
        "        return lock.fencing_token\n"
    )
    out, err, status = api.run(["--strict", "--cache-dir", MYPY_CACHE, str(program)])
    assert status == 0, out + err


# ---------------------------------------------------------------- kazoo's habits


async def test_kazoo_s_non_blocking_acquire_points_to_try_acquire(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    """``acquire(blocking=False)`` and ``acquire(False)`` (kazoo's first argument is
    ``blocking``) are refused before any traffic, naming ``try_acquire()``; kazoo's default
    spelling, ``blocking=True``, is accepted."""
    lock = zk.lock(P)
    for attempt in (
        lambda: lock.acquire(blocking=False),  # type: ignore[arg-type]
        lambda: lock.acquire(False),
    ):
        with pytest.raises(aiozklock.InvalidArgument) as caught:
            attempt()
        assert "try_acquire()" in str(caught.value)
        assert "blocking" in str(caught.value)
    assert await nothing_under(zk, P)
    with anyio.fail_after(10):
        await lock.acquire(timeout=2, blocking=True)
    assert lock.is_held
    await lock.release()
