"""The smaller items of issue 8: docstrings, a missing chroot, a reaped container, the lost
session's id, the log level of a deliberate close, a clamped session timeout."""

from __future__ import annotations

import inspect
import logging

import anyio
import pytest

import aiozklock
from aiozklock import SessionState, StateChange
from aiozklock.testing import FaultProxy, Opcode, expire_session
from tests.conftest import ClientFactory

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

PATH = "/locks/orders/157"


def _undocumented(name: str, obj: object) -> list[str]:
    doc = inspect.getdoc(obj) if inspect.isfunction(obj) else getattr(obj, "__doc__", None)
    # A dataclass without a docstring gets its signature as one.
    missing = [name] if not doc or doc.startswith(f"{name}(") else []
    if inspect.isclass(obj):
        for member, value in vars(obj).items():
            if member.startswith("_"):
                continue
            if isinstance(value, property | staticmethod | classmethod) or inspect.isfunction(
                value
            ):
                target = value.fget if isinstance(value, property) else value
                if not getattr(target, "__doc__", None):
                    missing.append(f"{name}.{member}")
    return missing


def test_every_public_name_has_a_docstring() -> None:
    missing = []
    for name in aiozklock.__all__:
        obj = getattr(aiozklock, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            missing += _undocumented(name, obj)
    assert missing == []


# ---------------------------------------------------------------- a chroot that does not exist


async def test_a_missing_chroot_is_named_by_no_node_errors(
    zk: aiozklock.ZooKeeperClient, chroot: str
) -> None:
    with anyio.fail_after(10):
        assert await zk.exists("/") is None  # the test's chroot is not created for it
        calls = (
            lambda: zk.get_children("/"),
            lambda: zk.get_data("/config"),
            lambda: zk.delete("/config"),
            lambda: zk.create("/config", b"x"),
        )
        for call in calls:
            with pytest.raises(aiozklock.NoNodeError) as raised:
                await call()
            message = str(raised.value)
            assert f"in chroot {chroot}, which does not exist" in message
            assert "ensure_path('/')" in message
        # The tolerant form does not care why the node is missing.
        assert await zk.get_children("/", missing_ok=True) == []

        # Recipes create the chroot (as a container) on first use.
        async with zk.lock(PATH):
            pass
        assert await zk.exists("/") is not None
        await zk.create("/kept")  # a persistent child: the container is not reaped under us
        with pytest.raises(aiozklock.NoNodeError) as raised:
            await zk.get_children("/missing")
        assert raised.value.path == "/missing"
        assert "chroot" not in str(raised.value)  # the chroot exists: the path is to blame


async def test_ensure_path_root_creates_the_chroot(
    zk: aiozklock.ZooKeeperClient, zk_hosts: str, chroot: str
) -> None:
    with anyio.fail_after(10):
        await zk.ensure_path("/")
        assert await zk.get_children("/") == []
        async with aiozklock.connect(zk_hosts, session_timeout=4.0) as root:
            assert chroot.lstrip("/") in await root.get_children("/")


# ---------------------------------------------------------------- get_children(missing_ok=)


async def test_get_children_missing_ok_returns_nothing_for_a_reaped_container(
    zk: aiozklock.ZooKeeperClient,
) -> None:
    with anyio.fail_after(10):
        async with zk.lock(PATH):
            assert len(await zk.get_children(PATH, missing_ok=True)) == 1
        # What the server's container reaper does to the lock's empty parent.
        await zk.delete(PATH)
        with pytest.raises(aiozklock.NoNodeError):
            await zk.get_children(PATH)
        assert await zk.get_children(PATH, missing_ok=True) == []


async def test_get_children_missing_ok_must_be_a_bool_and_sends_nothing(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy)
    with anyio.fail_after(10):
        before = proxy.count(Opcode.GET_CHILDREN)
        with pytest.raises(aiozklock.InvalidArgument, match="missing_ok must be True or False"):
            await client.get_children("/", missing_ok="yes")  # type: ignore[arg-type]
        assert proxy.count(Opcode.GET_CHILDREN) == before


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
    # Our client's reconnect must not re-attach before the expiry: held until it is done.
    proxy.set_delay(3600)
    with anyio.fail_after(10):
        await expire_session(zk_hosts.split(",")[0], old_id, client.session_password)
        proxy.set_delay(0)
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
