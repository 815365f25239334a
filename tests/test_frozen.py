"""``fast_init``: the cheap ``__init__`` of the frozen dataclasses on the request path keeps
every property of the dataclass's own (class, equality, hash, defaults, immutability)."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from aiozklock._recipes._core._place import Joined
from aiozklock._wire._frozen import fast_init
from aiozklock._wire._records import Created, Stat


@dataclasses.dataclass(frozen=True, slots=True)
class Plain:
    a: int
    b: str = "b"
    c: object = None


Fast: type[Any] = fast_init(
    dataclasses.make_dataclass(
        "Fast",
        [("a", int), ("b", str, dataclasses.field(default="b")), ("c", object, None)],
        frozen=True,
        slots=True,
    )
)


def test_same_values_signature_and_behaviour() -> None:
    plain, fast = Plain(1, c=[2]), Fast(1, c=[2])
    assert type(fast) is Fast
    assert (fast.a, fast.b, fast.c) == (plain.a, plain.b, plain.c)
    assert fast == Fast(1, "b", [2])
    assert fast != Fast(2)
    assert repr(fast) == repr(plain).replace("Plain", "Fast")
    assert list(inspect.signature(Fast).parameters) == ["a", "b", "c"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.a = 2
    with pytest.raises(TypeError):
        Fast()


def test_the_wire_records() -> None:
    stat = Stat(*range(11))
    assert stat == Stat(*range(11))
    assert hash(stat) == hash(Stat(*range(11)))
    assert dataclasses.astuple(stat) == tuple(range(11))
    assert dataclasses.replace(stat, czxid=9).czxid == 9
    created = Created("/a", stat)
    assert pickle.loads(pickle.dumps(created)) == created == copy.copy(created)
    joined = Joined({"/m": ["n"]}, proven=True)
    assert (joined.guarded, joined.proven, joined.followed) == (None, True, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        stat.czxid = 1  # type: ignore[misc]


def test_refuses_what_it_cannot_copy() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        a: list[int] = dataclasses.field(default_factory=list)

    for cls in (NoSlots, Factory):
        with pytest.raises(TypeError):
            fast_init(cls)
