"""The rest of the fault matrix against real ZooKeeper: F2, F5, F8, F11, F13, F14, F15.

Same rules as tests/test_faults.py, whose helpers this file reuses: every test runs on asyncio
and trio; server-side facts come from an independent observer (a raw connection straight to
the server, or another client), never from the client under test; timing numbers are printed
(``pytest -s``) as ``FAULTS <F-id> ...`` lines. Server-process faults on the single server
(F11) use this module's own standalone server, so the shared one is never frozen; ensemble
faults (F13, F14) use the shared ensemble and always leave every member serving.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import aiozklock
from aiozklock import SessionState, StateChange
from aiozklock._recipes._core._names import nodes_of
from aiozklock._wire import _session as session_module
from aiozklock.testing import (
    FaultProxy,
    History,
    Opcode,
    RawConnectionClosed,
    RawSessionExpired,
    RawZooKeeperConnection,
    ZooKeeperCluster,
    ZooKeeperMember,
    session_of,
)
from tests.conftest import ClientFactory, gone, on_wait, wait_for_queue
from tests.test_faults import (
    PATH,
    STEADY_TIMEOUT,
    TIMEOUT,
    DeletionWatch,
    HolderOutcome,
    StateLog,
    WaiterOutcome,
    acquire_once,
    first_host,
    hold_until_cancelled,
    observer,  # noqa: F401  (fixture)
    report,
)

pytestmark = [pytest.mark.anyio]

# Ensemble tests here need no session to survive a leader election (F12 does, with 6 s): 4 s
# keeps them short while leaving the silence detection (timeout/2) far from any JVM hiccup.
ENSEMBLE_FAULT_TIMEOUT = 4.0


def is_state(state: SessionState) -> Callable[[StateChange], bool]:
    return lambda change: change.state is state


@pytest.fixture
async def waiter_proxy(zk_hosts: str) -> AsyncIterator[FaultProxy]:
    """A second FaultProxy, for a second client that must be partitioned on its own."""
    async with FaultProxy(zk_hosts) as fault_proxy:
        yield fault_proxy


def connection_of(session: Any) -> object | None:
    """The session's current connection object (internal; None while it has none)."""
    return session._conn


def sent_upon_reconnect(proxy: FaultProxy, opcode: int) -> bool:
    """Whether the client wrote ``opcode`` on its last connection through ``proxy`` before
    any ping there: upon the reconnect, not after a silence (the session pings once idle for
    a third of its timeout). Prompt by cause, not by a clock: a loaded machine delays the
    reconnect's work and the ping's timer alike."""
    last = proxy.connect_requests[-1].connection_index
    sent = [request.opcode for request in proxy.requests if request.connection_index == last]
    pinged = sent.index(Opcode.PING) if Opcode.PING in sent else len(sent)
    return opcode in sent[:pinged]


# A waiter is woken only by its watch or by a change of its session's state (no polling): a
# wake-up lost hangs it, and the bound on waiting for its grant fails. So a grant's promptness
# is told by that bound, not by a clock's verdict on a loaded machine.


async def guid_nodes(conn: RawZooKeeperConnection, parent: str, guid: str) -> list[str]:
    """Children of ``parent`` (a server path) that carry ``guid``, as the observer sees them."""
    return nodes_of(await conn.get_children(parent), guid)


# --- F2: a create's reply is lost, then the acquire times out or is cancelled ---------------


@dataclass
class AttemptOutcome:
    done: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    error: BaseException | None = None
    acquired: bool = False
    ended: float = 0.0


async def attempt_acquire(
    lock: aiozklock.Lock, acquire_timeout: float | None, out: AttemptOutcome
) -> None:
    try:
        with out.scope:
            await lock.acquire(timeout=acquire_timeout)
            out.acquired = True  # not expected: the lock is held by someone else
    except aiozklock.LockTimeout as exc:
        out.error = exc
    finally:
        out.ended = time.monotonic()
        out.done.set()


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "case", ["timeout-waiting", "cancel-waiting", "timeout-disconnected", "cancel-disconnected"]
)
async def test_lost_create_reply_then_timeout_or_cancel_leaves_no_node(
    case: str,
    proxy: FaultProxy,
    open_client: ClientFactory,
    observer: RawZooKeeperConnection,  # noqa: F811
    chroot: str,
) -> None:
    """F2: the create is executed but its reply lost; the acquire then ends by timeout or
    cancellation, either while waiting on the predecessor (after the node was found by GUID)
    or while still disconnected (outcome of the create unknown). The observer sees our node
    deleted by the end (or, disconnected, by the first business of the reconnect), in the
    same session; no watch leaks; the same lock object acquires afterwards."""
    end, where = case.split("-")
    holder_client = await open_client(session_timeout=STEADY_TIMEOUT)
    client = await open_client(proxy, session_timeout=STEADY_TIMEOUT)
    session_id = client.session_id
    holder = holder_client.lock(PATH, identifier="holder")
    await holder.acquire()
    lock = client.lock(PATH, identifier="f2")
    guid = lock._queue.guid  # the lock retires it if a node of ours is left to its janitor
    baseline_watchers = session_of(client).watcher_count()
    states = StateLog(client)
    waiting = anyio.Event()
    on_wait(lock._queue, waiting.set)
    parent = f"{chroot}{PATH}"

    def refuse_reconnects(change: StateChange) -> None:
        # Runs synchronously as the client turns SUSPENDED, before its first reconnect.
        if change.state is SessionState.SUSPENDED and not proxy.blackholed:
            proxy.blackhole(True, new="refuse")

    remove_listener = (
        session_of(client).add_listener(refuse_reconnects) if where == "disconnected" else None
    )
    # The last exchange now: the client's own LOST clock starts here, far from this test's end.
    await client.exists("/")
    acquire_timeout = {"timeout-waiting": 1.0, "timeout-disconnected": 0.3}.get(case)
    out = AttemptOutcome()
    async with anyio.create_task_group() as tg:
        proxy.arm_drop_after(Opcode.CREATES, 1)
        tg.start_soon(attempt_acquire, lock, acquire_timeout, out)
        with anyio.fail_after(5):
            if where == "waiting":
                await waiting.wait()
            else:
                await states.wait_for(is_state(SessionState.SUSPENDED))
        # The server executed the create: exactly one node carries our GUID.
        ours = await guid_nodes(observer, parent, guid)
        assert len(ours) == 1, ours
        if where == "waiting":
            assert lock.statistics().node == ours[0]  # found by GUID and adopted
        deletion = DeletionWatch(observer, f"{parent}/{ours[0]}")
        await deletion.arm()
        tg.start_soon(deletion.run)

        if end == "cancel":
            out.scope.cancel()
        with anyio.fail_after(5):
            await out.done.wait()
        assert not out.acquired
        if end == "cancel":
            assert out.scope.cancelled_caught, "the cancellation must propagate"
            assert out.error is None
        else:
            assert isinstance(out.error, aiozklock.LockTimeout), out.error
        assert not lock.is_held
        if where == "waiting":
            # Connected: a cancelled acquire confirmed its cleanup before it ended ("nothing
            # of ours is left in the queue"), so another session no longer sees the node; a
            # timed-out one wrote its delete without waiting for it (its time was up), so
            # its own session, whose next request is ordered after it, sees the node gone.
            seen_by = holder_client if end == "cancel" else client
            assert await seen_by.exists(f"{PATH}/{ours[0]}") is None
        if where == "disconnected":
            assert remove_listener is not None
            remove_listener()
            assert client.state is SessionState.SUSPENDED  # it ended while disconnected
            proxy.blackhole(False)
        with anyio.fail_after(5):
            reconnected = await states.wait_for(is_state(SessionState.CONNECTED))
        cleanup_from = out.ended if where == "waiting" else max(out.ended, reconnected.at)
        with anyio.fail_after(5):
            await deletion.deleted.wait()
    cleanup = deletion.deleted_at - cleanup_from
    if where == "waiting":
        report("F2", case=case, end_to_deleted=cleanup)
    else:
        report(
            "F2",
            case=case,
            end_to_reconnect=reconnected.at - out.ended,
            reconnect_to_deleted=cleanup,
        )
    assert proxy.swallowed_replies == 1
    assert proxy.count(Opcode.CREATE2) == 1  # never resent blindly
    if where == "disconnected":  # (waiting: seen gone by the time the acquire ended, above)
        assert sent_upon_reconnect(proxy, Opcode.DELETE)
    # Deleted by us, in a session that stayed alive: not by an expiry.
    assert client.session_id == session_id
    assert states.first(is_state(SessionState.LOST)) is None, states.changes
    assert set(proxy.session_ids) == {session_id}
    assert await guid_nodes(observer, parent, guid) == []
    assert await guid_nodes(observer, parent, lock._queue.guid) == []
    assert session_of(client).watcher_count() == baseline_watchers
    # Reusable: the same object gets the lock once it is free, with a newer token.
    holder_token = holder.fencing_token
    await holder.release()
    with anyio.fail_after(5):
        async with lock.acquire(timeout=2):
            assert lock.is_held
            assert lock.fencing_token > holder_token
            assert await observer.get_children(parent) == [lock.statistics().node]
    # The release is ordered before the client's next request: it sees nothing left.
    await gone(client, PATH)


