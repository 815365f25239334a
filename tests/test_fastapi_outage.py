"""aiozklock.fastapi during ZooKeeper outages: a request answers at once when it cannot succeed
(503 with ``Retry-After`` while the session is down, unless ``wait_for_connection`` says to
wait), and a request that times out answers close to its timeout.

Real FastAPI over httpx's ASGI transport, real ZooKeeper; the outages are made by the
FaultProxy between the application's client and the server. Time bounds compare with the
request's own timeout (or the proxy's delay), with margins of a second or more.
"""

import time
from typing import Annotated, Any

import anyio
import httpx
import pytest
from fastapi import Depends, FastAPI

import aiozklock
from aiozklock import SessionState
from aiozklock.fastapi import STATE_ATTRIBUTE, HTTPErrors, lifespan, locked
from aiozklock.testing import FaultProxy, Opcode
from tests.conftest import wait_for_queue
from tests.test_fastapi import ORDER, serve
from tests.test_fault_matrix import is_state
from tests.test_faults import StateLog

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("error::RuntimeWarning")]

SESSION_TIMEOUT = 10.0  # long: the session stays SUSPENDED (not LOST) through each test
TIMEOUT = 10.0  # the lock's: a request that waited it out could not pass the bounds below


def order_app(proxy: FaultProxy, chroot: str, **locked_options: Any) -> tuple[FastAPI, Any]:
    """An application whose client runs through ``proxy``; ``POST /orders/{id}`` holds the
    order's lock (``locked(ORDER, **locked_options)``). Returns it and an ``arrived``
    dependency's event holder: ``arrived[0]`` is set when a request reaches the lock."""
    app = FastAPI(lifespan=lifespan(proxy.address + chroot, session_timeout=SESSION_TIMEOUT))
    order_lock = locked(ORDER, **locked_options)
    arrived = [anyio.Event()]

    async def arrive() -> None:  # resolved just before the lock (parameter order)
        arrived[0].set()

    @app.post("/orders/{order_id:int}")
    async def ship(
        order_id: int,
        _: Annotated[None, Depends(arrive)],
        lock: Annotated[aiozklock.Lock, order_lock],
    ) -> int:
        return lock.fencing_token

    return app, arrived


def states_of(app: FastAPI) -> StateLog:
    return StateLog(getattr(app.state, STATE_ATTRIBUTE))


async def partition(proxy: FaultProxy, states: StateLog) -> None:
    """Cut the client off (reconnects hang) and wait until it knows (SUSPENDED)."""
    proxy.blackhole(True, new="hang")
    await proxy.drop_all()
    await states.wait_for(is_state(SessionState.SUSPENDED))


async def test_a_request_while_the_session_is_suspended_is_503_at_once(
    proxy: FaultProxy, chroot: str
) -> None:
    app, _ = order_app(proxy, chroot, timeout=TIMEOUT, errors=HTTPErrors(retry_after=3))
    with anyio.fail_after(TIMEOUT + 10):
        async with serve(app) as http:
            states = states_of(app)
            await partition(proxy, states)
            started = time.monotonic()
            response = await http.post("/orders/7")
            elapsed = time.monotonic() - started
            proxy.blackhole(False)
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "3"
    assert "ZooKeeper is unreachable" in response.json()["detail"]
    assert elapsed < TIMEOUT / 4, elapsed
    assert states.first(is_state(SessionState.LOST)) is None  # it was only SUSPENDED


async def test_wait_for_connection_rides_out_an_outage_shorter_than_it(
    proxy: FaultProxy, chroot: str
) -> None:
    app, arrived = order_app(proxy, chroot, timeout=TIMEOUT, wait_for_connection=TIMEOUT)
    with anyio.fail_after(TIMEOUT + 10):
        async with serve(app) as http, anyio.create_task_group() as tg:
            states = states_of(app)
            await partition(proxy, states)
            responses: list[httpx.Response] = []

            async def post() -> None:
                responses.append(await http.post("/orders/7"))

            tg.start_soon(post)
            await arrived[0].wait()  # the request is at the lock, the session still down
            proxy.blackhole(False)
    [response] = responses
    assert response.status_code == 200
    suspended = states.first(is_state(SessionState.SUSPENDED))
    reconnected = states.first(is_state(SessionState.CONNECTED))
    assert suspended is not None
    assert reconnected is not None
    assert reconnected.at > suspended.at


