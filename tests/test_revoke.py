"""Revocation (issue 33, items 1 and 2): ``zk.lock(path, revocable=True)`` and
``zk.revoke(path)``, by Curator's protocol (a node's data set to ``__REVOKE__``).

A revocable holder's body is cancelled, its lock released (its node deleted) and
``LockRevoked`` raised; a holder that did not opt in ignores a request; a revocable waiter
gives up its place. ``zk.revoke`` refuses bad input before any traffic, and says why it
could not revoke: no holder, not revocable, not gone in time. Real ZooKeeper, asyncio and
trio; the command line's exit codes in a subprocess; the cost on the wire, counted by a
FaultProxy. Curator both ways: ``tests/test_revoke_curator.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio
import pytest

import aiozklock
from aiozklock import LockRevoked, NotRevoked
from aiozklock.testing import FaultProxy, wait_for_children
from tests.conftest import ClientFactory, node_gone, wait_for_queue
from tests.test_bad_input import requests_except_pings

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PATH = "/locks/revoke"
REVOKE = b"__REVOKE__"
HANG = 10.0  # a hang bound, not a duration
CREATE2, DELETE, EXISTS, GET_DATA, GET_CHILDREN = 15, 2, 3, 4, 8


@dataclass
class Holder:
    """A task holding ``lock`` in ``async with`` until ``done`` (or until cancelled): what
    happened to its body, and what its block raised."""

    lock: aiozklock.Lock | aiozklock.WriteLock | aiozklock.ReadLock
    held: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    cancelled: bool = False
    raised: BaseException | None = None
    node: str = ""

    async def hold(self) -> None:
        try:
            async with self.lock:
                node = self.lock.statistics().node
                assert node is not None
                self.node = f"{self.lock.path}/{node}"
                self.held.set()
                try:
                    await self.done.wait()
                except anyio.get_cancelled_exc_class():
                    self.cancelled = True
                    raise
        except aiozklock.LockLost as exc:
            self.raised = exc
        self.held.set()


async def test_a_revocable_holder_lets_go_and_another_session_acquires(
    open_client: ClientFactory,
) -> None:
    holder_client, other = await open_client(), await open_client()
    holder = Holder(holder_client.lock(PATH, revocable=True))
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(holder.hold)
            await holder.held.wait()
            asked = await other.revoke(PATH)  # returns once the node is gone
        assert asked == (holder.node,)
        assert holder.cancelled
        assert isinstance(holder.raised, LockRevoked)
        assert "revoked" in str(holder.raised)
        assert await other.exists(holder.node) is None
        async with other.lock(PATH) as lock:  # granted: nothing of the holder's is left
            assert lock.is_held
    assert holder.lock.statistics().losses == 1
    assert not holder.lock.statistics().locked


async def test_a_revocable_holder_ignores_other_data_then_still_hears_a_request(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    holder_client = await open_client()
    holder = Holder(holder_client.lock(PATH, revocable=True))
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(holder.hold)
            await holder.held.wait()
            # Another writer's data (say, a count of local waiters): not a request. The
            # holder's session reads it back (so its watch has fired: ZooKeeper tells a
            # watcher before it shows the new data), then once more: by then the read the
            # watch made it send has been answered too.
            await zk.set_data(holder.node, b'{"local_waiters": 3}')
            for _ in range(2):
                await holder_client.get_data(holder.node)
            assert holder.lock.statistics().locked
            assert not holder.cancelled
            await zk.set_data(holder.node, REVOKE)  # its watch was set again: heard
            await node_gone(zk, holder.node)
    assert holder.cancelled
    assert isinstance(holder.raised, LockRevoked)


async def test_a_holder_that_did_not_opt_in_ignores_a_revoke(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    holder_client = await open_client()
    holder = Holder(holder_client.lock(PATH))
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(holder.hold)
            await holder.held.wait()
            data, _ = await zk.get_data(holder.node)
            # zk.revoke knows it from its node's data: it does not write.
            with pytest.raises(NotRevoked) as refused:
                await zk.revoke(PATH, wait=0)
            assert refused.value.reason == "not revocable"
            assert refused.value.nodes == (holder.node,)
            assert "did not opt in" in str(refused.value)
            assert (await zk.get_data(holder.node))[0] == data
            # Curator's Revoker does not ask: it writes. The holder's session reads the
            # request back, so any notification of it would have reached it before.
            await zk.set_data(holder.node, REVOKE)
            assert (await holder_client.get_data(holder.node))[0] == REVOKE
            await holder_client.exists(holder.node)  # a further round trip of its session
            assert holder.lock.statistics().locked  # (is_held is the holding task's)
            assert not holder.cancelled
            holder.done.set()
    assert holder.raised is None
    assert not holder.cancelled


async def test_a_revocable_waiter_gives_up_its_place(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    holder = Holder(zk.lock(PATH))
    waiter_client = await open_client()
    waiter = waiter_client.lock(PATH, revocable=True)
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(holder.hold)
            await holder.held.wait()

            async def wait_for_it() -> None:
                with pytest.raises(LockRevoked, match="while it waited"):
                    await waiter.acquire()

            tg.start_soon(wait_for_it)
            queue = await wait_for_queue(zk, PATH, 2)
            (theirs,) = [c for c in queue if f"{PATH}/{c}" != holder.node]
            await zk.set_data(f"{PATH}/{theirs}", REVOKE)  # Curator's request, to the waiter
            await node_gone(zk, f"{PATH}/{theirs}")
            assert holder.lock.statistics().locked  # the holder was not asked
            holder.done.set()
    assert holder.raised is None
    assert not waiter.statistics().locked
    # Read by the holder's session: its delete, written before release() returned, is
    # ordered before this read (another session may list the node a moment longer).
    assert await zk.get_children(PATH) == []


async def test_a_revoke_of_a_lock_nobody_holds_says_so(zk: aiozklock.ZooKeeperClient) -> None:
    for path in ("/locks/never", PATH):  # missing, and there but empty
        with pytest.raises(NotRevoked) as refused:
            await zk.revoke(path)
        assert refused.value.reason == "no holder"
        assert refused.value.nodes == ()
        await zk.ensure_path(PATH)


async def test_a_holder_that_does_not_let_go_in_time(zk: aiozklock.ZooKeeperClient) -> None:
    # A Curator-style node with empty data: perhaps a revocable Curator mutex, perhaps
    # not (it may be anything: nobody here lets go).
    await zk.ensure_path(PATH)
    node = await zk.create(
        f"{PATH}/_c_{'0' * 8}-0000-0000-0000-{'0' * 12}-lock-", ephemeral=True, sequential=True
    )
    [contender] = await zk.lock(PATH).contenders()
    assert contender.revocable is None
    with pytest.raises(NotRevoked) as refused:
        await zk.revoke(PATH, wait=0.2)
    assert refused.value.reason == "timeout"
    assert "it may not be revocable" in str(refused.value)
    assert (await zk.get_data(node))[0] == REVOKE
    assert await zk.revoke(PATH, wait=0) == (node,)  # only asked: not waited for


async def test_revoke_refuses_bad_input_before_any_traffic(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    zk = await open_client(proxy)
    proxy.reset_counters()
    for path, wait in [
        ("relative", 1.0),
        ("/", 1.0),
        ("/a/", 1.0),
        (PATH, -1.0),
        (PATH, float("nan")),
        (PATH, "1"),
        (PATH, True),
    ]:
        with pytest.raises(aiozklock.InvalidArgument):
            await zk.revoke(path, wait=wait)
    assert requests_except_pings(proxy) == []


async def test_a_revocable_lock_costs_one_request_more_and_no_round_trip(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    """Uncontended cycles: the create and the listing (one round trip), then the delete;
    a revocable one adds its watch (a getData on its own node, not awaited)."""
    zk = await open_client(proxy)
    for lock in (zk.lock(PATH), zk.lock(PATH + "-r", revocable=True)):
        async with lock:
            pass  # the first cycle creates the path
    await zk.exists(PATH)  # answered: what the first cycles wrote has been counted
    # Measured on objects never granted before: their joins list (a re-join may be proven
    # alone without one, depending on the server's other sessions: test_rejoin_proof.py).
    plain = zk.lock(PATH, identifier="measured")
    revocable = zk.lock(PATH + "-r", identifier="measured", revocable=True)
    seen = {}
    for lock in (plain, revocable):
        proxy.reset_counters()
        async with lock:
            pass
        await zk.exists(lock.path)  # answered: the delete, written before it, is counted
        seen[lock is revocable] = requests_except_pings(proxy)
    assert seen[False] == [CREATE2, GET_CHILDREN, DELETE, EXISTS]
    assert seen[True] == [CREATE2, GET_CHILDREN, GET_DATA, DELETE, EXISTS]


async def test_a_revoked_multi_lock_lets_go_of_every_path(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    paths = [PATH + "/a", PATH + "/b"]
    holder_client = await open_client()
    multi = holder_client.multi_lock(paths, revocable=True)
    raised: list[BaseException] = []
    held = anyio.Event()

    async def hold() -> None:
        try:
            async with multi:
                held.set()
                await anyio.sleep_forever()
        except LockRevoked as exc:
            raised.append(exc)

    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold)
            await held.wait()
            await zk.revoke(paths[1])
        for path in paths:
            await wait_for_children(zk, path, lambda children: children == [])
    assert len(raised) == 1


async def test_the_doctors_deadlock_advice_names_the_revoke_that_breaks_it(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    one, two = await open_client(), await open_client()
    a, b = "/dl/a", "/dl/b"
    taken = [anyio.Event(), anyio.Event()]
    outcome: dict[int, str] = {}

    async def party(index: int, first: aiozklock.Lock, second: aiozklock.Lock) -> None:
        try:
            async with first:
                taken[index].set()
                await taken[1 - index].wait()  # both hold their first: the cycle is certain
                async with second:
                    outcome[index] = "got both"
        except LockRevoked:
            outcome[index] = "revoked"

    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(party, 0, one.lock(a, revocable=True), one.lock(b, revocable=True))
            tg.start_soon(party, 1, two.lock(b, revocable=True), two.lock(a, revocable=True))
            for event in taken:
                await event.wait()
            await wait_for_queue(zk, a, 2)
            await wait_for_queue(zk, b, 2)
            (finding,) = (await zk.diagnose("/dl")).of_kind(aiozklock.FindingKind.DEADLOCK)
            (revoke,) = [p for p in (a, b) if f"`aiozklock revoke {p}`" in finding.action]
            await zk.revoke(revoke)
    holder_of_it = 0 if revoke == a else 1
    assert outcome == {holder_of_it: "revoked", 1 - holder_of_it: "got both"}


async def test_a_revocable_write_lock_lets_go_and_a_reader_is_not_revocable(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    holder_client = await open_client()
    writer = Holder(holder_client.rw_lock(PATH, revocable=True).write_lock)
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.hold)
            await writer.held.wait()
            assert await zk.revoke(PATH) == (writer.node,)
        assert isinstance(writer.raised, LockRevoked)
        async with holder_client.rw_lock(PATH, revocable=True).read_lock:
            with pytest.raises(NotRevoked) as refused:
                await zk.revoke(PATH)
    assert refused.value.reason == "not revocable"


async def test_a_revocable_waiter_hears_a_request_while_following_its_last_grants_hint(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """A granted by a listing with D and E behind it (its hint: E) re-joins by waiting for
    E's node inside its join (``tests/test_follow.py``): a request reaches it there."""
    b, c, d, e = [Holder((await open_client()).lock(PATH)) for _ in range(4)]
    a_lock = (await open_client()).lock(PATH, revocable=True)
    a_granted, a_release, a_refused = anyio.Event(), anyio.Event(), anyio.Event()
    raised: list[BaseException] = []

    async def a() -> None:
        async with a_lock:
            a_granted.set()
            await a_release.wait()
        try:  # again at once: it follows its hint
            await a_lock.acquire()
        except LockRevoked as exc:
            raised.append(exc)
            a_refused.set()

    await zk.ensure_path(PATH)
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            for size, start in enumerate([b.hold, c.hold, a, d.hold, e.hold], start=1):
                tg.start_soon(start)
                await wait_for_queue(zk, PATH, size)
            b.done.set()
            await c.held.wait()
            c.done.set()
            await a_granted.wait()
            a_release.set()
            await d.held.wait()
            queue = await wait_for_queue(zk, PATH, 3)  # D, E and A's new node
            newest = max(queue, key=lambda name: name[-10:])
            await zk.set_data(f"{PATH}/{newest}", REVOKE)
            await node_gone(zk, f"{PATH}/{newest}")
            await a_refused.wait()  # its node goes before the exception reaches A's task
            assert len(raised) == 1
            assert d.lock.statistics().locked  # heard before E's node (its hint) went
            assert not e.held.is_set()
            d.done.set()
            e.done.set()
