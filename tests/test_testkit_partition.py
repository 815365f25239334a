"""Server-to-server link faults of the test kit: ``ZooKeeperCluster(partitionable=True)``.

Real ZooKeeper ensembles (tickTime 200 ms, syncLimit 5: a cut-off follower gives up after
about 1 s), and the link pump on its own with plain sockets.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from aiozklock.testing import (
    RawZooKeeperConnection,
    ZooKeeperCluster,
    ZooKeeperMember,
    four_letter_word,
)
from aiozklock.testing._server_links import (
    pairs_between,
    pairs_isolating,
    rewrite_initial_message,
)
from aiozklock.testing._server_links_pump import LinkPump

# Server state has no event to await: these tests poll it, this often, within a hang bound.
POLL = 0.05
BOUND = 20.0  # a hang bound for an election or a rejoin (about 1-4 s here)


def poll_until(condition: Callable[[], bool], what: str, bound: float = BOUND) -> float:
    """Seconds until ``condition()`` held (polled every ``POLL``); fails after ``bound``."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < bound, f"not within {bound} s: {what}"
        time.sleep(POLL)
    return time.monotonic() - start


def leader_among(members: list[ZooKeeperMember]) -> ZooKeeperMember | None:
    leaders = [member for member in members if member.mode() == "leader"]
    return leaders[0] if leaders else None


def serves_not(member: ZooKeeperMember) -> bool:
    """The member answers on its client port, and says it is not serving (no quorum)."""
    try:
        return "not currently serving" in four_letter_word(member.address, "srvr")
    except OSError:
        return False


def heal_and_settle(cluster: ZooKeeperCluster) -> None:
    cluster.heal()
    for member in cluster.members:
        if not member.running:
            member.start(wait=False)
    cluster.wait_serving(BOUND)


@pytest.fixture(scope="module")
def cluster3() -> Iterator[ZooKeeperCluster]:
    with ZooKeeperCluster(3, partitionable=True) as cluster:
        yield cluster


@pytest.fixture
def ensemble(cluster3: ZooKeeperCluster) -> Iterator[ZooKeeperCluster]:
    """The module's partitionable 3-node ensemble, healed and serving after each test."""
    cluster3.wait_serving(BOUND)
    assert cluster3.cut_links == frozenset()
    try:
        yield cluster3
    finally:
        heal_and_settle(cluster3)


# --- against real ensembles ---------------------------------------------------------------


@pytest.mark.ensemble
@pytest.mark.timeout(60)
def test_isolated_follower_stops_serving_and_rejoins_after_heal(
    ensemble: ZooKeeperCluster,
) -> None:
    leader = ensemble.leader()
    follower = ensemble.followers()[0]
    ensemble.isolate(follower)
    assert ensemble.cut_links == pairs_isolating([1, 2, 3], follower.id)
    poll_until(lambda: follower.mode() is None, "the isolated follower stops serving")
    assert serves_not(follower), "its client port is not cut: it answers, not serving"
    assert leader.mode() == "leader"  # the other two keep their quorum
    assert sorted(str(m.mode()) for m in ensemble.members if m is not follower) == [
        "follower",
        "leader",
    ]
    ensemble.heal()
    assert ensemble.cut_links == frozenset()
    poll_until(lambda: follower.mode() == "follower", "the healed follower rejoins")
    assert leader.mode() == "leader"


@pytest.mark.ensemble
@pytest.mark.timeout(60)
def test_isolated_leader_is_replaced_and_stops_serving(ensemble: ZooKeeperCluster) -> None:
    old = ensemble.leader()
    others = [member for member in ensemble.members if member is not old]
    ensemble.isolate(old.id)
    poll_until(lambda: leader_among(others) is not None, "a new leader among the others")
    poll_until(lambda: old.mode() is None, "the isolated old leader stops serving")
    assert serves_not(old)
    assert sorted(str(m.mode()) for m in others) == ["follower", "leader"]
    ensemble.heal()
    poll_until(lambda: old.mode() == "follower", "the old leader rejoins as a follower")


