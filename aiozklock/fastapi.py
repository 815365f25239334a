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
dependency with ``scope="function"``). It is entered in the request's task, around the
endpoint: when the lock is lost, the loss policy cancels the endpoint where it awaits, so it
writes nothing after the loss, and the client gets 503 with ``Retry-After``. Not acquired in
time: 409 (configurable, e.g. 423). Install with ``pip install "aiozklock[fastapi]"``.
"""

from __future__ import annotations

import inspect
import string
import warnings
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.convertors import StringConvertor
from starlette.routing import BaseRoute, Mount

from aiozklock._client import ZooKeeperClient, connect
from aiozklock._exceptions import (
    ClientClosed,
    InvalidArgument,
    LockLost,
    LockTimeout,
    UsageError,
    ZooKeeperUnavailable,
)
from aiozklock._recipes._core._holding import LossPolicy
from aiozklock._recipes._core._primitive import AcquireContext, Primitive
from aiozklock._wire._session import SessionState
from aiozklock._wire._validation import validate_recipe_path, validate_timeout

#: The attribute of ``app.state`` that holds the application's client.
STATE_ATTRIBUTE = "aiozklock"

# Failures that say "ZooKeeper cannot vouch for this lock now": retrying later may work.
_UNAVAILABLE = (LockLost, ZooKeeperUnavailable, ClientClosed)

AppLifespan = Callable[[FastAPI], AbstractAsyncContextManager[Any]]
Make = Callable[[ZooKeeperClient, list[str]], Primitive]


def lifespan(
    hosts: str,
    *,
    app_lifespan: AppLifespan | None = None,
    session_timeout: float = 10.0,
    connect_timeout: float = 10.0,
    loss_policy: LossPolicy = "suspended",
) -> AppLifespan:
    """A FastAPI lifespan that opens one client for the application and closes it at
    shutdown: ``FastAPI(lifespan=aiozklock.fastapi.lifespan("zk1:2181/app"))``.

    The client is ``app.state.aiozklock`` (see ``client`` and ``ZooKeeper`` for endpoints).
    ``app_lifespan``, the application's own lifespan, runs inside: the client is open during
    its startup and its shutdown, and what it yields (lifespan state) is passed on. The other
    arguments are ``aiozklock.connect()``'s. Startup also checks every route's lock
    dependencies (``locked``, ``locked_all``) against the route's path parameters.

    Raises ``InvalidArgument`` now for bad connection arguments. Startup raises
    ``UsageError`` for a route whose lock template names a path parameter the route does not
    have, or whose endpoint is not ``async def`` (a thread cannot be cancelled on a loss),
    and ``ZooKeeperUnavailable`` if no server answers within ``connect_timeout``; it warns
    (``RuntimeWarning``) for a template field the endpoint reads as a non-str type that the
    route does not convert (``/orders/007`` and ``/orders/7`` would be two locks).
    """
    options: dict[str, Any] = {
        "session_timeout": session_timeout,
        "connect_timeout": connect_timeout,
        "loss_policy": loss_policy,
    }
    connect(hosts, **options)  # validates now; sends nothing

    @asynccontextmanager
    async def run(app: FastAPI) -> AsyncIterator[Any]:
        check_routes(app.routes)
        async with connect(hosts, **options) as zk:
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


#: An endpoint parameter annotated with it receives the application's client.
ZooKeeper = Annotated[ZooKeeperClient, Depends(client)]


@dataclass(frozen=True, slots=True)
class HTTPErrors:
    """How lock failures become HTTP errors (``HTTPException``).

    ``not_acquired``: the status when the lock is not acquired within the timeout (409
    Conflict by default; 423 Locked is the other usual choice). ``unavailable``: the status
    when ZooKeeper cannot be reached, the client is closed, or the lock was lost during the
    endpoint (503 by default), sent with ``Retry-After: retry_after`` seconds (no header if
    ``None``). Raises ``InvalidArgument`` for a status outside 400-599 or a negative
    ``retry_after``.
    """

    not_acquired: int = 409
    unavailable: int = 503
    retry_after: int | None = 1

    def __post_init__(self) -> None:
        for name in ("not_acquired", "unavailable"):
            status = getattr(self, name)
            if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status < 600:
                raise InvalidArgument(f"{name} must be an HTTP error status (400-599): {status!r}")
        retry = self.retry_after
        if retry is not None and (
            isinstance(retry, bool) or not isinstance(retry, int) or retry < 0
        ):
            raise InvalidArgument(f"retry_after must be whole seconds >= 0 or None: {retry!r}")


def locked(
    template: str,
    *,
    timeout: float | None,
    fair: bool = True,
    identifier: str | None = None,
    errors: HTTPErrors = HTTPErrors(),  # frozen: sharing it is safe
) -> Any:
    """A dependency holding ``zk.lock(path)`` while the endpoint runs; the endpoint receives
    the held ``Lock`` (``NonFairLock`` if ``fair=False``), e.g. for its ``fencing_token``:
    ``lock: Annotated[aiozklock.Lock, locked("/locks/orders/{order_id}", timeout=1.0)]``.

    ``template``'s ``{fields}`` are filled from the request's path parameters: their text as
    sent, or as converted by a route convertor (``/orders/{order_id:int}`` makes ``007`` and
    ``7`` one lock). ``timeout``: seconds to wait for the lock (``None``: no bound; a web
    request rarely should wait unbounded, so it must be chosen). The lock is released before
    the response is sent; if it is lost meanwhile, the endpoint is cancelled.

    Raises ``InvalidArgument`` now for a bad template, timeout, identifier or ``fair``. At
    request time raises ``HTTPException``: ``errors.not_acquired`` (409) if not acquired in
    time, ``errors.unavailable`` (503, ``Retry-After``) if ZooKeeper is unavailable (also
    when the time ran out while disconnected), the client closed or the lock lost, 422 if a
    path parameter cannot be a node name (a ``/``, ``.``, ``..``, a control character);
    ``UsageError`` (a 500) for a template field the route does not have.
    """
    if not isinstance(fair, bool):
        raise InvalidArgument(f"fair must be a bool, not {fair!r}")

    def make(zk: ZooKeeperClient, paths: list[str]) -> Primitive:
        return zk.lock(paths[0], identifier=identifier, fair=fair)

    return _dependency((template,), make, timeout, identifier, errors)


def locked_all(
    templates: Sequence[str],
    *,
    timeout: float | None,
    identifier: str | None = None,
    errors: HTTPErrors = HTTPErrors(),  # frozen: sharing it is safe
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

    return _dependency(tuple(templates), make, timeout, identifier, errors)


# The attribute marking our lock dependencies, with their templates and fields, so that
# startup can check them against their routes.
_TEMPLATES = "_aiozklock_templates"


def _dependency(
    templates: tuple[str, ...],
    make: Make,
    timeout: float | None,
    identifier: str | None,
    errors: HTTPErrors,
) -> Any:
    """The yield dependency shared by every recipe: ``make`` builds the recipe object from
    the client and the filled paths; acquiring, holding and the error mapping are here."""
    fields = {template: _fields(template) for template in templates}
    bound = validate_timeout(timeout)
    if identifier is not None and not isinstance(identifier, str):
        raise InvalidArgument(f"identifier must be a str, not {type(identifier).__name__}")
    if not isinstance(errors, HTTPErrors):
        raise InvalidArgument(f"errors must be an aiozklock.fastapi.HTTPErrors: {errors!r}")

    async def hold(request: Request) -> AsyncIterator[Primitive]:
        paths = [_fill(t, fields[t], request) for t in templates]
        label = ", ".join(paths)
        zk = client(request)
        try:
            acquiring = make(zk, paths).acquire(timeout=bound)
            held = await acquiring.__aenter__()
        except LockTimeout as exc:
            if zk.state is not SessionState.CONNECTED:  # it waited for ZooKeeper, not a holder
                raise _unavailable(errors, f"{label}: ZooKeeper is unreachable") from exc
            detail = f"{label} is held by another request; not acquired within {bound} s"
            raise HTTPException(errors.not_acquired, detail) from exc
        except _UNAVAILABLE as exc:
            raise _unavailable(errors, f"{label} cannot be acquired: {exc}") from exc
        # Entered in this task, around the endpoint, which FastAPI runs in the same task
        # inside this yield: a loss cancels the endpoint wherever it awaits.
        try:
            yield held
        except BaseException as exc:
            await _exit(acquiring, exc, errors, label)
            raise
        await _exit(acquiring, None, errors, label)

    setattr(hold, _TEMPLATES, fields)
    return Depends(hold, scope="function")


async def _exit(
    acquiring: AcquireContext[Primitive],
    exc: BaseException | None,
    errors: HTTPErrors,
    label: str,
) -> None:
    """Release, confirmed by the server (so that a client that has the response finds the
    lock free from any process); a loss (or a close) on the way out becomes
    ``errors.unavailable``."""
    try:
        await acquiring.exit(
            type(exc) if exc else None,
            exc,
            exc.__traceback__ if exc else None,
            confirm=True,
        )
    except _UNAVAILABLE as error:
        if error is exc:  # the endpoint's own error, passed through
            raise
        raise _unavailable(errors, f"{label} was lost during the request: {error}") from error


def _unavailable(errors: HTTPErrors, detail: str) -> HTTPException:
    headers = None if errors.retry_after is None else {"Retry-After": str(errors.retry_after)}
    return HTTPException(errors.unavailable, detail, headers=headers)


def _fields(template: str) -> tuple[str, ...]:
    """The ``{field}`` names of a lock path template; ``InvalidArgument`` if it is not one."""
    if not isinstance(template, str):
        raise InvalidArgument(f"a lock path template must be a str, not {template!r}")
    bad = InvalidArgument(
        f"bad lock path template {template!r}: write each field as {{name}}, "
        "e.g. '/locks/orders/{order_id}'"
    )
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError:
        raise bad from None
    names: list[str] = []
    for _text, name, spec, conversion in parts:
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            raise bad
        names.append(name)
    validate_recipe_path(template.format_map(dict.fromkeys(names, "x")), what="lock path template")
    return tuple(names)


def _fill(template: str, names: tuple[str, ...], request: Request) -> str:
    """``template`` filled from the request's path parameters."""
    values: dict[str, str] = {}
    params: Mapping[str, Any] = request.path_params
    for name in names:
        if name not in params:
            raise UsageError(
                f"lock path template {template!r} needs the path parameter {name!r}, "
                f"which the route {request.url.path!r} does not have ({sorted(params)})"
            )
        value = str(params[name])
        if "/" in value:  # it would lock a node inside another lock's queue
            raise HTTPException(422, f"path parameter {name!r} cannot contain '/': {value!r}")
        values[name] = value
    path = template.format_map(values)
    try:
        return validate_recipe_path(path)
    except InvalidArgument as exc:  # the template was valid: a value is not a node name
        raise HTTPException(422, f"path parameters do not make a lock path: {exc}") from None


