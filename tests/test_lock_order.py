"""Lock-order checking in-process (``connect(check_lock_order=...)``), on real ZooKeeper.

Each inversion is run SEQUENTIALLY (the first task ends before the second starts), so
nothing deadlocks: the checker reports what would deadlock if both ran at once. Line
numbers are taken next to the ``async with`` they name (``_here()`` returns the line after
its own), so the tests check the exact call sites the messages name.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import warnings
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest

import aiozklock
from aiozklock import LockOrderViolation, LockOrderWarning
from aiozklock._recipes._core._order import MAX_ORDERS
from aiozklock.testing import FaultProxy, Opcode
from tests.conftest import ClientFactory, gone

pytestmark = [pytest.mark.anyio]

A, B, C = "/locks/a", "/locks/b", "/locks/c"
SHIPPING = "/locks/shipping"
HERE = __file__


def _here() -> int:
    """The line after the caller's: where its next ``async with`` is."""
    return sys._getframe(1).f_lineno + 1


async def in_task(job: Callable[[], Awaitable[Any]]) -> None:
    """Run ``job`` in a task of its own, to its end (the tasks of a test run in turn);
    what it raises is raised here."""
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(job)
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


@contextmanager
def no_warning() -> Iterator[None]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        yield
    assert [str(w.message) for w in seen if issubclass(w.category, LockOrderWarning)] == []


async def nest(zk: aiozklock.ZooKeeperClient, outer: str, inner: str, lines: list[int]) -> None:
    """Take ``outer``, then ``inner`` under it; ``lines`` gets the inner one's line."""
    async with zk.lock(outer):
        lines.append(_here())
        async with zk.lock(inner):
            pass


# ---------------------------------------------------------------- the inversion


async def test_an_inversion_warns_once_naming_both_call_sites_and_paths(
    open_client: ClientFactory,
) -> None:
    zk = await open_client(check_lock_order="warn")
    assert zk.check_lock_order == "warn"
    lines: list[int] = []

    async def a_then_b() -> None:
        async with zk.lock(A):
            lines.append(_here())
            async with zk.lock(B):
                pass

    async def b_then_a() -> None:
        async with zk.lock(B):
            lines.append(_here())
            async with zk.lock(A):
                pass

    with no_warning():
        await in_task(a_then_b)
        await in_task(a_then_b)  # the same order again: nothing to say
    with pytest.warns(LockOrderWarning) as record:
        await in_task(b_then_a)
    assert len(record) == 1
    message = str(record[0].message)
    first, second = lines[0], lines[2]
    assert f"  now:    {B}, then {A}, at {HERE}:{second}" in message
    assert f"  before: {A}, then {B}, at {HERE}:{first}" in message
    assert "lock order inversion" in message
    assert (record[0].filename, record[0].lineno) == (HERE, second)  # points at the user
    with no_warning():  # once per pair, whichever order comes next
        await in_task(b_then_a)
        await in_task(a_then_b)


