"""FastAPI integration: one client per application, and locks as dependencies.

    from typing import Annotated
    import aiozklock
    from aiozklock.fastapi import lifespan, locked
    from fastapi import FastAPI

    app = FastAPI(lifespan=lifespan("zk1:2181,zk2:2181/shop"))

    OrderLock = Annotated[aiozklock.Lock, locked("/locks/orders/{order_id}", timeout=1.0)]

    @app.post("/orders/{order_id}/ship")
    async def ship(order_id: int, lock: OrderLock) -> dict[str, int]:
        await ship_order(order_id, fencing_token=lock.fencing_token)
        return {"order": order_id}

The lock is held while the endpoint runs and released before the response is sent (a yield
dependency with ``scope="function"``; the server's confirmation of the release is awaited
for at most the lock's ``timeout``, so an outage does not hold back the answer). It is
entered in the request's task, around the endpoint: when the lock is lost, the loss policy
cancels the endpoint where it awaits, so it writes nothing after the loss. What the client
gets says what was written: an endpoint that commits through ``commit: Commit``
(``async with commit(session.begin()): ...``) answers 503 with ``Retry-After`` if the loss
came before any commit (nothing written: retry), its own answer once a commit returned, and
500 with ``Aiozklock-Outcome: unknown`` if a commit raised (replay with an idempotency key).
Not acquired in time: 409 (configurable, e.g. 423). While the session is not connected no
lock can be granted: a request then answers 503 at once (``wait_for_connection`` to wait a
while).
``lifespan`` takes every option of ``aiozklock.connect()`` (TLS, credentials, telemetry...).
Install with ``pip install "aiozklock[fastapi]"``.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Any, Unpack

from aiozklock._extras import missing_extra

try:
    from fastapi import Depends, FastAPI, Request
except ModuleNotFoundError as exc:
    missing_extra(exc, "fastapi", "fastapi", "aiozklock.fastapi")

from aiozklock._client import ZooKeeperClient, connect
from aiozklock._exceptions import InvalidArgument, UsageError
from aiozklock._recipes._core._primitive import Primitive
from aiozklock._settings import ConnectOptions
from aiozklock._wire._validation import validate_identifier, validate_timeout
from aiozklock.fastapi._errors import OUTCOME_HEADER as OUTCOME_HEADER
from aiozklock.fastapi._errors import HTTPErrors as HTTPErrors
from aiozklock.fastapi._hold import dependency
from aiozklock.fastapi._outcome import Commits as Commits
from aiozklock.fastapi._outcome import commit_dependency
from aiozklock.fastapi._routes import check_routes as check_routes

STATE_ATTRIBUTE = "aiozklock"
"""The attribute of ``app.state`` that holds the application's client."""

AppLifespan = Callable[[FastAPI], AbstractAsyncContextManager[Any]]


def lifespan(
    hosts: str,
    *,
    app_lifespan: AppLifespan | None = None,
    **options: Unpack[ConnectOptions],
) -> AppLifespan:
    """A FastAPI lifespan that opens one client for the application and closes it at
    shutdown: ``FastAPI(lifespan=aiozklock.fastapi.lifespan("zk1:2181/app"))``.

    The client is ``app.state.aiozklock`` (see ``client`` and ``ZooKeeper`` for endpoints).
    ``app_lifespan``, the application's own lifespan, runs inside: the client is open during
    its startup and its shutdown, and what it yields (lifespan state) is passed on. The other
    arguments (``aiozklock.ConnectOptions``) are ``aiozklock.connect()``'s, with the same
    defaults and meaning: all of them
    (``telemetry``, ``auth``, ``default_acl``, ``ssl``, ``max_request_bytes``,
    ``check_lock_order``, ``lock_classes``...). Startup also checks every route's lock
    dependencies (``locked``, ``locked_all``) against the route's path parameters.

    Raises ``InvalidArgument`` now for bad connection arguments. Startup raises
    ``UsageError`` for a route whose lock template names a path parameter the route does not
    have, or whose endpoint is not ``async def`` (a thread cannot be cancelled on a loss),
    and what entering ``connect()`` raises (``ZooKeeperUnavailable`` if no server answers
    within ``connect_timeout``, ``AuthenticationFailed``); it warns (``RuntimeWarning``) for
    a template field the endpoint reads as a non-str type that the route does not convert
    (``/orders/007`` and ``/orders/7`` would be two locks).
    """

    def open_client() -> ZooKeeperClient:
        return connect(hosts, **options)

    open_client()  # validates now; sends nothing

    @asynccontextmanager
    async def run(app: FastAPI) -> AsyncIterator[Any]:
        check_routes(app.routes)
        async with open_client() as zk:
            setattr(app.state, STATE_ATTRIBUTE, zk)
            try:
                if app_lifespan is None:
                    yield None
                else:
                    async with app_lifespan(app) as state:
                        yield state
            finally:
                delattr(app.state, STATE_ATTRIBUTE)

    return run


def client(request: Request) -> ZooKeeperClient:
    """The application's client, as a dependency: ``zk: aiozklock.fastapi.ZooKeeper``.

    Raises ``UsageError`` if the application was not started with ``lifespan(...)``."""
    zk = getattr(request.app.state, STATE_ATTRIBUTE, None)
    if not isinstance(zk, ZooKeeperClient):
        raise UsageError(
            "no ZooKeeper client on app.state: create the application with "
            "FastAPI(lifespan=aiozklock.fastapi.lifespan(hosts))"
        )
    return zk


ZooKeeper = Annotated[ZooKeeperClient, Depends(client)]
"""An endpoint parameter annotated with it receives the application's client."""

