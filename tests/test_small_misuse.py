"""The smaller items of issue 8: docstrings, a missing chroot, a reaped container, the lost
session's id, the log level of a deliberate close, a clamped session timeout."""

from __future__ import annotations

import anyio
import pytest

from aiozklock import SessionState, StateChange
from aiozklock.testing import FaultProxy, expire_session
from tests.conftest import ClientFactory

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

PATH = "/locks/orders/157"


# ---------------------------------------------------------------- the lost session's id


async def test_a_listener_sees_the_id_of_the_lost_session(
    proxy: FaultProxy, open_client: ClientFactory, zk_hosts: str
) -> None:
    client = await open_client(proxy)
    changes: list[StateChange] = []
    lost = anyio.Event()

    def record(change: StateChange) -> None:
        changes.append(change)
        if change.state is SessionState.LOST:
            lost.set()

    client.add_listener(record)
    old_id = client.session_id
    assert old_id != 0
    proxy.set_delay(0.3)  # our client's reconnect must not re-attach before the expiry
    with anyio.fail_after(10):
        await expire_session(zk_hosts.split(",")[0], old_id, client.session_password)
        await lost.wait()
    (change,) = [c for c in changes if c.state is SessionState.LOST]
    assert change.session_id == old_id
