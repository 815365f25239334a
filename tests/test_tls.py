"""TLS and mutual TLS against real ZooKeeper servers (Netty, ``secureClientPort``).

The servers' plain port stays open beside the TLS one: independent observers (a raw
connection, ``expire_session``) use it, so that server-side facts never come from the client
under test. Through the FaultProxy the TLS bytes are opaque: the proxy passes them through,
and the faults (drop, partition) act on them as on any TCP stream.
"""

from __future__ import annotations

import gc
import os
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.to_thread
import pytest

import aiozklock
from aiozklock import SessionState
from aiozklock.testing import (
    FaultProxy,
    History,
    RawZooKeeperConnection,
    TLSFiles,
    ZooKeeperCluster,
    expire_session,
    session_of,
)
from tests.conftest import gone, wait_for_queue
from tests.test_faults import (
    DeletionWatch,
    HolderOutcome,
    StateLog,
    WaiterOutcome,
    acquire_once,
    first_host,
    hold_until_cancelled,
)

pytestmark = [pytest.mark.anyio]

PATH = "/locks/tls"
TIMEOUT = 2.0  # the session a test times out (the partition)
STEADY_TIMEOUT = 4.0  # every other (see test_faults: a slow ping reply is no partition)
ENSEMBLE_TIMEOUT = 8.0  # a failover must finish within ~0.5 of it (the leader proof)
# A hang guard for a client's first session (a TLS handshake with a busy JVM took over 3 s at
# load 30): no test measures it; the reconnect bounds derive from the session timeout.
CONNECT_TIMEOUT = 20.0
# For the failures that must not be retried: long, so that "well before the timeout" keeps a
# wide margin over a TLS handshake with a busy JVM.
TERMINAL_CONNECT_TIMEOUT = 10.0


class TLSClientFactory(Protocol):
    async def __call__(
        self, hosts: str | None = None, **kwargs: Any
    ) -> aiozklock.ZooKeeperClient: ...


@pytest.fixture
async def open_tls_client(
    zk_tls_cluster: ZooKeeperCluster, zk_tls_files: TLSFiles, chroot: str
) -> AsyncIterator[TLSClientFactory]:
    """``await open_tls_client(hosts=None, **connect_kwargs)``: a client over TLS (to the TLS
    server unless ``hosts`` is given) in this test's chroot; all closed at teardown."""
    async with AsyncExitStack() as stack:

        async def factory(hosts: str | None = None, **kwargs: Any) -> aiozklock.ZooKeeperClient:
            kwargs.setdefault("ssl", zk_tls_files.client_context())
            kwargs.setdefault("session_timeout", STEADY_TIMEOUT)
            kwargs.setdefault("connect_timeout", CONNECT_TIMEOUT)
            client = aiozklock.connect((hosts or zk_tls_cluster.secure_hosts) + chroot, **kwargs)
            return await stack.enter_async_context(client)

        yield factory


@pytest.fixture
async def tls_proxy(zk_tls_cluster: ZooKeeperCluster) -> AsyncIterator[FaultProxy]:
    async with FaultProxy(zk_tls_cluster.secure_hosts) as fault_proxy:
        yield fault_proxy


@pytest.fixture
async def tls_observer(zk_tls_cluster: ZooKeeperCluster) -> AsyncIterator[RawZooKeeperConnection]:
    """A raw connection to the TLS server's plain port."""
    async with await RawZooKeeperConnection.open(first_host(zk_tls_cluster.hosts)) as conn:
        yield conn


@pytest.fixture(scope="module")
def mtls_cluster(zk_tls_files: TLSFiles) -> Iterator[ZooKeeperCluster]:
    """A TLS server that requires a client certificate signed by the test CA."""
    with ZooKeeperCluster(1, tls=zk_tls_files, client_auth="need") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def expired_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperCluster]:
    """A TLS server whose certificate has expired."""
    files = TLSFiles.generate(tmp_path_factory.mktemp("expired"), expired=True)
    with ZooKeeperCluster(1, tls=files) as cluster:
        yield cluster


def open_descriptors() -> int:
    gc.collect()  # what earlier tests left for the collector closes now, not mid-test
    return len(os.listdir("/proc/self/fd"))


