"""Digest authentication and ACLs, on real ZooKeeper: who may read, create and delete what,
credentials re-sent on every connection before anything else, refused credentials final."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

import aiozklock
from aiozklock import (
    ACL,
    CREATOR_ALL_ACL,
    CREATOR_ALL_WORLD_READ_ACL,
    OPEN_ACL_UNSAFE,
    READ_ACL_UNSAFE,
    Perms,
    SessionState,
)
from aiozklock._wire._protocol import exists_op
from aiozklock.testing import FaultProxy, Opcode, ZooKeeperCluster, digest_id, session_of
from tests.conftest import ClientFactory, gone

pytestmark = [pytest.mark.anyio]

ALICE = ("digest", "alice:alice-secret")
BOB = ("digest", "bob:bob-secret")
ALICE_ALL = ACL(Perms.ALL, "digest", digest_id("alice:alice-secret"))
WORLD_READ = ACL(Perms.READ, "world", "anyone")
SUPERUSER = "super:super-secret"


async def test_creator_all_node_is_the_creators_alone(open_client: ClientFactory) -> None:
    # Clients are opened outside fail_after: the fixture's exit stack outlives its scope.
    alice = await open_client(auth=[ALICE])
    # The same user in another session (credentials as bytes).
    again = await open_client(auth=[("digest", b"alice:alice-secret")])
    # Digest has no user database: a wrong password authenticates as another identity,
    # which the ACL refuses like anyone else.
    others = [await open_client(auth=auth) for auth in ([], [("digest", "alice:wrong")], [BOB])]
    with anyio.fail_after(15):
        await alice.ensure_path("/")
        await alice.create("/private", b"secret", acl=CREATOR_ALL_ACL)
        await alice.create("/private/child", acl=CREATOR_ALL_ACL)
        assert (await again.get_data("/private"))[0] == b"secret"
        assert await again.get_acl("/private") == ([ALICE_ALL], await again.exists("/private"))
        for other in others:
            with pytest.raises(aiozklock.NoAuthError, match="/private") as read:
                await other.get_data("/private")
            assert read.value.path == "/private"
            assert isinstance(read.value, PermissionError)
            with pytest.raises(aiozklock.NoAuthError, match="/private/other") as create:
                await other.create("/private/other")
            assert "parent" in str(create.value)
            with pytest.raises(aiozklock.NoAuthError, match="/private/child"):
                await other.delete("/private/child")
        assert await alice.get_children("/private") == ["child"]


async def test_creator_acl_without_an_identity_is_refused_before_any_traffic(
    proxy: FaultProxy, open_client: ClientFactory, hosts: str
) -> None:
    zk = await open_client(proxy)
    proxy.reset_counters()
    with anyio.fail_after(10):
        with pytest.raises(aiozklock.InvalidArgument, match="no identity"):
            await zk.create("/mine", acl=CREATOR_ALL_ACL)
        with pytest.raises(aiozklock.InvalidArgument, match="no identity"):
            zk.lock("/mine", acl=CREATOR_ALL_WORLD_READ_ACL)
        with pytest.raises(aiozklock.InvalidArgument, match="default_acl"):
            aiozklock.connect(hosts, default_acl=CREATOR_ALL_ACL)
        assert proxy.count() == 0  # nothing was sent (the server would say InvalidACL)
        assert await zk.exists("/mine") is None


async def test_refused_credentials_fail_at_once_and_for_good(
    proxy: FaultProxy, chroot: str
) -> None:
    """An unknown scheme is refused (digest never is: see the test above): entering raises
    at once, with no second attempt, and the session the handshake made is closed."""
    # Long, so that "not retried until then" has a margin no load can use up (a refusal
    # takes milliseconds; the bound below is half of it).
    connect_timeout = 25.0
    client = aiozklock.connect(
        proxy.address + chroot,
        auth=[ALICE, ("no-such-scheme", "x")],
        connect_timeout=connect_timeout,
    )
    started = time.monotonic()
    with (
        anyio.fail_after(2 * connect_timeout),
        pytest.raises(aiozklock.AuthenticationFailed) as info,
    ):
        async with client:
            pytest.fail("entered with refused credentials")
    elapsed = time.monotonic() - started
    assert isinstance(info.value, aiozklock.ZooKeeperUnavailable)
    assert isinstance(info.value, PermissionError)
    assert "'no-such-scheme'" in str(info.value)
    assert elapsed < connect_timeout / 2, elapsed  # refused is final, not retried
    assert proxy.count(Opcode.AUTH) == 2  # alice's, then the refused one; no retry
    assert proxy.count(Opcode.CLOSE) == 1  # the session it made is closed, not left to expire


async def test_credentials_resent_first_on_every_reconnect(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    # A long session: no stall of a loaded machine makes the client take its connection
    # for silent and reconnect once more (AUTH is counted below).
    alice = await open_client(proxy, auth=[ALICE], session_timeout=20.0)
    bob = await open_client(auth=[BOB])
    with anyio.fail_after(20):
        # A watch, which the reconnect must re-arm: the credentials still go first.
        session = session_of(alice)
        await session.call(exists_op(session.server_path("/later"), lambda event: None))
        reconnected = anyio.Event()
        alice.add_listener(
            lambda change: reconnected.set() if change.state is SessionState.CONNECTED else None
        )
        await proxy.drop_all()
        await reconnected.wait()
        await proxy.wait_for_request(Opcode.SET_WATCHES)
        last = proxy.requests[-1].connection_index
        first, second = [r.opcode for r in proxy.requests if r.connection_index == last][:2]
        assert (first, second) == (Opcode.AUTH, Opcode.SET_WATCHES)
        assert proxy.count(Opcode.AUTH) == 2
        # Created after the reconnect, owned by alice: the connection is alice's.
        await alice.ensure_path("/")
        await alice.create("/later", acl=CREATOR_ALL_ACL)
        assert (await alice.get_acl("/later"))[0] == [ALICE_ALL]
        with pytest.raises(aiozklock.NoAuthError, match="/later"):
            await bob.get_data("/later")


async def test_lock_preset_lets_others_observe_but_not_interfere(
    open_client: ClientFactory,
) -> None:
    alice = await open_client(auth=[ALICE])
    bob = await open_client(auth=[BOB])
    alice_elsewhere = await open_client(auth=[ALICE])
    with anyio.fail_after(20):
        lock = alice.lock("/locks/a", identifier="alice", acl=CREATOR_ALL_WORLD_READ_ACL)
        async with lock:
            node = f"/locks/a/{lock.statistics().node}"
            # The container carries the preset: only alice may queue or delete beneath it.
            assert (await bob.get_acl("/locks/a"))[0] == [
                ACL(Perms.ALL, "digest", "alice:x"),  # hash hidden: bob lacks ADMIN
                WORLD_READ,
            ]
            observed = bob.lock("/locks/a")
            assert [c.identifier for c in await observed.contenders()] == ["alice"]
            with pytest.raises(aiozklock.NoAuthError, match=node):
                await bob.delete(node)
            with pytest.raises(aiozklock.NoAuthError, match="/locks/a/"):
                await observed.acquire(timeout=1)
            # Alice in another session contends normally (it queued, then left in time).
            assert not await alice_elsewhere.lock("/locks/a").try_acquire()
            assert [c.identifier for c in await observed.contenders()] == ["alice"]
        await gone(bob, "/locks/a")


# recipe -> (make it with default_acl, the paths it creates a node under)
class _Signal(logging.Handler):
    """Sets ``event`` when a record at ``level`` or above is logged."""

    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.event = anyio.Event()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        self.event.set()


async def test_a_delete_an_acl_refuses_is_reported_not_retried(
    open_client: ClientFactory,
) -> None:
    """A lock path anyone may create under but nobody may delete from: the release is
    refused. Confirmed, it raises ``NoAuthError`` naming the node; not confirmed, the
    janitor tries once and gives up with an ERROR naming it."""
    client = await open_client()
    create_only = [ACL(Perms.READ | Perms.CREATE, "world", "anyone")]
    signal = _Signal(logging.ERROR)
    janitor_log = logging.getLogger("aiozklock._recipes._core._janitor")
    janitor_log.addHandler(signal)
    try:
        with anyio.fail_after(10):
            confirmed = client.lock("/confirmed", acl=create_only)
            await confirmed.acquire()
            node = f"/confirmed/{confirmed.statistics().node}"
            with pytest.raises(aiozklock.NoAuthError, match=node):
                await confirmed.release(confirm=True)
            background = client.lock("/background", acl=create_only)
            async with background:
                node = f"/background/{background.statistics().node}"
            await signal.event.wait()
            assert any(node in message for message in signal.messages), signal.messages
            assert await client.exists(node) is not None  # left until the session ends
    finally:
        janitor_log.removeHandler(signal)


RECIPES: dict[str, tuple[Any, list[str]]] = {
    "lock": (lambda zk, under="": zk.lock(f"{under}/r"), ["/r"]),
    "nonfair": (lambda zk, under="": zk.lock(f"{under}/r", fair=False), ["/r"]),
    "multi_lock": (lambda zk, under="": zk.multi_lock([f"{under}/r", f"{under}/s"]), ["/r", "/s"]),
    "election": (lambda zk, under="": zk.election(f"{under}/r"), ["/r"]),
    "lease_lock": (lambda zk, under="": zk.lease_lock(f"{under}/r", 30), ["/r"]),
}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
async def test_recipe_nodes_and_containers_get_the_acl(
    recipe: str, open_client: ClientFactory
) -> None:
    """``default_acl`` reaches every node a recipe creates, its containers (chroot included)
    too; a recipe's ``acl=`` overrides it."""
    alice = await open_client(auth=[ALICE], default_acl=CREATOR_ALL_WORLD_READ_ACL)
    with anyio.fail_after(15):
        preset = [ALICE_ALL, WORLD_READ]
        make, nodes = RECIPES[recipe]
        async with make(alice):
            for path in ["/", *nodes]:
                assert (await alice.get_acl(path))[0] == preset, path
            for path in nodes:
                (child,) = await alice.get_children(path)
                assert (await alice.get_acl(f"{path}/{child}"))[0] == preset
        open_lock = alice.lock("/open", acl=OPEN_ACL_UNSAFE)
        async with open_lock:
            node = f"/open/{open_lock.statistics().node}"
            assert (await alice.get_acl(node))[0] == list(OPEN_ACL_UNSAFE)
            assert (await alice.get_acl("/open"))[0] == list(OPEN_ACL_UNSAFE)


