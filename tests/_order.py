"""The order the suite runs in under ``pytest -n N --dist worksteal`` (what .ci/dev.sh runs):
every worker's first share as long as the others', its longest modules first.

xdist's work stealing hands worker ``k`` the ``k``-th contiguous slice of the collection (equal
counts of tests), then lets an idle worker take the second half of the longest queue left. In
alphabetical order the slices differ by minutes (the nemesis, the ensembles and the faults
fall in two of them), and a long test could start last. Here modules are dealt to the slices
by their measured time (``durations.json``: seconds of worker time per file, from a run's
``--junitxml``; ``python -m tests._order run.xml`` prints it), the longest to the least
loaded slice that has room left (a module is split only where a slice is full), and each
slice runs its longest modules first, so that what is stolen last is short.

A module's tests keep their order and stay together within a slice: a module-scoped server
is started once per slice, as before. ``AIOZKLOCK_TEST_ORDER=collection`` keeps pytest's own
order (to compare, or to rule the order out when a test fails).
"""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
#: Seconds per test of a module missing from the table (most run in well under a second).
UNKNOWN_PER_TEST = 0.5


def _module_of(item: pytest.Item) -> str:
    return item.nodeid.partition("::")[0]


def slice_sizes(count: int, workers: int) -> list[int]:
    """The sizes of the first slices xdist's work stealing sends, in worker order."""
    sizes, left = [], count
    for remaining in range(workers, 0, -1):
        sizes.append(left // remaining)
        left -= sizes[-1]
    return sizes


def balanced_order(
    items: list[pytest.Item], workers: int, seconds: dict[str, float]
) -> list[pytest.Item]:
    """``items`` reordered (see the module's docstring); the same list for the same input."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(_module_of(item), []).append(item)
    cost = {
        name: seconds.get(name, UNKNOWN_PER_TEST * len(tests)) for name, tests in modules.items()
    }
    sizes = slice_sizes(len(items), workers)
    room = list(sizes)
    load = [0.0] * workers
    parts: list[list[tuple[float, str, list[pytest.Item]]]] = [[] for _ in range(workers)]
    for name in sorted(modules, key=lambda name: (-cost[name], name)):
        tests = modules[name]
        per_test = cost[name] / len(tests)
        while tests:
            k = min((i for i in range(workers) if room[i]), key=lambda i: (load[i], i))
            taken, tests = tests[: room[k]], tests[room[k] :]
            room[k] -= len(taken)
            load[k] += per_test * len(taken)
            parts[k].append((per_test * len(taken), name, taken))
    ordered: list[pytest.Item] = []
    for part in parts:
        for _, _, taken in sorted(part, key=lambda p: (-p[0], p[1])):
            ordered.extend(taken)
    return ordered


def reorder(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In place, under ``--dist worksteal`` with more than one worker; else nothing."""
    workers = int(getattr(config, "workerinput", {}).get("workercount", 0) or 0)
    if workers < 2 or getattr(config.option, "dist", None) != "worksteal":
        return
    if os.environ.get("AIOZKLOCK_TEST_ORDER") == "collection":
        return
    seconds = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    items[:] = balanced_order(items, workers, seconds)


def table(*junit_files: str) -> dict[str, float]:
    """Seconds per test file, summed over ``--junitxml`` reports (setup, call, teardown)."""
    total: defaultdict[str, float] = defaultdict(float)
    for path in junit_files:
        for case in ET.parse(path).iter("testcase"):
            module = (case.get("classname") or "").split(".")
            while module and not module[-1].startswith("test_"):
                module.pop()  # a test class's name
            total["/".join(module) + ".py"] += float(case.get("time") or 0)
    return {name: round(seconds, 1) for name, seconds in sorted(total.items())}


if __name__ == "__main__":
    print(json.dumps(table(*sys.argv[1:]), indent=1))