# --- the argument --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["yes", 1, Path("ca.pem"), ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)],
    ids=["str", "int", "path", "server-context"],
)
def test_bad_ssl_argument_is_rejected_before_any_traffic(value: object) -> None:
    with pytest.raises(aiozklock.InvalidArgument, match="ssl must be"):
        aiozklock.connect("127.0.0.1:1", ssl=value)  # type: ignore[arg-type]


# --- connecting and locking over TLS -------------------------------------------------------


@pytest.mark.timeout(30)
async def test_lock_cycles_over_tls(
    open_tls_client: TLSClientFactory, tls_observer: RawZooKeeperConnection, chroot: str
) -> None:
    client = await open_tls_client()
    lock = client.lock(PATH)
    tokens = []
    with anyio.fail_after(10):
        for _ in range(3):
            async with lock:
                node = lock.statistics().node
                stat = await tls_observer.exists(f"{chroot}{PATH}/{node}")
                assert stat is not None
                assert stat.ephemeral_owner == client.session_id
                tokens.append(lock.fencing_token)
            assert not lock.is_held
    assert tokens == sorted(tokens)
    assert len(set(tokens)) == 3
    assert session_of(client).state is SessionState.CONNECTED


@pytest.mark.timeout(30)
async def test_close_over_tls_ends_the_session_on_the_server(
    open_tls_client: TLSClientFactory, tls_observer: RawZooKeeperConnection, chroot: str
) -> None:
    client = await open_tls_client()
    lock = client.lock(PATH)
    with anyio.fail_after(5):
        await lock.acquire()
    node = f"{chroot}{PATH}/{lock.statistics().node}"
    assert await tls_observer.exists(node) is not None
    with anyio.fail_after(5):
        await client.close()
    # close() returns once the server confirmed: the node is gone already.
    assert await tls_observer.exists(node) is None
    assert client.state is SessionState.CLOSED


@pytest.mark.timeout(30)
async def test_contenders_across_two_tls_clients(open_tls_client: TLSClientFactory) -> None:
    first, second = await open_tls_client(), await open_tls_client()
    history = History()
    waiter = WaiterOutcome()
    holder = first.lock(PATH, identifier="first")
    with anyio.fail_after(10):
        await holder.acquire()
        token = holder.fencing_token
        entered = time.monotonic()
        async with anyio.create_task_group() as tg:
            second_lock = second.lock(PATH, identifier="second")
            tg.start_soon(acquire_once, second_lock, waiter, history, "second")
            await wait_for_queue(first, PATH, 2)
            assert [c.identifier for c in await holder.contenders()] == ["first", "second"]
            assert not waiter.acquired.is_set()
            released = time.monotonic()
            history.record("first", token, entered, released)
            await holder.release()
            await waiter.acquired.wait()
    assert waiter.acquired_at > released
    assert waiter.token > token
    assert history.check().ok
    await gone(first, PATH)


# --- mutual TLS ----------------------------------------------------------------------------


@pytest.mark.timeout(30)
async def test_mutual_tls_with_a_client_certificate(
    mtls_cluster: ZooKeeperCluster, open_tls_client: TLSClientFactory, zk_tls_files: TLSFiles
) -> None:
    client = await open_tls_client(
        mtls_cluster.secure_hosts, ssl=zk_tls_files.client_context(client_cert=True)
    )
    with anyio.fail_after(10):
        async with client.lock(PATH) as lock:
            assert lock.is_held
            assert await client.get_children(PATH) == [lock.statistics().node]


@pytest.mark.timeout(30)
async def test_mutual_tls_without_a_client_certificate_fails_fast(
    mtls_cluster: ZooKeeperCluster, zk_tls_files: TLSFiles
) -> None:
    before = open_descriptors()
    started = time.monotonic()
    with pytest.raises(aiozklock.ZooKeeperUnavailable, match="client certificate") as excinfo:
        async with aiozklock.connect(
            mtls_cluster.secure_hosts,
            ssl=zk_tls_files.client_context(),
            connect_timeout=TERMINAL_CONNECT_TIMEOUT,
        ):
            pytest.fail("connected without a client certificate")
    elapsed = time.monotonic() - started
    print(f"TLS mtls-rejected elapsed={elapsed:.3f}")
    assert elapsed < TERMINAL_CONNECT_TIMEOUT / 2  # terminal: not retried until the timeout
    cause = excinfo.value.__cause__
    assert isinstance(cause, ssl.SSLError), cause
    assert "ALERT" in str(cause.reason), cause
    assert open_descriptors() <= before  # none left open (others may close meanwhile)


