"""Cheap construction for the frozen slotted dataclasses made on every request's path.

A frozen dataclass's generated ``__init__`` stores each field with ``object.__setattr__``
(its own ``__setattr__`` refuses): about 1,500 CPU instructions a field on CPython 3.11, so
17,000 for a ``Stat``, more than all the rest of a reply's decoding. ``fast_init`` gives such
a class an ``__init__`` that turns the new instance into a mutable twin with the same slots
(``__class__`` assignment: the same layout), stores the fields as plain slot writes, and
turns it back: the same class, fields, signature, equality, hash, repr and immutability, at a
third of the cost. Where the interpreter refuses the swap, the dataclass's own ``__init__``
stays.
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING
from typing import Any, TypeVar

T = TypeVar("T")


def fast_init(cls: type[T]) -> type[T]:
    """Give the frozen slotted dataclass ``cls`` (no base class, no ``__post_init__``, no
    default factory, no keyword-only field) the cheap ``__init__`` described above."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if (
        not fields
        or cls.__bases__ != (object,)
        or hasattr(cls, "__post_init__")
        or "__slots__" not in cls.__dict__
        or any(f.kw_only or not f.init or f.default_factory is not MISSING for f in fields)
    ):
        raise TypeError(f"fast_init does not support {cls.__qualname__}")
    twin = type(f"_{cls.__name__}Init", (), {"__slots__": cls.__slots__})  # type: ignore[attr-defined]
    try:  # the swap both ways, once: refused (another layout, interpreter), nothing changes
        probe = object.__new__(cls)
        object.__setattr__(probe, "__class__", twin)
        probe.__class__ = cls
    except TypeError:
        return cls
    namespace: dict[str, Any] = {"_cls": cls, "_twin": twin, "_set": object.__setattr__}
    params = []
    for f in fields:
        if f.default is MISSING:
            params.append(f.name)
        else:
            namespace[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
    stores = "".join(f"        self.{f.name} = {f.name}\n" for f in fields)
    source = (
        f"def __init__(self, {', '.join(params)}):\n"
        "    _set(self, '__class__', _twin)\n"
        f"    try:\n{stores}    finally:\n"
        "        self.__class__ = _cls\n"
    )
    exec(source, namespace)  # as dataclasses builds its __init__
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = dict(cls.__init__.__annotations__)
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


__all__ = ("fast_init",)