@pytest.mark.ensemble
@pytest.mark.timeout(60)
def test_partition_one_against_two_leaves_the_two_with_a_leader(
    ensemble: ZooKeeperCluster,
) -> None:
    # The minority is the leader: the majority side must elect, not merely keep, a leader.
    alone = ensemble.leader()
    rest = [member for member in ensemble.members if member is not alone]
    ensemble.partition([alone], rest)
    assert ensemble.cut_links == pairs_between([1, 2, 3], [{alone.id}])
    poll_until(lambda: leader_among(rest) is not None, "the majority elects a leader")
    poll_until(lambda: alone.mode() is None, "the minority stops serving")


@pytest.mark.ensemble
@pytest.mark.timeout(90)
def test_two_three_split_on_five_leaves_the_three_with_a_leader() -> None:
    with ZooKeeperCluster(5, partitionable=True) as cluster:
        # The leader on the minority side, so the majority must elect a new one.
        leader = cluster.leader()
        minority = [leader, next(m for m in cluster.members if m is not leader)]
        majority = [m for m in cluster.members if m not in minority]
        cluster.partition(minority, majority)
        poll_until(lambda: leader_among(majority) is not None, "the majority elects a leader")
        poll_until(
            lambda: all(member.mode() is None for member in minority),
            "the minority stops serving",
        )
        assert sorted(str(m.mode()) for m in majority) == ["follower", "follower", "leader"]
        cluster.heal()
        cluster.wait_serving(BOUND)


@pytest.mark.ensemble
@pytest.mark.timeout(60)
def test_reset_cut_drops_the_follower_and_heal_lets_it_back(
    ensemble: ZooKeeperCluster,
) -> None:
    follower = ensemble.followers()[0]
    ensemble.isolate(follower, how="reset")
    poll_until(lambda: follower.mode() is None, "the reset follower stops serving")
    assert serves_not(follower)
    assert leader_among([m for m in ensemble.members if m is not follower]) is not None
    ensemble.heal()
    poll_until(lambda: follower.mode() == "follower", "the follower rejoins")


@pytest.mark.ensemble
@pytest.mark.timeout(60)
@pytest.mark.anyio
async def test_client_link_to_an_isolated_member_stays_up(ensemble: ZooKeeperCluster) -> None:
    follower = ensemble.followers()[0]
    async with await RawZooKeeperConnection.open(follower.address) as conn:
        ensemble.isolate(follower)  # from the event loop: returns at once
        # A cut-off follower answers pings by itself until it gives up (about 1 s here).
        await conn.ping()
        with anyio.fail_after(BOUND):  # a hang bound
            # The member drops its clients itself when it leaves the quorum.
            await conn.wait_closed()
        assert await anyio.to_thread.run_sync(serves_not, follower)
    ensemble.heal()
    await anyio.to_thread.run_sync(follower.wait_serving, BOUND)
    async with await RawZooKeeperConnection.open(follower.address) as conn:
        await conn.ping()


@pytest.mark.ensemble
@pytest.mark.timeout(90)
def test_killed_and_restarted_member_rejoins_behind_the_same_proxies(
    ensemble: ZooKeeperCluster,
) -> None:
    follower = ensemble.followers()[0]
    config = follower.config_path.read_text()
    follower.kill()
    follower.start(timeout=BOUND)  # rejoins through the proxies: same config, same ports
    assert follower.mode() == "follower"
    assert follower.config_path.read_text() == config
    ensemble.isolate(follower)  # the proxies still cover the new process's links
    poll_until(lambda: follower.mode() is None, "the restarted, isolated member stops serving")
    ensemble.heal()
    poll_until(lambda: follower.mode() == "follower", "it rejoins after heal")