@pytest.mark.parametrize("recipe", sorted(RECIPES))
async def test_a_create_an_acl_refuses_names_the_path(
    recipe: str, open_client: ClientFactory
) -> None:
    """A recipe path under a node only alice may write: bob's acquire raises ``NoAuthError``
    naming the container it could not create, and leaves nothing."""
    alice = await open_client(auth=[ALICE])
    bob = await open_client(auth=[BOB])
    with anyio.fail_after(10):
        await alice.ensure_path("/")
        await alice.create("/closed", acl=CREATOR_ALL_WORLD_READ_ACL)
        make, _ = RECIPES[recipe]
        with pytest.raises(aiozklock.NoAuthError, match="/closed/") as info:
            await make(bob, "/closed").acquire(timeout=5)
        assert info.value.path is not None
        assert info.value.path.startswith("/closed/")
        assert await alice.get_children("/closed") == []


async def test_acl_is_not_part_of_a_recipes_identity(zk: aiozklock.ZooKeeperClient) -> None:
    lock = zk.lock("/p")
    assert zk.lock("/p", acl=list(OPEN_ACL_UNSAFE)) is lock  # the default, spelled out
    assert lock.acl == OPEN_ACL_UNSAFE
    with pytest.raises(aiozklock.UsageError, match="one ACL"):
        zk.lock("/p", acl=READ_ACL_UNSAFE)
    election = zk.election("/e", acl=READ_ACL_UNSAFE)  # kept: the registry is weak
    with pytest.raises(aiozklock.UsageError):
        zk.election("/e")
    assert election.acl == READ_ACL_UNSAFE