# --- F5: release with a dead or black-holed connection ----------------------------------------


# A livelock (an await that never yields) cannot be bounded by fail_after: pytest-timeout is.
# A healthy run takes < 0.1 s (its fixtures, with servers on a loaded machine, seconds).
@pytest.mark.timeout(30)
@pytest.mark.parametrize("when", ["at-once", "in-teardown", "after-suspended"])
@pytest.mark.parametrize("policy", ["suspended", "expired"])
async def test_release_right_after_connection_drop(
    policy: aiozklock.LossPolicy,
    when: str,
    proxy: FaultProxy,
    open_client: ClientFactory,
    observer: RawZooKeeperConnection,  # noqa: F811
    chroot: str,
) -> None:
    """F5: the holder's connection is reset right before ``release()``: at once; exactly while
    the client tears the connection down (it has read the reset, not yet reported SUSPENDED);
    or once it has reported SUSPENDED. Either release returns and the node is already gone, or it
    raises ``LockLost`` (the "suspended" policy gave the lock up first) and the node is deleted
    on the reconnect (its first business), in the same session. The queued client acquires
    either way: the lock is never left held by nobody."""
    client = await open_client(proxy, session_timeout=STEADY_TIMEOUT, loss_policy=policy)
    other = await open_client(session_timeout=STEADY_TIMEOUT)
    session_id = client.session_id
    history = History()
    lock = client.lock(PATH, identifier="holder")
    waiter = WaiterOutcome()
    states = StateLog(client)

    await lock.acquire()
    enter = time.monotonic()
    token = lock.fencing_token
    node = lock.statistics().node
    assert node is not None
    async with anyio.create_task_group() as tg:
        tg.start_soon(acquire_once, other.lock(PATH, identifier="waiter"), waiter, history, "w")
        with anyio.fail_after(5):
            await wait_for_queue(other, PATH, 2)
        deletion = DeletionWatch(observer, f"{chroot}{PATH}/{node}")
        await deletion.arm()
        tg.start_soon(deletion.run)

        await proxy.drop_all()
        if when == "after-suspended":
            with anyio.fail_after(2):
                await states.wait_for(is_state(SessionState.SUSPENDED))
        elif when == "in-teardown":
            # Polled at every checkpoint: the first moment the session has let the
            # connection go (it is closing it, and reports SUSPENDED after that).
            with anyio.fail_after(2):
                while connection_of(session_of(client)) is not None:
                    await anyio.lowlevel.checkpoint()
        state_at_release = client.state
        release_called = time.monotonic()
        history.record("holder", token, enter, release_called)  # it stops acting here
        outcome = "released"
        try:
            await lock.release(confirm=True)  # the nowait release: tests/test_release.py
        except aiozklock.LockLost:
            outcome = "lost"
        returned = time.monotonic()
        if outcome == "released":
            # Released means gone: the server says so right now.
            assert await other.exists(f"{PATH}/{node}") is None
        with anyio.fail_after(5):
            reconnected = await states.wait_for(is_state(SessionState.CONNECTED))
            await deletion.deleted.wait()
            await waiter.acquired.wait()
    report(
        "F5-drop",
        policy=policy,
        when=when,
        state_at_release=state_at_release.value,
        outcome=outcome,
        release_call=returned - release_called,
        reconnect_to_deleted=deletion.deleted_at - reconnected.at,
        release_to_waiter=waiter.acquired_at - release_called,
    )
    if policy == "expired":
        # A dropped connection is not a loss for this policy: release() deletes the node.
        assert outcome == "released"
    elif when == "after-suspended":
        assert outcome == "lost"  # given up at SUSPENDED, before release() was called
    assert not lock.is_held
    # Deleted on the connection it came back on (one reconnect), as its first business.
    assert len(proxy.connect_requests) == 2
    assert sent_upon_reconnect(proxy, Opcode.DELETE)
    assert waiter.acquired_at - release_called < STEADY_TIMEOUT / 2  # far from any expiry
    assert waiter.token > token
    # The session survived: the node was deleted by us, not by an expiry.
    assert client.session_id == session_id
    assert states.first(is_state(SessionState.LOST)) is None, states.changes
    report_ = history.check()
    assert report_.ok, str(report_)
    await gone(other, PATH)


