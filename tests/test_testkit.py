"""The test kit itself, against real ZooKeeper: servers, FaultProxy, expiry, history.

Run with the plugin: ``pytest tests/test_testkit.py -p aiozklock.testing.pytest_plugin``.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
import pytest
from aiozk import protocol
from anyio.abc import SocketAttribute

from aiozklock.testing import (
    FaultProxy,
    FencedStore,
    History,
    Opcode,
    RawConnectionClosed,
    RawSessionExpired,
    RawZooKeeperConnection,
    WatchEventType,
    ZooKeeperCluster,
    ZooKeeperStartError,
    ZooKeeperUnavailableForTests,
    _server,
    expire_session,
    find_zookeeper_classpath,
    four_letter_word,
)

# --- helpers ------------------------------------------------------------------------------


def unique_path(tag: str) -> str:
    return f"/aiozklock-testkit-{tag}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def zk_address(zk_hosts: str) -> str:
    """One server, direct (observers and expiry never go through a proxy)."""
    return zk_hosts.split(",")[0].strip()


@pytest.fixture
async def observer(zk_address: str) -> AsyncIterator[RawZooKeeperConnection]:
    async with await RawZooKeeperConnection.open(zk_address) as conn:
        yield conn


@pytest.fixture
async def proxy(zk_address: str) -> AsyncIterator[FaultProxy]:
    """A FaultProxy in front of one server (deliberately overrides any conftest ``proxy``,
    so these tests do not depend on other fixtures)."""
    async with FaultProxy(zk_address) as fault_proxy:
        yield fault_proxy


# --- servers ------------------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_classpath_found() -> None:
    classpath = find_zookeeper_classpath()
    assert classpath is not None
    assert any(Path(jar).name.startswith("zookeeper") for jar in classpath.split(os.pathsep))


@pytest.mark.timeout(10)
def test_classpath_from_zookeeper_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "lib").mkdir()
    for jar in ("zookeeper-3.9.0.jar", "lib/zookeeper-jute-3.9.0.jar", "lib/slf4j-api.jar"):
        (tmp_path / jar).touch()
    monkeypatch.setenv("ZOOKEEPER_HOME", str(tmp_path))
    classpath = find_zookeeper_classpath()
    assert classpath is not None
    assert sorted(Path(jar).name for jar in classpath.split(os.pathsep)) == [
        "slf4j-api.jar",
        "zookeeper-3.9.0.jar",
        "zookeeper-jute-3.9.0.jar",
    ]


@pytest.mark.timeout(10)
def test_missing_install_raises_with_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_server, "find_zookeeper_classpath", lambda: None)
    with pytest.raises(ZooKeeperUnavailableForTests, match="apt-get install zookeeper"):
        ZooKeeperCluster(1).start()


@pytest.mark.timeout(30)
def test_start_failure_reports_log_tail(tmp_path: Path) -> None:
    cluster = ZooKeeperCluster(1, base_dir=tmp_path, extra_config={"tickTime": "not-a-number"})
    with pytest.raises(ZooKeeperStartError, match=r"(?s)exited with.*log tail.*not-a-number"):
        cluster.start()
    assert cluster.members == []
    cluster.close()
    cluster.close()  # idempotent
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")
@pytest.mark.timeout(60)
def test_jvm_options_from_the_environment_reach_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``$AIOZKLOCK_ZK_JVM_OPTIONS`` (shell words) is on every member's JVM command line."""
    monkeypatch.setenv("AIOZKLOCK_ZK_JVM_OPTIONS", "-XX:TieredStopAtLevel=1 '-Daiozklock.a b=c'")
    with ZooKeeperCluster(1, base_dir=tmp_path) as cluster:
        member = cluster.members[0]
        assert member.mode() == "standalone"
        argv = Path(f"/proc/{member.pid}/cmdline").read_bytes().split(b"\0")
    assert b"-XX:TieredStopAtLevel=1" in argv
    assert b"-Daiozklock.a b=c" in argv


