"""The doctor's deadlock confirmation and a read/write lock's downgrade node (issue 30, item
6), on real ZooKeeper: the node is not sequential (named with its write node's older
sequence), so its name can come back, and a node listed in the scan and again afterwards
did not necessarily exist all along. A deadlock it seemed part of must not be confirmed
when it was gone meanwhile: here its going let the waiter behind it take the lock, so
nobody waits for ever any more."""

from __future__ import annotations

import anyio
import pytest

import aiozklock
from aiozklock._doctor._diagnose import assess, confirm
from aiozklock._doctor._scan import scan
from aiozklock.testing import session_of
from tests.conftest import ClientFactory, wait_for_queue

pytestmark = [pytest.mark.anyio]

HANG = 30.0  # a hang bound, not a duration


async def test_a_downgrade_node_made_again_meanwhile_does_not_confirm_a_deadlock(
    zk: aiozklock.ZooKeeperClient, open_client: ClientFactory
) -> None:
    other = await open_client()
    p_side, q_side = zk.rw_lock("/dl/a"), other.rw_lock("/dl/a")
    q_granted = anyio.Event()
    downgraded, q_holds_b = anyio.Event(), anyio.Event()

    async def p() -> None:  # holds /a's read lock at its write node's place, waits for /b
        async with p_side.write_lock:
            await p_side.read_lock.acquire()
        downgraded.set()
        await q_holds_b.wait()
        await zk.lock("/dl/b").acquire()

    async def q() -> None:  # holds /b, waits for /a's write lock
        async with other.lock("/dl/b"):
            q_holds_b.set()
            await downgraded.wait()
            await q_side.write_lock.acquire()
            q_granted.set()
            await anyio.sleep_forever()

    session = session_of(zk)
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(p, name="p")
            tg.start_soon(q, name="q")
            await downgraded.wait()  # the paths exist from then on
            await q_holds_b.wait()
            await wait_for_queue(zk, "/dl/a", 2)
            await wait_for_queue(zk, "/dl/b", 2)
            found = await scan(session, "/dl")
            seen = assess(found)
            assert len(seen.deadlocks) == 1  # P waits for Q at /b, Q for P at /a: so far, so true
            assert len((await confirm(session, seen)).deadlocks) == 1  # and still there
            # Meanwhile the downgrade node goes (its holder's, deleted here by hand) and Q is
            # granted /a; then a node of the same name is made again, ahead of Q's.
            (read_node,) = [n for n in await zk.get_children("/dl/a") if "__READ__" in n]
            data = await zk.get_data(f"/dl/a/{read_node}")
            await zk.delete(f"/dl/a/{read_node}")
            await q_granted.wait()
            await zk.create(f"/dl/a/{read_node}", data[0], ephemeral=True)
            confirmed = await confirm(session, seen)
            tg.cancel_scope.cancel()
    # Q holds /a and /b and will let them go: no deadlock, though every name is listed again.
    assert confirmed.deadlocks == []
