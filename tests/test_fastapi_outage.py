"""aiozklock.fastapi during ZooKeeper outages: a request answers at once when it cannot succeed
(503 with ``Retry-After`` while the session is down, unless ``wait_for_connection`` says to
wait), a request that times out answers close to its timeout, and a request that is done
does not wait out an outage for its release's confirmation (the release stays queued).

Real FastAPI over httpx's ASGI transport, real ZooKeeper; the outages are made by the
FaultProxy between the application's client and the server. Time bounds compare with the
request's own timeout (or the proxy's delay), with margins of a second or more.
"""

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any

import anyio
import httpx
import pytest
from fastapi import Depends, FastAPI

import aiozklock
from aiozklock import SessionState
from aiozklock.fastapi import (
    OUTCOME_HEADER,
    STATE_ATTRIBUTE,
    Commit,
    HTTPErrors,
    lifespan,
    locked,
    locked_all,
)
from aiozklock.testing import FaultProxy, Opcode
from tests.conftest import gone, node_gone, wait_for_queue
from tests.test_fastapi import ORDER, serve
from tests.test_fault_matrix import is_state
from tests.test_faults import StateLog

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("error::RuntimeWarning")]

SESSION_TIMEOUT = 10.0  # long: the session stays SUSPENDED (not LOST) through each test
TIMEOUT = 10.0  # the lock's: a request that waited it out could not pass the bounds below
LOCK_TIMEOUT = 1.0  # the lock's, in the tests of the release: far below the session timeout


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
    once the time is up (it took three round trips). Told by the requests, not by a clock:
    a loaded machine may take longer anywhere, never send more."""
    timeout, delay = 1.0, 2.0
    app, _ = order_app(proxy, chroot, timeout=timeout)
    with anyio.fail_after(SESSION_TIMEOUT + 10):
        async with serve(app) as http, zk.lock("/locks/orders/7"):
            proxy.set_delay(delay)
            started = time.monotonic()
            response = await http.post("/orders/7")
            answered = time.monotonic()
            await proxy.wait_for_request(Opcode.DELETE)  # written before the answer came
            proxy.set_delay(0)
    assert response.status_code == 409
    sent = [
        (request.opcode, request.t)
        for request in proxy.requests
        if request.t >= started and request.opcode not in (Opcode.PING, Opcode.CLOSE)
    ]
    # The one round trip (the create and the listing, written together), then the cleanup.
    assert [opcode for opcode, _ in sent] == [Opcode.CREATE2, Opcode.GET_CHILDREN, Opcode.DELETE]
    (_, create_at), (_, listed_at), (_, delete_at) = sent
    assert listed_at - create_at < timeout  # both before the time was up
    assert delete_at >= create_at + delay  # the cleanup needed the create's answer
    assert answered < delete_at + delay  # and the 409 did not wait for the cleanup's


@dataclass
class Gate:
    """An endpoint's progress: ``wrote`` once it committed (``written``), then it waits for
    ``go`` before it returns."""

    wrote: anyio.Event = field(default_factory=anyio.Event)
    go: anyio.Event = field(default_factory=anyio.Event)
    written: list[int] = field(default_factory=list)

    @asynccontextmanager
    async def transaction(self, order_id: int) -> AsyncIterator[None]:
        """A stand-in for a database transaction: it commits on a normal exit."""
        yield
        self.written.append(order_id)


def committing_app(proxy: FaultProxy, chroot: str, gate: Gate, **options: Any) -> FastAPI:
    """An application whose client runs through ``proxy`` (``options``: the lifespan's);
    ``POST /orders/{id}`` holds the order's lock (timeout ``LOCK_TIMEOUT``), commits through
    ``Commit``, and returns its fencing token once ``gate.go`` is set."""
    options.setdefault("session_timeout", SESSION_TIMEOUT)
    app = FastAPI(lifespan=lifespan(proxy.address + chroot, **options))

    @app.post("/orders/{order_id:int}")
    async def ship(
        order_id: int,
        lock: Annotated[aiozklock.Lock, locked(ORDER, timeout=LOCK_TIMEOUT)],
        commit: Commit,
    ) -> int:
        async with commit(gate.transaction(order_id)):
            pass
        gate.wrote.set()
        await gate.go.wait()
        return lock.fencing_token

    return app


async def answered_before_expiry(
    answered: anyio.Event, proxy: FaultProxy, session_timeout: float = SESSION_TIMEOUT
) -> None:
    """What the HTTP client needs: the answer before the server could have expired the
    session (a session timeout after ZooKeeper went silent). Else the outage is ended, so
    that the request (and the test) can end, and the test fails."""
    with anyio.move_on_after(session_timeout):
        await answered.wait()
    if not answered.is_set():
        proxy.blackhole(False)
        raise AssertionError("the answer waited out the outage for the release")


@dataclass
class Posted:
    """``POST /orders/7`` in flight, its body past its commit (``gate.wrote``), held at
    ``gate.go``: the session's ``states``, the lock's ``node``; ``answered`` is set and
    ``responses`` filled once the answer comes."""

    states: StateLog
    node: str
    answered: anyio.Event
    responses: list[httpx.Response]


@asynccontextmanager
async def posted(app: FastAPI, gate: Gate, zk: aiozklock.ZooKeeperClient) -> AsyncIterator[Posted]:
    """Serve ``app``, post an order in a task, yield once its body holds the lock and has
    committed; leaving waits for the answer."""
    async with serve(app) as http, anyio.create_task_group() as tg:
        states = states_of(app)
        answered, responses = anyio.Event(), list[httpx.Response]()

        async def post() -> None:
            responses.append(await http.post("/orders/7"))
            answered.set()

        tg.start_soon(post)
        await gate.wrote.wait()
        [name] = await zk.get_children("/locks/orders/7")
        yield Posted(states, f"/locks/orders/7/{name}", answered, responses)


OUTAGE_ENDS = ("the delete delivered", "the delete dropped", "the session expired")
EXPIRING_TIMEOUT = 4.0


@pytest.mark.parametrize("end", OUTAGE_ENDS)
async def test_an_answer_does_not_wait_out_an_outage_for_its_release(
    end: str,
    proxy: FaultProxy,
    chroot: str,
    zk: aiozklock.ZooKeeperClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ZooKeeper stops answering just as the endpoint, which wrote, returns: the release is
    written into the silence, and the answer (the endpoint's own: 200) comes within the
    lock's timeout, before the server could have expired the session (it came after the
    reconnect or the session's end, up to a session timeout). The release is not lost: the
    delete held by the outage is applied when it ends, a delete lost with the connection
    is sent again once reconnected; or the server expires the session, and nothing is
    left."""
    gate = Gate()
    # The expiry is waited for: a shorter session, still 4 x the lock's timeout.
    timeout = EXPIRING_TIMEOUT if end == "the session expired" else SESSION_TIMEOUT
    app = committing_app(proxy, chroot, gate, session_timeout=timeout)
    with anyio.fail_after(3 * SESSION_TIMEOUT):
        async with posted(app, gate, zk) as request:
            states, node, answered = request.states, request.node, request.answered
            proxy.blackhole(True)  # silence: the session does not know yet
            gate.go.set()
            await answered_before_expiry(answered, proxy, timeout)
            assert states.first(is_state(SessionState.LOST)) is None
            assert await zk.exists(node) is not None  # the release is not applied yet
            if end == "the delete dropped":
                await proxy.drop_all()  # the held delete is discarded with the connection
            elif end == "the session expired":
                await node_gone(zk, node, within=2 * timeout)  # by the server
            proxy.blackhole(False)
            await node_gone(zk, node, within=SESSION_TIMEOUT)  # released after the outage
            if end == "the session expired":
                await states.wait_for(is_state(SessionState.LOST))
    [response] = request.responses
    assert response.status_code == 200
    assert OUTCOME_HEADER not in response.headers
    assert gate.written == [7]
    assert "the release was not confirmed" in caplog.text
    await gone(zk, "/locks/orders/7")  # nothing is left
    if end != "the session expired":
        assert states.first(is_state(SessionState.LOST)) is None  # one session throughout


async def test_a_release_while_disconnected_is_queued_for_the_reconnect(
    proxy: FaultProxy, chroot: str, zk: aiozklock.ZooKeeperClient
) -> None:
    """The endpoint returns while the session is suspended (its holding outlives that, with
    ``loss_policy="expired"``): the delete cannot be written; the answer comes within the
    lock's timeout all the same, and the delete is sent once the session is back."""
    gate = Gate()
    app = committing_app(proxy, chroot, gate, loss_policy="expired")
    with anyio.fail_after(3 * SESSION_TIMEOUT):
        async with posted(app, gate, zk) as request:
            states, node, answered = request.states, request.node, request.answered
            await partition(proxy, states)
            gate.go.set()
            await answered_before_expiry(answered, proxy)
            assert await zk.exists(node) is not None  # queued, not written
            proxy.blackhole(False)
            await node_gone(zk, node, within=SESSION_TIMEOUT)
    [response] = request.responses
    assert response.status_code == 200
    assert OUTCOME_HEADER not in response.headers
    assert gate.written == [7]
    assert states.first(is_state(SessionState.LOST)) is None  # deleted in the same session


class ChildrenAtResponseStart:
    """ASGI middleware: lists each path's children when the response starts to be sent."""

    def __init__(
        self, app: Any, zk: aiozklock.ZooKeeperClient, paths: list[str], seen: list[str]
    ) -> None:
        self.app, self.zk, self.paths, self.seen = app, zk, paths, seen

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                for path in self.paths:
                    self.seen += await self.zk.get_children(path)
            await send(message)

        await self.app(scope, receive, sending)


@pytest.mark.parametrize("recipe", ["non-fair lock", "multi-lock"])
async def test_every_recipe_is_released_before_the_response_is_sent(
    recipe: str, hosts: str, zk: aiozklock.ZooKeeperClient
) -> None:
    """With ZooKeeper answering, the release is confirmed before the response: another
    session finds no node when the response starts (a fixed node, a node per path)."""
    app = FastAPI(lifespan=lifespan(hosts, session_timeout=SESSION_TIMEOUT))
    paths = ["/locks/orders/7"]
    if recipe == "multi-lock":
        paths.append("/locks/customers/ann")
        dependency = locked_all([ORDER, "/locks/customers/{customer}"], timeout=LOCK_TIMEOUT)
    else:
        dependency = locked(ORDER, timeout=LOCK_TIMEOUT, fair=False)
    inside: list[str] = []

    @app.post("/customers/{customer}/orders/{order_id:int}")
    async def order(customer: str, order_id: int, _: Annotated[Any, dependency]) -> None:
        for path in paths:
            inside.extend(await zk.get_children(path))

    seen: list[str] = []
    app.add_middleware(ChildrenAtResponseStart, zk=zk, paths=paths, seen=seen)
    with anyio.fail_after(SESSION_TIMEOUT):
        async with serve(app) as http:
            response = await http.post("/customers/ann/orders/7")
    assert response.status_code == 200
    assert len(inside) == len(paths)
    assert seen == []