# A partition of 0.3 x the session timeout ends before our silence detection (timeout/2 after the
# last reply) can see it.
HELD_PARTITION = 0.3


@pytest.mark.timeout(30)
@pytest.mark.parametrize("lift", ["before-silence", "after-suspended"])
async def test_release_during_short_partition(
    lift: str,
    proxy: FaultProxy,
    open_client: ClientFactory,
    observer: RawZooKeeperConnection,  # noqa: F811
    chroot: str,
) -> None:
    """F5: ``release()`` starts inside a partition shorter than the session timeout: it waits
    ("before-silence": 0.3 x the timeout, the delete is merely held; "after-suspended": the
    partition lasts until the silence is detected, SUSPENDED, and the delete is settled after
    the reconnect), returns only once the node is gone, keeps the session, and the queued
    client acquires right after."""
    client = await open_client(proxy, session_timeout=TIMEOUT)
    other = await open_client(session_timeout=STEADY_TIMEOUT)
    session_id = client.session_id
    history = History()
    lock = client.lock(PATH, identifier="holder")
    waiter = WaiterOutcome()
    states = StateLog(client)
    held_while_partitioned: list[bool] = []
    lifted_at: list[float] = []

    async def partition(fault_at: float) -> None:
        """Holds the partition, then lifts it."""
        with anyio.fail_after(5):  # a hang bound
            await proxy.wait_for_request(Opcode.DELETE)  # release() sent it into the partition
        # The delete is held: the node is still there, and release() has not returned.
        held_while_partitioned.append(await other.exists(f"{PATH}/{node}") is not None)
        if lift == "after-suspended":
            # Lifted as soon as the silence is detected: the event, not a fixed time, so that
            # the reconnect has what is left of the session (0.9 - 0.5 of the timeout after
            # the last reply) however late this task runs.
            with anyio.fail_after(TIMEOUT):  # a hang bound: our LOST deadline comes first
                await states.wait_for(is_state(SessionState.SUSPENDED))
        else:
            await anyio.sleep(fault_at + HELD_PARTITION * TIMEOUT - time.monotonic())  # hold it
        lifted_at.append(time.monotonic())
        proxy.blackhole(False)

    await lock.acquire()
    enter = time.monotonic()
    token = lock.fencing_token
    node = lock.statistics().node
    assert node is not None
    async with anyio.create_task_group() as tg:
        tg.start_soon(acquire_once, other.lock(PATH, identifier="waiter"), waiter, history, "w")
        with anyio.fail_after(5):
            await wait_for_queue(other, PATH, 2)
        deletion = DeletionWatch(observer, f"{chroot}{PATH}/{node}")
        await deletion.arm()
        tg.start_soon(deletion.run)

        await client.exists("/")  # the last exchange before the partition
        fault_at = time.monotonic()
        proxy.blackhole(True)
        proxy.reset_counters()
        tg.start_soon(partition, fault_at)
        history.record("holder", token, enter, fault_at)  # it stops acting here
        with anyio.fail_after(3 * TIMEOUT):  # a hang bound
            # Confirmed, to see it settle (the nowait release: tests/test_release.py).
            await lock.release(confirm=True)  # raises if anything goes wrong: none is expected
        returned_at = time.monotonic()
        assert lifted_at, "release() returned during the partition"
        # Released means gone: the server says so right now.
        assert await other.exists(f"{PATH}/{node}") is None
        with anyio.fail_after(5):
            await deletion.deleted.wait()
            await waiter.acquired.wait()
    report(
        "F5-partition",
        lift=lift,
        states=",".join(states.states()) or "-",
        release_call=returned_at - fault_at,
        lift_to_return=returned_at - lifted_at[0],
        release_to_waiter=waiter.acquired_at - returned_at,
    )
    assert held_while_partitioned == [True]
    assert not lock.is_held
    assert returned_at > lifted_at[0]
    # Handshakes since the partition began: none (the held delete answered on the same
    # connection), or the one reconnect whose first business was the delete.
    if lift == "before-silence":
        assert proxy.connect_requests == []
    else:
        assert len(proxy.connect_requests) == 1
        assert sent_upon_reconnect(proxy, Opcode.DELETE)
    assert waiter.token > token
    assert client.session_id == session_id
    assert states.first(is_state(SessionState.LOST)) is None, states.changes
    if lift == "after-suspended":
        # Nothing heard for half the timeout: detected, and the session kept across it.
        assert states.states() == ["SUSPENDED", "CONNECTED"], states.changes
        assert states.changes[0].reason.startswith("nothing heard"), states.changes
        assert set(proxy.session_ids) == {session_id}
    report_ = history.check()
    assert report_.ok, str(report_)
    await gone(other, PATH)