@pytest.mark.parametrize(
    "auth",
    [
        "digest:alice:pw",  # a str, not pairs
        [("digest", "no-colon")],
        [("", "alice:pw")],
        [(None, "alice:pw")],
        [("digest", 42)],
        [("digest",)],
    ],
)
def test_bad_auth_is_rejected_before_any_traffic(auth: Any) -> None:
    with pytest.raises(aiozklock.InvalidArgument):
        aiozklock.connect("127.0.0.1:1", auth=auth)


@pytest.mark.parametrize(
    "acl",
    [[], "world:anyone", ACL(Perms.ALL, "world", "anyone"), [("world", "anyone")], [None]],
)
async def test_bad_acl_is_rejected_before_any_traffic(
    acl: Any, proxy: FaultProxy, open_client: ClientFactory
) -> None:
    with pytest.raises(aiozklock.InvalidArgument):
        aiozklock.connect("127.0.0.1:1", default_acl=acl)
    client = await open_client(proxy)
    with anyio.fail_after(10):
        sent = proxy.count()
        with pytest.raises(aiozklock.InvalidArgument):
            client.lock("/x", acl=acl)
        with pytest.raises(aiozklock.InvalidArgument):
            await client.create("/x", acl=acl)
        with pytest.raises(aiozklock.InvalidArgument):
            await client.ensure_path("/x", acl=acl)
        assert proxy.count() == sent


