"""The doctor's other findings on real ZooKeeper (``zk.diagnose()``): long holders and long
queues, expired leases not yet deleted, leftover persistent parents, unreadable nodes; and
its arguments, checked before any traffic."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import anyio
import pytest
from kazoo.client import KazooClient  # type: ignore[import-untyped]

import aiozklock
from aiozklock import ACL, FindingKind, Perms, Severity
from aiozklock.testing import ZooKeeperCluster
from tests.conftest import ClientFactory, wait_for_queue

pytestmark = [pytest.mark.anyio]

HANG = 30.0  # a hang bound, not a duration
# Past a warning of WARNING s by any clock: the findings below are about time passing, so
# their tests let it pass (there is no event to wait for).
WARNING = 0.5
PAST = 0.6
LEASE_TTL = 1.0


async def test_a_holder_past_the_hold_warning_is_a_long_holder(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    async with zk.lock("/lh/job", identifier="nightly"):
        fresh = await zk.diagnose("/lh", hold_warning=30)  # a margin for a loaded machine
        await anyio.sleep(PAST)
        diagnosis = await zk.diagnose("/lh", hold_warning=WARNING)
        relaxed = await zk.diagnose("/lh")  # the default: 60 s
    assert fresh.healthy
    (finding,) = diagnosis.findings
    assert (finding.kind, finding.severity) == (FindingKind.LONG_HOLDER, Severity.WARNING)
    assert finding.paths == ("/lh/job",)
    assert finding.sessions == (zk.session_id,)
    assert finding.seconds is not None
    assert finding.seconds >= WARNING
    assert "identifier nightly" in finding.message
    assert diagnosis.longest_hold >= WARNING
    assert relaxed.healthy


async def test_a_queue_at_the_queue_warning_is_a_long_queue(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    waiters = [await open_client() for _ in range(2)]
    with anyio.fail_after(HANG):
        async with zk.lock("/lq/hot"), anyio.create_task_group() as tg:
            for client in waiters:
                tg.start_soon(client.lock("/lq/hot").acquire)
            await wait_for_queue(zk, "/lq/hot", 3)
            diagnosis = await zk.diagnose("/lq", queue_warning=2)
            below = await zk.diagnose("/lq", queue_warning=3)
            tg.cancel_scope.cancel()
    (finding,) = diagnosis.findings
    assert (finding.kind, finding.count) == (FindingKind.LONG_QUEUE, 2)
    assert set(finding.sessions) == {client.session_id for client in waiters}
    assert finding.message.startswith("2 waiting on /lq/hot; the oldest for ")
    assert diagnosis.longest_wait == pytest.approx(finding.seconds, abs=0.01)
    assert below.healthy


@pytest.fixture(scope="module")
def keeping_cluster() -> Iterator[ZooKeeperCluster]:
    """A server whose reaper of expired TTL nodes runs once an hour: an expired lease stays
    until the test is done (the usual servers reap every 60 s, at any moment)."""
    with ZooKeeperCluster(1, jvm_properties={"znode.container.checkIntervalMs": "3600000"}) as c:
        yield c


async def test_an_expired_lease_not_deleted_yet_is_found(
    keeping_cluster: ZooKeeperCluster,
) -> None:
    hosts = keeping_cluster.hosts + f"/doctor-{uuid.uuid4().hex[:12]}"
    async with aiozklock.connect(hosts) as zk:
        async with aiozklock.connect(hosts) as holder:
            # Taken and never renewed, then left by its process (closed well before the
            # keeper would give it up and delete it, at 0.9 of the TTL): a lease outlives a
            # session.
            await holder.lease_lock("/ls/job", LEASE_TTL, renew=False).acquire()
        async with zk.lease_lock("/ls/live", 30):
            await anyio.sleep(LEASE_TTL + PAST)  # the first lease's TTL runs out
            diagnosis = await zk.diagnose("/ls", hold_warning=WARNING)
    (finding,) = diagnosis.of_kind(FindingKind.EXPIRED_LEASE)
    assert finding.severity is Severity.WARNING
    assert finding.paths == ("/ls/job",)
    assert finding.seconds is not None
    assert finding.seconds > 0
    assert "zkCli.sh delete /ls/job/lease" in finding.action
    # An expired lease is not a long holder too; the live one is held for PAST.
    assert [f.paths for f in diagnosis.of_kind(FindingKind.LONG_HOLDER)] == [("/ls/live",)]
    kinds = {queue.path: queue.kind for queue in diagnosis.queues}
    assert kinds == {"/ls/job": "lease", "/ls/live": "lease"}


async def test_a_persistent_parent_left_empty_is_a_leftover(
    zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    await zk.ensure_path("/lo")
    client = KazooClient(hosts=hosts, timeout=4.0)
    await anyio.to_thread.run_sync(client.start, 20)
    try:
        lock = client.Lock("/lo/orders/7", "kazoo")  # kazoo's parents are persistent
        await anyio.to_thread.run_sync(lock.acquire)
        await anyio.to_thread.run_sync(lock.release)
    finally:
        await anyio.to_thread.run_sync(client.stop)
        client.close()
    unknown = await zk.diagnose("/lo", leftover_age=WARNING)
    await zk.create("/lo/later")  # a write after the parent became empty: it dates it
    young = await zk.diagnose("/lo", leftover_age=30)  # a margin for a loaded machine
    await anyio.sleep(PAST)
    diagnosis = await zk.diagnose("/lo", leftover_age=WARNING)
    default = await zk.diagnose("/lo")  # 10 minutes
    # Nothing written after it (but the doctor's clock probe): when it emptied is unknown.
    assert unknown.healthy
    assert young.healthy
    (finding,) = diagnosis.findings
    assert (finding.kind, finding.severity) == (FindingKind.LEFTOVER_PARENT, Severity.WARNING)
    assert finding.paths == ("/lo/orders/7",)  # not /lo/orders: it has a child
    assert "zkCli.sh delete /lo/orders/7" in finding.action
    assert finding.seconds is not None
    assert finding.seconds >= WARNING
    assert default.healthy


async def test_nodes_this_session_may_not_read_are_reported(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    owner = await open_client(auth=[("digest", "owner:secret")])
    await owner.ensure_path("/ur")
    await owner.create("/ur/secret", acl=[ACL.digest(Perms.ALL, "owner:secret")])
    diagnosis = await zk.diagnose("/ur")
    (finding,) = diagnosis.findings
    assert (finding.kind, finding.severity) == (FindingKind.UNREADABLE, Severity.INFO)
    assert finding.paths == ("/ur/secret",)
    assert diagnosis.healthy  # the rest was read and is fine


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({"prefix": "relative"}, "prefix must be absolute"),
        ({"prefix": "/p/"}, "prefix must not end"),
        ({"prefix": 7}, "prefix must be a str"),
        ({"hold_warning": 0}, "hold_warning"),
        ({"hold_warning": float("nan")}, "hold_warning"),
        ({"leftover_age": -1}, "leftover_age"),
        ({"queue_warning": 0}, "queue_warning"),
        ({"queue_warning": 2.5}, "queue_warning"),
        ({"queue_warning": True}, "queue_warning"),
    ],
)
async def test_bad_arguments_are_refused_before_any_traffic(
    zk_hosts: str, arguments: dict[str, object], match: str
) -> None:
    # A client never entered has no session: an argument checked after any request
    # would raise ClientClosed instead.
    client = aiozklock.connect(zk_hosts)
    options = {"prefix": "/p", **arguments}
    with pytest.raises(aiozklock.InvalidArgument, match=match):
        await client.diagnose(**options)  # type: ignore[arg-type]
    with pytest.raises(aiozklock.ClientClosed):
        await client.diagnose("/p")


async def test_the_clock_probe_is_written_only_when_an_age_is_needed(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    await zk.ensure_path("/ro")
    await zk.create("/ro/config", b"x")  # a plain node: nothing here has an age
    before = await zk.exists("/ro")
    quiet = await zk.diagnose("/ro")
    after_quiet = await zk.exists("/ro")
    async with zk.lock("/ro/job"):
        busy = await zk.diagnose("/ro")
        children = await zk.get_children("/ro")
    assert before is not None
    assert after_quiet is not None
    assert (quiet.clock, after_quiet.cversion) == ("local", before.cversion)  # nothing written
    assert busy.clock == "server"  # the probe: created and deleted in one multi
    assert sorted(children) == ["config", "job"]  # and left nothing
