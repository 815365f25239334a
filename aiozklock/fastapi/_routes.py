"""Lock path templates of ``aiozklock.fastapi``: their fields, filling them from a request's
path parameters, and the startup check of every route's lock dependencies."""

from __future__ import annotations

import inspect
import string
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import HTTPException, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.convertors import StringConvertor
from starlette.routing import BaseRoute, Mount

from aiozklock._exceptions import InvalidArgument, UsageError
from aiozklock._wire._validation import validate_recipe_path

# The attribute marking our lock dependencies, with their templates and fields, so that
# startup can check them against their routes.
TEMPLATES = "_aiozklock_templates"
# The attribute marking the Commit dependency, which needs a lock dependency on its route.
COMMIT_MARK = "_aiozklock_commit"


def fields(template: str) -> tuple[str, ...]:
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


def fill(template: str, names: tuple[str, ...], request: Request) -> str:
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
    field must be a path parameter of its route, the endpoint must be ``async def``, and a
    route that declares ``Commit`` must hold a lock.

    ``lifespan`` calls it at startup; call it yourself when you do not use ``lifespan``.
    ``mounted``: the path parameters of the enclosing mounts. Raises ``UsageError``; warns
    as ``lifespan`` says."""
    for route in routes:
        if isinstance(route, Mount):
            check_routes(route.routes, mounted | set(route.param_convertors))
        elif isinstance(route, APIRoute):
            params = mounted | set(route.param_convertors)
            locks = commits = 0
            for dependant in _dependants(route.dependant):
                templates = getattr(dependant.call, TEMPLATES, {})
                commits += bool(getattr(dependant.call, COMMIT_MARK, False))
                locks += bool(templates)
                for template, names in templates.items():
                    _check_route(route, template, names, params)
            if commits and not locks:
                raise UsageError(
                    f"route {sorted(route.methods or ())} {route.path!r} declares Commit but "
                    "holds no lock: add a locked(...) or locked_all(...) dependency"
                )


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


__all__ = ("COMMIT_MARK", "TEMPLATES", "check_routes", "fields", "fill")
