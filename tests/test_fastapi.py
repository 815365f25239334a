"""aiozklock.fastapi with a real FastAPI application, over httpx's ASGI transport, with the
application's lifespan run for real and real ZooKeeper.

No ``from __future__ import annotations`` here: FastAPI reads the endpoints' annotations,
which refer to values local to each test.
"""

import importlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import anyio
import anyio.lowlevel
import httpx
import pytest
from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import aiozklock
from aiozklock.fastapi import (
    STATE_ATTRIBUTE,
    HTTPErrors,
    ZooKeeper,
    lifespan,
    locked,
    locked_all,
)
from aiozklock.testing import FaultProxy, History
from tests.conftest import ClientFactory, gone

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("error::RuntimeWarning")]

ORDER = "/locks/orders/{order_id}"


@asynccontextmanager
async def serve(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """Run ``app``'s lifespan (startup, then shutdown) around an httpx client for it."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            yield http


async def post_all(http: httpx.AsyncClient, urls: list[str]) -> list[httpx.Response]:
    """POST every url concurrently; the responses in the order of ``urls``."""
    responses: list[httpx.Response | None] = [None] * len(urls)

    async def post(i: int) -> None:
        responses[i] = await http.post(urls[i])

    async with anyio.create_task_group() as tg:
        for i in range(len(urls)):
            tg.start_soon(post, i)
    return [r for r in responses if r is not None]


async def test_concurrent_requests_for_one_order_hold_the_lock_one_at_a_time(
    hosts: str,
) -> None:
    history = History()
    inside = most = 0
    app = FastAPI(lifespan=lifespan(hosts, session_timeout=4.0))

    @app.post("/orders/{order_id:int}")
    async def ship(
        order_id: int, n: int, lock: Annotated[aiozklock.Lock, locked(ORDER, timeout=20.0)]
    ) -> dict[str, int]:
        nonlocal inside, most
        with history.section(f"request-{n}", lock.fencing_token):
            inside += 1
            most = max(most, inside)
            await anyio.lowlevel.checkpoint()  # the others run here: an overlap would show
            inside -= 1
        return {"token": lock.fencing_token}

    with anyio.fail_after(30):
        async with serve(app) as http:
            responses = await post_all(http, [f"/orders/7?n={n}" for n in range(20)])
    assert [r.status_code for r in responses] == [200] * 20
    report = history.check()
    assert report.ok, report.failures()
    assert report.sections == 20
    assert most == 1
    assert len({r.json()["token"] for r in responses}) == 20  # one grant each


async def test_not_acquired_in_time_is_409_or_the_configured_status(
    hosts: str, zk: aiozklock.ZooKeeperClient
) -> None:
    app = FastAPI(lifespan=lifespan(hosts, session_timeout=4.0))

    @app.post("/orders/{order_id:int}")
    async def ship(order_id: int, lock: Annotated[aiozklock.Lock, locked(ORDER, timeout=0)]) -> int:
        return lock.fencing_token

    locked_423 = locked(ORDER, timeout=0.2, errors=HTTPErrors(not_acquired=423))

    @app.post("/orders/{order_id:int}/pay")
    async def pay(order_id: int, lock: Annotated[aiozklock.Lock, locked_423]) -> int:
        return lock.fencing_token

    with anyio.fail_after(15):
        async with serve(app) as http:
            async with zk.lock("/locks/orders/7") as elsewhere:
                busy = await post_all(http, ["/orders/7"] * 5 + ["/orders/7/pay"])
                token = elsewhere.fencing_token
            await gone(zk, "/locks/orders/7")  # released: applied (timeout=0 tries once)
            assert [r.status_code for r in busy] == [409] * 5 + [423]
            assert "/locks/orders/7 is held by another request" in busy[0].json()["detail"]
            free = await http.post("/orders/7")
    assert free.status_code == 200
    assert free.json() > token


async def test_distinct_orders_run_in_parallel(hosts: str) -> None:
    entered = {1: anyio.Event(), 2: anyio.Event()}
    app = FastAPI(lifespan=lifespan(hosts, session_timeout=4.0))

    @app.post("/orders/{order_id:int}")
    async def ship(
        order_id: int, lock: Annotated[aiozklock.Lock, locked(ORDER, timeout=10.0)]
    ) -> str:
        entered[order_id].set()
        await entered[3 - order_id].wait()  # both handlers are inside their locks at once
        return lock.path

    with anyio.fail_after(10):
        async with serve(app) as http:
            responses = await post_all(http, ["/orders/1", "/orders/2"])
    assert [r.json() for r in responses] == ["/locks/orders/1", "/locks/orders/2"]


class ListChildrenAtResponseStart:
    """ASGI middleware: lists ``path``'s children when the response starts to be sent."""

    def __init__(
        self, app: ASGIApp, zk: aiozklock.ZooKeeperClient, path: str, seen: dict[str, list[str]]
    ) -> None:
        self.app, self.zk, self.path, self.seen = app, zk, path, seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.seen["at the response"] = await self.zk.get_children(self.path)
            await send(message)

        await self.app(scope, receive, sending)


async def test_the_lock_is_released_before_the_response_is_sent(
    hosts: str, zk: aiozklock.ZooKeeperClient
) -> None:
    app = FastAPI(lifespan=lifespan(hosts, session_timeout=4.0))
    seen: dict[str, list[str]] = {}

    @app.post("/orders/{order_id:int}")
    async def ship(
        order_id: int, lock: Annotated[aiozklock.Lock, locked(ORDER, timeout=5.0)]
    ) -> None:
        seen["in the endpoint"] = await zk.get_children(lock.path)

    app.add_middleware(ListChildrenAtResponseStart, zk=zk, path="/locks/orders/7", seen=seen)
    with anyio.fail_after(10):
        async with serve(app) as http:
            response = await http.post("/orders/7")
    assert response.status_code == 200
    assert len(seen["in the endpoint"]) == 1
    assert seen["at the response"] == []


async def test_a_connection_drop_during_the_request_stops_the_endpoint_outcome_unknown(
    proxy: FaultProxy, open_client: ClientFactory, chroot: str
) -> None:
    """The loss cancels the endpoint; it had written once, and does not commit through
    Commit, so the answer cannot say nothing was written: 500, Aiozklock-Outcome: unknown
    (test_fastapi_outcome.py has the endpoints that do)."""
    writes: list[str] = []
    entered, go_on = anyio.Event(), anyio.Event()
    cancelled: list[bool] = []
    app = FastAPI(lifespan=lifespan(proxy.address + chroot, session_timeout=4.0))
    # Waits for the reconnection (the second request), not for the lost lock (the first).
    order_lock = locked(
        ORDER, timeout=5.0, wait_for_connection=5.0, errors=HTTPErrors(retry_after=7)
    )

    @app.post("/orders/{order_id:int}")
    async def ship(order_id: int, lock: Annotated[aiozklock.Lock, order_lock]) -> int:
        writes.append(f"first write, token {lock.fencing_token}")
        entered.set()
        try:
            await go_on.wait()
        except anyio.get_cancelled_exc_class():
            cancelled.append(True)
            raise
        writes.append(f"second write, token {lock.fencing_token}")
        return lock.fencing_token

    with anyio.fail_after(20):
        async with serve(app) as http:
            async with anyio.create_task_group() as tg:
                responses: list[httpx.Response] = []
                tg.start_soon(lambda: _append(responses, http.post("/orders/7")))
                await entered.wait()
                await proxy.drop_all()
            [lost] = responses
            go_on.set()  # nothing is left to resume: the endpoint was cancelled
            assert lost.status_code == 500
            assert lost.headers["Aiozklock-Outcome"] == "unknown"
            assert "Retry-After" not in lost.headers
            assert "was lost during the request" in lost.json()["detail"]
            assert cancelled == [True]
            assert len(writes) == 1
            again = await http.post("/orders/7")  # once reconnected, the order is served
    assert again.status_code == 200
    token = again.json()
    assert writes[1:] == [f"first write, token {token}", f"second write, token {token}"]


async def _append(responses: list[httpx.Response], request: Any) -> None:
    responses.append(await request)


async def test_shutdown_closes_the_session_and_wraps_the_apps_own_lifespan(
    hosts: str, zk: aiozklock.ZooKeeperClient
) -> None:
    states: list[tuple[str, aiozklock.SessionState]] = []

    @asynccontextmanager
    async def own(app: FastAPI) -> AsyncIterator[dict[str, str]]:
        client = getattr(app.state, STATE_ATTRIBUTE)
        states.append(("startup", client.state))
        yield {"greeting": "hello"}
        states.append(("shutdown", client.state))

    app = FastAPI(lifespan=lifespan(hosts, app_lifespan=own, session_timeout=4.0))

    @app.post("/workers/{name}")
    async def register(name: str, client: ZooKeeper) -> str:
        return await client.create(f"/workers/{name}", ephemeral=True)

    await zk.ensure_path("/workers")
    with anyio.fail_after(10):
        async with app.router.lifespan_context(app) as state:
            client = getattr(app.state, STATE_ATTRIBUTE)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
                created = (await http.post("/workers/w1")).json()
            assert await zk.exists(created) is not None
        assert state == {"greeting": "hello"}
        assert await zk.exists(created) is None  # the session is closed on the server
    connected = aiozklock.SessionState.CONNECTED
    assert states == [("startup", connected), ("shutdown", connected)]
    assert client.state is aiozklock.SessionState.CLOSED
    assert not hasattr(app.state, STATE_ATTRIBUTE)


async def test_locked_all_holds_every_path_and_fair_false_a_non_fair_lock(
    hosts: str, zk: aiozklock.ZooKeeperClient
) -> None:
    app = FastAPI(lifespan=lifespan(hosts, session_timeout=4.0))
    both = locked_all(["/locks/customers/{customer}", ORDER], timeout=0)

    @app.post("/customers/{customer}/orders/{order_id:int}")
    async def order(
        customer: str, order_id: int, locks: Annotated[aiozklock.MultiLock, both]
    ) -> dict[str, int]:
        return locks.fencing_tokens

    @app.post("/orders/{order_id:int}")
    async def ship(
        order_id: int, lock: Annotated[aiozklock.NonFairLock, locked(ORDER, timeout=1, fair=False)]
    ) -> str:
        return type(lock).__name__

    with anyio.fail_after(10):
        async with serve(app) as http:
            async with zk.lock("/locks/customers/ann"):
                busy = await http.post("/customers/ann/orders/7")
            await gone(zk, "/locks/customers/ann")  # released: applied (timeout=0 tries once)
            free = await http.post("/customers/ann/orders/7")
            non_fair = await http.post("/orders/7")
    assert busy.status_code == 409
    assert sorted(free.json()) == ["/locks/customers/ann", "/locks/orders/7"]
    assert non_fair.json() == "NonFairLock"


async def test_a_path_parameter_that_is_not_a_node_name_is_422(hosts: str) -> None:
    app = FastAPI(lifespan=lifespan(hosts, session_timeout=4.0))

    @app.post("/files/{name:path}")
    async def touch(
        name: str, lock: Annotated[aiozklock.Lock, locked("/f/{name}", timeout=1)]
    ) -> str:
        return lock.path

    with anyio.fail_after(10):
        async with serve(app) as http:
            nested = await http.post("/files/a/b")
            control = await http.post("/files/a%01b")  # a control character
            fine = await http.post("/files/a")
    assert (nested.status_code, control.status_code) == (422, 422)
    assert "cannot contain '/'" in nested.json()["detail"]
    assert fine.json() == "/f/a"


async def test_misuse_is_refused_at_definition_or_at_startup(hosts: str) -> None:
    with pytest.raises(aiozklock.InvalidArgument, match="write each field as"):
        locked("/locks/{order_id!r}", timeout=1)
    with pytest.raises(aiozklock.InvalidArgument, match="write each field as"):
        locked("/locks/{}", timeout=1)
    with pytest.raises(aiozklock.InvalidArgument, match="absolute"):
        locked("locks/{order_id}", timeout=1)
    with pytest.raises(aiozklock.InvalidArgument, match="timeout"):
        locked(ORDER, timeout=-1)
    with pytest.raises(aiozklock.InvalidArgument, match="non-empty"):
        locked_all([], timeout=1)
    with pytest.raises(aiozklock.InvalidArgument, match="HTTP error status"):
        HTTPErrors(not_acquired=200)
    with pytest.raises(aiozklock.InvalidArgument, match="wait_for_connection"):
        locked(ORDER, timeout=1, wait_for_connection=-1)
    with pytest.raises(aiozklock.InvalidArgument, match="wait_for_connection"):
        locked_all([ORDER], timeout=1, wait_for_connection=float("nan"))
    with pytest.raises(aiozklock.InvalidArgument, match="session_timeout"):
        lifespan(hosts, session_timeout=0)
    with pytest.raises(aiozklock.InvalidArgument, match="ssl must be"):
        lifespan(hosts, ssl="yes")  # type: ignore[arg-type]

    app = FastAPI(lifespan=lifespan(hosts))

    @app.post("/orders/{id}")
    async def ship(id: int, lock: Annotated[aiozklock.Lock, locked(ORDER, timeout=1)]) -> None:
        pass

    with pytest.raises(aiozklock.UsageError, match="needs the path parameter"):
        async with app.router.lifespan_context(app):
            pass

    app = FastAPI(lifespan=lifespan(hosts))

    @app.post("/orders/{order_id:int}")
    def sync(order_id: int, lock: Annotated[aiozklock.Lock, locked(ORDER, timeout=1)]) -> None:
        pass

    with pytest.raises(aiozklock.UsageError, match="must be 'async def'"):
        async with app.router.lifespan_context(app):
            pass


async def test_a_lock_on_unconverted_text_the_endpoint_reads_as_int_warns(hosts: str) -> None:
    app = FastAPI(lifespan=lifespan(hosts, session_timeout=4.0))

    @app.post("/orders/{order_id}")  # "007" and "7": one order, but two lock paths
    async def ship(
        order_id: int, lock: Annotated[aiozklock.Lock, locked(ORDER, timeout=1)]
    ) -> None:
        pass

    with anyio.fail_after(10), pytest.warns(RuntimeWarning, match=r"'\{order_id:int\}'"):
        async with app.router.lifespan_context(app):
            pass


async def test_the_client_dependency_without_the_lifespan_says_what_is_missing() -> None:
    app = FastAPI()

    @app.get("/")
    async def root(client: ZooKeeper) -> None:
        pass

    transport = httpx.ASGITransport(app=app)
    with anyio.fail_after(5):
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            with pytest.raises(aiozklock.UsageError, match=r"lifespan=aiozklock\.fastapi"):
                await http.get("/")


async def test_the_example_application_ships_an_order(
    hosts: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIOZKLOCK_HOSTS", hosts)
    example = importlib.reload(importlib.import_module("examples.fastapi_app"))
    with anyio.fail_after(10):
        async with serve(example.app) as http:
            first, second = await post_all(http, ["/orders/157/ship"] * 2)
    tokens = sorted(r.json()["fencing_token"] for r in (first, second))
    assert tokens[0] < tokens[1]
    assert example.shipped == {157: tokens[1]}


async def test_waiting_while_zookeeper_is_unreachable_is_503_not_409(
    proxy: FaultProxy, chroot: str
) -> None:
    app = FastAPI(lifespan=lifespan(proxy.address + chroot, session_timeout=10.0))

    @app.post("/orders/{order_id:int}")
    async def ship(
        order_id: int, lock: Annotated[aiozklock.Lock, locked(ORDER, timeout=0.2)]
    ) -> None:
        pass

    with anyio.fail_after(15):
        async with serve(app) as http:
            client = getattr(app.state, STATE_ATTRIBUTE)
            suspended = anyio.Event()
            client.add_listener(
                lambda change: (
                    suspended.set() if change.state is aiozklock.SessionState.SUSPENDED else None
                )
            )
            proxy.blackhole(True, new="hang")
            await proxy.drop_all()
            await suspended.wait()
            response = await http.post("/orders/7")
            proxy.blackhole(False)
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert "ZooKeeper is unreachable" in response.json()["detail"]
