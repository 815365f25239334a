"""A server restart revives the sessions it had: one our clock gave up is closed at once.

A ZooKeeper server restarted with its data loads the sessions it had before the crash and
re-arms their expiry from the moment it loaded them, whatever the time it was down. A
session our own clock gave up (LOST) while the server was down is therefore alive again for
a whole timeout, its lock nodes at the head of their queues; the client closes it explicitly
at its next connection, so the lock is free at once rather than a session timeout later.

Every test has its own standalone server (restarting the shared one would disturb the
others). Timing numbers are printed (``pytest -s``) as ``FAULTS <name> ...`` lines; the
assertion is the order of events: the client's close before the server's expiry, which the
server logs (``Expiring session 0x...``) before it deletes the session's nodes.
"""

from __future__ import annotations

import time
from contextlib import AsyncExitStack

import anyio
import anyio.to_thread
import pytest

import aiozklock
from aiozklock import SessionState
from aiozklock.testing import History, ZooKeeperCluster
from tests.test_faults import HolderOutcome, StateLog, hold_until_cancelled, report

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(120)]

PATH = "/locks/restart"
TIMEOUT = 4.0  # the session timeout of the user's report


@pytest.mark.parametrize("acquirer", ["another client", "the same client"])
async def test_a_session_given_up_while_the_server_was_down_is_closed_after_its_restart(
    acquirer: str, chroot: str
) -> None:
    cluster = ZooKeeperCluster(1)
    await anyio.to_thread.run_sync(cluster.start)
    try:
        (member,) = cluster.members
        hosts = cluster.hosts + chroot
        async with AsyncExitStack() as stack:
            holder_client = await stack.enter_async_context(
                aiozklock.connect(hosts, session_timeout=TIMEOUT)
            )
            states = StateLog(holder_client)
            old_session = holder_client.session_id
            holder = HolderOutcome()
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    hold_until_cancelled, holder_client.lock(PATH), holder, History(), "old"
                )
                with anyio.fail_after(10):
                    await holder.entered.wait()
                await anyio.to_thread.run_sync(member.kill)
                with anyio.fail_after(3 * TIMEOUT):  # a hang bound: LOST comes at 0.9 x
                    lost = await states.wait_for(lambda c: c.state is SessionState.LOST)
                    await holder.done.wait()
            assert isinstance(holder.error, aiozklock.LockLost)
            assert lost.session_id == old_session
            # The scenario, not a synchronization: the server stays down a whole timeout
            # after our clock gave the session up (the user's restart took that long), so
            # that no clock of ours can take the session for expired on the server.
            await anyio.sleep(TIMEOUT)
            await member.astart(timeout=60)
            serving_at = time.monotonic()
            if acquirer == "another client":
                client = await stack.enter_async_context(
                    aiozklock.connect(hosts, session_timeout=TIMEOUT)
                )
            else:
                client = holder_client
            lock = client.lock(PATH, identifier="after the restart")
            with anyio.fail_after(3 * TIMEOUT):  # a hang bound: the order is asserted below
                async with lock:
                    acquired_at = time.monotonic()
                    contenders = await lock.contenders()
                    old_node = await client.exists(f"{PATH}/{holder.node}")
            report("restart-close", acquirer=acquirer, serving_to_acquired=acquired_at - serving_at)
            assert old_node is None
            assert [c.session_id for c in contenders] == [client.session_id]
            assert client.session_id != old_session
            # Without the close, the old node stays until the restarted server expires its
            # session (a whole timeout after it loaded it), and the server logs that expiry
            # before it deletes the node. The close came first: the server never expired it
            # (an ordering of events, not a time measured on a loaded machine).
            expired = f"Expiring session 0x{old_session:x},"
            log = member.log_path.read_text(errors="replace")
            assert expired not in log, f"the restarted server expired the old session: {expired}"
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(cluster.close)
