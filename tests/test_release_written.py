"""A release is on the wire when the call returns (issue 30): leaving ``async with``,
``release()``, and an ``acquire()`` that raises (``LockTimeout``, a cancellation) have
handed every delete they imply to the OS before they return, so a caller that blocks next
(a CPU-bound step, a synchronous library, ``time.sleep``) keeps the resource from nobody.

The observable fact: right after the call, the test blocks its own event loop's thread
(nothing of this client can run) while another session, in a thread with its own event
loop, waits for the deletion with an existence watch. A delete written at the call arrives
at once; one left for the event loop's next turn never comes while it is blocked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
import pytest

import aiozklock
from aiozklock._recipes._core._queue import Queue
from aiozklock._wire._validation import join
from aiozklock.testing import RawZooKeeperConnection, ZooKeeperCluster, session_of
from tests.conftest import ClientFactory, on_wait
from tests.test_faults import first_host
from tests.test_semaphore import on_wait as on_lease_wait
from tests.test_tls import TLSClientFactory, open_tls_client  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.anyio]

PATH = "/locks/written"
DELETED = 2  # a watch event's type: NodeDeleted
BOUND = 5.0  # a hang guard: a delete that is on the wire is seen in milliseconds
# Far longer than BOUND: a loop blocked for BOUND must not let the session expire (its
# nodes would then go with it, and the test would pass for that reason).
SESSION_TIMEOUT = 20.0
TTL = 30.0

Make = Callable[[aiozklock.ZooKeeperClient], Any]

RECIPES: dict[str, Make] = {
    "lock": lambda zk: zk.lock(PATH),
    "nonfair": lambda zk: zk.lock(PATH, fair=False),
    "multilock": lambda zk: zk.multi_lock([PATH + "/a", PATH + "/b"]),
    "write": lambda zk: zk.rw_lock(PATH).write_lock,
    "read": lambda zk: zk.rw_lock(PATH).read_lock,
    "semaphore": lambda zk: zk.semaphore(PATH, 2),
    "semaphore-kazoo": lambda zk: zk.semaphore(PATH, 2, compat="kazoo"),
    "election": lambda zk: zk.election(PATH),
    "lease": lambda zk: zk.lease_lock(PATH, TTL),
}
# Recipes that queue: a second contender waits behind the first, then times out or is
# cancelled.
QUEUED: dict[str, Make] = {
    "lock": RECIPES["lock"],
    "multilock": RECIPES["multilock"],
    "write": RECIPES["write"],
    "semaphore": lambda zk: zk.semaphore(PATH, 1),
    "election": RECIPES["election"],
}


class DeletionObserver:
    """Another session, in a thread with its own event loop: an existence watch on each of
    ``nodes`` (server paths), then ``deleted`` is set once every one of them is gone.
    Independent of the event loop under test, which the test blocks."""

    def __init__(self, address: str, nodes: list[str]) -> None:
        self._address = address
        self._nodes = nodes
        self.armed = threading.Event()
        self.deleted = threading.Event()
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="deletion-observer", daemon=True)

    def start(self) -> None:
        """Start and block until the watches are armed (a hang guard bounds it)."""
        self._thread.start()
        if not self.armed.wait(BOUND):
            raise AssertionError(f"the observer was not armed in {BOUND} s: {self.failure!r}")

    def _run(self) -> None:
        try:
            anyio.run(self._observe)
        except BaseException as exc:  # reported by the test's assertions
            self.failure = exc
            self.armed.set()

    async def _observe(self) -> None:
        async with await RawZooKeeperConnection.open(self._address) as conn:
            for node in self._nodes:
                if await conn.exists(node, watch=True) is None:
                    raise AssertionError(f"{node} does not exist when the observer starts")
            self.armed.set()
            with anyio.move_on_after(3 * BOUND):
                for node in self._nodes:
                    await conn.wait_for_event(path=node, type=DELETED)
                self.deleted.set()

    def seen_within(self, bound: float) -> bool:
        """Block the calling thread (the test's event loop: nothing of it runs) until every
        node is seen deleted, at most ``bound`` seconds; whether they were."""
        return self.deleted.wait(bound)

    def join(self) -> None:
        self._thread.join(4 * BOUND)


async def our_nodes(zk: aiozklock.ZooKeeperClient, path: str) -> list[str]:
    """The client paths of the nodes under ``path`` that a holding made: ephemeral ones, and
    a lease's TTL node (whose stat shows no owner)."""
    if await zk.exists(path + "/lease") is not None:
        return [path + "/lease"]
    found: list[str] = []
    for child in await zk.get_children(path, missing_ok=True):
        node = f"{path}/{child}"
        stat = await zk.exists(node)
        if stat is not None and stat.ephemeral_owner:
            found.append(node)
        found.extend(await our_nodes(zk, node))
    return found


async def observe(
    address: str, chroot: str, zk: aiozklock.ZooKeeperClient, nodes: list[str]
) -> DeletionObserver:
    assert nodes, "nothing to observe"
    assert session_of(zk).timeout > 2 * BOUND  # blocking for BOUND cannot expire it
    observer = DeletionObserver(address, [chroot + node for node in nodes])
    await anyio.to_thread.run_sync(observer.start)
    return observer


async def released_then_blocked(
    address: str, chroot: str, zk: aiozklock.ZooKeeperClient, recipe: str, call: str
) -> None:
    """Acquire ``recipe``, release it with ``call``, then block the event loop's thread
    until another session sees every node of ours deleted."""
    lock = RECIPES[recipe](zk)
    if call == "aexit":
        async with lock:
            with anyio.fail_after(BOUND):
                observer = await observe(address, chroot, zk, await our_nodes(zk, PATH))
    else:
        with anyio.fail_after(BOUND):
            await lock.acquire()
            observer = await observe(address, chroot, zk, await our_nodes(zk, PATH))
        if recipe == "election":
            await lock.resign()
        else:
            await lock.release()
    seen = observer.seen_within(BOUND)  # blocks the loop: no turn of it can write anything
    observer.join()
    assert observer.failure is None, observer.failure
    assert seen, f"{recipe}: the release ({call}) was not on the wire when it returned"


@pytest.mark.parametrize("call", ["aexit", "release"])
@pytest.mark.parametrize("recipe", list(RECIPES))
async def test_a_release_is_on_the_wire_when_it_returns(
    zk_hosts: str, chroot: str, open_client: ClientFactory, recipe: str, call: str
) -> None:
    client = await open_client(session_timeout=SESSION_TIMEOUT)
    await released_then_blocked(first_host(zk_hosts), chroot, client, recipe, call)


@pytest.mark.parametrize("call", ["aexit", "release"])
@pytest.mark.parametrize("recipe", ["lock", "multilock", "read"])
async def test_a_release_over_tls_is_on_the_wire_when_it_returns(
    zk_tls_cluster: ZooKeeperCluster,
    chroot: str,
    open_tls_client: TLSClientFactory,  # noqa: F811
    recipe: str,
    call: str,
) -> None:
    client = await open_tls_client(session_timeout=SESSION_TIMEOUT)
    # The observer reads the server's plain port: a fact about the server, not our TLS.
    await released_then_blocked(first_host(zk_tls_cluster.hosts), chroot, client, recipe, call)


def when_waiting(recipe: Any, hook: Callable[[Queue], None]) -> None:
    """Call ``hook(queue)`` when ``recipe``'s queue is about to wait, its nodes created."""
    if isinstance(recipe, aiozklock.Semaphore):
        on_lease_wait(recipe, hook)
    else:
        queue = recipe._queue
        on_wait(queue, lambda: hook(queue))


async def abandoned_then_blocked(
    address: str, chroot: str, clients: tuple[Any, Any], name: str, how: str
) -> None:
    """A waiter queues behind a holder; its ``acquire(timeout=)`` raises ``LockTimeout``
    (``how == "timeout"``) or it is cancelled while it waits; then the test blocks the event
    loop's thread until another session sees the waiter's nodes deleted."""
    make = QUEUED[name]
    held, waiter = make(clients[0]), make(clients[1])
    observers: list[DeletionObserver] = []
    scope = anyio.CancelScope()

    # Blocking for BOUND cannot expire either session (and delete the nodes with it).
    assert all(session_of(client).timeout > 2 * BOUND for client in clients)

    def arm(queue: Queue) -> None:
        # The waiter's nodes exist, and it is about to wait: watch their deletion from
        # another thread (this blocks the loop until armed: a test step, not the scenario).
        if observers:
            return
        nodes = [chroot + join(member, node) for member, node in queue.nodes.items()]
        observers.append(DeletionObserver(address, nodes))
        observers[0].start()
        if how == "cancel":
            scope.cancel()

    when_waiting(waiter, arm)
    with anyio.fail_after(BOUND):
        await held.acquire()
    timeout = 1.0
    while not observers:  # the wait was not reached in time (a busy machine): longer
        if how == "timeout":
            with pytest.raises(aiozklock.LockTimeout):
                await waiter.acquire(timeout=timeout)
            timeout *= 2
        else:
            with scope:
                await waiter.acquire()
            assert scope.cancelled_caught
    (observer,) = observers
    seen = observer.seen_within(BOUND)  # blocks the loop: no turn of it writes anything
    observer.join()
    assert observer.failure is None, observer.failure
    assert seen, f"{name}: the acquire ({how}) left its delete unwritten when it raised"


@pytest.mark.parametrize("how", ["timeout", "cancel"])
@pytest.mark.parametrize("name", list(QUEUED))
async def test_a_failed_acquire_s_delete_is_on_the_wire_when_it_raises(
    zk_hosts: str, chroot: str, open_client: ClientFactory, name: str, how: str
) -> None:
    clients = (
        await open_client(session_timeout=SESSION_TIMEOUT),
        await open_client(session_timeout=SESSION_TIMEOUT),
    )
    await abandoned_then_blocked(first_host(zk_hosts), chroot, clients, name, how)


@pytest.mark.parametrize("how", ["timeout", "cancel"])
async def test_a_failed_acquire_over_tls_is_on_the_wire_when_it_raises(
    zk_tls_cluster: ZooKeeperCluster,
    chroot: str,
    open_tls_client: TLSClientFactory,  # noqa: F811
    how: str,
) -> None:
    clients = (
        await open_tls_client(session_timeout=SESSION_TIMEOUT),
        await open_tls_client(session_timeout=SESSION_TIMEOUT),
    )
    await abandoned_then_blocked(first_host(zk_tls_cluster.hosts), chroot, clients, "lock", how)
