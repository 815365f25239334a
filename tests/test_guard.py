"""ZooKeeper writes guarded by a holding: ``set_data``/``create``/``delete`` with ``guard=``.

The write and a check of the holding's own node(s) go in one ``multi``: applied while we
hold, refused by the server (``StaleFencingToken``, nothing written) once our node is gone,
even when the stale holder does not know yet. Refused before any request: a holding known
lost, a guard the task does not hold, a recipe whose fixed node makes a check unsound.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

import aiozklock
from aiozklock._wire._protocol import MultiCheck, MultiSetData, multi_op
from aiozklock.testing import FaultProxy, Opcode, expire_session, session_of
from tests.conftest import ClientFactory

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PATH = "/locks/guard"
DATA = "/data/x"  # written under guard: b"old" until a guarded write lands
GONE = "/data/gone"  # deleted under guard
NEW = "/data/y"  # created under guard
Make = Callable[[aiozklock.ZooKeeperClient], Any]
Write = Callable[[], Awaitable[object]]

# Every recipe that accepts guard=, and in each layout: (ours, a rival that takes it once
# our node is gone). Semaphores with one lease, so that the rival's grant excludes us.
RECIPES: dict[str, tuple[Make, Make]] = {
    "lock": (lambda zk: zk.lock(PATH), lambda zk: zk.lock(PATH)),
    "lock-kazoo": (
        lambda zk: zk.lock(PATH, compat="kazoo"),
        lambda zk: zk.lock(PATH, compat="kazoo"),
    ),
    "multi_lock": (
        lambda zk: zk.multi_lock([PATH, PATH + "2"]),
        lambda zk: zk.multi_lock([PATH, PATH + "2"]),
    ),
    "multi_lock-kazoo": (
        lambda zk: zk.multi_lock([PATH, PATH + "2"], compat="kazoo"),
        lambda zk: zk.multi_lock([PATH, PATH + "2"], compat="kazoo"),
    ),
    "read_lock": (lambda zk: zk.rw_lock(PATH).read_lock, lambda zk: zk.rw_lock(PATH).write_lock),
    "read_lock-kazoo": (
        lambda zk: zk.rw_lock(PATH, compat="kazoo").read_lock,
        lambda zk: zk.rw_lock(PATH, compat="kazoo").write_lock,
    ),
    "write_lock": (lambda zk: zk.rw_lock(PATH).write_lock, lambda zk: zk.rw_lock(PATH).write_lock),
    "election": (lambda zk: zk.election(PATH), lambda zk: zk.election(PATH)),
    "election-kazoo": (
        lambda zk: zk.election(PATH, compat="kazoo"),
        lambda zk: zk.election(PATH, compat="kazoo"),
    ),
    "semaphore": (lambda zk: zk.semaphore(PATH, 1), lambda zk: zk.semaphore(PATH, 1)),
    "semaphore-kazoo": (
        lambda zk: zk.semaphore(PATH, 1, compat="kazoo"),
        lambda zk: zk.semaphore(PATH, 1, compat="kazoo"),
    ),
    "semaphore-curator": (
        lambda zk: zk.semaphore(PATH, 1, compat="curator"),
        lambda zk: zk.semaphore(PATH, 1, compat="curator"),
    ),
}


def sent(proxy: FaultProxy) -> list[int]:
    """The opcodes of the requests the proxy saw since its last reset, pings left out."""
    return [request.opcode for request in proxy.requests if request.opcode != Opcode.PING]


def held_nodes(held: Any) -> tuple[str, ...]:
    """The nodes of the current task's holding (what a guard checks)."""
    holding = held._held_engine("")._holding
    assert holding is not None
    return tuple(holding.nodes)


async def data_files(zk: aiozklock.ZooKeeperClient) -> None:
    await zk.ensure_path("/data")
    await zk.create(DATA, b"old")
    await zk.create(GONE)


async def untouched(zk: aiozklock.ZooKeeperClient) -> None:
    """Nothing of a refused guarded write landed (read by another client)."""
    assert (await zk.get_data(DATA))[0] == b"old"
    assert await zk.exists(NEW) is None
    assert await zk.exists(GONE) is not None