Commit = Annotated[Commits, Depends(commit_dependency)]
"""An endpoint parameter annotated with it (``commit: Commit``) receives the request's
commit points: commit through them, ``async with commit(session.begin()): ...``, and a lost
lock is answered by what was committed (see ``Commits`` and ``HTTPErrors``). Startup raises
``UsageError`` for a route that declares it without a lock dependency."""


def locked(
    template: str,
    *,
    timeout: float | None,
    fair: bool = True,
    identifier: str | None = None,
    wait_for_connection: float = 0.0,
    errors: HTTPErrors = HTTPErrors(),  # noqa: B008 (frozen: sharing it is safe)
) -> Any:
    """A dependency holding ``zk.lock(path)`` while the endpoint runs; the endpoint receives
    the held ``Lock`` (``NonFairLock`` if ``fair=False``), e.g. for its ``fencing_token``:
    ``lock: Annotated[aiozklock.Lock, locked("/locks/orders/{order_id}", timeout=1.0)]``.

    ``template``'s ``{fields}`` are filled from the request's path parameters: their text as
    sent, or as converted by a route convertor (``/orders/{order_id:int}`` makes ``007`` and
    ``7`` one lock). ``timeout``: seconds to wait for the lock, the wait for the connection
    included (``None``: no bound; a web request rarely should wait unbounded, so it must be
    chosen). The lock is released before the response is sent, and the server's
    confirmation of the release is awaited for at most ``timeout`` (the session timeout if
    None; not at all if 0): an outage does not hold back the answer, and the release stays
    queued for the reconnect (logged as a WARNING). If the lock is lost while held,
    the endpoint is cancelled, unless it has sent a commit through ``Commit``. An endpoint
    that returned gets its own answer, even if the lock was found lost on the way out.

    ``wait_for_connection``: seconds a request waits for a session that is not connected
    (suspended, lost, reconnecting), when it comes or while it waits in the queue, before
    it answers ``errors.unavailable``. The default, 0, answers at once: no lock can be
    granted until the session is back. A value above ``timeout`` (e.g. ``math.inf``) waits
    as long as ``timeout`` allows.

    Raises ``InvalidArgument`` now for a bad template, timeout, identifier (not a str, or
    longer than the recipes' 1,024 characters), ``fair`` or ``wait_for_connection``. At
    request time raises ``HTTPException``: ``errors.not_acquired`` (409) if not acquired in
    time, ``errors.unavailable`` (503, ``Retry-After``) if ZooKeeper is unavailable (the
    session down longer than ``wait_for_connection``, or the time ran out while
    disconnected), the client closed, or the lock lost before anything was committed
    through ``Commit``; ``errors.outcome_unknown`` (500, ``Aiozklock-Outcome: unknown``) if
    the request may have written (see ``HTTPErrors``); 422 if a path parameter cannot be a
    node name (a ``/``, ``.``, ``..``, a control character); ``UsageError`` (a 500) for a
    template field the route does not have.
    """
    if not isinstance(fair, bool):
        raise InvalidArgument(f"fair must be a bool, not {fair!r}")

    def make(zk: ZooKeeperClient, paths: list[str]) -> Primitive:
        return zk.lock(paths[0], identifier=identifier, fair=fair)

    return _dependency((template,), make, timeout, identifier, wait_for_connection, errors)


def locked_all(
    templates: Sequence[str],
    *,
    timeout: float | None,
    identifier: str | None = None,
    wait_for_connection: float = 0.0,
    errors: HTTPErrors = HTTPErrors(),  # noqa: B008 (frozen: sharing it is safe)
) -> Any:
    """Like ``locked``, for ``zk.multi_lock(paths)``: all the paths, all or nothing,
    deadlock-free; the endpoint receives the held ``MultiLock``:
    ``locks: Annotated[aiozklock.MultiLock, locked_all(["/a/{x}", "/b/{y}"], timeout=1.0)]``.

    Raises what ``locked`` raises, and ``InvalidArgument`` for an empty list of templates.
    """
    if isinstance(templates, str) or not templates:
        raise InvalidArgument(f"templates must be a non-empty list of paths: {templates!r}")

    def make(zk: ZooKeeperClient, paths: list[str]) -> Primitive:
        return zk.multi_lock(paths, identifier=identifier)

    return _dependency(tuple(templates), make, timeout, identifier, wait_for_connection, errors)


def _dependency(
    templates: tuple[str, ...],
    make: Callable[[ZooKeeperClient, list[str]], Primitive],
    timeout: float | None,
    identifier: str | None,
    wait_for_connection: float,
    errors: HTTPErrors,
) -> Any:
    """Validate what every lock dependency shares, and make it (``_hold``)."""
    bound = validate_timeout(timeout)
    validate_identifier(identifier)  # the recipes' own check: refused now, not per request
    patience = wait_for_connection
    if (
        isinstance(patience, bool)
        or not isinstance(patience, int | float)
        or math.isnan(patience)
        or patience < 0
    ):
        raise InvalidArgument(
            f"wait_for_connection must be a number of seconds >= 0: {wait_for_connection!r}"
        )
    if not isinstance(errors, HTTPErrors):
        raise InvalidArgument(f"errors must be an aiozklock.fastapi.HTTPErrors: {errors!r}")
    return dependency(templates, make, bound, float(patience), errors, client)


__all__ = (
    "OUTCOME_HEADER",
    "STATE_ATTRIBUTE",
    "Commit",
    "Commits",
    "HTTPErrors",
    "ZooKeeper",
    "check_routes",
    "client",
    "lifespan",
    "locked",
    "locked_all",
)
