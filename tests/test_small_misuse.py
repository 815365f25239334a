"""The smaller items of issue 8: docstrings, a missing chroot, a reaped container, the lost
session's id, the log level of a deliberate close, a clamped session timeout."""

from __future__ import annotations

import logging

import anyio
import pytest

import aiozklock
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


# ---------------------------------------------------------------- log levels of a loss


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.name.startswith("aiozklock") and record.levelno >= logging.WARNING
    ]


async def test_closing_the_client_while_holding_logs_no_warning(
    hosts: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="aiozklock")
    with anyio.fail_after(10):
        async with aiozklock.connect(hosts, session_timeout=4.0) as client:
            lock = client.lock(PATH)
            await lock.acquire()
        assert not lock.statistics().locked
    assert _warnings(caplog) == []
    assert any("lost: session closed" in record.getMessage() for record in caplog.records)


async def test_a_real_loss_still_logs_a_warning(
    proxy: FaultProxy, open_client: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="aiozklock")
    client = await open_client(proxy, loss_policy="suspended")
    suspended = anyio.Event()
    # Registered after the loss monitor's listener: when this one runs, the loss is logged.
    client.add_listener(
        lambda change: suspended.set() if change.state is SessionState.SUSPENDED else None
    )
    lock = client.lock(PATH)
    with anyio.fail_after(10):
        await lock.acquire()
        await proxy.drop_all()
        await suspended.wait()
    assert not lock.statistics().locked
    (warning,) = _warnings(caplog)
    assert "lost: session suspended" in warning.getMessage()


# ---------------------------------------------------------------- a clamped session timeout


async def test_a_clamped_session_timeout_is_logged_once(
    hosts: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="aiozklock")
    with anyio.fail_after(10):
        async with aiozklock.connect(hosts, session_timeout=600.0) as client:
            granted = client.negotiated_timeout
        async with aiozklock.connect(hosts, session_timeout=4.0) as unclamped:
            assert unclamped.negotiated_timeout == 4.0
    assert granted < 600
    clamped = [record.getMessage() for record in _warnings(caplog)]
    assert len(clamped) == 1
    assert f"session_timeout 600 s was clamped by the server to {granted:g} s" in clamped[0]