# --- misconfiguration ----------------------------------------------------------------------

CERTIFICATE_CASES = {
    # ssl=True: the system's CAs, which never signed the test CA.
    "untrusted": "unable to get local issuer certificate",
    # The certificate names IP 127.0.0.1 only.
    "wrong-host": "Hostname mismatch",
    "expired": "certificate has expired",
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", list(CERTIFICATE_CASES))
async def test_certificate_failures_raise_at_once_with_the_cause(
    case: str, request: pytest.FixtureRequest
) -> None:
    cluster: ZooKeeperCluster = request.getfixturevalue(
        "expired_cluster" if case == "expired" else "zk_tls_cluster"
    )
    assert cluster.tls is not None
    hosts = cluster.secure_hosts
    ssl_arg: ssl.SSLContext | bool = cluster.tls.client_context()
    if case == "untrusted":
        ssl_arg = True
    elif case == "wrong-host":
        hosts = hosts.replace("127.0.0.1", "localhost")
    before = open_descriptors()
    started = time.monotonic()
    with pytest.raises(aiozklock.ZooKeeperUnavailable) as excinfo:
        async with aiozklock.connect(hosts, ssl=ssl_arg, connect_timeout=TERMINAL_CONNECT_TIMEOUT):
            pytest.fail("connected despite the certificate")
    elapsed = time.monotonic() - started
    print(f"TLS {case} elapsed={elapsed:.3f}")
    assert elapsed < TERMINAL_CONNECT_TIMEOUT / 2  # terminal: not retried until the timeout
    assert isinstance(excinfo.value.__cause__, ssl.SSLCertVerificationError)
    assert CERTIFICATE_CASES[case] in str(excinfo.value)
    assert open_descriptors() <= before  # none left open (others may close meanwhile)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", ["tls-to-plain-port", "plain-to-tls-port"])
async def test_tls_and_plain_ports_mixed_up_fail_at_connect_timeout(
    case: str, zk_tls_cluster: ZooKeeperCluster, zk_hosts: str, zk_tls_files: TLSFiles
) -> None:
    connect_timeout = 1.5
    if case == "tls-to-plain-port":
        hosts, ssl_arg = zk_hosts, zk_tls_files.client_context()
        hint = "a plain port rather than a TLS one"
    else:
        hosts, ssl_arg = zk_tls_cluster.secure_hosts, None
        hint = "if it is a TLS port (secureClientPort), connect with ssl="
    before = open_descriptors()
    started = time.monotonic()
    with pytest.raises(aiozklock.ZooKeeperUnavailable) as excinfo:
        async with aiozklock.connect(hosts, ssl=ssl_arg, connect_timeout=connect_timeout):
            pytest.fail("connected with TLS and plain mixed up")
    elapsed = time.monotonic() - started
    print(f"TLS {case} elapsed={elapsed:.3f}")
    assert connect_timeout - 0.1 < elapsed < connect_timeout + 3  # retried until then
    assert hint in str(excinfo.value)
    assert open_descriptors() <= before  # none left open (others may close meanwhile)


# --- faults over TLS -----------------------------------------------------------------------


@pytest.mark.timeout(30)
async def test_waiter_connection_drop_over_tls_keeps_session_and_wakes_after_release(
    tls_proxy: FaultProxy, open_tls_client: TLSClientFactory
) -> None:
    holder_client = await open_tls_client()
    waiter_client = await open_tls_client(tls_proxy.address)
    session_id = waiter_client.session_id
    states = StateLog(waiter_client)
    history = History()
    holder = holder_client.lock(PATH, identifier="holder")
    outcome = WaiterOutcome()
    with anyio.fail_after(5):
        await holder.acquire()
    entered = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(acquire_once, waiter_client.lock(PATH), outcome, history, "waiter")
        with anyio.fail_after(5):
            await wait_for_queue(holder_client, PATH, 2)
        await tls_proxy.drop_all()
        with anyio.fail_after(5):
            back = await states.wait_for(lambda c: c.state is SessionState.CONNECTED)
        assert back.session_id == session_id
        assert states.states() == ["SUSPENDED", "CONNECTED"]
        assert tls_proxy.connections_accepted >= 2  # a new TLS connection through the proxy
        # The waiter's queue node survived with its session.
        assert len(await holder_client.get_children(PATH)) == 2
        released = time.monotonic()
        history.record("holder", holder.fencing_token, entered, released)
        with anyio.fail_after(5):
            await holder.release()
        with anyio.fail_after(5):  # a hang bound
            await outcome.acquired.wait()
    assert outcome.acquired_at > released
    assert waiter_client.session_id == session_id
    assert history.check().ok
    await gone(holder_client, PATH)


@pytest.mark.slow
@pytest.mark.timeout(40)
@pytest.mark.parametrize("policy", ["suspended", "expired"])
async def test_partition_longer_than_session_over_tls(
    policy: aiozklock.LossPolicy,
    tls_proxy: FaultProxy,
    open_tls_client: TLSClientFactory,
    tls_observer: RawZooKeeperConnection,
    chroot: str,
) -> None:
    holder_client = await open_tls_client(
        tls_proxy.address, session_timeout=TIMEOUT, loss_policy=policy
    )
    waiter_client = await open_tls_client()
    old_session = holder_client.session_id
    history = History()
    lock = holder_client.lock(PATH, identifier="holder")
    outcome = HolderOutcome()
    waiter = WaiterOutcome()
    states = StateLog(holder_client)
    async with anyio.create_task_group() as tg:
        tg.start_soon(hold_until_cancelled, lock, outcome, history, "holder")
        with anyio.fail_after(5):
            await outcome.entered.wait()
        deletion = DeletionWatch(tls_observer, f"{chroot}{PATH}/{outcome.node}")
        await deletion.arm()
        tg.start_soon(deletion.run)
        tg.start_soon(acquire_once, waiter_client.lock(PATH), waiter, history, "waiter")
        with anyio.fail_after(5):
            await wait_for_queue(waiter_client, PATH, 2)
        tls_proxy.blackhole(True)
        with anyio.fail_after(3 * TIMEOUT):
            await outcome.done.wait()
            await deletion.deleted.wait()
            await waiter.acquired.wait()
        # Still partitioned: our clock gives no session up (only a server can say so).
        assert states.first(lambda c: c.state is SessionState.LOST) is None
        tls_proxy.blackhole(False)
        with anyio.fail_after(5):
            back = await states.wait_for(
                lambda c: c.state is SessionState.CONNECTED and c.session_id not in (0, old_session)
            )
        lost = states.first(lambda c: c.state is SessionState.LOST)
        assert lost is not None
        assert "server" in lost.reason, lost
    assert outcome.body_exit is not None
    suspended = states.first(lambda c: c.state is SessionState.SUSPENDED)
    assert suspended is not None
    # Measured from our clock's decision (see test_faults' F7), not from when a loaded
    # process ran the holder's exit.
    margin = deletion.deleted_at - states.gave_up_at(policy, TIMEOUT)
    print(
        f"TLS partition policy={policy} margin={margin:.3f}"
        f" observed={deletion.deleted_at - outcome.body_exit:.3f}"
    )
    assert isinstance(outcome.error, aiozklock.LockLost), outcome.error
    assert outcome.body_cancelled
    assert not outcome.cancellation_escaped
    assert margin > (0.25 * TIMEOUT if policy == "suspended" else 0)
    if policy == "suspended":
        assert suspended.at <= outcome.body_exit < min(lost.at, deletion.deleted_at)
    else:  # at the proof's horizon
        assert "unproven" in str(outcome.error), outcome.error
        assert suspended.at <= outcome.body_exit < lost.at
    assert waiter.token > outcome.token
    assert history.check().ok
    assert holder_client.session_id == back.session_id
    await gone(waiter_client, PATH)


@pytest.mark.timeout(30)
async def test_real_session_expiry_while_holding_over_tls(
    tls_proxy: FaultProxy,
    open_tls_client: TLSClientFactory,
    tls_observer: RawZooKeeperConnection,
    zk_tls_cluster: ZooKeeperCluster,
    chroot: str,
) -> None:
    # A longer session than elsewhere: the expiry is injected, and a TLS handshake with a
    # JVM that has not warmed up can take longer than a reconnect attempt of a 2 s session.
    holder_client = await open_tls_client(tls_proxy.address, session_timeout=4.0)
    other_client = await open_tls_client()
    old_session = holder_client.session_id
    lock = holder_client.lock(PATH, identifier="holder")
    outcome = HolderOutcome()
    history = History()
    states = StateLog(holder_client)
    async with anyio.create_task_group() as tg:
        tg.start_soon(hold_until_cancelled, lock, outcome, history, "holder")
        with anyio.fail_after(5):
            await outcome.entered.wait()
        node_path = f"{chroot}{PATH}/{outcome.node}"
        # The holder's own reconnect must not re-attach before the expiry closes the session
        # (see test_faults): it learns of the closed connection, and can reconnect, only
        # once the expiry is done.
        tls_proxy.blackhole(True, new="refuse")
        password = session_of(holder_client).password
        await expire_session(first_host(zk_tls_cluster.hosts), old_session, password)
        assert await tls_observer.exists(node_path) is None
        tls_proxy.blackhole(False)
        with anyio.fail_after(5):
            await outcome.done.wait()
            lost = await states.wait_for(lambda c: c.state is SessionState.LOST)
        assert isinstance(outcome.error, aiozklock.LockLost), outcome.error
        assert "expired" in lost.reason
        with anyio.fail_after(5):
            await states.wait_for(
                lambda c: c.state is SessionState.CONNECTED and c.session_id not in (0, old_session)
            )
        with anyio.fail_after(5):
            async with lock:
                assert lock.fencing_token > outcome.token
                assert await other_client.get_children(PATH) == [lock.statistics().node]
    await gone(other_client, PATH)


@pytest.mark.ensemble
@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.parametrize("policy", ["expired", "suspended"])
async def test_failover_across_the_tls_ensemble(
    policy: aiozklock.LossPolicy,
    zk_tls_ensemble: ZooKeeperCluster,
    open_tls_client: TLSClientFactory,
) -> None:
    await zk_tls_ensemble.await_serving(timeout=30)
    client = await open_tls_client(
        zk_tls_ensemble.secure_hosts,
        session_timeout=ENSEMBLE_TIMEOUT,
        connect_timeout=10,
        loss_policy=policy,
    )
    session_id = client.session_id
    states = StateLog(client)
    lock = client.lock(PATH, identifier="holder")
    outcome = HolderOutcome()
    release = anyio.Event()
    connected_to = session_of(client)._current_host()
    member = next(m for m in zk_tls_ensemble.members if m.secure_address == connected_to)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold_until_cancelled, lock, outcome, History(), "holder", release)
            with anyio.fail_after(10):
                await outcome.entered.wait()
            await anyio.to_thread.run_sync(member.kill)
            with anyio.fail_after(2 * ENSEMBLE_TIMEOUT):
                back = await states.wait_for(lambda c: c.state is SessionState.CONNECTED)
            assert back.session_id == session_id  # the session survived the failover
            assert session_of(client)._current_host() != connected_to
            assert states.first(lambda c: c.state is SessionState.LOST) is None
            if policy == "expired":
                assert await client.get_children(PATH) == [outcome.node]
                release.set()
                with anyio.fail_after(5):
                    await outcome.done.wait()
                assert outcome.held_at_release  # the holder's own check, in its task
                assert outcome.error is None
            else:
                with anyio.fail_after(5):
                    await outcome.done.wait()
                assert isinstance(outcome.error, aiozklock.LockLost)
        assert outcome.is_held_after is False
    finally:
        if not member.running:
            await member.astart(timeout=30)