async def test_a_session_lost_while_waiting_in_the_queue_is_503_at_once(
    proxy: FaultProxy, chroot: str, zk: aiozklock.ZooKeeperClient
) -> None:
    app, _ = order_app(proxy, chroot, timeout=TIMEOUT)
    with anyio.fail_after(TIMEOUT + 10):
        async with serve(app) as http, zk.lock("/locks/orders/7"):
            states = states_of(app)
            async with anyio.create_task_group() as tg:
                responses: list[httpx.Response] = []

                async def post() -> None:
                    responses.append(await http.post("/orders/7"))

                tg.start_soon(post)
                await wait_for_queue(zk, "/locks/orders/7", 2)  # the request waits its turn
                await partition(proxy, states)
                cut = time.monotonic()
            elapsed = time.monotonic() - cut
            proxy.blackhole(False)
    [response] = responses
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert elapsed < TIMEOUT / 4, elapsed


@pytest.mark.parametrize("wait_for_connection", [0.0, TIMEOUT])
async def test_a_drop_while_queued_is_503_at_once_or_ridden_out_if_configured(
    wait_for_connection: float, proxy: FaultProxy, chroot: str, zk: aiozklock.ZooKeeperClient
) -> None:
    """The connection drops and comes back at once (same session) while the request waits
    in the queue: by default it answers 503 as the session goes down; with a
    ``wait_for_connection`` it keeps its place and is served once the holder leaves."""
    app, _ = order_app(proxy, chroot, timeout=TIMEOUT, wait_for_connection=wait_for_connection)
    with anyio.fail_after(TIMEOUT + 10):
        async with serve(app) as http, anyio.create_task_group() as tg:
            states = states_of(app)
            holder = zk.lock("/locks/orders/7")
            await holder.acquire()
            responses: list[httpx.Response] = []

            async def post() -> None:
                responses.append(await http.post("/orders/7"))

            tg.start_soon(post)
            await wait_for_queue(zk, "/locks/orders/7", 2)
            await proxy.drop_all()
            await states.wait_for(is_state(SessionState.CONNECTED))
            await holder.release()
    [response] = responses
    assert response.status_code == (200 if wait_for_connection else 503)
    assert states.first(is_state(SessionState.LOST)) is None  # the same session throughout


async def test_a_timed_out_request_does_not_wait_for_its_cleanup(
    proxy: FaultProxy, chroot: str, zk: aiozklock.ZooKeeperClient
) -> None:
    """The reply to the timed-out request's delete never comes (ZooKeeper drops the reply to
    a write of a session that moved to another server, e.g. while recovering): the request
    must not wait for it (it did, for half the session timeout, 6 s in all)."""
    timeout = 1.0
    app, _ = order_app(proxy, chroot, timeout=timeout)
    with anyio.fail_after(SESSION_TIMEOUT + 10):
        async with serve(app) as http, zk.lock("/locks/orders/7"):
            proxy.arm_drop_after([Opcode.DELETE], reset=False)
            started = time.monotonic()
            response = await http.post("/orders/7")
            elapsed = time.monotonic() - started
            await proxy.wait_for_request(Opcode.DELETE)  # its cleanup was sent all the same
    assert response.status_code == 409
    assert elapsed < timeout + SESSION_TIMEOUT / 4, elapsed


async def test_a_slow_zookeeper_answers_409_after_one_round_trip(
    proxy: FaultProxy, chroot: str, zk: aiozklock.ZooKeeperClient
) -> None:
    """Every request takes ``delay`` (> the timeout) to reach the server: the 409 comes
    after the one round trip that finds the lock held; nothing more is sent and waited for
    once the time is up (it took three round trips)."""
    timeout, delay = 1.0, 2.0
    app, _ = order_app(proxy, chroot, timeout=timeout)
    with anyio.fail_after(SESSION_TIMEOUT + 10):
        async with serve(app) as http, zk.lock("/locks/orders/7"):
            proxy.set_delay(delay)
            started = time.monotonic()
            response = await http.post("/orders/7")
            elapsed = time.monotonic() - started
            proxy.set_delay(0)
    assert response.status_code == 409
    assert elapsed < delay + timeout, elapsed