def _established_to(ports: set[int]) -> list[tuple[int, int]]:
    """Inodes and remote ports of the established TCP connections to 127.0.0.1:``ports``
    (IPv4 and IPv6 tables: a JVM dials from dual-stack sockets)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rpartition(":")[2], 16)
            if fields[3] == "01" and remote_port in ports:
                found.append((int(fields[9]), remote_port))
    return found


def _own_socket_inodes() -> set[int]:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(int(target[len("socket:[") : -1]))
    return inodes


@pytest.mark.ensemble
@pytest.mark.skipif(not Path("/proc/net/tcp6").exists(), reason="reads Linux's /proc/net")
def test_no_server_link_bypasses_the_proxies(ensemble: ZooKeeperCluster) -> None:
    """Every connection to a member's real quorum or election port comes from the proxies
    (this process). Without rewriting the election address that a dialer announces, the
    members' election dial-backs connected to the real ports directly."""
    real = set()
    for member in ensemble.members:
        line = next(
            line
            for line in member.config_path.read_text().splitlines()
            if line.startswith(f"server.{member.id}=")
        )
        real |= {int(port) for port in line.partition("=")[2].split(":")[1:3]}
    # Every pair's election link, and a quorum link per follower, once the ensemble serves.
    links = _established_to(real)
    assert len(links) >= 3 + 2, links
    foreign = [link for link in links if link[0] not in _own_socket_inodes()]
    assert not foreign, f"connections to real server ports not through the proxies: {foreign}"


# --- errors -------------------------------------------------------------------------------