def check_routes(routes: Iterable[BaseRoute], mounted: frozenset[str] = frozenset()) -> None:
    """Check the lock dependencies of ``routes`` (and of mounted routers): every template
    field must be a path parameter of its route, and the endpoint must be ``async def``.

    ``lifespan`` calls it at startup; call it yourself when you do not use ``lifespan``.
    ``mounted``: the path parameters of the enclosing mounts. Raises ``UsageError``; warns
    as ``lifespan`` says."""
    for route in routes:
        if isinstance(route, Mount):
            check_routes(route.routes, mounted | set(route.param_convertors))
        elif isinstance(route, APIRoute):
            params = mounted | set(route.param_convertors)
            for dependant in _dependants(route.dependant):
                templates = getattr(dependant.call, _TEMPLATES, {})
                for template, names in templates.items():
                    _check_route(route, template, names, params)


def _check_route(
    route: APIRoute, template: str, names: tuple[str, ...], params: frozenset[str]
) -> None:
    where = f"route {sorted(route.methods or ())} {route.path!r}"
    missing = [name for name in names if name not in params]
    if missing:
        raise UsageError(
            f"{where}: lock path template {template!r} needs the path parameter(s) "
            f"{missing}, the route has {sorted(params)}"
        )
    _warn_unconverted(route, where, template, names)
    endpoint = route.endpoint
    if not (
        inspect.iscoroutinefunction(endpoint)
        or (
            not inspect.isroutine(endpoint) and inspect.iscoroutinefunction(type(endpoint).__call__)
        )
    ):
        raise UsageError(
            f"{where}: a locked endpoint must be 'async def': FastAPI runs a 'def' endpoint "
            "in a thread, which cannot be cancelled when the lock is lost"
        )


def _warn_unconverted(route: APIRoute, where: str, template: str, names: tuple[str, ...]) -> None:
    """Warn when the endpoint reads a field as a non-str type that the route does not
    convert: the lock takes the text as sent, so ``/orders/007`` and ``/orders/7`` would be
    one order for the endpoint and two locks."""
    for field in route.dependant.path_params:
        converted = not isinstance(route.param_convertors.get(field.name), StringConvertor)
        if field.name in names and field.field_info.annotation is not str and not converted:
            warnings.warn(
                f"{where}: lock path template {template!r} takes {field.name!r} as text, but "
                f"the endpoint reads it as {field.field_info.annotation!r}: two spellings of "
                f"one value would be two locks; convert it in the route, e.g. "
                f"'{{{field.name}:int}}'",
                RuntimeWarning,
                stacklevel=2,
            )


def _dependants(dependant: Dependant) -> Iterable[Dependant]:
    yield dependant
    for sub in dependant.dependencies:
        yield from _dependants(sub)


__all__ = (
    "STATE_ATTRIBUTE",
    "HTTPErrors",
    "ZooKeeper",
    "check_routes",
    "client",
    "lifespan",
    "locked",
    "locked_all",
)
