"""``Lock.valid_until`` and the paused holder (fault-matrix F9).

A process that is paused (GC, SIGSTOP, a descheduled VM) while holding a lock cannot be told
anything until it runs again, and when it does, its first action may come before any
heartbeat. ``valid_until`` is the check it can make at that moment; fencing tokens are what
protects the resource whatever it does.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

import aiozklock
from aiozklock import SessionState
from aiozklock.testing import FaultProxy, FencedStore, RawZooKeeperConnection, expire_session
from tests.conftest import ClientFactory, gone
from tests.test_faults import (
    PARKED,
    STEADY_TIMEOUT,
    TIMEOUT,
    DeletionWatch,
    StateLog,
    first_host,
    observer,
    report,
)

pytestmark = [pytest.mark.anyio]

__all__ = ["observer"]  # a fixture, imported to be used here

PATH = "/locks/pause"
ROOT = Path(__file__).resolve().parent.parent


async def test_valid_until_while_held_and_after_release(zk: aiozklock.ZooKeeperClient) -> None:
    lock = zk.lock(PATH)
    with pytest.raises(aiozklock.NotLockOwner):
        _ = lock.valid_until
    async with lock:
        now = aiozklock.clock()
        timeout = zk.negotiated_timeout
        # It runs from the send time of the newest answered request (our acquire at the
        # latest), 90 % of the session timeout ahead.
        assert now < lock.valid_until <= now + 0.9 * timeout
        assert lock.is_held
    with pytest.raises(aiozklock.NotLockOwner):
        _ = lock.valid_until


async def test_valid_until_is_minus_infinity_once_lost(
    proxy: FaultProxy, open_client: ClientFactory, zk_hosts: str
) -> None:
    client = await open_client(proxy, session_timeout=STEADY_TIMEOUT)
    states = StateLog(client)
    lock = client.lock(PATH)
    await lock.acquire()
    # Our client's reconnect must not re-attach before the expiry is done: its handshakes
    # are parked in the proxy until then (see test_faults' F6).
    proxy.set_delay(PARKED)
    await expire_session(first_host(zk_hosts), client.session_id, client.session_password)
    proxy.set_delay(0)
    with anyio.fail_after(5):  # the loss policy, an earlier listener, marks the lock lost
        await states.wait_for(lambda change: change.state is not SessionState.CONNECTED)
    assert not lock.statistics().locked
    assert lock.valid_until == -math.inf
    assert not lock.is_held
    with pytest.raises(aiozklock.LockLost):
        await lock.release()


async def open_holder(module: str, *args: str) -> anyio.abc.Process:
    """A holder in its own process: ``python -m tests.<module> ARGS...``, from the repository
    root, its stdin and stdout piped (it speaks JSON lines: ``ChildLines``)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", f"tests.{module}", *args]
    process = await anyio.open_process(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT, env=env
    )
    assert process.stdin is not None
    return process


class ChildLines:
    """JSON lines from the child's stdout, read as they arrive."""

    def __init__(self, process: anyio.abc.Process) -> None:
        assert process.stdout is not None
        self._stream = BufferedByteReceiveStream(process.stdout)

    async def next(self) -> dict[str, Any]:
        line = await self._stream.receive_until(b"\n", 1 << 16)
        record: dict[str, Any] = json.loads(line)
        return record


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_paused_holder_is_fenced_and_its_validity_has_expired_on_resume(
    anyio_backend: str,
    zk_hosts: str,
    chroot: str,
    open_client: ClientFactory,
    observer: RawZooKeeperConnection,
) -> None:
    """F9: SIGSTOP the holder process for 2.5x the session timeout. The server expires its
    session and grants the lock to another client; on SIGCONT the old holder's first check,
    made before its event loop runs again, says it no longer holds the lock; every write it
    still attempts is rejected by the fenced store; its body is then cancelled (LockLost)."""
    store = FencedStore()
    process = await open_holder(
        "_pause_holder", zk_hosts + chroot, PATH, str(TIMEOUT), anyio_backend
    )
    other = await open_client(session_timeout=STEADY_TIMEOUT)
    other_lock = other.lock(PATH, identifier="other")
    try:
        lines = ChildLines(process)
        with anyio.fail_after(30):  # a hang bound: a Python process starts, connects, acquires
            acquired = await lines.next()
            first_write = await lines.next()
        assert acquired["event"] == "acquired"
        old_token: int = acquired["token"]
        assert first_write["is_held"] is True
        assert store.write("paused", old_token, "before the pause")

        deletion = DeletionWatch(observer, f"{chroot}{PATH}/{acquired['node']}")
        await deletion.arm()
        os.kill(process.pid, signal.SIGSTOP)
        paused_at = time.monotonic()
        with anyio.fail_after(5 * TIMEOUT):  # a hang bound
            await deletion.run()  # the server expired the paused holder's session
        with anyio.fail_after(5):
            await other_lock.acquire()
        new_token = other_lock.fencing_token
        assert new_token > old_token
        assert store.write("other", new_token, "the new holder")

        await process.stdin.send(b"\n")  # read by the child as soon as it runs again
        await anyio.sleep(max(0.0, paused_at + 2.5 * TIMEOUT - time.monotonic()))  # the pause
        os.kill(process.pid, signal.SIGCONT)
        resumed_at = time.monotonic()

        writes: list[dict[str, Any]] = []
        with anyio.fail_after(20):  # a hang bound
            while (record := await lines.next())["event"] == "write":
                writes.append(record)
                store.write("paused", old_token, "after the pause")
        exit_record = record
        assert exit_record["event"] == "exit"
        assert exit_record["error"] == "LockLost"
        # The first action after resume came before the event loop ran: only the validity
        # check could know, and it did.
        assert writes, "the child wrote nothing after resuming"
        assert writes[0]["is_held"] is False
        assert writes[0]["valid_until"] < writes[0]["t"]
        assert all(write["is_held"] is False for write in writes)
        assert [write.accepted for write in store.rejected] == [False] * len(writes)
        assert len(store.rejected) == len(writes)
        assert store.value == "the new holder"
        report(
            "F9",
            server_expiry_after_pause=deletion.deleted_at - paused_at,
            first_check_after_resume=writes[0]["t"] - resumed_at,
            body_cancelled_after_resume=exit_record["t"] - resumed_at,
            stale_writes_rejected=len(store.rejected),
        )
        await other_lock.release()
        with anyio.fail_after(20):  # a hang bound
            assert await process.wait() == 0
        await gone(other, PATH)
    finally:
        if process.returncode is None:
            os.kill(process.pid, signal.SIGCONT)
            process.kill()
            await process.wait()