def test_errors_before_anything_is_cut(ensemble: ZooKeeperCluster, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown member 4"):
        ensemble.isolate(4)
    with pytest.raises(ValueError, match="unknown member 0"):
        ensemble.cut(0, 1)
    with pytest.raises(ValueError, match="from itself"):
        ensemble.cut(2, ensemble.members[1])
    with pytest.raises(ValueError, match="two groups"):
        ensemble.partition([1, 2], [2, 3])
    with pytest.raises(ValueError, match="how must be"):
        ensemble.isolate(1, how="drop")
    with pytest.raises(ValueError, match="not a member"):
        ensemble.isolate(_stranger(tmp_path))
    assert ensemble.cut_links == frozenset()


def _stranger(directory: Path) -> ZooKeeperMember:
    """A member of no cluster (never started)."""
    return ZooKeeperMember(1, 1, directory, {}, in_ensemble=True, classpath="", java="")


def test_a_cluster_that_is_not_partitionable_says_so() -> None:
    with pytest.raises(ValueError, match="needs an ensemble"):
        ZooKeeperCluster(1, partitionable=True)
    plain = ZooKeeperCluster(3)
    assert plain.cut_links == frozenset()
    with pytest.raises(RuntimeError, match="partitionable=True"):
        plain.isolate(1)
    with pytest.raises(RuntimeError, match="not started"):
        ZooKeeperCluster(3, partitionable=True).heal()


# --- pure parts ---------------------------------------------------------------------------


def test_pairs() -> None:
    assert pairs_isolating([1, 2, 3], 2) == {(2, 1), (2, 3), (1, 2), (3, 2)}
    assert pairs_between([1, 2, 3], [{1}, {2, 3}]) == {(1, 2), (2, 1), (1, 3), (3, 1)}
    assert pairs_between([1, 2, 3, 4, 5], [{1, 2}]) == pairs_between(
        [1, 2, 3, 4, 5], [{1, 2}, {3, 4, 5}]
    )
    assert len(pairs_between([1, 2, 3, 4, 5], [{1, 2}])) == 2 * 2 * 3


def _initial(version: int, sid: int, address: bytes) -> bytes:
    return struct.pack("!qqi", version, sid, len(address)) + address


def test_rewrite_initial_message() -> None:
    message = _initial(-65536, 2, b"127.0.0.1:40001")
    after = b"election votes"
    for cut in range(len(message)):  # incomplete: wait for more
        assert not rewrite_initial_message(bytearray(message[:cut]), 2, b"127.0.0.1:5")
    buffer = bytearray(message + after)
    assert rewrite_initial_message(buffer, 2, b"127.0.0.1:50002")
    assert bytes(buffer) == _initial(-65536, 2, b"127.0.0.1:50002") + after
    for untouched in (
        struct.pack("!q", 2) + after,  # pre-3.5: the sid alone
        _initial(-65535, 3, b"127.0.0.1:40001"),  # another sender: left alone
        _initial(-65536, 2, b"") + after,  # refused by the server anyway
    ):
        buffer = bytearray(untouched)
        assert rewrite_initial_message(buffer, 2, b"127.0.0.1:50002")
        assert bytes(buffer) == untouched


# --- the pump on its own ------------------------------------------------------------------


@pytest.fixture
def pumped() -> Iterator[tuple[LinkPump, socket.socket, int]]:
    """A pump with one listener (pair 1 -> 2) in front of a plain listening socket."""
    target = socket.create_server(("127.0.0.1", 0))
    target.settimeout(BOUND)
    pump = LinkPump()
    listener = pump.listen((1, 2))
    listener.upstream_port = target.getsockname()[1]
    pump.start()
    try:
        yield pump, target, listener.port
    finally:
        pump.close()
        target.close()


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, f"closed after {data!r}"
        data += chunk
    return data


HOLD_WINDOW = 0.3  # how long a cut must hold what would otherwise cross in a millisecond


@pytest.mark.timeout(30)
def test_silent_cut_holds_bytes_and_new_connections_until_heal(
    pumped: tuple[LinkPump, socket.socket, int],
) -> None:
    pump, target, port = pumped
    dialer = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
    server, _ = target.accept()
    server.settimeout(BOUND)
    dialer.sendall(b"before")
    assert _recv_exactly(server, 6) == b"before"  # a positive barrier first
    pump.set_cut([(1, 2)], "silent")
    dialer.sendall(b"held-1")
    server.sendall(b"back-held")
    late = socket.create_connection(("127.0.0.1", port), timeout=BOUND)  # accepted, held
    late.sendall(b"late")
    dialer.settimeout(HOLD_WINDOW)
    server.settimeout(HOLD_WINDOW)
    target.settimeout(HOLD_WINDOW)
    for sock in (dialer, server, target):
        with pytest.raises(TimeoutError):  # nothing crosses, nothing is closed
            sock.accept() if sock is target else sock.recv(1)
    dialer.sendall(b"held-2")
    pump.heal()
    for sock in (dialer, server, target):
        sock.settimeout(BOUND)
    assert _recv_exactly(server, 12) == b"held-1held-2"  # in order
    assert _recv_exactly(dialer, 9) == b"back-held"
    late_server, _ = target.accept()
    assert _recv_exactly(late_server, 4) == b"late"
    for sock in (dialer, server, late, late_server):
        sock.close()


@pytest.mark.timeout(30)
def test_reset_cut_resets_connections_until_heal(
    pumped: tuple[LinkPump, socket.socket, int],
) -> None:
    pump, target, port = pumped
    dialer = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
    server, _ = target.accept()
    server.settimeout(BOUND)
    pump.set_cut([(1, 2), (2, 1)], "reset")
    assert pump.cut_links == {(1, 2), (2, 1)}
    with pytest.raises(ConnectionResetError):
        dialer.recv(1)
    with pytest.raises(ConnectionResetError):
        server.recv(1)
    with (  # a new connection is reset: while connecting, or on its first read
        pytest.raises(ConnectionResetError),
        socket.create_connection(("127.0.0.1", port), timeout=BOUND) as refused,
    ):
        refused.recv(1)
    pump.heal()
    again = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
    again.sendall(b"ok")
    fresh, _ = target.accept()
    assert _recv_exactly(fresh, 2) == b"ok"
    for sock in (dialer, server, again, fresh):
        sock.close()