# --- F8: partition shorter than the session timeout, under both loss policies -----------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("policy", ["suspended", "expired"])
async def test_partition_shorter_than_session_timeout(
    policy: aiozklock.LossPolicy,
    proxy: FaultProxy,
    waiter_proxy: FaultProxy,
    open_client: ClientFactory,
    observer: RawZooKeeperConnection,  # noqa: F811
    chroot: str,
) -> None:
    """F8: holder and waiter are both partitioned until both have seen it (silence: half the
    session timeout), then at once healed, long before our LOST deadline. Both come
    back in the same session. "suspended": the holder's body is cancelled at SUSPENDED with
    ``LockLost`` and its node deleted after the reconnect. "expired": the holder keeps the lock
    (same node, not cancelled). The waiter re-checks the queue after its reconnect and acquires
    only after the holder's node is gone."""
    holder_client = await open_client(proxy, session_timeout=TIMEOUT, loss_policy=policy)
    waiter_client = await open_client(waiter_proxy, session_timeout=TIMEOUT)
    direct = await open_client(session_timeout=STEADY_TIMEOUT)  # reads the server, not partitioned
    sessions = (holder_client.session_id, waiter_client.session_id)
    history = History()
    release = anyio.Event()
    holder = HolderOutcome()
    waiter = WaiterOutcome()
    holder_states, waiter_states = StateLog(holder_client), StateLog(waiter_client)

    async with anyio.create_task_group() as tg:
        lock = holder_client.lock(PATH, identifier="holder")
        tg.start_soon(hold_until_cancelled, lock, holder, history, "holder", release)
        with anyio.fail_after(5):
            await holder.entered.wait()
            tg.start_soon(
                acquire_once, waiter_client.lock(PATH, identifier="w"), waiter, history, "w"
            )
            await wait_for_queue(holder_client, PATH, 2)
            await waiter_proxy.wait_for_request(Opcode.EXISTS)
        deletion = DeletionWatch(observer, f"{chroot}{PATH}/{holder.node}")
        await deletion.arm()
        tg.start_soon(deletion.run)

        await holder_client.exists("/")
        await waiter_client.exists("/")
        waiter_proxy.reset_counters()
        fault_at = time.monotonic()
        proxy.blackhole(True)
        waiter_proxy.blackhole(True)
        # The partition must outlast the silence threshold (timeout/2 after the last reply)
        # to be seen at all, and end well before our LOST deadline (0.9 x timeout after the
        # last answered request). It is held until both clients have seen it ("suspended":
        # and the holder's body was cancelled, during the partition), then lifted at once:
        # events, not a fixed time, so the reconnects keep what is left of the sessions
        # however late this task runs.
        with anyio.fail_after(TIMEOUT):  # a hang bound: our LOST deadline comes first
            await holder_states.wait_for(is_state(SessionState.SUSPENDED))
            await waiter_states.wait_for(is_state(SessionState.SUSPENDED))
            if policy == "suspended":
                await holder.done.wait()
        lifted_at = time.monotonic()
        proxy.blackhole(False)
        waiter_proxy.blackhole(False)
        with anyio.fail_after(TIMEOUT):
            holder_back = await holder_states.wait_for(is_state(SessionState.CONNECTED))
            waiter_back = await waiter_states.wait_for(is_state(SessionState.CONNECTED))
        # Each side's handshakes so far: what follows happens on the connection it came
        # back on (a grant or a delete that needed another reconnect would add one).
        handshakes = (len(proxy.connect_requests), len(waiter_proxy.connect_requests))
        for log in (holder_states, waiter_states):
            assert log.states()[:2] == ["SUSPENDED", "CONNECTED"], log.changes
        assert (holder_client.session_id, waiter_client.session_id) == sessions
        assert set(proxy.session_ids) == {sessions[0]}
        assert set(waiter_proxy.session_ids) == {sessions[1]}
        # The waiter was woken by the state change and lists the queue again on its new
        # connection.
        with anyio.fail_after(5):  # a hang bound
            await waiter_proxy.wait_for_request(Opcode.GET_CHILDREN)
        new_connection = waiter_proxy.connect_requests[-1].connection_index
        assert any(
            r.opcode == Opcode.GET_CHILDREN and r.connection_index == new_connection
            for r in waiter_proxy.requests
        )
        suspended = holder_states.first(is_state(SessionState.SUSPENDED))
        assert suspended is not None

        if policy == "expired":
            # Same session, same node: the lock is still ours, the body still runs.
            with anyio.fail_after(5):  # a hang bound
                await waiter_proxy.wait_for_request(Opcode.EXISTS)  # watching the holder again
                await waiter_client.exists("/")
            assert not holder.done.is_set()
            stat = await direct.exists(f"{PATH}/{holder.node}")
            assert stat is not None
            assert stat.ephemeral_owner == sessions[0]
            assert stat.czxid == holder.token
            assert not waiter.acquired.is_set()
            released_at = time.monotonic()
            release.set()
            with anyio.fail_after(5):
                await holder.done.wait()
                await waiter.acquired.wait()
                await deletion.deleted.wait()
            assert holder.held_at_release is True
            assert holder.error is None
            assert not holder.body_cancelled
        else:
            with anyio.fail_after(5):
                await holder.done.wait()
                await deletion.deleted.wait()
                await waiter.acquired.wait()
            assert holder.body_cancelled
            assert isinstance(holder.error, aiozklock.LockLost), holder.error
            assert holder.body_exit is not None
            assert holder.body_exit - suspended.at < 0.5
            assert holder.body_exit < lifted_at  # cancelled during the partition
            released_at = holder.body_exit
            # Deleted after the reconnect, by us (the session is alive), not by an expiry.
            assert deletion.deleted_at > holder_back.at
    report(
        "F8",
        policy=policy,
        fault_to_suspended=suspended.at - fault_at,
        fault_to_lift=lifted_at - fault_at,
        lift_to_holder_back=holder_back.at - lifted_at,
        lift_to_waiter_back=waiter_back.at - lifted_at,
        release_to_waiter=waiter.acquired_at - released_at,
    )
    assert waiter.acquired_at > released_at
    # Prompt by cause, not by a clock: the holder deleted its node and the waiter was
    # granted on the connections they came back on (no silence, no expiry in between).
    assert (len(proxy.connect_requests), len(waiter_proxy.connect_requests)) == handshakes
    assert waiter.token > holder.token
    assert holder.is_held_after is False
    for log in (holder_states, waiter_states):
        assert log.first(is_state(SessionState.LOST)) is None, log.changes
    report_ = history.check()
    assert report_.ok, str(report_)
    await gone(waiter_client, PATH)


# --- F15: the watch race, deterministic and under load ----------------------------------------


def delete_from_another_thread(address: str, path: str) -> float:
    """Delete ``path`` through a raw connection of our own, on an event loop in another
    thread, and return when the server confirmed it (``time.monotonic()``). Blocks the
    calling thread: called from the lock's hook, it freezes the waiter's whole event loop at
    that point while the server deletes the node and queues the NodeDeleted to the waiter."""
    confirmed: list[float] = []
    errors: list[BaseException] = []

    async def delete() -> None:
        async with await RawZooKeeperConnection.open(address) as conn:
            await conn.delete(path)
            confirmed.append(time.monotonic())

    def run() -> None:
        try:
            anyio.run(delete, backend="asyncio")
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name="f15-delete")
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive(), "the delete thread did not finish"
    assert not errors, errors
    return confirmed[0]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("how", ["released-by-holder", "deleted-before-wait"])
