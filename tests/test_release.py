"""A release costs the caller no round trip (issue 10): leaving ``async with`` and
``release()`` return once the delete is written (issue 30: at the call, not at the event
loop's next turn: ``test_release_written.py``); the session's later requests are ordered
after it, so a re-acquire is pipelined; no other session is granted before the delete
commits; a delete that fails is retried by the janitor; ``confirm=True`` waits for it.

The partition of a FaultProxy holds bytes (both ways) and delivers them when it lifts: a
release that waited for its reply could not return while it is on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

import aiozklock
from aiozklock import SessionState
from aiozklock.testing import FaultProxy
from tests.conftest import ClientFactory, gone, wait_for_children, wait_for_queue

pytestmark = [pytest.mark.anyio]

PATH = "/locks/release"
DELETE = 2
MULTI = 14
CREATE2 = 15

RECIPES: dict[str, tuple[Callable[[aiozklock.ZooKeeperClient], Any], str, int]] = {
    "lock": (lambda zk: zk.lock(PATH), PATH, DELETE),
    "nonfair": (lambda zk: zk.lock(PATH, fair=False), PATH, DELETE),
    "multilock": (lambda zk: zk.multi_lock([PATH + "/a", PATH + "/b"]), PATH + "/a", MULTI),
}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
async def test_release_returns_before_its_reply_and_the_delete_follows(
    proxy: FaultProxy, open_client: ClientFactory, recipe: str
) -> None:
    make, listed, opcode = RECIPES[recipe]
    client = await open_client(proxy)
    observer = await open_client()
    lock = make(client)
    with anyio.fail_after(10):
        await lock.acquire()
        proxy.blackhole(True)
        await lock.release()
        # Returned while no reply can come, and not because the session gave up on the
        # silent connection (half its timeout later, and it would not be CONNECTED now).
        assert client.state is SessionState.CONNECTED
        await proxy.wait_for_request(opcode)
        assert len(await observer.get_children(listed)) == 1  # not applied yet
        proxy.blackhole(False)
        await wait_for_children(observer, listed, lambda children: children == [])
    assert not lock.statistics().locked


async def test_a_reacquire_is_written_before_the_delete_is_answered(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    lock = client.lock(PATH)
    tokens: list[int] = []

    async def reacquire() -> None:
        async with lock:
            tokens.append(lock.fencing_token)

    with anyio.fail_after(10):
        await lock.acquire()
        first = lock.fencing_token
        proxy.blackhole(True)
        proxy.reset_counters()
        async with anyio.create_task_group() as tg:
            await lock.release()
            await proxy.wait_for_request(DELETE)  # written, not taken into a re-acquire
            tg.start_soon(reacquire)
            await proxy.wait_for_request(CREATE2)  # pipelined behind the unanswered delete
            assert [r.opcode for r in proxy.requests][:2] == [DELETE, CREATE2]
            proxy.blackhole(False)
    assert tokens[0] > first


async def test_no_other_session_is_granted_before_the_delete_commits(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    holder_client = await open_client(proxy)
    waiter_client = await open_client()
    holder, waiter = holder_client.lock(PATH), waiter_client.lock(PATH)
    granted: list[tuple[list[str], int]] = []

    async def wait_and_look() -> None:
        async with waiter:
            granted.append((await waiter_client.get_children(PATH), waiter.fencing_token))

    with anyio.fail_after(10):
        await holder.acquire()
        token = holder.fencing_token
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_and_look)
            await wait_for_queue(waiter_client, PATH, 2)
            proxy.blackhole(True)
            await holder.release()  # returned: the delete is held in the partition
            await proxy.wait_for_request(DELETE)
            assert granted == []  # the waiter cannot be granted before the delete commits
            assert len(await waiter_client.get_children(PATH)) == 2
            proxy.blackhole(False)
    ((children, waiter_token),) = granted
    assert len(children) == 1  # when granted, only its own node was left
    assert waiter_token > token


async def test_confirm_waits_until_the_release_is_applied(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    observer = await open_client()
    lock = client.lock(PATH)
    done = anyio.Event()

    async def release_confirmed() -> None:
        await lock.acquire()
        proxy.blackhole(True)
        await lock.release(confirm=True)
        done.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(release_confirmed)
            await proxy.wait_for_request(DELETE)
            assert not done.is_set()  # its reply is held in the partition
            proxy.blackhole(False)
            await done.wait()
            assert await observer.get_children(PATH) == []  # applied when it returned
    await lock.acquire()
    with pytest.raises(aiozklock.InvalidArgument):
        await lock.release(confirm=1)  # type: ignore[arg-type]
    await lock.release()


@pytest.mark.parametrize("recipe", sorted(RECIPES))
async def test_a_delete_that_never_arrived_is_retried_after_the_reconnect(
    proxy: FaultProxy, open_client: ClientFactory, recipe: str
) -> None:
    make, listed, opcode = RECIPES[recipe]
    client = await open_client(proxy)
    observer = await open_client()
    lock = make(client)
    with anyio.fail_after(15):
        await lock.acquire()
        session_id = client.session_id
        proxy.blackhole(True)
        await lock.release()
        await proxy.wait_for_request(opcode)
        await proxy.drop_all()  # the held delete is discarded: it never reaches the server
        proxy.blackhole(False)
        assert len(await observer.get_children(listed)) == 1
        await wait_for_children(observer, listed, lambda children: children == [])
    assert client.session_id == session_id  # the same session: the janitor deleted it


async def test_close_right_after_a_release_leaves_nothing(
    hosts: str, open_client: ClientFactory
) -> None:
    observer = await open_client()
    with anyio.fail_after(10):
        async with aiozklock.connect(hosts) as client, client.lock(PATH):
            pass
        assert await observer.get_children(PATH, missing_ok=True) == []


@pytest.mark.parametrize("recipe", sorted(RECIPES))
async def test_a_release_while_disconnected_returns_and_is_done_after_the_reconnect(
    proxy: FaultProxy, open_client: ClientFactory, recipe: str
) -> None:
    make, listed, _ = RECIPES[recipe]
    # "expired": a dropped connection is not a loss, so the holder may release meanwhile.
    client = await open_client(proxy, loss_policy="expired")
    observer = await open_client()
    lock = make(client)
    suspended = anyio.Event()
    client.add_listener(
        lambda change: suspended.set() if change.state is SessionState.SUSPENDED else None
    )
    with anyio.fail_after(15):
        await lock.acquire()
        session_id = client.session_id
        proxy.blackhole(True, new="refuse")
        await proxy.drop_all()
        await suspended.wait()
        await lock.release()
        # Nothing to wait for, handed to the janitor: it returned while the session is still
        # SUSPENDED (neither reconnected, nor given up by its clock).
        assert client.state is SessionState.SUSPENDED
        assert not lock.statistics().locked
        assert len(await observer.get_children(listed)) == 1
        proxy.blackhole(False)
        await wait_for_children(observer, listed, lambda children: children == [])
    assert client.session_id == session_id  # deleted by us after the reconnect, not expired


# Each recipe, its member paths, and the opcodes of its release and of its create.
REJOINED = {
    "lock": (lambda zk: zk.lock(PATH), [PATH], (DELETE, CREATE2)),
    "multilock": (
        lambda zk: zk.multi_lock([PATH + "/a", PATH + "/b"]),
        [PATH + "/a", PATH + "/b"],
        (MULTI, MULTI),
    ),
}


async def _only_nodes(observer: aiozklock.ZooKeeperClient, members: list[str]) -> list[int]:
    """The czxid of the single node left in each member (asserts there is one)."""
    czxids = []
    for member in members:
        children = await observer.get_children(member)
        assert len(children) == 1, (member, children)
        stat = await observer.exists(f"{member}/{children[0]}")
        assert stat is not None
        czxids.append(stat.czxid)
    return czxids


@pytest.mark.parametrize("recipe", sorted(REJOINED))
async def test_a_reacquire_right_after_a_release_writes_after_its_deletes(
    proxy: FaultProxy, open_client: ClientFactory, recipe: str
) -> None:
    make, members, (released, created) = REJOINED[recipe]
    client = await open_client(proxy)
    observer = await open_client()
    lock = make(client)
    with anyio.fail_after(10):
        await lock.acquire()
        first = lock.fencing_token
        proxy.reset_counters()
        await lock.release()  # written now: no re-acquire takes it into its create
        await lock.acquire()
        # The deletes (one delete, or a multi-lock's multi of deletes), then the creates.
        assert [r.opcode for r in proxy.requests][:2] == [released, created]
        assert await _only_nodes(observer, members) == [lock.fencing_token] * len(members)
        assert lock.fencing_token > first
        await lock.release()


@pytest.mark.parametrize("applied", [True, False], ids=["applied", "never-arrived"])
@pytest.mark.parametrize("recipe", sorted(REJOINED))
async def test_a_rejoin_whose_create_reply_is_lost_leaves_only_the_new_nodes(
    proxy: FaultProxy, open_client: ClientFactory, recipe: str, applied: bool
) -> None:
    """The release's deletes and the re-acquire's create, written back to back, are lost
    together (or the create's reply is): the old nodes carry the same GUID, and are never
    adopted as the new ones (``Round.released``)."""
    make, members, (released, created) = REJOINED[recipe]
    client = await open_client(proxy)
    observer = await open_client()
    lock = make(client)
    tokens: list[int] = []
    held, go, reheld, checked = anyio.Event(), anyio.Event(), anyio.Event(), anyio.Event()

    async def hold_release_and_reacquire() -> None:
        await lock.acquire()
        tokens.append(lock.fencing_token)
        held.set()
        await go.wait()
        await lock.release()  # written; the re-acquire's create right behind it
        await lock.acquire()
        tokens.append(lock.fencing_token)
        reheld.set()
        await checked.wait()
        await lock.release()

    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold_release_and_reacquire)
            await held.wait()
            session_id = client.session_id
            proxy.reset_counters()
            # The create is the second of the two (a multi-lock's release is a multi too).
            second = 2 if released == created else 1
            if applied:  # the server applies it; its reply is lost with the connection
                proxy.arm_drop_after([created], second)
            else:  # both held in the partition, then discarded: the server sees neither
                proxy.blackhole(True)
            go.set()
            await proxy.wait_for_request(created, second)
            if not applied:
                await proxy.drop_all()
                proxy.blackhole(False)
            await reheld.wait()
            assert await _only_nodes(observer, members) == [tokens[1]] * len(members)
            checked.set()
            await wait_for_children(observer, members[0], lambda children: children == [])
        # The old nodes went: by their deletes, or (never arrived) by the janitor; the new
        # ones were adopted, not the old.
        assert tokens[1] > tokens[0]
        assert client.session_id == session_id
        assert proxy.count(created) >= second


async def test_a_create_refused_by_an_acl_after_a_release_leaves_nothing(
    open_client: ClientFactory,
) -> None:
    from aiozklock._wire import _protocol as proto
    from aiozklock.testing import session_of

    client = await open_client()
    observer = await open_client()
    lock = client.lock(PATH)
    with anyio.fail_after(10):
        await lock.acquire()
        session = session_of(client)
        # setACL (opcode 7) on the lock path: deletes still allowed, creates not.
        acl = [aiozklock.ACL(aiozklock.Perms.READ | aiozklock.Perms.DELETE, "world", "anyone")]
        server_path = session.server_path(PATH)
        body = proto.LENGTH.pack(7) + proto._ustring(server_path) + proto.encode_acl(acl)
        await session.call(proto.Op(body + proto.LENGTH.pack(-1), server_path, lambda *_: None))
        await lock.release()
        with pytest.raises(aiozklock.NoAuthError):
            await lock.acquire()  # the delete went through; the create is refused
        await gone(observer, PATH)