def guarded_writes(client: aiozklock.ZooKeeperClient, guard: Any) -> list[Write]:
    """A guarded set_data, create and delete, to be made one by one."""
    return [
        lambda: client.set_data(DATA, b"stale", guard=guard),
        lambda: client.create(NEW, b"stale", guard=guard),
        lambda: client.delete(GONE, guard=guard),
    ]


async def settle(client: aiozklock.ZooKeeperClient, proxy: FaultProxy) -> None:
    """Let the writes an acquisition leaves to be written soon go out, then count anew."""
    await client.exists("/")
    proxy.reset_counters()


# ---------------------------------------------------------------- applied while held


@pytest.mark.parametrize("recipe", sorted(RECIPES))
async def test_guarded_writes_are_applied_while_held_in_one_round_trip_each(
    recipe: str, proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    await data_files(zk)
    held = RECIPES[recipe][0](client)
    async with held:
        await settle(client, proxy)
        stat = await client.set_data(DATA, b"new", guard=held)
        assert sent(proxy) == [Opcode.MULTI]
        created = await client.create(NEW, b"y", guard=held)
        await client.delete(GONE, guard=held)
        assert sent(proxy) == [Opcode.MULTI] * 3  # one round trip per guarded write
    data, now = await zk.get_data(DATA)
    assert (data, now.version, now.mzxid) == (b"new", 1, stat.mzxid)
    assert created == NEW
    assert (await zk.get_data(NEW))[0] == b"y"
    assert await zk.exists(GONE) is None


async def test_sequential_and_ephemeral_guarded_create(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    client = await open_client()
    await zk.ensure_path("/data")
    async with client.lock(PATH) as lock:
        path = await client.create("/data/s-", ephemeral=True, sequential=True, guard=lock)
    assert path.startswith("/data/s-")
    assert len(path) == len("/data/s-") + 10
    _, stat = await zk.get_data(path)
    assert stat.ephemeral_owner == client.session_id


# ---------------------------------------------------------------- stale holders


@pytest.mark.parametrize("recipe", sorted(RECIPES))
async def test_a_stale_holder_that_does_not_know_is_refused_by_the_server(
    recipe: str, proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """Our node deleted by another client (nothing tells the holder), the recipe granted
    to a rival: each guarded write of ours reaches the server, which refuses all of it."""
    client, rival_client = await open_client(proxy), await open_client()
    await data_files(zk)
    make, make_rival = RECIPES[recipe]
    held, rival = make(client), make_rival(rival_client)
    await held.acquire()
    token = held.fencing_token
    for node in held_nodes(held):
        await zk.delete(node)
    with anyio.fail_after(10):
        await rival.acquire()
    await settle(client, proxy)
    assert held.is_held  # it does not know
    for write, path in zip(guarded_writes(client, held), [DATA, NEW, GONE], strict=True):
        with pytest.raises(aiozklock.StaleFencingToken) as caught:
            await write()
        stale = caught.value
        assert (stale.resource, stale.token, stale.newer) == (path, token, None)
        assert isinstance(stale.__cause__, aiozklock.NoNodeError)
    # The server refused them, not the client. (The rival's create may fire the holder's
    # newcomers' watch after ``settle``: that listing is the holding's own read, not a write.)
    writes = [opcode for opcode in sent(proxy) if opcode != Opcode.GET_CHILDREN]
    assert writes == [Opcode.MULTI] * 3
    await untouched(zk)
    await rival_client.set_data(DATA, b"rival", guard=rival)  # the new holder's write lands
    assert (await zk.get_data(DATA))[0] == b"rival"
    with contextlib.suppress(aiozklock.LockLost):
        await held.release()


async def test_a_multi_lock_guard_checks_every_member(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    await data_files(zk)
    lock = client.multi_lock(["/locks/a", "/locks/b", "/locks/c"])
    async with lock:
        nodes = held_nodes(lock)
        await zk.delete(nodes[2])  # the last member only
        await settle(client, proxy)
        with pytest.raises(aiozklock.StaleFencingToken) as caught:
            await client.set_data(DATA, b"stale", guard=lock)
        assert sent(proxy) == [Opcode.MULTI]
        assert any(nodes[2] in note for note in caught.value.__notes__)
        assert isinstance(caught.value, aiozklock.LockLost)
        await untouched(zk)


async def test_a_semaphore_guard_checks_the_calling_tasks_own_lease(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    client = await open_client()
    await data_files(zk)
    sem = client.semaphore(PATH, 2)
    both, done = anyio.Event(), anyio.Event()
    leases: dict[str, tuple[str, ...]] = {}
    outcomes: dict[str, object] = {}

    async def hold(name: str, data: bytes) -> None:
        async with sem:
            leases[name] = held_nodes(sem)
            if len(leases) == 2:
                both.set()
            await done.wait()
            try:
                await client.set_data(DATA, data, guard=sem)
                outcomes[name] = "written"
            except aiozklock.StaleFencingToken as exc:
                outcomes[name] = exc

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold, "kept", b"kept")
            tg.start_soon(hold, "lost", b"lost")
            await both.wait()
            assert leases["kept"] != leases["lost"]
            await zk.delete(leases["lost"][0])
            done.set()
    assert outcomes["kept"] == "written"
    assert isinstance(outcomes["lost"], aiozklock.StaleFencingToken)
    assert (await zk.get_data(DATA))[0] == b"kept"


async def test_a_read_lock_taken_at_the_write_locks_place_guards_with_its_own_node(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """The write holder's read lock is a plain ephemeral node named with our GUID and the
    write node's sequence (a downgrade): the guard checks it, not the write node."""
    client = await open_client()
    await data_files(zk)
    rw = client.rw_lock(PATH)
    async with rw.write_lock, rw.read_lock:
        (read_node,) = held_nodes(rw.read_lock)
        (write_node,) = held_nodes(rw.write_lock)
        assert read_node[-10:] == write_node[-10:]  # the write node's place
        await client.set_data(DATA, b"read", guard=rw.read_lock)
        await zk.delete(read_node)
        with pytest.raises(aiozklock.StaleFencingToken):
            await client.set_data(DATA, b"stale", guard=rw.read_lock)
        assert (await zk.get_data(DATA))[0] == b"read"
        await client.set_data(DATA, b"write", guard=rw.write_lock)  # its own node is there
    assert (await zk.get_data(DATA))[0] == b"write"


async def test_a_write_delayed_in_flight_past_the_holding_is_refused(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """Kleppmann's scenario: the holder sends its write, the write is held up in the
    network, meanwhile the holding ends and another client takes the lock and writes; the
    late write arrives and is refused."""
    client = await open_client(proxy, session_timeout=20.0)  # the hold stays far below it
    rival_client = await open_client()
    await data_files(zk)
    lock, rival = client.lock(PATH), rival_client.lock(PATH)
    await lock.acquire()
    await settle(client, proxy)
    (node,) = held_nodes(lock)
    proxy.blackhole(True)

    async def meanwhile() -> None:
        await proxy.wait_for_request(Opcode.MULTI)  # sent, and held in the network
        await zk.delete(node)
        async with rival:
            await rival_client.set_data(DATA, b"rival", guard=rival)
        proxy.blackhole(False)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(meanwhile)
            with pytest.raises(aiozklock.StaleFencingToken):  # the holder's write, late
                await client.set_data(DATA, b"late", guard=lock)
    assert (await zk.get_data(DATA))[0] == b"rival"
    assert proxy.count(Opcode.MULTI) == 1


async def test_a_holder_whose_session_expired_unknown_to_it_writes_nothing(
    zk_hosts: str, proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """loss_policy="expired" keeps the lock while disconnected; the session expires on the
    server meanwhile and a rival takes the lock. The holder's guarded write, made before it
    hears of the expiry, fails with StaleFencingToken and writes nothing."""
    client = await open_client(proxy, session_timeout=20.0, loss_policy="expired")
    rival_client = await open_client()
    await data_files(zk)
    lock, rival = client.lock(PATH), rival_client.lock(PATH)
    await lock.acquire()
    suspended = anyio.Event()
    client.add_listener(
        lambda change: suspended.set() if change.state is aiozklock.SessionState.SUSPENDED else None
    )
    proxy.blackhole(True)
    await proxy.drop_all()
    with anyio.fail_after(10):
        await suspended.wait()
        await expire_session(zk_hosts, client.session_id, client.session_password)
        await rival.acquire()
    assert lock.statistics().locked  # the holder does not know
    finished = False

    async def reconnect() -> None:
        await anyio.wait_all_tasks_blocked()
        assert not finished  # the client took the write, and waits to send it
        proxy.blackhole(False)

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(reconnect)
            try:
                with pytest.raises(aiozklock.StaleFencingToken) as caught:
                    await client.set_data(DATA, b"stale", guard=lock)
            finally:
                finished = True
    assert any("session is gone" in note for note in caught.value.__notes__)
    await untouched(zk)
    assert proxy.count(Opcode.MULTI) == 0  # bound to its session: never sent in the new one
    with contextlib.suppress(aiozklock.LockLost):
        await lock.release()


async def test_a_holding_known_lost_raises_before_any_request(
    zk_hosts: str, proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    await data_files(zk)
    lock = client.lock(PATH)
    await lock.acquire()
    token = lock.fencing_token
    states: list[aiozklock.SessionState] = []
    connected_again = anyio.Event()

    def on_state(change: aiozklock.StateChange) -> None:
        states.append(change.state)
        if (
            aiozklock.SessionState.LOST in states
            and change.state is aiozklock.SessionState.CONNECTED
        ):
            connected_again.set()

    client.add_listener(on_state)
    with anyio.fail_after(20):
        proxy.set_delay(3600)  # the client's reconnect must not re-attach before the expiry
        await expire_session(zk_hosts, client.session_id, client.session_password)
        proxy.set_delay(0)
        await connected_again.wait()  # in a new session: the holding is known lost
    await settle(client, proxy)
    for write in guarded_writes(client, lock):
        with pytest.raises(aiozklock.StaleFencingToken) as caught:
            await write()
        assert caught.value.token == token
        assert any("lost" in note for note in caught.value.__notes__)
    assert proxy.count(Opcode.MULTI) == 0
    await untouched(zk)
    with pytest.raises(aiozklock.LockLost):
        await lock.release()


# ---------------------------------------------------------------- the outcome of the write


async def test_the_writes_own_errors_keep_their_meaning_when_the_check_passes(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    client = await open_client()
    await data_files(zk)
    async with client.lock(PATH) as lock:
        with pytest.raises(aiozklock.NoNodeError):
            await client.set_data("/data/missing", b"x", guard=lock)
        with pytest.raises(aiozklock.BadVersionError):
            await client.set_data(DATA, b"x", version=5, guard=lock)
        with pytest.raises(aiozklock.NodeExistsError):
            await client.create(DATA, b"x", guard=lock)
        with pytest.raises(aiozklock.NoNodeError):
            await client.create("/nowhere/x", guard=lock)
        with pytest.raises(aiozklock.NoNodeError):
            await client.delete("/data/missing", guard=lock)
        stat = await client.set_data(DATA, b"v1", version=0, guard=lock)
        assert stat.version == 1
        assert lock.is_held
    await untouched_but(zk, b"v1")


async def untouched_but(zk: aiozklock.ZooKeeperClient, data: bytes) -> None:
    assert (await zk.get_data(DATA))[0] == data
    assert await zk.exists("/nowhere") is None
    assert await zk.exists(GONE) is not None


async def test_a_lost_reply_raises_connection_loss_and_is_not_sent_again(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    client = await open_client(proxy, loss_policy="expired")
    await data_files(zk)
    async with client.lock(PATH) as lock:
        await settle(client, proxy)
        proxy.arm_drop_after([Opcode.MULTI])
        with pytest.raises(aiozklock.ConnectionLoss) as caught:
            await client.set_data(DATA, b"maybe", guard=lock)
        assert any("may or may not" in note for note in caught.value.__notes__)
        assert proxy.count(Opcode.MULTI) == 1
        # Here the server applied it (only the reply was lost): reading back tells.
        assert (await client.get_data(DATA))[0] == b"maybe"
        assert proxy.count(Opcode.MULTI) == 1  # never resent


# ---------------------------------------------------------------- refused before any request


async def test_fixed_node_recipes_refuse_guard_before_any_request(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    await data_files(zk)
    for held in (client.lock(PATH, fair=False), client.lease_lock(PATH + "-lease", ttl=30)):
        for holding in (False, True):
            if holding:
                await held.acquire()
            await settle(client, proxy)
            for write in guarded_writes(client, held):
                with pytest.raises(aiozklock.UsageError, match=r"zk\.lock") as caught:
                    await write()
                assert "version 0" in str(caught.value)
            assert sent(proxy) == []
        await held.release()
    await untouched(zk)


async def test_a_plain_check_would_not_fence_a_stale_non_fair_holder(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """Why the non-fair lock refuses guard=: its node is re-created at the same path by the
    next holder with version 0, so a check of (path, version) made by the stale holder
    passes, and its write lands while another holds the lock."""
    stale_client, rival_client = await open_client(), await open_client()
    await data_files(zk)
    stale, rival = stale_client.lock(PATH, fair=False), rival_client.lock(PATH, fair=False)
    await stale.acquire()
    node = stale.statistics().node
    _, ours = await zk.get_data(node)
    await zk.delete(node)  # the stale holder is not told
    with anyio.fail_after(10):
        await rival.acquire()
    _, theirs = await zk.get_data(node)
    assert theirs.czxid != ours.czxid
    assert theirs.version == ours.version == 0
    session = session_of(stale_client)
    check = MultiCheck(session.server_path(node), ours.version)
    write = MultiSetData(session.server_path(DATA), b"stale", -1)
    result = await session.call(multi_op([check, write], session.client_path))
    assert result.ok  # the check passed on the rival's node
    assert (await zk.get_data(DATA))[0] == b"stale"
    assert rival.is_held  # and the stale holder's write landed meanwhile
    with pytest.raises(aiozklock.UsageError):
        await stale_client.set_data(DATA, b"stale", guard=stale)
    with contextlib.suppress(aiozklock.LockLost):
        await stale.release()


async def test_bad_guards_raise_before_any_request(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    client, other = await open_client(proxy), await open_client()
    await data_files(zk)
    lock = client.lock(PATH)
    await settle(client, proxy)
    with pytest.raises(aiozklock.InvalidArgument, match="recipe object"):
        await client.set_data(DATA, b"x", guard="lock")  # type: ignore[arg-type]
    with pytest.raises(aiozklock.InvalidArgument, match="read_lock or write_lock"):
        await client.create(NEW, guard=client.rw_lock(PATH + "-rw"))  # type: ignore[arg-type]
    with pytest.raises(aiozklock.InvalidArgument, match="another client"):
        await client.delete(GONE, guard=other.lock(PATH))
    with pytest.raises(aiozklock.NotLockOwner, match="cannot guard"):
        await client.set_data(DATA, b"x", guard=lock)  # not held
    with pytest.raises(aiozklock.InvalidArgument, match="version"):
        await client.set_data(DATA, b"x", version=-2, guard=lock)
    with pytest.raises(aiozklock.InvalidArgument, match="version"):
        await client.set_data(DATA, b"x", version=True)  # type: ignore[arg-type]
    with pytest.raises(aiozklock.InvalidArgument, match="data"):
        await client.set_data(DATA, "x")  # type: ignore[arg-type]
    with pytest.raises(aiozklock.InvalidArgument, match="path"):
        await client.set_data("data/x", b"x", guard=lock)
    assert sent(proxy) == []
    held, done = anyio.Event(), anyio.Event()

    async def hold() -> None:
        async with lock:
            held.set()
            await done.wait()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold)
            await held.wait()
            await settle(client, proxy)
            with pytest.raises(aiozklock.NotLockOwner, match="current task does not hold"):
                await client.set_data(DATA, b"x", guard=lock)  # held by another task
            sem = client.semaphore(PATH + "-sem", 2)
            with pytest.raises(aiozklock.NotLockOwner):
                await client.set_data(DATA, b"x", guard=sem)
            assert sent(proxy) == []
            done.set()
    await untouched(zk)


# ---------------------------------------------------------------- set_data itself


async def test_set_data_replaces_the_data_in_one_request(
    proxy: FaultProxy, zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    await data_files(zk)
    await settle(client, proxy)
    stat = await client.set_data(DATA, b"v1")
    assert sent(proxy) == [Opcode.SET_DATA]
    assert stat.version == 1
    stat = await client.set_data(DATA, bytearray(b"v2"), version=1)
    assert stat.version == 2
    with pytest.raises(aiozklock.BadVersionError):
        await client.set_data(DATA, b"v3", version=1)
    with pytest.raises(aiozklock.NoNodeError):
        await client.set_data("/data/missing", b"x")
    data, now = await zk.get_data(DATA)
    assert (data, now.version) == (b"v2", 2)