@pytest.mark.parametrize(
    "fields",
    [(32, "world", "anyone"), (-1, "world", "anyone"), (True, "w", "a"), (1, "", "a"), (1, "w", 2)],
)
def test_bad_acl_entries_are_rejected(fields: tuple[Any, Any, Any]) -> None:
    with pytest.raises(aiozklock.InvalidArgument):
        ACL(*fields)
    assert ACL(3, "world", "anyone").perms == Perms.READ | Perms.WRITE  # type: ignore[arg-type]
    assert isinstance(ACL(3, "world", "anyone").perms, Perms)  # type: ignore[arg-type]


# ---------------------------------------------------------------- a server of this module's own


@pytest.fixture(scope="module")
def auth_server() -> Iterator[ZooKeeperCluster]:
    """A standalone server with a digest superuser, and ZooKeeper's ``key`` scheme: it
    accepts a number unless ``/key`` holds one that does not divide it, which makes
    credentials accepted at first and refused at a reconnect."""
    provider = {
        "zookeeper.authProvider.1": "org.apache.zookeeper.server.auth.KeyAuthenticationProvider"
    }
    with ZooKeeperCluster(superuser=SUPERUSER, jvm_properties=provider) as cluster:
        yield cluster


async def test_superuser_passes_every_acl(auth_server: ZooKeeperCluster, chroot: str) -> None:
    hosts = auth_server.hosts + chroot
    with anyio.fail_after(15):
        async with aiozklock.connect(hosts, auth=[ALICE]) as alice:
            await alice.ensure_path("/")
            await alice.create("/private", b"alice's", acl=CREATOR_ALL_ACL)
            async with aiozklock.connect(hosts, auth=[("digest", SUPERUSER)]) as superuser:
                assert (await superuser.get_data("/private"))[0] == b"alice's"
                await superuser.delete("/private")
            assert await alice.exists("/private") is None


async def hold_and_drop(lock: aiozklock.Lock, proxy: FaultProxy) -> None:
    """Hold ``lock``, drop the connection, and wait: the body is cancelled on the loss."""
    async with lock:
        await proxy.drop_all()
        await anyio.sleep_forever()


async def test_credentials_refused_at_a_reconnect_close_the_client(
    auth_server: ZooKeeperCluster, chroot: str
) -> None:
    async with (
        FaultProxy(auth_server.hosts) as proxy,
        aiozklock.connect(auth_server.hosts) as admin,
        # A long session (the server's longest): its node must go well before it could
        # expire, however slow the machine (the bound below is half of it), and no stall
        # makes the client reconnect once more (AUTH is counted below).
        aiozklock.connect(
            proxy.address + chroot, auth=[("key", "25")], session_timeout=30.0
        ) as client,
    ):
        with anyio.fail_after(30):
            closed = anyio.Event()
            client.add_listener(
                lambda change: closed.set() if change.state is SessionState.CLOSED else None
            )
            lock = client.lock("/lock")
            await admin.create("/key", b"7")  # 25 is no multiple of 7: refused from now on
            try:
                with pytest.raises(aiozklock.LockLost):
                    await hold_and_drop(lock, proxy)
                await closed.wait()
            finally:
                await admin.delete("/key")
            assert client.state is SessionState.CLOSED
            with pytest.raises(aiozklock.AuthenticationFailed, match="'key'"):
                await client.exists("/")
            # Its session was closed at once, well before it could expire: the lock node
            # went with it.
            await gone(admin, f"{chroot}/lock", within=client.negotiated_timeout / 2)
            assert proxy.count(Opcode.AUTH) == 2  # the first connection's, one refused
            assert proxy.count(Opcode.CLOSE) == 1
