"""Fences that a store enforces: a write carries the holder's fencing token, and the store
refuses it once it has accepted a newer one (``aiozklock.StaleFencingToken``).

``PostgresFence`` (extra ``aiozklock[postgres]``) and ``RedisFence`` (extra
``aiozklock[redis]``) are imported on first use, so ``import aiozklock.fencing`` loads no
database driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._postgres import PostgresFence as PostgresFence
    from ._redis import RedisFence as RedisFence

__all__: tuple[str, ...] = ("PostgresFence", "RedisFence")

# name -> module that defines it, imported on first access
_HOMES: dict[str, str] = {
    "PostgresFence": "aiozklock.fencing._postgres",
    "RedisFence": "aiozklock.fencing._redis",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
