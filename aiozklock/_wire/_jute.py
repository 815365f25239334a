"""``aiozk.protocol`` (the jute records), loaded without running aiozk's package ``__init__``
until somebody needs it.

That ``__init__`` imports aiozk's whole client (its session, connection, recipes and retry
modules), none of which we use: about 80 ms of a cold ``import aiozklock``. So the package
module is made bare (its ``__path__`` only) to parent the protocol modules; a submodule is
imported when named (``aiozk.client``), and the real ``__init__`` runs on the first access to
any other name (``aiozk.ZKClient``, ``from aiozk import Deadline``): an application that
uses aiozk itself sees no difference.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType
from typing import Any


def load() -> ModuleType:
    """The module ``aiozk.protocol``. Raises ``ImportError`` if aiozk is not installed."""
    if "aiozk" not in sys.modules:
        spec = importlib.util.find_spec("aiozk")
        if spec is None or spec.loader is None:
            raise ImportError("aiozklock needs aiozk (for aiozk.protocol)", name="aiozk")
        package = importlib.util.module_from_spec(spec)
        package.__dict__["__getattr__"] = _deferred_init(package, spec)
        sys.modules["aiozk"] = package
    return importlib.import_module("aiozk.protocol")


def _deferred_init(package: ModuleType, spec: importlib.machinery.ModuleSpec) -> Any:
    ran = False

    def __getattr__(name: str) -> object:
        nonlocal ran
        if not name.startswith("__") and importlib.util.find_spec(f"aiozk.{name}") is not None:
            return importlib.import_module(f"aiozk.{name}")  # a submodule: no __init__ needed
        if not ran:
            ran = True
            assert spec.loader is not None
            spec.loader.exec_module(package)  # binds the package's names in place
            if name in package.__dict__:
                return package.__dict__[name]
        raise AttributeError(f"module 'aiozk' has no attribute {name!r}")

    return __getattr__


__all__ = ("load",)
