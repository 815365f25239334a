"""The read lock shared by the tasks of one client: every task inside at once on one node,
writers (another client's and our own) waiting for the last of them, no writer starved by
a busy process, downgrade, loss and cancellation (see also tests/test_rwlock.py)."""

from __future__ import annotations

import logging

import anyio
import pytest

import aiozklock
from aiozklock.testing import FaultProxy, Opcode, expire_session, session_of
from tests.conftest import ClientFactory, gone, wait_for_children, wait_for_queue
from tests.interop.peers import Changes

pytestmark = [pytest.mark.anyio]

PATH = "/locks/shared"
N = 10
HOLD = 3600.0  # a proxy delay that never runs out by itself: the test lifts it


class Readers:
    """Tasks that each take ``client.rw_lock(PATH).read_lock`` (the client's one object)
    in ``async with`` and stay inside until told to leave."""

    def __init__(self, client: aiozklock.ZooKeeperClient) -> None:
        self.client = client
        self.inside = 0
        self.entered = 0
        self.changes = Changes()
        self.leave: dict[int, anyio.Event] = {}
        self.left: dict[int, anyio.Event] = {}
        self.tokens: set[int] = set()
        self.lost = 0
        self.finished_body = 0

    async def run(self, index: int, wait: bool = True) -> None:
        self.leave[index], self.left[index] = anyio.Event(), anyio.Event()
        lock = self.client.rw_lock(PATH).read_lock
        try:
            async with lock:
                self.inside += 1
                self.entered += 1
                self.tokens.add(lock.fencing_token)
                assert lock.is_held
                self.changes.notify()
                if wait:
                    await self.leave[index].wait()
                else:
                    await anyio.sleep(30)  # cancelled by a loss
                self.finished_body += 1
                self.inside -= 1
        except aiozklock.LockLost:
            self.lost += 1
        finally:
            self.left[index].set()
            self.changes.notify()

    async def until_inside(self, count: int) -> None:
        await self.changes.until(lambda: self.inside >= count)


async def one_read_node(client: aiozklock.ZooKeeperClient) -> str:
    (child,) = await client.get_children(PATH)
    assert "-__READ__" in child
    return child


# --- sharing -------------------------------------------------------------------------------


