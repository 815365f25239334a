"""Leader election on a real ZooKeeper, on asyncio and trio.

Timing numbers are printed (``pytest -s``) as ``ELECTION <name> ...`` lines. Pitfalls of
/work/shared/recipes-pitfalls.md covered here: 12 (expiry: the old node is never taken for
ours, the candidate re-campaigns in its new session), 14 (bodies cancelled on connection drop,
client close, partition, expiry; campaigning again works), 15 (fencing token = czxid, is_leader
checked by clock), 16 (``leader()`` when the head vanishes between listing and read, and during
churn), 17 (``watch_leader()``: head-only watch, no listing while the head is stable, ops per
leader change with many observers, None when empty, coalesced, re-sync after reconnect).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio
import anyio.abc
import pytest

import aiozklock
from aiozklock import SessionState, StateChange
from aiozklock.testing import FaultProxy, History, Opcode, expire_session, session_of
from tests.conftest import ClientFactory, wait_for_children, wait_for_queue

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(40)]

PATH = "/elections/scheduler"
SHORT_TIMEOUT = 2.0  # session timeout of the fault tests' leaders


def report(name: str, **numbers: float | int | str) -> None:
    parts = " ".join(
        f"{key}={value:.4f}" if isinstance(value, float) else f"{key}={value}"
        for key, value in numbers.items()
    )
    print(f"ELECTION {name} {parts}")


@dataclass
class Term:
    """One candidate's ``async with election:``; the body waits for ``resign``."""

    entered: anyio.Event = field(default_factory=anyio.Event)
    resign: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    token: int = 0
    enter: float = 0.0
    exit: float = 0.0
    cancelled: bool = False
    error: BaseException | None = None


async def lead(election: aiozklock.Election, term: Term, history: History, name: str) -> None:
    """Campaign, lead until ``term.resign`` (or cancelled by a loss), record the section."""
    try:
        async with election:
            term.token = election.fencing_token
            term.enter = time.monotonic()
            term.entered.set()
            try:
                await term.resign.wait()
            except anyio.get_cancelled_exc_class():
                term.cancelled = True
                raise
            finally:
                term.exit = time.monotonic()
                history.record(name, term.token, term.enter, term.exit)
    except aiozklock.AiozklockError as exc:
        term.error = exc
    finally:
        term.done.set()


class Watcher:
    """Consumes ``watch_leader()`` in a task: every value, with an event per value."""

    def __init__(self, election: aiozklock.Election) -> None:
        self.election = election
        self.values: list[str | None] = []
        self._changed = anyio.Event()

    async def run(self) -> None:
        async with contextlib.aclosing(self.election.watch_leader()) as leaders:
            async for leader in leaders:
                self.values.append(leader)
                self._changed.set()
                self._changed = anyio.Event()

    async def wait_for(self, count: int) -> list[str | None]:
        """Wait until ``count`` values were seen (unbounded: use fail_after)."""
        while len(self.values) < count:
            await self._changed.wait()
        return self.values


@contextlib.asynccontextmanager
async def watching(election: aiozklock.Election) -> AsyncIterator[Watcher]:
    watcher = Watcher(election)
    async with anyio.create_task_group() as tg:
        tg.start_soon(watcher.run)
        yield watcher
        tg.cancel_scope.cancel()


async def node_stat(zk: aiozklock.ZooKeeperClient, name: str) -> aiozklock.Stat:
    stat = await zk.exists(f"{PATH}/{name}")
    assert stat is not None
    return stat


# --- the contract ----------------------------------------------------------------------------


async def test_leader_scope_fencing_token_and_resign(zk: aiozklock.ZooKeeperClient) -> None:
    election = zk.election(PATH, identifier="node-1")
    assert await election.leader() is None  # the path does not exist yet
    assert not election.is_leader
    with anyio.fail_after(10):
        async with election as leading:
            assert leading is election
            (name,) = await zk.get_children(PATH)
            stat = await node_stat(zk, name)
            assert election.fencing_token == stat.czxid
            assert stat.ephemeral_owner == zk.session_id
            assert json.loads((await zk.get_data(f"{PATH}/{name}"))[0])["identifier"] == "node-1"
            assert await election.leader() == "node-1"
            (contender,) = await election.contenders()
            assert contender.is_holder and contender.identifier == "node-1"
            seen: dict[str, bool] = {}

            async def other_task() -> None:  # is_leader is per object, is_held per task
                seen["is_leader"] = election.is_leader
                seen["is_held"] = election.is_held

            async with anyio.create_task_group() as tg:
                tg.start_soon(other_task)
            assert seen == {"is_leader": True, "is_held": False}
            assert election.is_held
        assert not election.is_leader
        assert await zk.get_children(PATH) == []
        assert await election.leader() is None  # the path exists, with no candidate