async def test_predecessor_gone_between_check_and_wait(
    how: str,
    open_client: ClientFactory,
    observer: RawZooKeeperConnection,  # noqa: F811
    zk_hosts: str,
    chroot: str,
) -> None:
    """F15 (deterministic): the predecessor goes away between the waiter's existence check
    (node there, watch set) and its wait, via ``on_wait`` (tests/conftest.py): either its
    holder is told to release at that instant, or the hook blocks the waiter's event loop until the
    server has deleted it (the NodeDeleted is then already queued for the waiter). No
    wake-up is lost: the waiter acquires (a lost one would hang it: see the note above
    ``guid_nodes``), and no watch is left behind."""
    client = await open_client(session_timeout=STEADY_TIMEOUT)
    holder_client = await open_client(session_timeout=STEADY_TIMEOUT)
    history = History()
    lock = client.lock(PATH, identifier="waiter")
    baseline_watchers = session_of(client).watcher_count()
    hook_calls: list[float] = []
    gone_at: list[float] = []
    release_now = anyio.Event()
    held = anyio.Event()
    waiter = WaiterOutcome()

    async def hold() -> None:
        holder = holder_client.lock(PATH, identifier="holder")
        async with holder:
            with history.section("holder", holder.fencing_token):
                held.set()
                await release_now.wait()
        gone_at.append(time.monotonic())  # the holder's delete is confirmed

    if how == "released-by-holder":

        def hook() -> None:
            hook_calls.append(time.monotonic())
            release_now.set()

    else:
        # The predecessor: a contender's node made by a raw session of its own.
        await holder_client.ensure_path(PATH)
        predecessor = await observer.create(
            f"{chroot}{PATH}/{random.Random(15).getrandbits(64):032x}-lock-",
            ephemeral=True,
            sequential=True,
        )

        def hook() -> None:
            hook_calls.append(time.monotonic())
            gone_at.append(delete_from_another_thread(first_host(zk_hosts), predecessor))

    on_wait(lock._queue, hook)
    async with anyio.create_task_group() as tg:
        if how == "released-by-holder":
            tg.start_soon(hold)
            with anyio.fail_after(5):
                await held.wait()
        tg.start_soon(acquire_once, lock, waiter, history, "waiter")
        with anyio.fail_after(5):
            await waiter.acquired.wait()
    assert len(hook_calls) == 1  # it really waited once, on a node that existed
    assert len(gone_at) == 1
    report("F15-race", how=how, gone_to_acquired=waiter.acquired_at - gone_at[0])
    assert waiter.acquired_at >= hook_calls[0]
    assert session_of(client).watcher_count() == baseline_watchers
    report_ = history.check()
    assert report_.ok, str(report_)
    await gone(client, PATH)


F15_HANDOFFS = 300
F15_ACQUIRE_BOUND = 5.0  # seconds; a lost wake-up would wait forever


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_fast_handoffs_lose_no_wakeup(open_client: ClientFactory) -> None:
    """F15 (load): 3 clients hand one lock to each other 300 times, each holding it 0-3 ms
    (seeded). Every acquire ends within its bound (no lost wake-up); the history has exactly
    300 sections, no overlap, increasing tokens; an unprotected read-modify-write counter
    ends at exactly 300; nothing is left in the queue, and no watch is left behind."""
    rng = random.Random(20150315)
    clients = {name: await open_client(session_timeout=STEADY_TIMEOUT) for name in ("a", "b", "c")}
    history = History()
    waits: list[float] = []
    counter = 0
    sections = 0

    async def worker(name: str, client: aiozklock.ZooKeeperClient) -> None:
        nonlocal counter, sections
        lock = client.lock(PATH, identifier=name)
        while sections < F15_HANDOFFS:
            started = time.monotonic()
            await lock.acquire(timeout=F15_ACQUIRE_BOUND)
            waits.append(time.monotonic() - started)
            try:
                if sections >= F15_HANDOFFS:
                    break
                enter = time.monotonic()
                value = counter
                await anyio.sleep(rng.uniform(0, 0.003))
                counter = value + 1
                sections += 1
                history.record(name, lock.fencing_token, enter, time.monotonic())
            finally:
                await lock.release()

    started = time.monotonic()
    with anyio.fail_after(50):
        async with anyio.create_task_group() as tg:
            for name, client in clients.items():
                tg.start_soon(worker, name, client)
    elapsed = time.monotonic() - started
    ordered = sorted(history.sections, key=lambda s: s.enter)
    handoffs = sum(1 for a, b in itertools.pairwise(ordered) if a.client != b.client)
    report(
        "F15-load",
        sections=len(history.sections),
        handoffs=handoffs,
        elapsed=elapsed,
        max_wait=max(waits),
        per_section_ms=1000 * elapsed / F15_HANDOFFS,
    )
    report_ = history.check()
    assert report_.ok, str(report_)
    assert report_.sections == F15_HANDOFFS
    assert counter == F15_HANDOFFS
    assert max(waits) < F15_ACQUIRE_BOUND
    # FIFO: a released lock goes to the next in line, and the others are always in line.
    assert handoffs >= F15_HANDOFFS // 2
    for client in clients.values():
        assert session_of(client).watcher_count() == 0
    await gone(clients["a"], PATH)  # the last release may be another session's


# --- F11: the ZooKeeper server is frozen longer than the session timeout ------------------------


@pytest.fixture(scope="module")
def frozen_server() -> Iterator[ZooKeeperCluster]:
    """A standalone server of this module's own: F11 freezes it (the shared one is never)."""
    cluster = ZooKeeperCluster(1).start()
    try:
        yield cluster
    finally:
        cluster.close()


