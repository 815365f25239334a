"""The suite's own order under work stealing (tests/_order.py): a permutation, xdist's slices
about equally long, each module whole within a slice unless the slice was full."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import pytest

from tests._order import balanced_order, slice_sizes


@dataclass(frozen=True)
class Item:
    nodeid: str


def items_of(counts: dict[str, int]) -> list[Any]:
    return [Item(f"{module}::test_{i}") for module, count in counts.items() for i in range(count)]


def test_slice_sizes_are_xdists() -> None:
    assert slice_sizes(2442, 4) == [610, 610, 611, 611]
    assert slice_sizes(7, 3) == [2, 2, 3]
    assert sum(slice_sizes(2442, 4)) == 2442


def test_slices_are_balanced_and_run_their_longest_modules_first() -> None:
    counts = {"a.py": 40, "b.py": 10, "c.py": 30, "d.py": 20, "e.py": 20}
    seconds = {"a.py": 20.0, "b.py": 200.0, "c.py": 30.0, "d.py": 190.0, "e.py": 40.0}
    items = items_of(counts)
    ordered = cast(list[Any], balanced_order(cast(list[pytest.Item], items), 2, seconds))
    assert sorted(i.nodeid for i in ordered) == sorted(i.nodeid for i in items)
    first, second = ordered[:60], ordered[60:]
    per_test = {m: seconds[m] / n for m, n in counts.items()}

    def load(part: list[Any]) -> float:
        return sum(per_test[i.nodeid.partition("::")[0]] for i in part)

    assert abs(load(first) - load(second)) <= 40.0  # alphabetically: 250 s against 230 s
    for part in (first, second):
        modules = [i.nodeid.partition("::")[0] for i in part]
        runs = [m for k, m in enumerate(modules) if k == 0 or modules[k - 1] != m]
        assert len(runs) == len(set(runs))  # each module once per slice
        assert runs[0] in ("b.py", "d.py")  # the longest first
        tests = [i.nodeid for i in part]
        for module in runs:  # a module's tests keep their order
            mine = [t for t in tests if t.startswith(module)]
            assert mine == sorted(mine, key=lambda t: int(t.rpartition("_")[2]))
    assert len({i.nodeid.partition("::")[0] for i in first} & {"b.py", "d.py"}) == 1


def test_an_unknown_module_is_estimated_and_the_order_is_stable() -> None:
    items = cast(list[pytest.Item], items_of({"x.py": 5, "y.py": 3}))
    once = balanced_order(items, 2, {})
    assert once == balanced_order(items, 2, {})
    assert len(once) == 8