async def test_campaign_and_resign_methods(zk: aiozklock.ZooKeeperClient) -> None:
    first = zk.election(PATH, identifier="first")
    second = zk.election(PATH, identifier="second")
    with anyio.fail_after(10):
        assert await first.try_acquire()
        assert not await second.try_acquire()  # one attempt, no waiting, no node left
        assert len(await zk.get_children(PATH)) == 1
        with pytest.raises(aiozklock.LockTimeout):
            await second.acquire(timeout=0.2)
        assert len(await zk.get_children(PATH)) == 1
        with pytest.raises(aiozklock.NotLockOwner):
            await second.resign()
        await first.resign()
        async with second.acquire(timeout=5):
            assert await first.leader() == "second"
        assert await zk.get_children(PATH) == []


async def test_default_identifier_is_host_and_pid(zk: aiozklock.ZooKeeperClient) -> None:
    election = zk.election(PATH)
    expected = f"{socket.gethostname()}:{os.getpid()}"
    assert election.identifier == expected
    with anyio.fail_after(10):
        async with election:
            assert await election.leader() == expected
        # A mutex node without identifier shares the queue naming: named by host and pid too.
        async with zk.lock(PATH):
            assert await election.leader() == expected


async def test_bad_input_raises_before_any_traffic(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    proxy.reset_counters()
    for path in ("relative", "/trailing/", "/", "", 7):
        with pytest.raises(aiozklock.InvalidArgument):
            client.election(path)  # type: ignore[arg-type]
    with pytest.raises(aiozklock.InvalidArgument):
        client.election(PATH, identifier=42)  # type: ignore[arg-type]
    with pytest.raises(aiozklock.InvalidArgument):
        client.election(PATH, identifier="x" * 100_000)
    election = client.election(PATH)
    for timeout in (-1, float("nan"), "1"):
        with pytest.raises(aiozklock.InvalidArgument):
            election.acquire(timeout=timeout)  # type: ignore[arg-type]
    with pytest.raises(aiozklock.NotLockOwner):
        await election.release()
    with pytest.raises(aiozklock.NotLockOwner):
        election.fencing_token  # noqa: B018
    assert proxy.count() == 0
    await client.close()
    with pytest.raises(aiozklock.ClientClosed):
        client.election(PATH)


async def test_cancel_while_campaigning_leaves_no_node(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    other = await open_client()
    leader = zk.election(PATH, identifier="leader")
    candidate = other.election(PATH, identifier="candidate")
    with anyio.fail_after(10):
        async with leader:
            async with anyio.create_task_group() as tg:
                tg.start_soon(candidate.acquire)
                await wait_for_queue(zk, PATH, 2)
                tg.cancel_scope.cancel()
            assert len(await zk.get_children(PATH)) == 1
            assert [c.identifier for c in await leader.contenders()] == ["leader"]
        # The object campaigns again normally afterwards.
        async with candidate:
            assert await candidate.leader() == "candidate"
        assert await zk.get_children(PATH) == []


async def test_one_leader_at_a_time_among_sessions(open_client: ClientFactory) -> None:
    sessions, terms = 4, 3
    clients = [await open_client() for _ in range(sessions)]
    history = History()
    leaders_now = 0
    most = 0

    async def candidate(index: int) -> None:
        nonlocal leaders_now, most
        election = clients[index].election(PATH, identifier=f"c{index}")
        for _ in range(terms):
            async with election:
                with history.section(f"c{index}", election.fencing_token):
                    leaders_now += 1
                    most = max(most, leaders_now)
                    assert await election.leader() == f"c{index}"
                    await anyio.sleep(0.005)  # hold leadership across other requests
                    leaders_now -= 1

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for index in range(sessions):
                tg.start_soon(candidate, index)
    result = history.check()
    assert result.ok, str(result)
    assert result.sections == sessions * terms
    assert most == 1
    assert await clients[0].get_children(PATH) == []


async def test_succession_is_fifo_and_a_plain_handoff_needs_no_listing(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    names = ["a", "b", "c", "d"]
    # "b", the first successor, runs through the proxy: its requests are counted.
    clients = {n: await open_client(proxy if n == "b" else None) for n in names}
    history = History()
    terms = {n: Term() for n in names}
    order: list[str] = []
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            for count, name in enumerate(names, 1):
                tg.start_soon(
                    lead, clients[name].election(PATH, identifier=name), terms[name], history, name
                )
                if name == "a":
                    await terms["a"].entered.wait()  # the path exists from now on
                await wait_for_queue(clients["a"], PATH, count)
                if name == "b":
                    await proxy.wait_for_request(Opcode.EXISTS)  # b watches a
            proxy.reset_counters()
            for name in names:
                await terms[name].entered.wait()
                order.append(name)
                if name == "a":
                    resigned_at = time.monotonic()
                terms[name].resign.set()
                if name == "b":
                    handoff = terms["b"].enter - resigned_at
                    handoff_requests = [r.opcode for r in proxy.requests if r.opcode != Opcode.PING]
    report("handoff", resign_to_successor_body=handoff, successor_requests=len(handoff_requests))
    assert order == names
    assert handoff_requests == []  # no getChildren, nothing: the notification alone
    assert all(t.error is None and not t.cancelled for t in terms.values())
    assert [terms[n].token for n in names] == sorted(terms[n].token for n in names)
    result = history.check()
    assert result.ok, str(result)
    assert await clients["a"].get_children(PATH) == []