async def test_ten_tasks_hold_the_read_lock_together_on_one_node(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    """Every task stays inside until all 10 are: a barrier that only sharing passes."""
    readers = Readers(zk)
    lock = zk.rw_lock(PATH).read_lock
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for index in range(N):
                tg.start_soon(readers.run, index)
            await readers.until_inside(N)
            node = await one_read_node(zk)
            _, stat = await zk.get_data(f"{PATH}/{node}")
            assert readers.tokens == {stat.czxid}  # one node, one fencing token
            stats = lock.statistics()
            assert (stats.readers, stats.node, stats.locked) == (N, node, True)
            assert not lock.is_held  # not by this task
            for event in readers.leave.values():
                event.set()
    assert lock.statistics().readers == 0
    await gone(zk, PATH)


async def test_a_reader_joins_a_held_read_lock_with_one_listing_and_leaves_silently(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    """A task joining the held read lock sends one getChildren (does a writer wait behind
    our node?), no create; a reader that is not the last leaves without a request; the
    last one deletes the node. A reader asking for the write lock is refused at once."""
    client = await open_client(proxy)
    observer = await open_client()
    rw = client.rw_lock(PATH)
    readers = Readers(client)
    joined, leave_second = anyio.Event(), anyio.Event()

    async def join() -> None:
        assert await rw.read_lock.try_acquire() is True
        with pytest.raises(aiozklock.UsageError, match="cannot upgrade"):
            await rw.write_lock.acquire(timeout=5)
        joined.set()
        await leave_second.wait()
        await rw.read_lock.release()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(readers.run, 0)
            await readers.until_inside(1)
            proxy.reset_counters()
            tg.start_soon(join)
            await joined.wait()
            # (counted by opcode: a ping may go out meanwhile)
            assert (proxy.count(Opcode.GET_CHILDREN), proxy.count(Opcode.CREATE2)) == (1, 0)
            assert rw.read_lock.statistics().readers == 2
            await one_read_node(observer)
            proxy.reset_counters()
            readers.leave[0].set()
            await readers.left[0].wait()
            assert rw.read_lock.statistics().readers == 1
            await client.exists("/")  # a request sent at the release would be before this
            assert (proxy.count(Opcode.EXISTS), proxy.count(Opcode.DELETE)) == (1, 0)
            await one_read_node(observer)
            leave_second.set()
    await proxy.wait_for_request(Opcode.DELETE)
    await gone(observer, PATH)


async def test_tasks_arriving_while_the_first_reader_waits_share_its_grant(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    """The first reader queues behind another client's writer; the readers arriving
    meanwhile send nothing and enter with it, on its node."""
    client = await open_client(proxy)
    writer_client = await open_client()
    readers = Readers(client)
    writer = writer_client.rw_lock(PATH).write_lock
    with anyio.fail_after(10):
        await writer.acquire()
        async with anyio.create_task_group() as tg:
            proxy.reset_counters()
            tg.start_soon(readers.run, 0)
            await wait_for_queue(writer_client, PATH, 2)
            for index in range(1, N):
                tg.start_soon(readers.run, index)
            await anyio.wait_all_tasks_blocked()
            assert client.rw_lock(PATH).read_lock.statistics().tasks_waiting == N
            assert proxy.count(Opcode.CREATE2) == 1
            await writer.release()
            await readers.until_inside(N)
            assert proxy.count(Opcode.CREATE2) == 1
            await one_read_node(writer_client)
            for event in readers.leave.values():
                event.set()
    await gone(writer_client, PATH)


# --- writers -------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["another client", "this client"])
async def test_a_writer_waits_for_the_last_local_reader(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory, where: str
) -> None:
    readers = Readers(zk)
    writer_client = zk if where == "this client" else await open_client()
    writer = writer_client.rw_lock(PATH).write_lock
    granted = anyio.Event()

    async def write() -> None:
        async with writer:
            assert readers.inside == 0
            granted.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for index in range(3):
                tg.start_soon(readers.run, index)
            await readers.until_inside(3)
            read_node = await one_read_node(zk)
            tg.start_soon(write)
            await wait_for_queue(zk, PATH, 2)
            for index in range(2):
                readers.leave[index].set()
                await readers.left[index].wait()
                # The node stays while a reader of ours is inside: the writer still waits.
                assert read_node in await zk.get_children(PATH)
                assert not granted.is_set()
            readers.leave[2].set()
            await granted.wait()
    await gone(zk, PATH)


async def test_readers_arriving_behind_a_queued_writer_wait_for_it(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """A busy process cannot starve writers: once a writer waits behind our read node, a
    new local reader does not join it, and enters after the writer."""
    writer_client = await open_client()
    readers = Readers(zk)
    lock = zk.rw_lock(PATH).read_lock
    order: list[str] = []
    release_writer, writer_granted = anyio.Event(), anyio.Event()

    async def write() -> None:
        async with writer_client.rw_lock(PATH).write_lock:
            order.append("writer")
            writer_granted.set()
            await release_writer.wait()

    async def late_reader() -> None:
        async with lock:
            order.append("late reader")

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(readers.run, 0)
            await readers.until_inside(1)
            tg.start_soon(write)
            await wait_for_queue(zk, PATH, 2)

            async def try_late() -> None:
                assert await lock.try_acquire() is False  # the writer is behind our node

            async with anyio.create_task_group() as inner:
                inner.start_soon(try_late)
            tg.start_soon(late_reader)
            readers.leave[0].set()
            await writer_granted.wait()
            assert order == ["writer"]  # the late reader waits for the writer
            release_writer.set()
    assert order == ["writer", "late reader"]
    await gone(zk, PATH)


async def test_a_downgrade_is_joined_once_the_write_lock_is_released(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    """The write holder takes the read lock at its place; another task asking for the read
    lock meanwhile waits (a writer of ours holds), then joins the downgraded node."""
    rw = zk.rw_lock(PATH)
    entered, leave = anyio.Event(), anyio.Event()

    async def read() -> None:
        async with rw.read_lock:
            entered.set()
            await leave.wait()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await rw.write_lock.acquire()
            await rw.read_lock.acquire()
            read_node = rw.read_lock.statistics().node
            tg.start_soon(read)
            await anyio.wait_all_tasks_blocked()
            assert not entered.is_set()
            await rw.write_lock.release()  # downgrade
            await entered.wait()
            assert await zk.get_children(PATH) == [read_node]
            assert rw.read_lock.statistics().readers == 2
            await rw.read_lock.release()
            assert await zk.get_children(PATH) == [read_node]
            leave.set()
    await gone(zk, PATH)


async def test_a_reader_task_that_ended_holding_is_released_with_the_last_reader(
    zk: aiozklock.ZooKeeperClient, caplog: pytest.LogCaptureFixture
) -> None:
    lock = zk.rw_lock(PATH).read_lock
    readers = Readers(zk)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(readers.run, 0)
            await readers.until_inside(1)
            async with anyio.create_task_group() as forgetful:
                forgetful.start_soon(lock.acquire, name="forgetful")
            assert lock.statistics().readers == 2  # one of them is gone
            readers.leave[0].set()
        # The last live reader's release gave back the node, not the next orphan sweep.
        assert await zk.get_children(PATH) == []
    assert lock.statistics().readers == 0
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "'forgetful'" in errors[0]


# --- loss and cancellation -----------------------------------------------------------------


async def test_session_expiry_cancels_every_reader_body(
    proxy: FaultProxy, open_client: ClientFactory, zk_hosts: str
) -> None:
    client = await open_client(proxy, session_timeout=2.0)
    observer = await open_client()
    old_session, password = client.session_id, session_of(client).password
    readers = Readers(client)
    lock = client.rw_lock(PATH).read_lock
    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            for index in range(N):
                tg.start_soon(readers.run, index, False)
            await readers.until_inside(N)
            proxy.set_delay(HOLD)  # the reconnect must not re-attach before the expiry
            await expire_session(zk_hosts.split(",")[0], old_session, password)
            proxy.set_delay(0)
        assert (readers.lost, readers.finished_body) == (N, 0)
        assert lock.statistics().losses == 1
        async with observer.rw_lock(PATH).write_lock:  # the expired session's node is gone
            pass
        async with lock:  # and the read lock works in the new session
            await one_read_node(observer)
    await gone(observer, PATH)


async def test_cancelling_the_first_reader_while_it_waits_strands_no_one(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    """The first reader's node waits behind a writer; two more tasks wait on it. Cancelled,
    it removes its node, the next task queues anew, and both enter together once the
    writer leaves."""
    writer_client = await open_client()
    writer = writer_client.rw_lock(PATH).write_lock
    readers = Readers(zk)
    lock = zk.rw_lock(PATH).read_lock
    with anyio.fail_after(10):
        await writer.acquire()
        async with anyio.create_task_group() as tg:
            async with anyio.create_task_group() as first:
                first.start_soon(readers.run, 0)
                children = await wait_for_queue(zk, PATH, 2)
                # The create's reply came before the listing's; its task may not have run yet.
                await anyio.wait_all_tasks_blocked()
                first_node = lock.statistics().node
                assert first_node in children
                tg.start_soon(readers.run, 1)
                tg.start_soon(readers.run, 2)
                await anyio.wait_all_tasks_blocked()
                assert lock.statistics().tasks_waiting == 3
                first.cancel_scope.cancel()
            await wait_for_children(
                zk, PATH, lambda c: len(c) == 2 and first_node not in c
            )  # the next one queued anew, the first node is gone
            await writer.release()
            await readers.until_inside(2)
            await one_read_node(zk)
            readers.leave[1].set()
            readers.leave[2].set()
    assert readers.entered == 2
    await gone(zk, PATH)


async def clean_and_usable(lock: aiozklock.ReadLock, observer: aiozklock.ZooKeeperClient) -> None:
    """No node is left, and the read lock is taken again on a new node."""
    await gone(observer, PATH)
    assert lock.statistics().readers == 0
    async with lock.acquire(timeout=5):
        await one_read_node(observer)
    await gone(observer, PATH)


async def test_a_reader_cancelled_while_waiting_for_the_first_readers_grant(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    writer_client = await open_client()
    writer = writer_client.rw_lock(PATH).write_lock
    readers = Readers(zk)
    with anyio.fail_after(10):
        await writer.acquire()
        async with anyio.create_task_group() as tg:
            tg.start_soon(readers.run, 0)
            await wait_for_queue(zk, PATH, 2)
            async with anyio.create_task_group() as victim:
                victim.start_soon(readers.run, 1)
                await anyio.wait_all_tasks_blocked()
                victim.cancel_scope.cancel()
            await writer.release()
            await readers.until_inside(1)
            await one_read_node(zk)
            readers.leave[0].set()
    assert readers.entered == 1
    await clean_and_usable(zk.rw_lock(PATH).read_lock, writer_client)


async def test_a_reader_cancelled_in_its_join_listing(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    observer = await open_client()
    readers = Readers(client)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(readers.run, 0)
            await readers.until_inside(1)
            proxy.reset_counters()
            proxy.set_delay(HOLD)
            async with anyio.create_task_group() as victim:
                victim.start_soon(readers.run, 1)
                await proxy.wait_for_request(Opcode.GET_CHILDREN)  # held by the proxy
                victim.cancel_scope.cancel()
                proxy.set_delay(0)
            assert client.rw_lock(PATH).read_lock.statistics().readers == 1
            await one_read_node(observer)
            readers.leave[0].set()
    assert readers.entered == 1
    await clean_and_usable(client.rw_lock(PATH).read_lock, observer)


async def test_a_reader_cancelled_while_waiting_behind_a_queued_writer(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    observer = await open_client()
    readers = Readers(client)
    granted, release_writer = anyio.Event(), anyio.Event()

    async def write() -> None:
        async with observer.rw_lock(PATH).write_lock:
            granted.set()
            await release_writer.wait()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(readers.run, 0)
            await readers.until_inside(1)
            tg.start_soon(write)
            await wait_for_queue(observer, PATH, 2)
            proxy.reset_counters()
            async with anyio.create_task_group() as victim:
                victim.start_soon(readers.run, 1)
                await proxy.wait_for_request(Opcode.GET_CHILDREN)
                await client.exists("/")  # its listing's reply came before this one's
                await anyio.wait_all_tasks_blocked()
                assert client.rw_lock(PATH).read_lock.statistics().tasks_waiting == 1
                victim.cancel_scope.cancel()
            readers.leave[0].set()
            await granted.wait()
            assert len(await observer.get_children(PATH)) == 1  # the writer's
            release_writer.set()
    assert readers.entered == 1
    await clean_and_usable(client.rw_lock(PATH).read_lock, observer)


async def test_a_reader_cancelled_with_its_create_in_flight_while_another_waits_on_it(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    observer = await open_client()
    writer = observer.rw_lock(PATH).write_lock
    readers = Readers(client)
    with anyio.fail_after(10):
        await writer.acquire()
        async with anyio.create_task_group() as tg:
            proxy.reset_counters()
            proxy.set_delay(HOLD)
            async with anyio.create_task_group() as victim:
                victim.start_soon(readers.run, 1)
                await proxy.wait_for_request(Opcode.CREATE2)  # held by the proxy
                tg.start_soon(readers.run, 0)  # waits on the victim's acquisition
                await anyio.wait_all_tasks_blocked()
                victim.cancel_scope.cancel()
                proxy.set_delay(0)  # its create, then its cleanup, go out
            # Its node was deleted before the other task queued anew, in this session.
            await wait_for_queue(observer, PATH, 2)
            await writer.release()
            await readers.until_inside(1)
            await one_read_node(observer)
            readers.leave[0].set()
    assert readers.entered == 1
    await clean_and_usable(client.rw_lock(PATH).read_lock, observer)


async def test_the_last_reader_cancelled_in_a_confirmed_release_still_deletes_the_node(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    observer = await open_client()
    lock = client.rw_lock(PATH).read_lock
    readers = Readers(client)

    async def cancel_at_the_delete(scope: anyio.CancelScope) -> None:
        await proxy.wait_for_request(Opcode.DELETE)  # held by the proxy
        scope.cancel()
        proxy.set_delay(0)

    with anyio.fail_after(10):
        await lock.acquire()
        async with anyio.create_task_group() as tg:
            tg.start_soon(readers.run, 0)
            await readers.until_inside(1)
            readers.leave[0].set()
        proxy.reset_counters()
        proxy.set_delay(HOLD)
        async with anyio.create_task_group() as tg:
            scope = anyio.CancelScope()
            tg.start_soon(cancel_at_the_delete, scope)
            with scope:
                await lock.release(confirm=True)
        assert scope.cancelled_caught
        assert await observer.get_children(PATH) == []  # confirmed, even when cancelled
    await clean_and_usable(lock, observer)