F11_FREEZE = 1.5  # x the session timeout


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("policy", ["suspended", "expired"])
async def test_server_frozen_longer_than_session_timeout(
    policy: aiozklock.LossPolicy, frozen_server: ZooKeeperCluster, chroot: str
) -> None:
    """F11: the only server is SIGSTOPped for 1.5 x the session timeout (and at least until
    both clients have given their sessions up), then resumed.

    Guaranteed, whatever the server does with its session timers on SIGCONT (expire at once,
    or re-arm them): the holder's body is cancelled *before* the resume (at SUSPENDED, or at
    the proof's horizon with "expired"), so no re-grant can overlap it; no session is given
    up by our clock (only a server can say it expired); after the resume each client serves
    its old session if the server kept it, or a new one after the server refused the old;
    the holder's node goes (the server's expiry, or our janitor in a kept session) within
    one timeout; the waiter acquires only after that; the server is left serving."""
    (member,) = frozen_server.members
    await frozen_server.await_serving(timeout=30)
    hosts = frozen_server.hosts + chroot
    history = History()
    holder = HolderOutcome()
    waiter = WaiterOutcome()
    resumed_at: float | None = None
    async with AsyncExitStack() as stack:
        # The observer's own session (30 s) outlives the freeze under any server behaviour.
        observer_conn = await stack.enter_async_context(
            await RawZooKeeperConnection.open(member.address, session_timeout_ms=30_000)
        )
        holder_client = await stack.enter_async_context(
            aiozklock.connect(hosts, session_timeout=TIMEOUT, loss_policy=policy)
        )
        waiter_client = await stack.enter_async_context(
            aiozklock.connect(hosts, session_timeout=TIMEOUT)
        )
        old_sessions = (holder_client.session_id, waiter_client.session_id)
        old_password = holder_client.session_password
        holder_states, waiter_states = StateLog(holder_client), StateLog(waiter_client)
        try:
            async with anyio.create_task_group() as tg:
                lock = holder_client.lock(PATH, identifier="holder")
                tg.start_soon(hold_until_cancelled, lock, holder, history, "holder")
                with anyio.fail_after(5):
                    await holder.entered.wait()
                    tg.start_soon(
                        acquire_once, waiter_client.lock(PATH, identifier="w"), waiter, history, "w"
                    )
                    await wait_for_queue(holder_client, PATH, 2)
                deletion = DeletionWatch(observer_conn, f"{chroot}{PATH}/{holder.node}")
                await deletion.arm()
                tg.start_soon(deletion.run)

                await holder_client.exists("/")
                await waiter_client.exists("/")
                frozen_at = time.monotonic()
                await anyio.to_thread.run_sync(member.pause)
                # The freeze is held for F11_FREEZE x timeout, and in any case until the
                # holder's body has stopped (an event: a loaded machine may get there late).
                with anyio.fail_after(3 * TIMEOUT):  # a hang bound
                    await holder.done.wait()
                await anyio.sleep(max(0.0, frozen_at + F11_FREEZE * TIMEOUT - time.monotonic()))
                resumed_at = time.monotonic()
                await anyio.to_thread.run_sync(member.resume)
                with anyio.fail_after(TIMEOUT + 3):
                    await deletion.deleted.wait()
                    await waiter.acquired.wait()
                    holder_back = await holder_states.wait_for(
                        lambda c: c.state is SessionState.CONNECTED and c.at > resumed_at
                    )
        finally:
            if resumed_at is None or member.paused:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(member.resume)
        suspended = holder_states.first(is_state(SessionState.SUSPENDED))
        assert suspended is not None
        assert holder.body_exit is not None
        report(
            "F11",
            policy=policy,
            fault_to_cancel=holder.body_exit - frozen_at,
            resume_to_node_deleted=deletion.deleted_at - resumed_at,
            resume_to_reconnected=holder_back.at - resumed_at,
            resume_to_waiter=waiter.acquired_at - resumed_at,
        )
        # Cancelled while the server was still frozen: nothing can have been re-granted.
        assert holder.body_cancelled
        assert not holder.cancellation_escaped
        assert isinstance(holder.error, aiozklock.LockLost), holder.error
        assert holder.is_held_after is False
        assert holder.body_exit < resumed_at
        if policy == "suspended":
            assert holder.body_exit - suspended.at < 0.5
        else:  # at the proof's horizon, not at LOST (the session is kept a timeout longer)
            assert "unproven" in str(holder.error), holder.error
            assert holder.body_exit >= suspended.at
        # No clock of ours gave a session up during the freeze (a resumed server may keep
        # it); after the resume each client serves its old session, if the server kept it,
        # or a new one, the server having said the old one expired.
        for log, old in zip((holder_states, waiter_states), old_sessions, strict=True):
            lost_changes = [c for c in log.changes if c.state is SessionState.LOST]
            assert all(c.at > resumed_at and "server" in c.reason for c in lost_changes), log
            after = [
                c for c in log.changes if c.state is SessionState.CONNECTED and c.at > resumed_at
            ]
            assert after, log.changes
            assert all(c.session_id == old for c in after) or lost_changes, log.changes
        # The server got rid of the old session and its node, within one timeout of the
        # resume, and the lock went to the waiter only then.
        assert deletion.deleted_at > resumed_at
        assert deletion.deleted_at - resumed_at < TIMEOUT + 0.5
        assert waiter.acquired_at - resumed_at < TIMEOUT + 1.0
        assert waiter.token > holder.token
        if holder_client.session_id != old_sessions[0]:  # replaced: the old one is refused
            with pytest.raises((RawSessionExpired, RawConnectionClosed)):
                await RawZooKeeperConnection.open(
                    member.address, session_id=old_sessions[0], password=old_password
                )
        report_ = history.check()
        assert report_.ok, str(report_)
        # Left serving, and usable.
        assert await anyio.to_thread.run_sync(member.mode) == "standalone"
        async with holder_client.lock(PATH).acquire(timeout=5):
            pass
        await gone(holder_client, PATH)


# --- F13: an ensemble follower is frozen --------------------------------------------------------


class FirstHostFirst:
    """Stands in for the ``random`` module inside the session: the first connection goes to
    the first host of the list (the session starts at ``randrange(n) + 1``); the jitter of
    the reconnect back-off is untouched."""

    @staticmethod
    def randrange(n: int) -> int:
        return n - 1

    random = staticmethod(random.random)


F13_FREEZE = 1.1  # x the session timeout


