"""Leader election on a real ZooKeeper, on asyncio and trio.

Timing numbers are printed (``pytest -s``) as ``ELECTION <name> ...`` lines. Pitfalls of
/work/shared/recipes-pitfalls.md covered here: 12 (expiry: the old node is never taken for
ours, the candidate re-campaigns in its new session), 14 (bodies cancelled on connection drop,
client close, partition, expiry; campaigning again works), 15 (fencing token = czxid, is_leader
checked by clock), 16 (``leader()`` when the head vanishes between listing and read, and during
churn), 17 (``watch_leader()``: head-only watch, no listing while the head is stable, ops per
leader change with many observers, None when empty, coalesced, re-sync after reconnect); also
6 (the successor disconnected while its predecessor resigns) and 13 (the path wiped under an
observer). Not covered: 12's "expire while the server is down" variant, and 13's flapping.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import anyio
import anyio.abc
import pytest

import aiozklock
from aiozklock import SessionState, StateChange
from aiozklock.testing import FaultProxy, History, Opcode, expire_session, session_of
from tests._clocks import on_monotonic
from tests.conftest import ClientFactory, gone, wait_for_children, wait_for_queue

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(40)]

PATH = "/elections/scheduler"
SHORT_TIMEOUT = 2.0  # session timeout of the fault tests' leaders
# A proxy delay that never runs out by itself: the test lifts it once the fault is in place.
HOLD = 3600.0


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
            assert contender.is_holder
            assert contender.identifier == "node-1"
            seen: dict[str, bool] = {}

            async def other_task() -> None:  # is_leader is per object, is_held per task
                seen["is_leader"] = election.is_leader
                seen["is_held"] = election.is_held

            async with anyio.create_task_group() as tg:
                tg.start_soon(other_task)
            assert seen == {"is_leader": True, "is_held": False}
            assert election.is_held
        assert not election.is_leader
        await gone(zk, PATH)
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
        await gone(zk, PATH)


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
            client.election(path)
    with pytest.raises(aiozklock.InvalidArgument):
        client.election(PATH, identifier=42)
    with pytest.raises(aiozklock.InvalidArgument):
        client.election(PATH, identifier="x" * 100_000)
    election = client.election(PATH)
    for timeout in (-1, float("nan"), "1"):
        with pytest.raises(aiozklock.InvalidArgument):
            election.acquire(timeout=timeout)
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
        await gone(zk, PATH)


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
    await gone(clients[0], PATH)  # the last release may be another session's


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
    await gone(clients["a"], PATH)  # the last release was another session's


# --- leader() -------------------------------------------------------------------------------


async def test_leader_skips_a_head_that_vanishes_after_the_listing(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    # Pitfall 16: the observer's requests are delayed, and the head resigns after its
    # listing was answered and while its getData is on the way: the next one leads.
    observer = await open_client(proxy)
    other = await open_client()
    history = History()
    first, second = Term(), Term()
    result: list[str | None] = []
    asked = anyio.Event()
    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lead, zk.election(PATH, identifier="first"), first, history, "first")
            await first.entered.wait()
            tg.start_soon(lead, other.election(PATH, identifier="second"), second, history, "2")
            await wait_for_queue(zk, PATH, 2)
            proxy.reset_counters()
            proxy.set_delay(0.5)

            async def ask() -> None:
                result.append(await observer.election(PATH).leader())
                asked.set()

            tg.start_soon(ask)
            await proxy.wait_for_request(Opcode.GET_DATA)  # its listing was answered
            proxy.set_delay(HOLD)  # its getData stays on the way until lifted below
            first.resign.set()
            await second.entered.wait()  # before the delayed getData reaches the server
            proxy.set_delay(0)
            await asked.wait()
            second.resign.set()
    assert proxy.count(Opcode.GET_DATA) == 2
    assert proxy.count(Opcode.GET_CHILDREN) == 1
    assert result == ["second"]


async def test_leader_during_churn_never_raises(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    names = [f"c{i}" for i in range(3)]
    clients = [await open_client() for _ in names]
    seen: list[str | None] = []
    stop = anyio.Event()

    async def churn(client: aiozklock.ZooKeeperClient, name: str) -> None:
        election = client.election(PATH, identifier=name)
        for _ in range(15):
            async with election:
                await anyio.lowlevel.checkpoint()

    async def ask() -> None:
        observer = zk.election(PATH)
        while not stop.is_set():
            seen.append(await observer.leader())

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            async with anyio.create_task_group() as candidates:
                for client, name in zip(clients, names, strict=True):
                    candidates.start_soon(churn, client, name)
            stop.set()
    assert set(seen) <= {*names, None}
    assert set(seen) & set(names)  # it saw leaders
    assert await zk.election(PATH).leader() is None
    report("leader_churn", reads=len(seen), none=seen.count(None))


# --- watch_leader() -------------------------------------------------------------------------


async def test_watch_leader_sequence_and_no_listing_while_the_head_is_stable(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    observer = await open_client(proxy)
    baseline = session_of(observer).watcher_count()
    history = History()
    terms = {name: Term() for name in ("a", "b", "c")}
    others = {name: await open_client() for name in ("b", "c")}
    with anyio.fail_after(20):
        async with watching(observer.election(PATH)) as watcher, anyio.create_task_group() as tg:
            assert await watcher.wait_for(1) == [None]  # the path does not exist yet
            tg.start_soon(lead, zk.election(PATH, identifier="a"), terms["a"], history, "a")
            assert await watcher.wait_for(2) == [None, "a"]
            tg.start_soon(
                lead, others["b"].election(PATH, identifier="b"), terms["b"], history, "b"
            )
            await wait_for_queue(zk, PATH, 2)
            watches = session_of(observer).watcher_count()
            proxy.reset_counters()
            # A candidate joins and leaves behind the head: the observer hears nothing.
            async with anyio.create_task_group() as late:
                late.start_soon(
                    lead, others["c"].election(PATH, identifier="c"), terms["c"], history, "c"
                )
                await wait_for_queue(zk, PATH, 3)
                late.cancel_scope.cancel()
            await wait_for_children(zk, PATH, lambda children: len(children) == 2)
            # A notification would reach the observer before this reply: its watch would be
            # gone (fired), and a woken observer lists at once.
            await observer.get_acl("/")
            assert session_of(observer).watcher_count() == watches
            assert proxy.count() - proxy.count(Opcode.PING) == 1  # our round trip only
            proxy.reset_counters()
            terms["a"].resign.set()
            assert await watcher.wait_for(3) == [None, "a", "b"]
            # The head's deletion: one listing and one read (with the next watch).
            assert proxy.count(Opcode.GET_CHILDREN) == 1
            assert proxy.count(Opcode.GET_DATA) == 1
            terms["b"].resign.set()
            assert await watcher.wait_for(4) == [None, "a", "b", None]
        assert session_of(observer).watcher_count() == baseline
    assert history.check().ok


async def test_watch_leader_costs_per_leader_change_with_many_observers(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    # Pitfall 17: observers watch the head only; a change costs each one listing and one read,
    # and candidates queueing behind the head cost nothing.
    observers = 50
    client = await open_client(proxy)
    history = History()
    a, b, c = Term(), Term(), Term()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lead, zk.election(PATH, identifier="a"), a, history, "a")
            await a.entered.wait()
            watchers = [Watcher(client.election(PATH)) for _ in range(observers)]
            for watcher in watchers:
                tg.start_soon(watcher.run)
            for watcher in watchers:
                assert await watcher.wait_for(1) == ["a"]
            watches = session_of(client).watcher_count()
            proxy.reset_counters()
            tg.start_soon(lead, zk.election(PATH, identifier="b"), b, history, "b")
            await wait_for_queue(zk, PATH, 2)
            tg.start_soon(lead, zk.election(PATH, identifier="c"), c, history, "c")
            await wait_for_queue(zk, PATH, 3)
            # A notification would reach the observers' session before this reply: a watch
            # would be gone (fired), and a woken observer lists at once.
            await client.get_acl("/")
            assert session_of(client).watcher_count() == watches
            behind = proxy.count() - proxy.count(Opcode.PING) - 1  # less our round trip
            proxy.reset_counters()
            a.resign.set()
            for watcher in watchers:
                assert await watcher.wait_for(2) == ["a", "b"]
            per_change = proxy.count() - proxy.count(Opcode.PING)
            b.resign.set()
            c.resign.set()
            tg.cancel_scope.cancel()
    report(
        "observers",
        observers=observers,
        requests_when_queueing=behind,
        requests_per_leader_change=per_change,
    )
    assert behind == 0
    assert per_change == 2 * observers


async def test_watch_leader_cleans_up_on_cancel_and_on_aclose(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    session = session_of(zk)
    baseline = session.watcher_count()
    election = zk.election(PATH, identifier="me")
    with anyio.fail_after(10):
        # Cancelled while waiting for a change (no candidate: a watch on the path).
        async with watching(zk.election(PATH)) as watcher:
            assert await watcher.wait_for(1) == [None]
            assert session.watcher_count() == baseline + 1
        assert session.watcher_count() == baseline
        async with election:
            # The leader keeps its listing's child watch (a newcomer that cannot order our
            # nodes ends its term: issue 37, item 8).
            held = session.watcher_count()
            assert held == baseline + 1
            # Closed by the consumer after a value (a data watch on the head).
            async with contextlib.aclosing(election.watch_leader()) as leaders:
                async for leader in leaders:
                    assert leader == "me"
                    assert session.watcher_count() == held + 1
                    break
            assert session.watcher_count() == held
        assert session.watcher_count() == baseline


async def test_watch_leader_coalesces_for_a_slow_consumer(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    other = await open_client()
    history = History()
    a, b = Term(), Term()
    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lead, zk.election(PATH, identifier="a"), a, history, "a")
            await a.entered.wait()
            tg.start_soon(lead, other.election(PATH, identifier="b"), b, history, "b")
            await wait_for_queue(zk, PATH, 2)
            values = []
            async with contextlib.aclosing(zk.election(PATH).watch_leader()) as leaders:
                async for leader in leaders:
                    values.append(leader)
                    if leader == "a":  # while the consumer is busy: a -> b -> nobody
                        a.resign.set()
                        await b.entered.wait()
                        b.resign.set()
                        await b.done.wait()
                    if leader is None:
                        break
    assert values == ["a", None]


async def test_watch_leader_resyncs_after_a_partition(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    observer = await open_client(proxy)
    other = await open_client()
    history = History()
    a, b = Term(), Term()
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lead, zk.election(PATH, identifier="a"), a, history, "a")
            await a.entered.wait()
            async with watching(observer.election(PATH)) as watcher:
                assert await watcher.wait_for(1) == ["a"]
                tg.start_soon(lead, other.election(PATH, identifier="b"), b, history, "b")
                await wait_for_queue(zk, PATH, 2)
                proxy.blackhole(True)
                a.resign.set()
                await b.entered.wait()
                await proxy.drop_all()  # the observer reconnects once the partition lifts
                proxy.blackhole(False)
                assert await watcher.wait_for(2) == ["a", "b"]
            b.resign.set()
    assert history.check().ok


# --- faults ---------------------------------------------------------------------------------


async def crash_and_succeed(
    leader_client: aiozklock.ZooKeeperClient,
    successor_client: aiozklock.ZooKeeperClient,
    fault: Callable[[], Awaitable[None]],
    within: float,
    *,
    fenced_only: bool = False,
) -> tuple[Term, Term, float]:
    """``leader_client`` leads, ``successor_client`` waits; ``fault()``; both terms end.
    Returns the terms and when the fault started.

    ``fenced_only``: the fault re-grants on the server before the leader can hear of it (a
    session expired by another connection), so terms may overlap by the notification's
    latency and only the fencing tokens separate them."""
    history = History()
    leader, successor = Term(), Term()
    election = leader_client.election(PATH, identifier="leader")
    with anyio.fail_after(within):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lead, election, leader, history, "leader")
            await leader.entered.wait()
            tg.start_soon(
                lead, successor_client.election(PATH, identifier="next"), successor, history, "next"
            )
            await wait_for_queue(successor_client, PATH, 2)
            fault_at = time.monotonic()
            await fault()
            await leader.done.wait()
            await successor.entered.wait()
            assert await successor_client.election(PATH).leader() == "next"
            successor.resign.set()
    assert leader.cancelled
    assert isinstance(leader.error, aiozklock.LeadershipLost), leader.error
    assert not election.is_leader
    assert successor.error is None
    assert successor.token > leader.token
    if not fenced_only:
        assert leader.exit < successor.enter  # never two leaders
        result = history.check()
        assert result.ok, str(result)
    return leader, successor, fault_at


def record_suspensions(client: aiozklock.ZooKeeperClient) -> list[tuple[StateChange, float]]:
    """Every SUSPENDED change of ``client``'s session, with its ``valid_until`` then."""
    session = session_of(client)
    suspensions: list[tuple[StateChange, float]] = []

    def on_change(change: StateChange) -> None:
        if change.state is SessionState.SUSPENDED:
            suspensions.append((change, on_monotonic(session.valid_until)))

    client.add_listener(on_change)
    return suspensions


