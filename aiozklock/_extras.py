"""The optional extras: a module that needs one says which to install when it is missing."""

from __future__ import annotations

from typing import NoReturn


def missing_extra(exc: ModuleNotFoundError, package: str, extra: str, feature: str) -> NoReturn:
    """Raise a ``ModuleNotFoundError`` naming ``pip install 'aiozklock[extra]'`` if ``exc``
    is about ``package`` itself; re-raise ``exc`` unchanged if it is about another module
    (a dependency missing from an installed ``package`` is that package's problem)."""
    if exc.name is None or exc.name.partition(".")[0] != package:
        raise exc
    raise ModuleNotFoundError(
        f"{feature} needs {package}, which is not installed: pip install 'aiozklock[{extra}]'",
        name=exc.name,
    ) from exc
