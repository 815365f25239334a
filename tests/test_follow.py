"""A re-join that follows its hint (issue 22): a holder granted with two or more queued
behind it joins again by watching the newest of them, pipelined with its create, instead
of listing the queue; it lists once that node is gone. The hint is only a hint: a node
gone, a newcomer queued after it, a lost reply, a timeout or a cancellation while following
must leave the queue's order, mutual exclusion and no node behind.

Every scenario builds the same queue on ``PATH``: B holds, then C, A (through the proxy),
D and E queue; B and C release, so A is granted by a listing that shows D and E behind it
(its hint: E). Then A releases and re-acquires (``A2``) without a yield in between."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

import aiozklock
from aiozklock.testing import FaultProxy
from tests.conftest import ClientFactory, gone, wait_for_children, wait_for_queue

pytestmark = [pytest.mark.anyio]

PATH = "/locks/follow"
GET_DATA = 4
EXISTS = 3
GET_CHILDREN = 8
DELETE = 2
CREATE2 = 15


@dataclass
class Scene:
    """The contenders of one scenario, their grants in order, and their release events."""

    observer: aiozklock.ZooKeeperClient
    a_client: aiozklock.ZooKeeperClient
    tg: anyio.abc.TaskGroup
    order: list[str] = field(default_factory=list)
    holding: set[str] = field(default_factory=set)
    release: dict[str, anyio.Event] = field(default_factory=dict)
    held: dict[str, anyio.Event] = field(default_factory=dict)  # set once granted
    scopes: dict[str, anyio.CancelScope] = field(default_factory=dict)
    a_lock: Any = None  # A's lock (on a_client)
    go: anyio.Event = field(default_factory=anyio.Event)  # A's second part may start
    done: anyio.Event = field(default_factory=anyio.Event)  # A's second part has ended

    def granted(self, name: str) -> None:
        assert not self.holding, f"{name} granted while {self.holding} holds"
        self.holding.add(name)
        self.order.append(name)
        self.held.setdefault(name, anyio.Event()).set()

    async def wait_held(self, name: str) -> None:
        await self.held.setdefault(name, anyio.Event()).wait()

    async def contend(self, name: str, lock: aiozklock.Lock) -> None:
        """Queue ``lock`` in a task of its own (holding until ``release[name]``), and wait
        until its node is in the queue."""
        size = len(await self.observer.get_children(PATH))
        self.release[name] = anyio.Event()

        async def hold() -> None:
            with anyio.CancelScope() as self.scopes[name]:
                async with lock:
                    self.granted(name)
                    await self.release[name].wait()
                    self.holding.discard(name)

        self.tg.start_soon(hold)
        await wait_for_queue(self.observer, PATH, size + 1)

    async def sync_a(self) -> None:
        """A round trip on A's session: every request A wrote before is answered (a
        session's requests run in order), so a watch it set is armed on the server."""
        await self.a_client.get_data("/")


Part = Callable[[Scene], Awaitable[None]]


@asynccontextmanager
async def scene(
    proxy: FaultProxy, open_client: ClientFactory, second: Part
) -> AsyncIterator[Scene]:
    """B holds; C, A, D, E queue; B and C release: A holds, with D and E behind it. Once
    ``go`` is set, A's task (the lock's owner) runs ``second``."""
    observer = await open_client()
    a_client = await open_client(proxy)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            s = Scene(observer, a_client, tg)
            await observer.ensure_path(PATH)
            for name in "BC":
                await s.contend(name, (await open_client()).lock(PATH))
            s.a_lock = a_client.lock(PATH)
            a_held = anyio.Event()

            async def a_task() -> None:
                await s.a_lock.acquire()
                s.granted("A")
                a_held.set()
                await s.go.wait()
                s.holding.discard("A")
                await second(s)

            tg.start_soon(a_task)
            await wait_for_queue(observer, PATH, 3)
            for name in "DE":
                await s.contend(name, (await open_client()).lock(PATH))
            s.release["B"].set()
            s.release["C"].set()
            await a_held.wait()
            assert s.order == ["B", "C", "A"]
            yield s
            for event in s.release.values():
                event.set()
        await gone(observer, PATH)


async def rejoin(s: Scene) -> None:
    """A releases and re-acquires without a yield in between (``A2`` once granted)."""
    await s.a_lock.release()
    await s.a_lock.acquire()
    s.granted("A2")
    s.holding.discard("A2")
    await s.a_lock.release()


