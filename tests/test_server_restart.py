"""A server restart revives the sessions it had: the client keeps its session through it.

A ZooKeeper server restarted with its data loads the sessions it had before the crash and
re-arms their expiry from the moment it loaded them, whatever the time it was down. So no
clock of a client can know that its session expired while the server was down; ours never
gives a session up (only a server can say it expired): at its next connection the client
presents its session again, the server accepts it, and the holding that was given up while
no server answered (at SUSPENDED, or at the proof's horizon) has its node deleted at once by
the janitor, so the lock is free at once rather than a session timeout later.

Every test has its own standalone server (restarting the shared one would disturb the
others). Timing numbers are printed (``pytest -s``) as ``FAULTS <name> ...`` lines; the
assertions are facts: the same session served after the restart, the old node gone before
the next grant, and the server never expiring the session (it would log ``Expiring session
0x...`` before deleting its nodes).
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
async def test_a_session_is_kept_through_a_server_restart_and_its_lost_lock_freed_at_once(
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
                with anyio.fail_after(3 * TIMEOUT):  # a hang bound
                    await holder.done.wait()
            assert isinstance(holder.error, aiozklock.LockLost)
            # The scenario, not a synchronization: the server stays down longer than a
            # session timeout (the user's restart took that long). No clock of ours gives
            # the session up meanwhile.
            await anyio.sleep(TIMEOUT)
            assert holder_client.state is SessionState.SUSPENDED
            assert states.first(lambda c: c.state is SessionState.LOST) is None
            await member.astart(timeout=60)
            serving_at = time.monotonic()
            with anyio.fail_after(3 * TIMEOUT):
                back = await states.wait_for(
                    lambda c: (
                        c.state is SessionState.CONNECTED
                        and c.at > serving_at - 60
                        and c.previous is SessionState.SUSPENDED
                    )
                )
            assert back.session_id == old_session  # revived by the server, kept by us
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
            report("restart-kept", acquirer=acquirer, serving_to_acquired=acquired_at - serving_at)
            assert old_node is None
            assert [c.session_id for c in contenders] == [client.session_id]
            assert holder_client.session_id == old_session
            # Without the janitor's delete, the old node would have stayed until the server
            # expired the session; the session was kept, and the server never expired it (an
            # ordering of events, not a time measured on a loaded machine).
            expired = f"Expiring session 0x{old_session:x},"
            log = member.log_path.read_text(errors="replace")
            assert expired not in log, f"the restarted server expired the session: {expired}"
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(cluster.close)