async def test_leader_client_closed(open_client: ClientFactory) -> None:
    leader_client = await open_client()
    successor_client = await open_client()
    leader, successor, fault_at = await crash_and_succeed(
        leader_client, successor_client, leader_client.close, within=10
    )
    report(
        "client_closed",
        close_to_cancel=leader.exit - fault_at,
        close_to_successor=successor.enter - fault_at,
    )
    await gone(successor_client, PATH)


async def test_leader_connection_dropped(proxy: FaultProxy, open_client: ClientFactory) -> None:
    # The session survives the drop; with loss_policy="suspended" the body is cancelled at
    # once, and the janitor deletes the node once reconnected: the successor leads.
    leader_client = await open_client(proxy, session_timeout=SHORT_TIMEOUT)
    successor_client = await open_client()
    session_id = leader_client.session_id
    suspensions = record_suspensions(leader_client)
    leader, successor, fault_at = await crash_and_succeed(
        leader_client, successor_client, proxy.drop_all, within=10
    )
    report(
        "connection_dropped",
        drop_to_cancel=leader.exit - fault_at,
        drop_to_successor=successor.enter - fault_at,
    )
    # Cancelled at once: on the SUSPENDED that the drop itself caused (the session noticed
    # the closed connection), not on the one that half a timeout of silence would cause.
    suspended, _ = suspensions[0]
    assert suspended.reason.startswith("connection"), suspended.reason
    assert fault_at <= suspended.at <= leader.exit
    assert leader_client.session_id == session_id  # not a session expiry
    await gone(successor_client, PATH)