@pytest.mark.ensemble
@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_frozen_follower_clients_fail_over(
    zk_ensemble: ZooKeeperCluster, chroot: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """F13: the follower that a holder ("expired" policy) and a waiter are connected to is
    SIGSTOPped for 1.1 x the session timeout. Both fail over to another member within the
    session timeout, in the same sessions (never LOST); the lock stays held and the waiter
    re-checks; meanwhile ``connect`` with the frozen member first in its host list connects
    within ``connect_timeout``, and with only the frozen member fails within it. After the
    resume the member serves again, and the lock passes on to the waiter."""
    timeout = ENSEMBLE_FAULT_TIMEOUT
    await zk_ensemble.await_serving(timeout=30)
    frozen = (await anyio.to_thread.run_sync(zk_ensemble.followers))[0]
    others = [m for m in zk_ensemble.members if m is not frozen]
    host_list = ",".join([frozen.address, *(m.address for m in others)])
    monkeypatch.setattr(session_module, "random", FirstHostFirst)
    history = History()
    release = anyio.Event()
    holder = HolderOutcome()
    waiter = WaiterOutcome()
    connects: dict[str, float] = {}
    connect_errors: dict[str, BaseException] = {}
    connected_to: dict[str, str] = {}

    async def connect_during_freeze(name: str, hosts: str, connect_timeout: float) -> None:
        started = time.monotonic()
        try:
            async with aiozklock.connect(
                hosts + chroot, session_timeout=timeout, connect_timeout=connect_timeout
            ) as client:
                connected_to[name] = session_of(client)._current_host()
                await client.exists("/")
        except aiozklock.ZooKeeperUnavailable as exc:
            connect_errors[name] = exc
        finally:
            connects[name] = time.monotonic() - started

    resumed = False
    try:
        async with AsyncExitStack() as stack:
            clients = {
                name: await stack.enter_async_context(
                    aiozklock.connect(
                        host_list + chroot,
                        session_timeout=timeout,
                        connect_timeout=10,
                        loss_policy=policy,
                    )
                )
                for name, policy in (("holder", "expired"), ("waiter", "suspended"))
            }
            for client in clients.values():
                assert session_of(client)._current_host() == frozen.address
            sessions = {name: c.session_id for name, c in clients.items()}
            logs = {name: StateLog(c) for name, c in clients.items()}
            async with anyio.create_task_group() as tg:
                lock = clients["holder"].lock(PATH, identifier="holder")
                tg.start_soon(hold_until_cancelled, lock, holder, history, "holder", release)
                with anyio.fail_after(10):
                    await holder.entered.wait()
                    waiter_lock = clients["waiter"].lock(PATH, identifier="waiter")
                    tg.start_soon(acquire_once, waiter_lock, waiter, history, "waiter")
                    await wait_for_queue(clients["holder"], PATH, 2)
                for client in clients.values():
                    await client.exists("/")  # the last exchange before the freeze

                frozen_at = time.monotonic()
                await anyio.to_thread.run_sync(frozen.pause)
                tg.start_soon(connect_during_freeze, "frozen-first", host_list, 3.0)
                tg.start_soon(connect_during_freeze, "frozen-only", frozen.address, 1.5)
                with anyio.fail_after(timeout):
                    backs = {
                        name: await log.wait_for(is_state(SessionState.CONNECTED))
                        for name, log in logs.items()
                    }
                for name, client in clients.items():
                    assert session_of(client)._current_host() != frozen.address
                    assert client.session_id == sessions[name]
                    assert logs[name].states()[:2] == ["SUSPENDED", "CONNECTED"], logs[name]
                # Still held, by the same session; the waiter is still waiting.
                assert not holder.done.is_set()
                stat = await clients["waiter"].exists(f"{PATH}/{holder.node}")
                assert stat is not None
                assert stat.ephemeral_owner == sessions["holder"]
                assert not waiter.acquired.is_set()
                await anyio.sleep(frozen_at + F13_FREEZE * timeout - time.monotonic())  # hold
                resumed_at = time.monotonic()
                await anyio.to_thread.run_sync(frozen.resume)
                resumed = True
                # srvr may still answer from before the freeze for a few ms: the member
                # serves again once a session and a lock round trip work through it alone.
                await frozen.await_serving(timeout=30)
                async with aiozklock.connect(
                    frozen.address + chroot, session_timeout=timeout, connect_timeout=10
                ) as direct:
                    with anyio.fail_after(10):
                        async with direct.lock("/locks/f13-probe").acquire(timeout=5):
                            pass
                serving_at = time.monotonic()
                # Every session is intact after the resume: each still answers.
                for client in clients.values():
                    with anyio.fail_after(5):
                        await client.exists("/")
                assert not waiter.acquired.is_set()
                released_at = time.monotonic()
                release.set()
                with anyio.fail_after(5):
                    await waiter.acquired.wait()
                    await holder.done.wait()
    finally:
        if not resumed:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(frozen.resume)
                await zk_ensemble.await_serving(timeout=30)
    failover = {name: back.at - frozen_at for name, back in backs.items()}
    report(
        "F13",
        failover_holder=failover["holder"],
        failover_waiter=failover["waiter"],
        connect_frozen_first=connects["frozen-first"],
        connect_frozen_only=connects["frozen-only"],
        resume_to_serving=serving_at - resumed_at,
        release_to_waiter=waiter.acquired_at - released_at,
    )
    # Failed over after the silence (timeout/2 after the last frame heard: the session's own
    # clock, exact whenever this process ran), or sooner when a probe through the leader went
    # unanswered for a sixth of the timeout; well before the session could expire.
    for name, log in logs.items():
        suspended = log.first(is_state(SessionState.SUSPENDED))
        assert suspended is not None
        if suspended.reason.startswith("nothing heard"):
            assert suspended.at >= log.clock(suspended).last_heard + timeout / 2
        else:
            assert suspended.reason.startswith("no answer through the leader"), (name, suspended)
        assert failover[name] < timeout
    for name, log in logs.items():
        assert log.first(is_state(SessionState.LOST)) is None, (name, log.changes)
    # connect() does not hang on a frozen member.
    assert "frozen-first" not in connect_errors, connect_errors
    assert connected_to["frozen-first"] != frozen.address
    assert connects["frozen-first"] < 3.0
    assert isinstance(connect_errors.get("frozen-only"), aiozklock.ZooKeeperUnavailable)
    # Given up at its connect_timeout (1.5 s), plus unwinding (the session timeout is 4 s).
    assert connects["frozen-only"] < 2 * 1.5
    # The lock went on normally.
    assert holder.error is None
    assert not holder.body_cancelled
    assert holder.held_at_release is True
    assert waiter.acquired_at > released_at
    assert waiter.token > holder.token
    report_ = history.check()
    assert report_.ok, str(report_)


# --- F14: the ensemble loses its quorum ---------------------------------------------------------

F14_OUTAGE = 1.1  # x the session timeout


@pytest.mark.ensemble
@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_quorum_loss_cancels_holders_and_regrants_cleanly(
    zk_ensemble: ZooKeeperCluster, chroot: str
) -> None:
    """F14: 2 of 3 members (the leader among them) are killed for 1.1 x the session timeout
    (and at least until both holders have stopped) and restarted. Two locks, each with a
    holder and a waiter: the "suspended" holder is cancelled at SUSPENDED, the "expired" one
    at the proof's horizon, both before the quorum is back. No session is given up by our
    clock: once the quorum is back, the new leader revives every session with a fresh timeout
    and each client serves its own again (or a new one, if a server says the old expired);
    the holders' nodes go (our janitor deletes them in the kept sessions), each lock is
    granted to its waiter, with no overlap and increasing tokens; the old lock objects are
    usable again."""
    timeout = ENSEMBLE_FAULT_TIMEOUT
    await zk_ensemble.await_serving(timeout=30)
    hosts = zk_ensemble.hosts + chroot
    paths = {"suspended": "/locks/quorum-a", "expired": "/locks/quorum-b"}
    histories = {policy: History() for policy in paths}
    holders = {policy: HolderOutcome() for policy in paths}
    waiters = {policy: WaiterOutcome() for policy in paths}
    victims: list[ZooKeeperMember] = []
    quorum_at: float | None = None
    try:
        async with AsyncExitStack() as stack:

            async def client(**kwargs: Any) -> aiozklock.ZooKeeperClient:
                return await stack.enter_async_context(
                    aiozklock.connect(hosts, session_timeout=timeout, connect_timeout=10, **kwargs)
                )

            holder_clients = {policy: await client(loss_policy=policy) for policy in paths}
            waiter_clients = {policy: await client() for policy in paths}
            all_clients = [*holder_clients.values(), *waiter_clients.values()]
            old_sessions = {id(c): c.session_id for c in all_clients}
            logs = {id(c): StateLog(c) for c in all_clients}
            holder_locks = {
                policy: holder_clients[policy].lock(path, identifier=f"holder-{policy}")
                for policy, path in paths.items()
            }
            async with anyio.create_task_group() as tg:
                for policy, path in paths.items():
                    tg.start_soon(
                        hold_until_cancelled,
                        holder_locks[policy],
                        holders[policy],
                        histories[policy],
                        "holder",
                    )
                    with anyio.fail_after(10):
                        await holders[policy].entered.wait()
                    waiter_lock = waiter_clients[policy].lock(path, identifier="waiter")
                    tg.start_soon(
                        acquire_once, waiter_lock, waiters[policy], histories[policy], "waiter"
                    )
                    with anyio.fail_after(10):
                        await wait_for_queue(holder_clients[policy], path, 2)
                for c in all_clients:
                    await c.exists("/")  # the last exchange before the fault

                leader = await anyio.to_thread.run_sync(zk_ensemble.leader)
                follower = next(m for m in zk_ensemble.members if m is not leader)
                killed_at = time.monotonic()
                for member in (leader, follower):
                    await anyio.to_thread.run_sync(member.kill)
                    victims.append(member)
                # The "expired" holder is cancelled at the proof's horizon, 0.9 x timeout
                # after the last exchange. The outage is held for F14_OUTAGE x timeout, and in any
                # case until both holders have stopped (an event: a loaded machine may get
                # there late), so that the quorum always comes back after that.
                with anyio.fail_after(2 * timeout):  # a hang bound
                    for outcome in holders.values():
                        await outcome.done.wait()
                await anyio.sleep(max(0.0, killed_at + F14_OUTAGE * timeout - time.monotonic()))
                restart_at = time.monotonic()
                for member in victims:
                    await member.astart(wait=False)
                await zk_ensemble.await_serving(timeout=30)
                quorum_at = time.monotonic()
                # A hang bound, not a claim: the holders' nodes go when their clients
                # reconnect (the new leader revives their sessions with a fresh timeout) and
                # the janitor deletes them, which a loaded ensemble delays.
                with anyio.fail_after(3 * timeout + 5):
                    for outcome in waiters.values():
                        await outcome.acquired.wait()
            # Every client is back: in its own session, which the new leader revived, or in a
            # new one where a server said the old one expired; never given up by our clock.
            with anyio.fail_after(5):
                for c in all_clients:
                    back = await logs[id(c)].wait_for(
                        lambda ch: ch.state is SessionState.CONNECTED and ch.at > restart_at
                    )
                    lost_changes = logs[id(c)].all(is_state(SessionState.LOST))
                    assert all("server" in ch.reason for ch in lost_changes), lost_changes
                    assert back.session_id == old_sessions[id(c)] or lost_changes
            # The old lock objects work again, with newer tokens.
            for policy, lock in holder_locks.items():
                with anyio.fail_after(5):
                    async with lock.acquire(timeout=5):
                        assert lock.fencing_token > waiters[policy].token
                assert await holder_clients[policy].get_children(paths[policy]) == []
    finally:
        down = [m for m in zk_ensemble.members if not m.running]
        if down:
            with anyio.CancelScope(shield=True):
                for member in down:
                    await member.astart(wait=False)
                await zk_ensemble.await_serving(timeout=30)
    assert quorum_at is not None
    # A quorum (2 of 3) can serve before the slower JVM is up (quorum_at: all 3 serve): the
    # first new session after the outage marks when one did, at the latest.
    quorum_served = min(
        change.at
        for log in logs.values()
        for change in log.changes
        if change.state is SessionState.CONNECTED and change.at > restart_at
    )
    for policy in paths:
        holder, waiter = holders[policy], waiters[policy]
        log = logs[id(holder_clients[policy])]
        suspended = log.first(is_state(SessionState.SUSPENDED))
        assert suspended is not None
        assert holder.body_exit is not None
        report(
            "F14",
            policy=policy,
            kill_to_suspended=suspended.at - killed_at,
            kill_to_cancel=holder.body_exit - killed_at,
            restart_to_first_session=quorum_served - restart_at,
            restart_to_all_serving=quorum_at - restart_at,
            first_session_to_regrant=waiter.acquired_at - quorum_served,
        )
        assert holder.body_cancelled
        assert isinstance(holder.error, aiozklock.LockLost), holder.error
        assert not holder.cancellation_escaped
        assert holder.is_held_after is False
        assert holder.body_exit < restart_at  # before the quorum could grant anything
        if policy == "suspended":
            assert holder.body_exit - suspended.at < 0.5
        else:  # at the proof's horizon, not at LOST (the session is kept a timeout longer)
            assert "unproven" in str(holder.error), holder.error
            assert holder.body_exit >= suspended.at
        # Nothing was granted without a quorum; once one serves, the holder's node goes when
        # its client reconnects to its revived session (the janitor), and the lock passes on:
        # a lost wake-up would hit the hang bound.
        assert waiter.acquired_at > restart_at
        assert waiter.token > holder.token
        report_ = histories[policy].check()
        assert report_.ok, str(report_)