@pytest.mark.timeout(10)
def test_zk_hosts_fixture(zk_hosts: str, request: pytest.FixtureRequest) -> None:
    from_env = os.environ.get("AIOZKLOCK_ZK_HOSTS", "").strip()
    if from_env:
        assert zk_hosts == from_env
    else:
        cluster: ZooKeeperCluster = request.getfixturevalue("zk_cluster")
        assert zk_hosts == cluster.hosts
        assert cluster.members[0].mode() == "standalone"
    assert "imok" in four_letter_word(zk_hosts.split(",")[0], "ruok")


@pytest.mark.timeout(120)  # three JVM starts
def test_a_port_taken_by_another_server_is_not_mistaken_for_ours(
    tmp_path: Path, zk_cluster: ZooKeeperCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The free port a member was given can be taken by another process's ZooKeeper before
    its JVM binds it: that server's answers must not pass for our member's (CI saw a
    standalone member report 'leader': another test run's ensemble was on its port)."""
    from aiozklock.testing import _server

    taken = zk_cluster.members[0].client_port
    real = _server._free_ports
    handed: list[list[int]] = []

    def first_taken(count: int) -> list[int]:
        ports = [taken, *real(count)[1:]] if not handed else real(count)
        handed.append(ports)
        return ports

    monkeypatch.setattr(_server, "_free_ports", first_taken)
    cluster = ZooKeeperCluster(1, base_dir=tmp_path).start()
    try:
        assert len(handed) == 2  # started again with other ports
        assert cluster.hosts != zk_cluster.hosts
        assert cluster.members[0].answers_for_itself()
    finally:
        cluster.close()


@pytest.mark.anyio
@pytest.mark.timeout(120)  # three JVM starts: seconds each on a loaded machine
async def test_standalone_lifecycle(tmp_path: Path) -> None:
    cluster = ZooKeeperCluster(1, base_dir=tmp_path)
    await anyio.to_thread.run_sync(cluster.start)
    try:
        member = cluster.members[0]
        assert cluster.hosts == member.address == f"127.0.0.1:{member.client_port}"
        assert member.mode() == "standalone"
        assert cluster.leader() is member
        assert four_letter_word(member.address, "ruok") == "imok"
        async with await RawZooKeeperConnection.open(member.address) as conn:
            path = await conn.create(unique_path("persist"), b"kept")

        member.pause()
        assert member.mode() is None
        with pytest.raises(TimeoutError):  # frozen: accepts (kernel backlog), never answers
            four_letter_word(member.address, "srvr", timeout=0.3)
        member.resume()
        assert member.mode(timeout=10) == "standalone"  # a resumed JVM on a loaded machine

        old_pid = member.pid
        await member.arestart()  # SIGKILL + start, same dataDir, off the event loop
        assert member.pid is not None
        assert member.pid != old_pid
        assert member.mode() == "standalone"
        async with await RawZooKeeperConnection.open(member.address) as conn:
            assert (await conn.get_data(path))[0] == b"kept"

        member.stop()
        assert member.pid is None
        assert member.mode() is None
        await member.astart()
        assert member.mode() == "standalone"
        pid = member.pid
        work_dir = cluster.work_dir
        assert work_dir is not None
        assert work_dir.is_relative_to(tmp_path)
    finally:
        cluster.close()
    assert not work_dir.exists()
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.ensemble
@pytest.mark.timeout(120)  # may include the session ensemble's start (3 JVMs), and one more
def test_ensemble_leader_failover(zk_ensemble: ZooKeeperCluster) -> None:
    assert len(zk_ensemble.hosts.split(",")) == 3
    assert sorted(str(m.mode()) for m in zk_ensemble.members) == ["follower", "follower", "leader"]
    old_leader = zk_ensemble.leader()
    assert zk_ensemble.followers() == [m for m in zk_ensemble.members if m is not old_leader]

    old_leader.kill()
    killed_at = time.monotonic()
    new_leader = None
    while new_leader is None and time.monotonic() - killed_at < 15:
        try:
            new_leader = zk_ensemble.leader()
        except LookupError:
            time.sleep(0.05)  # polling server state: there is no event to await
    assert new_leader is not None, "no new leader elected within 15 s"
    assert new_leader is not old_leader
    elected_after = time.monotonic() - killed_at
    assert elected_after < 15

    old_leader.start()  # rejoins the quorum under the new leader
    zk_ensemble.wait_serving()
    assert old_leader.mode() == "follower"
    assert zk_ensemble.leader() is new_leader


# --- FaultProxy ---------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.timeout(20)
async def test_proxy_counts_requests(proxy: FaultProxy) -> None:
    exists_seen = anyio.Event()

    async def watch_for_exists() -> None:
        await proxy.wait_for_request(Opcode.EXISTS, 2)
        exists_seen.set()

    path = unique_path("count")
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_for_exists)
        async with await RawZooKeeperConnection.open(proxy.address) as conn:
            await conn.create(path, b"x")
            assert await conn.exists(path) is not None
            assert not exists_seen.is_set()
            assert await conn.get_children(path) == []
            assert await conn.exists(f"{path}/missing") is None
            with anyio.fail_after(10):  # a hang bound: the proxy saw it before the reply came
                await exists_seen.wait()
            await conn.delete(path)
        # leaving the block sent closeSession

    assert [r.opcode for r in proxy.requests] == [
        Opcode.CREATE,
        Opcode.EXISTS,
        Opcode.GET_CHILDREN,
        Opcode.EXISTS,
        Opcode.DELETE,
        Opcode.CLOSE,
    ]
    xids = [r.xid for r in proxy.requests]
    assert xids == sorted(xids)
    assert len(set(xids)) == len(xids)
    assert {r.connection_index for r in proxy.requests} == {0}
    assert proxy.count(Opcode.EXISTS) == 2
    assert proxy.count() == 6
    assert proxy.connections_accepted == 1
    assert proxy.session_ids == [conn.session_id]
    assert proxy.connect_requests[0].session_id == 0  # a new session was asked for
    assert proxy.set_watches_seen == 0

    proxy.reset_counters()
    assert proxy.count() == 0
    assert proxy.connections_accepted == 0
    assert proxy.session_ids == []


@pytest.mark.anyio
@pytest.mark.timeout(10)
async def test_proxy_passes_four_letter_words(proxy: FaultProxy) -> None:
    answer = await anyio.to_thread.run_sync(four_letter_word, proxy.address, "srvr")
    assert "Mode:" in answer
    assert proxy.four_letter_words == ["srvr"]
    assert proxy.requests == []


@pytest.mark.anyio
@pytest.mark.timeout(20)
@pytest.mark.parametrize("rst", [True, False], ids=["rst", "fin"])
async def test_drop_all_closes_client_connection(proxy: FaultProxy, rst: bool) -> None:
    conn = await RawZooKeeperConnection.open(proxy.address)
    await conn.ping()
    assert proxy.live_connections == 1
    await proxy.drop_all(rst=rst)
    assert proxy.live_connections == 0
    with anyio.fail_after(10):  # a hang bound
        assert await conn.wait_closed() == ("reset" if rst else "eof")

    # The session survives a dropped connection: re-attach through the proxy.
    again = await RawZooKeeperConnection.open(
        proxy.address, session_id=conn.session_id, password=conn.password
    )
    async with again:
        assert again.session_id == conn.session_id
        assert await again.exists("/") is not None
    assert proxy.connections_accepted == 2
    assert proxy.session_ids == [conn.session_id, conn.session_id]


async def server_counts(address: str, session_id: int) -> tuple[int, int] | None:
    """``(received, sent)``: the packets the server has read from and written to the
    connection of ``session_id`` (4lw ``cons``), or None if it lists no such connection."""
    cons = await anyio.to_thread.run_sync(four_letter_word, address, "cons")
    for line in cons.splitlines():
        if f"sid=0x{session_id:x}," in line:
            pairs = (field.partition("=") for field in line[line.index("(") + 1 : -1].split(","))
            fields = {key: value for key, _, value in pairs}
            return int(fields["recved"]), int(fields["sent"])
    return None


async def server_sees_session(address: str, session_id: int) -> bool:
    """Whether the server lists a live connection of ``session_id`` (4lw ``cons``)."""
    return await server_counts(address, session_id) is not None


async def server_gone(address: str, session_id: int) -> bool:
    return not await server_sees_session(address, session_id)


# Server (and kernel) state has no event to await: these tests poll it, this often, within
# a hang bound.
POLL = 0.05


async def poll_until(condition: Callable[[], Awaitable[bool] | bool]) -> None:
    """Return once ``condition()`` is true, checking every ``POLL`` (unbounded: wrap it in
    ``anyio.fail_after``)."""
    while True:
        met = condition()
        if met if isinstance(met, bool) else await met:
            return
        await anyio.sleep(POLL)


# How long a partition must hold something that left one side; once it has (a positive
# barrier first), it would otherwise be across in a millisecond.
HOLD_WINDOW = 0.5


def tcp_state(local_port: int, remote_port: int) -> str | None:
    """The kernel's state (hex, as in ``/proc/net/tcp``) of the 127.0.0.1 socket from
    ``local_port`` to ``remote_port``, or None if there is none."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state = line.split()[1:4]
        ports = (int(local.split(":")[1], 16), int(remote.split(":")[1], 16))
        if ports == (local_port, remote_port):
            return state
    return None


TCP_CLOSE_WAIT = "08"  # the peer's FIN has arrived; this side has not closed yet


@pytest.mark.anyio
@pytest.mark.timeout(30)
async def test_blackhole_holds_bytes_until_lifted(
    proxy: FaultProxy, observer: RawZooKeeperConnection, zk_address: str
) -> None:
    path = unique_path("blackhole")
    async with await RawZooKeeperConnection.open(proxy.address) as conn:
        assert await conn.exists(path, watch=True) is None

        async def all_answered() -> bool:
            # The server counts a reply a little after writing it: wait until it has
            # counted one for every request (the handshake and the exists).
            counts = await server_counts(zk_address, conn.session_id)
            return counts is not None and counts[1] >= counts[0]

        with anyio.fail_after(10):  # a hang bound
            await poll_until(all_answered)
        counts = await server_counts(zk_address, conn.session_id)
        assert counts is not None
        received, sent = counts
        proxy.blackhole(True)
        # server→client: the watch event this create fires is held by the proxy
        await observer.create(path)
        # client→server: a request sent during the partition is held too
        xid = await conn.send(protocol.ExistsRequest(path=path, watch=False))
        with anyio.fail_after(10):  # hang bounds
            await proxy.wait_for_request(Opcode.EXISTS, 2)  # it reached the proxy

            # The event has left the server (one more packet written to the session's
            # connection): from here, nothing but the partition keeps it from the client.
            async def event_sent() -> bool:
                return (await server_counts(zk_address, conn.session_id) or (0, 0))[1] > sent

            await poll_until(event_sent)
        with anyio.move_on_after(HOLD_WINDOW) as window:
            await conn.read_reply(xid)
        assert window.cancelled_caught, "a reply crossed the partition"
        assert conn.watch_events == []
        # ... and the request never reached the server: it read nothing more.
        assert await server_counts(zk_address, conn.session_id) == (received, sent + 1)

        lifted_at = time.monotonic()
        proxy.blackhole(False)
        reply = await conn.read_reply(xid)
        assert reply.err == 0
        assert reply.t >= lifted_at
        assert reply.response.stat.ephemeral_owner == 0
        # The event was sent first, so it is delivered first, also after the lift.
        [event] = conn.watch_events
        assert (event.type, event.path) == (WatchEventType.NODE_CREATED, path)
        assert lifted_at <= event.t <= reply.t
        assert proxy.connections_accepted == 1  # nothing was dropped
    await observer.delete(path)


@pytest.mark.anyio
@pytest.mark.timeout(30)
async def test_blackhole_client_close_reaches_server_after_lift(
    proxy: FaultProxy, zk_address: str
) -> None:
    conn = await RawZooKeeperConnection.open(proxy.address)
    assert await server_sees_session(zk_address, conn.session_id)
    client_port = conn._stream.extra(SocketAttribute.local_port)
    proxy.blackhole(True)
    await conn.aclose()  # FIN from the client, during the partition
    with anyio.fail_after(10):  # a hang bound
        # The FIN has reached the proxy's socket: from here, only the partition holds it.
        await poll_until(lambda: tcp_state(proxy.port, client_port) == TCP_CLOSE_WAIT)
    await anyio.sleep(HOLD_WINDOW)  # the window in which it must stay held
    assert await server_sees_session(zk_address, conn.session_id)
    proxy.blackhole(False)
    with anyio.fail_after(10):  # a hang bound: the server closes it at once once it arrives
        await poll_until(lambda: server_gone(zk_address, conn.session_id))
    await expire_session(zk_address, conn.session_id, conn.password)  # tidy up


@pytest.mark.anyio
@pytest.mark.timeout(30)
async def test_blackhole_server_close_reaches_client_after_lift(
    proxy: FaultProxy, zk_address: str
) -> None:
    conn = await RawZooKeeperConnection.open(proxy.address)
    proxy.blackhole(True)
    # The server closes the connection now (re-attach + closeSession) ...
    await expire_session(zk_address, conn.session_id, conn.password)
    with anyio.fail_after(10):  # a hang bound
        # It has: from here, only the partition holds the close from the client.
        await poll_until(lambda: server_gone(zk_address, conn.session_id))
    with anyio.move_on_after(HOLD_WINDOW) as window:
        await conn.wait_closed()
    assert window.cancelled_caught, "the close crossed the partition"
    # ... and the client learns it only when the partition heals.
    proxy.blackhole(False)
    with anyio.fail_after(10):  # a hang bound
        assert await conn.wait_closed() == "eof"


@pytest.mark.anyio
@pytest.mark.timeout(30)
async def test_blackhole_new_connections_refused_or_hung(proxy: FaultProxy) -> None:
    async with await RawZooKeeperConnection.open(proxy.address) as existing:
        proxy.blackhole(True, new="refuse")
        with pytest.raises(RawConnectionClosed) as refused:
            await RawZooKeeperConnection.open(proxy.address)
        assert refused.value.reason == "reset"  # accepted, then reset before any handshake
        assert proxy.session_ids == [existing.session_id]

        proxy.blackhole(True, new="hang")
        with pytest.raises(TimeoutError):
            await RawZooKeeperConnection.open(proxy.address, request_timeout=0.5)

        opened: list[RawZooKeeperConnection] = []

        async def connect() -> None:
            opened.append(await RawZooKeeperConnection.open(proxy.address, request_timeout=10))

        async with anyio.create_task_group() as tg:
            tg.start_soon(connect)
            with anyio.fail_after(10):  # a hang bound
                # Accepted, and its handshake read and held (every connection so far: the
                # existing one, the refused one, the timed out one, this one; handshakes
                # from all but the refused one).
                await poll_until(
                    lambda: proxy.connections_accepted == 4 and len(proxy.connect_requests) == 3
                )
            # Held, not forwarded: no session without the server, none made by the proxy.
            assert opened == []
            assert proxy.session_ids == [existing.session_id]
            proxy.blackhole(False)
        [late] = opened
        async with late:
            assert late.session_id not in (0, existing.session_id)
        # the existing connection was held, not dropped
        assert await existing.exists("/") is not None
    assert proxy.connections_accepted == 4


@pytest.mark.anyio
@pytest.mark.timeout(20)
async def test_set_delay_parks_requests_in_order(proxy: FaultProxy) -> None:
    async with await RawZooKeeperConnection.open(proxy.address) as conn:
        proxy.set_delay(0.3)
        first = await conn.send(protocol.ExistsRequest(path="/", watch=False))
        second = await conn.send(protocol.ExistsRequest(path="/zookeeper", watch=False))
        with anyio.fail_after(10):  # a hang bound
            await proxy.wait_for_request(Opcode.EXISTS, 2)
        reply1 = await conn.read_reply(first)
        reply2 = await conn.read_reply(second)
        received1, received2 = (r.t for r in proxy.requests[-2:])
        assert reply1.t - received1 >= 0.3  # parked for the delay after reaching the proxy
        assert reply2.t - received2 >= 0.3
        assert reply1.t <= reply2.t

        # Frames already parked are re-timed when the delay changes.
        parked = 30.0
        proxy.set_delay(parked)
        third = await conn.send(protocol.ExistsRequest(path="/", watch=False))
        with anyio.fail_after(10):  # a hang bound
            await proxy.wait_for_request(Opcode.EXISTS, 3)
        released_at = time.monotonic()
        proxy.set_delay(0)
        reply3 = await conn.read_reply(third)
        # Released by the change (a round trip), not when its 30 s were over.
        assert reply3.t - released_at < parked / 6


@pytest.mark.anyio
@pytest.mark.timeout(20)
async def test_arm_drop_after_create_executes_but_loses_reply(
    proxy: FaultProxy, observer: RawZooKeeperConnection
) -> None:
    path = unique_path("lost-reply")
    conn = await RawZooKeeperConnection.open(proxy.address)
    proxy.arm_drop_after(Opcode.CREATES)
    assert await conn.exists("/") is not None  # other opcodes pass
    with pytest.raises(RawConnectionClosed) as closed:
        await conn.create(path, b"v", ephemeral=True)
    assert closed.value.reason == "reset"
    assert proxy.swallowed_replies == 1
    assert proxy.count(Opcode.CREATE) == 1

    stat = await observer.exists(path)  # the server did execute it
    assert stat is not None
    assert stat.ephemeral_owner == conn.session_id

    # One-shot: the session's next create, on a new connection, is answered.
    async with await RawZooKeeperConnection.open(
        proxy.address, session_id=conn.session_id, password=conn.password
    ) as again:
        assert await again.create(f"{path}-2", ephemeral=True) == f"{path}-2"
    # closing the session removed both ephemerals
    assert await observer.exists(path) is None
    assert await observer.exists(f"{path}-2") is None


@pytest.mark.anyio
@pytest.mark.timeout(20)
async def test_arm_drop_after_without_reset_delivers_the_later_replies(
    proxy: FaultProxy, observer: RawZooKeeperConnection
) -> None:
    path = unique_path("skipped-reply")
    async with await RawZooKeeperConnection.open(proxy.address) as conn:
        proxy.arm_drop_after(Opcode.CREATES, reset=False)
        request = protocol.CreateRequest(
            path=path, data=b"", acl=[protocol.UNRESTRICTED_ACCESS], flags=0
        )
        await conn.send(request)
        later = await conn.send(protocol.ExistsRequest(path=path, watch=False))
        reply = await conn.read_reply(later)  # the first reply read: none for the create
        assert reply.err == 0  # the node exists: the server executed the create
        assert proxy.swallowed_replies == 1
        assert not conn.is_closed
        assert await conn.exists("/") is not None  # the connection goes on
        assert proxy.connections_accepted == 1
        stat = await observer.exists(path)  # the server did execute the create
        assert stat is not None
        await conn.delete(path)


@pytest.mark.anyio
@pytest.mark.timeout(20)
async def test_arm_drop_after_counts_matching_requests(
    proxy: FaultProxy, observer: RawZooKeeperConnection
) -> None:
    base = unique_path("nth")
    async with await RawZooKeeperConnection.open(proxy.address) as conn:
        proxy.arm_drop_after([Opcode.CREATE, Opcode.DELETE], n=3)
        await conn.create(base)
        await conn.create(f"{base}/a")
        await conn.exists(base)  # not counted
        with pytest.raises(RawConnectionClosed):
            await conn.delete(f"{base}/a")  # the 3rd matching request
    assert await observer.get_children(base) == []  # executed all the same
    await observer.delete(base)
    assert proxy.swallowed_replies == 1


@pytest.mark.anyio
@pytest.mark.timeout(20)
async def test_expire_session_deletes_ephemerals_and_kills_connection(
    proxy: FaultProxy, observer: RawZooKeeperConnection, zk_address: str
) -> None:
    session_timeout = 10.0
    conn = await RawZooKeeperConnection.open(
        proxy.address, session_timeout_ms=int(session_timeout * 1000)
    )
    path = await conn.create(unique_path("expire"), ephemeral=True)
    stat = await observer.exists(path, watch=True)
    assert stat is not None
    assert stat.ephemeral_owner == conn.session_id

    started = time.monotonic()
    await expire_session(zk_address, conn.session_id, conn.password)
    returned = time.monotonic()
    with anyio.fail_after(10):  # a hang bound
        event = await observer.wait_for_event(path=path, type=WatchEventType.NODE_DELETED)
    # Deleted by the expiry, at once: the session itself would have lived on for 10 s.
    assert event.t - started < session_timeout / 2
    assert await observer.exists(path) is None
    with anyio.fail_after(10):  # a hang bound
        assert await conn.wait_closed() in ("eof", "reset")
    assert returned - started < session_timeout / 2

    with pytest.raises(RawSessionExpired):
        await RawZooKeeperConnection.open(
            proxy.address, session_id=conn.session_id, password=conn.password
        )
    assert proxy.session_ids == [conn.session_id, 0]  # 0: the server refused it


# --- history checker ----------------------------------------------------------------------


@pytest.mark.timeout(5)
def test_history_clean() -> None:
    history = History()
    history.record("a", 10, 0.0, 1.0)
    history.record("b", 20, 1.0, 2.0)  # touching is not overlapping
    history.record("a", 30, 2.5, 3.0)
    history.record("a", 30, 3.0, 3.5)  # same grant, recorded in two sections
    report = history.check()
    assert report.ok
    assert report.sections == 4
    assert report.overlaps == ()
    assert report.token_order_violations == ()
    assert report.max_overlap == 0.0
    assert "OK" in str(report)


@pytest.mark.timeout(5)
def test_history_detects_overlap() -> None:
    history = History()
    a = history.record("a", 10, 0.0, 1.0)
    b = history.record("b", 20, 0.75, 2.0)
    history.record("c", 30, 3.0, 4.0)
    report = history.check()
    assert not report.ok
    assert report.overlaps == ((a, b),)
    assert report.max_overlap == pytest.approx(0.25)
    assert report.token_order_violations == ()
    assert "FAILED" in str(report)
    assert "overlap 250.0 ms" in str(report)
    assert history.check(slack=0.3).ok  # tolerated with slack


@pytest.mark.timeout(5)
def test_history_detects_token_order_violation() -> None:
    history = History()
    history.record("a", 10, 0.0, 1.0)
    b = history.record("b", 30, 1.0, 2.0)
    c = history.record("c", 20, 2.0, 3.0)  # granted later with a smaller token
    report = history.check()
    assert not report.ok
    assert report.overlaps == ()
    assert report.token_order_violations == ((b, c),)
    assert "token order" in str(report)


@pytest.mark.timeout(5)
def test_history_shared_sections_overlap_each_other_never_an_exclusive_one() -> None:
    """Read lock sections: readers share (and enter in any token order), a writer does not."""
    history = History()
    history.record("w", 10, 0.0, 1.0)
    history.record("r1", 30, 1.0, 3.0, shared=True)
    history.record("r2", 20, 1.5, 2.5, shared=True)  # entered later with a smaller token
    history.record("w", 40, 3.0, 4.0)
    assert history.check().ok
    late = history.record("w2", 25, 5.0, 6.0)  # below a reader's token before it
    overlapping = history.record("w3", 50, 1.6, 1.8)  # inside both readers' sections
    report = history.check()
    assert not report.ok
    assert len(report.overlaps) == 2
    assert all(overlapping in pair for pair in report.overlaps)
    assert any(pair[1] is late for pair in report.token_order_violations)


@pytest.mark.timeout(5)
def test_history_max_holders_accepts_n_at_once_and_flags_n_plus_one() -> None:
    """A semaphore of 2: two holders at once pass in any token order; a third fails."""
    history = History(max_holders=2)
    history.record("a", 20, 0.0, 2.0)
    history.record("b", 10, 0.5, 1.0)  # entered later with a smaller token: allowed
    history.record("c", 30, 1.0, 3.0)  # enters as b exits: touching is not overlapping
    history.record("a", 20, 2.0, 2.5)  # the same grant again: one holder, not two
    report = history.check()
    assert report.ok, str(report)
    assert report.peak_holders == 2
    assert "at most 2 holder(s) at once (limit 2)" in str(report)
    third = history.record("d", 40, 1.5, 1.8)  # a, c and d hold from 1.5 to 1.8
    report = history.check()
    assert not report.ok
    assert report.peak_holders == 3
    assert len(report.crowded) == 1
    window = report.crowded[0]
    assert (window.start, window.end) == (1.5, 1.8)
    assert third in window.holders
    assert len(window.holders) == 3
    assert report.overlaps == ()
    assert report.token_order_violations == ()
    assert "more than 2 holders" in report.failures()[0]
    assert history.check(slack=0.5).ok  # a window no longer than the slack is tolerated
    history.record_pause("d", 1.4, 1.6)  # d was stopped: judged by its acts instead
    report = history.check()
    assert report.ok
    assert len(report.paused_crowded) == 1
    with pytest.raises(ValueError, match="max_holders"):
        History(max_holders=0)


@pytest.mark.timeout(5)
def test_history_flags_acts_after_the_node_was_deleted_unless_paused() -> None:
    history = History(max_holders=2)
    history.record("a", 10, 0.0, 1.0, node="/s/n-1#10", acts=(0.2, 0.9))
    history.record("b", 11, 0.0, 1.0, node="/s/n-2#11", acts=(0.3, 0.4))
    history.record_deletion("/s/n-1#10", 0.5)  # a's session expired under it at 0.5
    history.record_deletion("/s/n-2#11", 1.2)
    report = history.check()
    assert not report.ok
    assert [(s.client, t) for s, t in report.released_acts] == [("a", 0.9)]
    assert "act(s) after the node was deleted" in report.failures()[0]
    history.record_pause("a", 0.1, 0.3)  # stopped between its check and its act
    report = history.check()
    assert report.ok
    assert report.paused_released_acts == 1


@pytest.mark.anyio
@pytest.mark.timeout(5)
async def test_history_sections_record_exit_on_cancel() -> None:
    history = History()
    with history.section("a", 1):
        pass
    with anyio.move_on_after(0.05):
        async with history.section("b", 2):
            await anyio.sleep_forever()
    with pytest.raises(RuntimeError), history.section("c", 3):
        raise RuntimeError("lock lost")
    assert [(s.client, s.token) for s in history.sections] == [("a", 1), ("b", 2), ("c", 3)]
    assert all(s.exit >= s.enter for s in history.sections)
    assert history.sections[1].duration >= 0.04
    assert history.check().ok


@pytest.mark.timeout(5)
def test_fenced_store_rejects_stale_writes() -> None:
    store = FencedStore()
    assert store.write("a", 10, "a1")
    assert store.write("a", 10, "a2")  # same token: same holder
    assert store.write("b", 20, "b1")
    assert not store.write("a", 10, "a3")  # the old holder, after a pause
    assert store.write("b", 20, "b2")
    assert store.value == "b2"
    assert store.max_token == 20
    assert [(w.client, w.value) for w in store.accepted] == [
        ("a", "a1"),
        ("a", "a2"),
        ("b", "b1"),
        ("b", "b2"),
    ]
    assert [(w.client, w.token, w.accepted) for w in store.rejected] == [("a", 10, False)]