async def test_partition_longer_than_the_session_cancels_before_reelection(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    leader_client = await open_client(proxy, session_timeout=SHORT_TIMEOUT)
    successor_client = await open_client()
    timeout = session_of(leader_client).timeout
    suspensions = record_suspensions(leader_client)

    async def partition() -> None:
        proxy.blackhole(True)

    leader, successor, fault_at = await crash_and_succeed(
        leader_client, successor_client, partition, within=4 * timeout
    )
    suspended, valid_until = suspensions[0]
    margin = successor.enter - leader.exit
    report(
        "partition",
        fault_to_cancel=leader.exit - fault_at,
        fault_to_reelection=successor.enter - fault_at,
        margin=margin,
        margin_pct=100 * margin / timeout,
        exit_before_valid_until=valid_until - leader.exit,
    )
    # By the leader session's own clock: cancelled when it went SUSPENDED (half the timeout
    # of silence), before its valid_until (the send time of its newest answered request plus
    # the timeout, less 10 %; the session is given up there), so well before the server
    # could expire the session (a whole timeout after it last heard from the leader) and the
    # successor's notification came.
    assert suspended.reason.startswith("nothing heard"), suspended.reason
    assert suspended.at <= leader.exit < valid_until
    assert valid_until + 0.1 * timeout <= successor.enter
    proxy.blackhole(False)


async def test_session_expiry_then_campaign_again_in_the_new_session(
    proxy: FaultProxy, open_client: ClientFactory, zk_hosts: str
) -> None:
    # Pitfall 12: the old session's node is gone with it; campaigning again queues a new
    # node owned by the new session, with a greater token.
    leader_client = await open_client(proxy, session_timeout=SHORT_TIMEOUT)
    successor_client = await open_client()
    old_session = leader_client.session_id
    password = session_of(leader_client).password
    reconnected = anyio.Event()

    def on_state(change: StateChange) -> None:
        if change.state is SessionState.CONNECTED and change.session_id != old_session:
            reconnected.set()

    leader_client.add_listener(on_state)

    async def expire() -> None:
        # Keep the client's own reconnect from re-attaching before the expiry lands.
        proxy.set_delay(HOLD)
        await expire_session(zk_hosts.split(",")[0], old_session, password)
        proxy.set_delay(0)

    leader, successor, fault_at = await crash_and_succeed(
        leader_client, successor_client, expire, within=10, fenced_only=True
    )
    report(
        "expiry",
        expire_to_cancel=leader.exit - fault_at,
        expire_to_successor=successor.enter - fault_at,
    )
    election = leader_client.election(PATH, identifier="again")
    with anyio.fail_after(10):
        await reconnected.wait()
        async with election:
            (name,) = await successor_client.get_children(PATH)
            stat = await node_stat(successor_client, name)
            assert stat.ephemeral_owner == leader_client.session_id != old_session
            assert election.fencing_token == stat.czxid > successor.token
            assert election.is_leader
    await gone(successor_client, PATH)


async def test_successor_connection_dropped_during_the_handover(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    # Pitfall 14 (6): the leader resigns while the successor is disconnected; the successor
    # learns it after reconnecting (same session) and leads, alone.
    successor_client = await open_client(proxy)
    history = History()
    leader, successor = Term(), Term()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lead, zk.election(PATH, identifier="leader"), leader, history, "leader")
            await leader.entered.wait()
            election = successor_client.election(PATH, identifier="next")
            tg.start_soon(lead, election, successor, history, "next")
            await wait_for_queue(zk, PATH, 2)
            await proxy.wait_for_request(Opcode.EXISTS)  # it watches the leader
            proxy.blackhole(True)
            await proxy.drop_all()
            leader.resign.set()
            await leader.done.wait()
            dropped_at = time.monotonic()
            proxy.blackhole(False)
            await successor.entered.wait()
            assert election.is_leader
            successor.resign.set()
    report("handover_drop", lift_to_successor=successor.enter - dropped_at)
    assert leader.error is None
    assert successor.error is None
    assert history.check().ok
    await gone(zk, PATH)


async def test_watch_leader_survives_the_path_being_wiped(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    # Pitfall 13: the election path itself goes away and comes back.
    other = await open_client()
    history = History()
    term = Term()
    with anyio.fail_after(10):
        async with watching(zk.election(PATH)) as watcher:
            # Read before "a" campaigns: else the first value could already be "a".
            assert await watcher.wait_for(1) == [None]
            async with other.election(PATH, identifier="a"):
                assert await watcher.wait_for(2) == [None, "a"]
            assert await watcher.wait_for(3) == [None, "a", None]
            await zk.delete(PATH)  # now only an existence watch can see it come back
            async with anyio.create_task_group() as tg:
                tg.start_soon(lead, other.election(PATH, identifier="b"), term, history, "b")
                assert await watcher.wait_for(4) == [None, "a", None, "b"]
                term.resign.set()
            assert await watcher.wait_for(5) == [None, "a", None, "b", None]
    assert term.error is None