async def test_raise_mode_raises_before_any_request_and_keeps_the_held_lock(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    zk = await open_client(proxy, check_lock_order="raise")
    other = await open_client()
    lines: list[int] = []
    await in_task(lambda: nest(zk, A, B, lines))

    async def b_then_a() -> None:
        async with zk.lock(B) as held:
            proxy.reset_counters()
            lines.append(_here() + 1)  # the acquire, in the body of the next line
            with pytest.raises(LockOrderViolation) as raised:
                await zk.lock(A).acquire()
            sent = [r.opcode for r in proxy.requests if r.opcode != Opcode.PING]
            assert sent == []  # not one request of the refused acquisition
            assert await other.get_children(A) == []  # no node of ours there
            assert held.is_held
            assert len(await other.get_children(B)) == 1
            message = str(raised.value)
            assert f"{B}, then {A}, at {HERE}:{lines[1]}" in message
            assert f"{A}, then {B}, at {HERE}:{lines[0]}" in message

    await in_task(b_then_a)
    await gone(other, B)  # released as usual
    with pytest.raises(LockOrderViolation):  # nothing learned from the refusal: raises again
        await in_task(lambda: nest(zk, B, A, []))
    await in_task(lambda: nest(zk, A, B, []))  # the learned order still goes


async def test_a_warning_made_an_error_refuses_every_time(open_client: ClientFactory) -> None:
    """``-W error::aiozklock.LockOrderWarning``: the inversion fails each time it runs, as
    with ``"raise"`` (an order that raised is not learned, so it is not forgiven)."""
    zk = await open_client(check_lock_order="warn")
    await in_task(lambda: nest(zk, A, B, []))
    with warnings.catch_warnings():
        warnings.simplefilter("error", LockOrderWarning)
        for _ in range(2):
            with pytest.raises(LockOrderWarning, match="lock order inversion"):
                await in_task(lambda: nest(zk, B, A, []))


async def test_a_three_lock_cycle_is_an_inversion(open_client: ClientFactory) -> None:
    zk = await open_client(check_lock_order="warn")
    lines: list[int] = []
    await in_task(lambda: nest(zk, A, B, lines))
    await in_task(lambda: nest(zk, B, C, lines))
    with pytest.warns(LockOrderWarning) as record:
        await in_task(lambda: nest(zk, C, A, lines))
    message = str(record[0].message)
    assert f"now:    {C}, then {A}, at {HERE}:{lines[2]}" in message
    assert f"before: {A}, then {B}, at {HERE}:{lines[0]}" in message
    assert f"before: {B}, then {C}, at {HERE}:{lines[1]}" in message


async def test_a_bounded_wait_is_checked_too(open_client: ClientFactory) -> None:
    zk = await open_client(check_lock_order="raise")

    async def bounded(outer: str, inner: str) -> None:
        async with zk.lock(outer).acquire(timeout=5.0), zk.lock(inner).acquire(timeout=5.0):
            pass

    await in_task(lambda: bounded(A, B))
    with pytest.raises(LockOrderViolation):
        await in_task(lambda: bounded(B, A))


# ---------------------------------------------------------------- classes


async def test_per_entity_paths_are_one_class(open_client: ClientFactory) -> None:
    zk = await open_client(check_lock_order="warn")
    lines: list[int] = []
    await in_task(lambda: nest(zk, "/locks/orders/1", "/locks/accounts/7", lines))
    with pytest.warns(LockOrderWarning) as record:
        await in_task(lambda: nest(zk, "/locks/accounts/9", "/locks/orders/2", lines))
    message = str(record[0].message)
    assert "/locks/accounts/{} and /locks/orders/{} are taken in both orders" in message
    assert f"now:    /locks/accounts/9, then /locks/orders/2, at {HERE}:{lines[1]}" in message
    assert f"before: /locks/orders/1, then /locks/accounts/7, at {HERE}:{lines[0]}" in message


async def test_uuids_and_hex_digests_are_entities_too(open_client: ClientFactory) -> None:
    zk = await open_client(check_lock_order="warn")
    uuid1, uuid2 = "0b8e4c9e-2f51-4c1e-9a3e-6f1d2c3b4a59", "7d3c2b1a-0f9e-4d8c-b7a6-958473625140"
    digest1, digest2 = "9f86d081884c7d65", "2c26b46b68ffc68f"
    await in_task(lambda: nest(zk, f"/users/{uuid1}", f"/blobs/{digest1}", []))
    with pytest.warns(LockOrderWarning, match=r"/blobs/\{\} and /users/\{\}"):
        await in_task(lambda: nest(zk, f"/blobs/{digest2}", f"/users/{uuid2}", []))


async def test_templates_name_classes_the_heuristic_would_not(
    open_client: ClientFactory,
) -> None:
    plain = await open_client(check_lock_order="warn")
    await in_task(lambda: nest(plain, "/locks/orders/abc", A, []))
    with no_warning():  # by default, /locks/orders/abc and /locks/orders/xyz are two classes
        await in_task(lambda: nest(plain, A, "/locks/orders/xyz", []))

    zk = await open_client(check_lock_order="warn", lock_classes=["/locks/orders/{id}"])
    await in_task(lambda: nest(zk, "/locks/orders/abc", A, []))
    with pytest.warns(LockOrderWarning, match=r"/locks/a and /locks/orders/\{id\} are"):
        await in_task(lambda: nest(zk, A, "/locks/orders/xyz", []))


async def test_two_locks_of_one_class_warn_with_the_multi_lock_advice(
    open_client: ClientFactory,
) -> None:
    zk = await open_client(check_lock_order="warn")
    lines: list[int] = []
    with pytest.warns(LockOrderWarning) as record:
        await in_task(lambda: nest(zk, "/locks/orders/1", "/locks/orders/2", lines))
    message = str(record[0].message)
    assert "two locks of one class (/locks/orders/{}) held by one task" in message
    assert f"/locks/orders/1, then /locks/orders/2, at {HERE}:{lines[0]}" in message
    assert "zk.multi_lock(['/locks/orders/1', '/locks/orders/2'])" in message
    with no_warning():  # once per class
        await in_task(lambda: nest(zk, "/locks/orders/3", "/locks/orders/4", lines))

    strict = await open_client(check_lock_order="raise")
    with pytest.raises(LockOrderViolation, match="two locks of one class"):
        await in_task(lambda: nest(strict, "/locks/orders/1", "/locks/orders/2", lines))


async def test_a_multi_lock_takes_one_class_together_without_a_warning(
    open_client: ClientFactory,
) -> None:
    zk = await open_client(check_lock_order="raise")

    async def together() -> None:
        # Learns /locks/orders/{} -> /locks/shipping, and nothing about the members.
        async with zk.multi_lock(["/locks/orders/2", "/locks/orders/1"]), zk.lock(SHIPPING):
            pass

    await in_task(together)
    await in_task(together)
    with pytest.raises(LockOrderViolation, match=r"/locks/orders/\{\}"):
        await in_task(lambda: nest(zk, SHIPPING, "/locks/orders/3", []))


# ---------------------------------------------------------------- no false positives


async def test_reentrant_and_sequential_use_are_not_orders(open_client: ClientFactory) -> None:
    zk = await open_client(check_lock_order="raise")
    a, b = zk.lock(A), zk.lock(B)

    async def reentrant() -> None:
        async with a, b, a:  # A again under B: a reentry, not "B then A"
            pass

    async def sequential() -> None:
        async with b:
            pass
        async with a:
            pass

    async def tried() -> None:
        async with b:
            assert await a.try_acquire()  # cannot wait: teaches no order
            await a.release()

    await in_task(reentrant)
    await in_task(sequential)
    await in_task(tried)

    rw = zk.rw_lock(C)

    async def downgrade() -> None:
        async with rw.write_lock, rw.read_lock:  # one path: not two classes
            pass

    await in_task(downgrade)


async def test_the_same_order_in_many_tasks_at_once_is_fine(open_client: ClientFactory) -> None:
    zk = await open_client(check_lock_order="raise")
    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(nest, zk, A, B, [])


# ---------------------------------------------------------------- every recipe that holds

RECIPES: dict[str, Callable[[aiozklock.ZooKeeperClient, str], Any]] = {
    "lock": lambda zk, path: zk.lock(path),
    "nonfair": lambda zk, path: zk.lock(path, fair=False),
    "write": lambda zk, path: zk.rw_lock(path).write_lock,
    "read": lambda zk, path: zk.rw_lock(path).read_lock,
    "election": lambda zk, path: zk.election(path),
    "lease": lambda zk, path: zk.lease_lock(path, 10.0),
    "semaphore": lambda zk, path: zk.semaphore(path, 2),
    "kazoo semaphore": lambda zk, path: zk.semaphore(path, 2, compat="kazoo"),
    "multi-lock": lambda zk, path: zk.multi_lock([path, "/locks/other"]),
}


@pytest.mark.parametrize("recipe", RECIPES)
async def test_every_holding_recipe_takes_part(open_client: ClientFactory, recipe: str) -> None:
    zk = await open_client(check_lock_order="warn")
    path = "/recipes/r"
    held = RECIPES[recipe](zk, path)

    async def recipe_then_lock() -> None:
        async with held, zk.lock(A):
            pass

    async def lock_then_recipe() -> None:
        async with zk.lock(A), held:
            pass

    await in_task(recipe_then_lock)
    with pytest.warns(LockOrderWarning) as record:
        await in_task(lock_then_recipe)
    # The multi-lock's two members each make a pair with A: one warning each.
    assert any(f"before: {path}, then {A}" in str(w.message) for w in record)
    assert len(record) == (2 if recipe == "multi-lock" else 1)


async def test_a_reader_joining_a_shared_read_lock_is_checked(open_client: ClientFactory) -> None:
    zk = await open_client(check_lock_order="warn")
    read = zk.rw_lock(C).read_lock
    await in_task(lambda: _read_then_a(zk))  # learns C then A
    holding, leave = anyio.Event(), anyio.Event()

    async def keep_reading() -> None:
        async with read:
            holding.set()
            await leave.wait()

    async def a_then_joined_read() -> None:
        # The read lock joins the other task's holding: no request, still an order.
        async with zk.lock(A), read:
            assert read.statistics().readers == 2

    async with anyio.create_task_group() as tg:
        tg.start_soon(keep_reading)
        await holding.wait()
        try:
            with pytest.warns(LockOrderWarning, match=f"{A}, then {C}"):
                await in_task(a_then_joined_read)
        finally:
            leave.set()


async def _read_then_a(zk: aiozklock.ZooKeeperClient) -> None:
    async with zk.rw_lock(C).read_lock, zk.lock(A):
        pass


async def test_learning_stops_at_a_bound_and_says_so(open_client: ClientFactory) -> None:
    """Per-entity paths no class names (``k17``) would each be a class, forever: the
    checker learns at most ``MAX_ORDERS`` orders, and warns once when it stops. (The
    checker is called directly with real lock objects, not acquired: 10,000 acquisitions
    would only make the test slow.)"""
    zk = await open_client(check_lock_order="warn")
    order = zk._recipes.order
    assert order is not None
    outer = zk.lock(A)
    with no_warning():
        for n in range(MAX_ORDERS):
            order.check(zk.lock(f"/locks/k{n}"), [outer], "t")
    line = _here() + 1
    with pytest.warns(LockOrderWarning, match="learns no more.*lock_classes") as record:
        order.check(zk.lock("/locks/one-too-many"), [outer], "t")
    assert (record[0].filename, record[0].lineno) == (HERE, line)
    with no_warning():  # said once
        for n in range(10):
            order.check(zk.lock(f"/locks/more/k{n}"), [outer], "t")


# ---------------------------------------------------------------- switching it on and off


async def test_the_environment_variable_switches_it_on(
    open_client: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIOZKLOCK_CHECK_LOCK_ORDER", "raise")
    zk = await open_client()
    assert zk.check_lock_order == "raise"
    await in_task(lambda: nest(zk, A, B, []))
    with pytest.raises(LockOrderViolation):
        await in_task(lambda: nest(zk, B, A, []))
    off = await open_client(check_lock_order=False)  # the argument wins
    assert off.check_lock_order is None
    monkeypatch.setenv("AIOZKLOCK_CHECK_LOCK_ORDER", "loud")
    with pytest.raises(aiozklock.InvalidArgument, match="AIOZKLOCK_CHECK_LOCK_ORDER='loud'"):
        aiozklock.connect("localhost:1")


async def test_off_by_default(zk: aiozklock.ZooKeeperClient) -> None:
    assert zk.check_lock_order is None
    with no_warning():
        await in_task(lambda: nest(zk, A, B, []))
        await in_task(lambda: nest(zk, B, A, []))
        await in_task(lambda: nest(zk, "/locks/orders/1", "/locks/orders/2", []))


def _calls_into_the_checker(profile: cProfile.Profile) -> int:
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    return sum(
        calls
        for (filename, _, name), (_, calls, *_rest) in stats.items()
        if filename.endswith("/_core/_order.py") or name == "_check_order"
    )


async def test_off_the_hot_path_calls_nothing_of_the_checker(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """Off, an uncontended cycle (nested, where the check would run) makes no call into
    the checker; on, the same cycle does (so the count means something)."""
    checked = await open_client(check_lock_order="warn")
    counts = []
    for client in (zk, checked):
        outer, inner = client.lock(A), client.lock(B)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(20):
            async with outer, inner:
                pass
        profile.disable()
        counts.append(_calls_into_the_checker(profile))
    assert counts[0] == 0
    assert counts[1] > 0


def test_bad_options_are_refused_before_any_traffic() -> None:
    with pytest.raises(aiozklock.InvalidArgument, match="check_lock_order must be"):
        aiozklock.connect("localhost:1", check_lock_order="loud")  # type: ignore[arg-type]
    with pytest.raises(aiozklock.InvalidArgument, match="list of path templates"):
        aiozklock.connect("localhost:1", lock_classes="/locks/orders/{id}")
    with pytest.raises(aiozklock.InvalidArgument, match="whole component"):
        aiozklock.connect("localhost:1", lock_classes=["/locks/order-{id}"])
    with pytest.raises(aiozklock.InvalidArgument, match="absolute"):
        aiozklock.connect("localhost:1", lock_classes=["locks/{id}"])
    assert issubclass(LockOrderViolation, aiozklock.UsageError)
    assert issubclass(LockOrderWarning, UserWarning)