async def test_a_rejoin_behind_two_watches_the_newest_and_lists_once(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    async with scene(proxy, open_client, rejoin) as s:
        proxy.reset_counters()
        s.go.set()
        await proxy.wait_for_request(EXISTS)
        await s.sync_a()
        s.release["D"].set()
        s.release["E"].set()
        await wait_for_children(s.observer, PATH, lambda children: children == [])
    assert s.order == ["B", "C", "A", "D", "E", "A2"]
    # The release's delete (written at the call), then the create and the watch on E in
    # one round trip, one listing once E is gone (listing at the join as well: two).
    assert proxy.requests[0].opcode == DELETE
    assert (proxy.count(CREATE2), proxy.count(EXISTS), proxy.count(GET_CHILDREN)) == (1, 1, 1)


async def test_a_hint_whose_node_is_gone_lists_and_keeps_the_order(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    async with scene(proxy, open_client, rejoin) as s:
        s.scopes["E"].cancel()  # E leaves the queue before A joins again
        await wait_for_children(s.observer, PATH, lambda children: len(children) == 2)
        before = set(await s.observer.get_children(PATH))
        s.go.set()  # A's delete, then A2's create
        await wait_for_children(s.observer, PATH, lambda now: len(now) == 2 and set(now) != before)
        await s.wait_held("D")  # granted at A's release; A2 waits for it
        assert s.order == ["B", "C", "A", "D"]
        s.release["D"].set()
        await wait_for_children(s.observer, PATH, lambda children: children == [])
    assert s.order == ["B", "C", "A", "D", "A2"]


async def test_a_newcomer_after_the_hint_is_not_overtaken(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    async with scene(proxy, open_client, rejoin) as s:
        await s.contend("F", (await open_client()).lock(PATH))  # queues after E, before A2
        s.go.set()
        await proxy.wait_for_request(EXISTS)
        await s.sync_a()
        for name in "DE":
            s.release[name].set()
        await s.wait_held("F")  # A2 waits for it
        assert s.order == ["B", "C", "A", "D", "E", "F"]
        s.release["F"].set()
        await wait_for_children(s.observer, PATH, lambda children: children == [])
    assert s.order == ["B", "C", "A", "D", "E", "F", "A2"]


async def test_a_lost_reply_to_the_hints_watch_is_recovered_in_order(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    async with scene(proxy, open_client, rejoin) as s:
        session_id = s.a_client.session_id
        proxy.arm_drop_after([EXISTS])
        s.go.set()
        await proxy.wait_for_request(EXISTS)
        await wait_for_children(s.observer, PATH, lambda children: len(children) == 3)
        await s.sync_a()  # reconnected (the same session), A2 waits behind D and E
        for name in "DE":
            s.release[name].set()
        await wait_for_children(s.observer, PATH, lambda children: children == [])
    assert s.order == ["B", "C", "A", "D", "E", "A2"]
    assert s.a_client.session_id == session_id


async def give_up_by_timeout(s: Scene) -> None:
    await s.a_lock.release()
    with pytest.raises(aiozklock.LockTimeout):
        await s.a_lock.acquire(timeout=0.3)
    s.order.append("timed out")
    s.done.set()


async def give_up_by_cancel(s: Scene) -> None:
    await s.a_lock.release()
    with s.scopes.setdefault("A2", anyio.CancelScope()):
        await s.a_lock.acquire()
    s.order.append("cancelled")
    s.done.set()


@pytest.mark.parametrize("how", ["cancelled", "timed out"])
async def test_an_acquire_given_up_while_following_leaves_no_node(
    proxy: FaultProxy, open_client: ClientFactory, how: str
) -> None:
    give_up = give_up_by_cancel if how == "cancelled" else give_up_by_timeout
    async with scene(proxy, open_client, give_up) as s:
        lock = s.a_lock
        before = set(await s.observer.get_children(PATH))
        ours = {name for name in before if name.startswith(lock._queue.guid)}
        proxy.reset_counters()
        s.scopes["A2"] = anyio.CancelScope()
        s.go.set()
        await proxy.wait_for_request(EXISTS)
        if how == "cancelled":
            await s.sync_a()
            s.scopes["A2"].cancel()
        await wait_for_children(s.observer, PATH, lambda children: set(children) == before - ours)
        await s.done.wait()
        assert not lock.statistics().locked
        assert s.order[:4] == ["B", "C", "A", "D"]  # D granted at A's release
        assert s.order[4:] == [how]
