"""Exceptions raised in the body of ``async with aiozklock.connect(...)`` leave it unchanged
(no ExceptionGroup), on asyncio and trio."""

from __future__ import annotations

import anyio
import pytest

import aiozklock
from aiozklock.testing import FaultProxy
from tests.conftest import ClientFactory

pytestmark = [pytest.mark.anyio]


class Boom(Exception):
    pass


async def test_a_user_exception_leaves_unchanged(hosts: str) -> None:
    error = Boom("from the body")
    with pytest.raises(Boom) as excinfo:
        async with aiozklock.connect(hosts):
            raise error
    assert excinfo.value is error
    assert not isinstance(excinfo.value, BaseExceptionGroup)


async def test_lock_timeout_leaves_unchanged_and_is_catchable(
    hosts: str, open_client: ClientFactory
) -> None:
    other = await open_client()
    async with other.lock("/locks/t"):
        caught = None
        try:
            async with aiozklock.connect(hosts) as zk:
                await zk.lock("/locks/t").acquire(timeout=0.1)
        except aiozklock.LockTimeout as exc:  # not wrapped in an ExceptionGroup
            caught = exc
        assert isinstance(caught, aiozklock.LockTimeout)


async def test_lock_lost_leaves_unchanged(proxy: FaultProxy) -> None:
    async def hold() -> None:
        async with (
            aiozklock.connect(proxy.address, session_timeout=4.0) as zk,
            zk.lock("/locks/lost"),
        ):
            await proxy.drop_all()
            await anyio.sleep(10)  # cancelled by the loss policy

    with anyio.fail_after(10), pytest.raises(aiozklock.LockLost) as excinfo:
        await hold()
    assert not isinstance(excinfo.value, BaseExceptionGroup)


async def test_cancellation_of_the_body_is_honoured(hosts: str) -> None:
    reached = False
    with anyio.CancelScope() as scope:
        async with aiozklock.connect(hosts) as zk, zk.lock("/locks/c"):
            # Cancelled from outside while the body waits: once held, not after a fixed time
            # (connecting and acquiring may take longer than that on a loaded machine).
            scope.cancel()
            await anyio.sleep(10)
            reached = True
    assert scope.cancelled_caught
    assert not reached
    async with aiozklock.connect(hosts) as zk:
        assert await zk.get_children("/locks/c") == []  # the session closed with its node


@pytest.mark.parametrize("error", [aiozklock.NoAuthError("/a/b"), aiozklock.NoNodeError("/a")])
def test_server_errors_survive_pickling(error: aiozklock.ZooKeeperError) -> None:
    import pickle

    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert (again.path, again.code, str(again)) == (error.path, error.code, str(error))


def test_stale_fencing_token_names_resource_and_both_tokens() -> None:
    import pickle

    error = aiozklock.StaleFencingToken("orders/157", 5 << 32, newer=(6 << 32) + 3)
    assert isinstance(error, aiozklock.LockLost)
    assert (error.resource, error.token, error.newer) == ("orders/157", 5 << 32, (6 << 32) + 3)
    assert "orders/157" in str(error)
    assert str(5 << 32) in str(error)
    assert str((6 << 32) + 3) in str(error)
    again = pickle.loads(pickle.dumps(error))
    assert (type(again), again.resource, again.token, again.newer, str(again)) == (
        type(error),
        error.resource,
        error.token,
        error.newer,
        str(error),
    )
    assert "seen" not in str(aiozklock.StaleFencingToken("r", 1))
