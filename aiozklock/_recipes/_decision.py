"""The mutex's decision core: a pure function, no I/O.

Given the children of a lock node and the name of our own child, decide whether we hold the
lock and, if not, whose deletion to wait for. Every lock contender in ZooKeeper runs exactly
this logic, so it is tested exhaustively on its own (tests/test_decision.py). The queue engine
(``_core/_queue.py``) takes it as a parameter; election uses it too.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiozklock._recipes._core._names import guid_of, queue_order
from aiozklock._recipes._core._plan import Decision


def decide(children: Iterable[str], ours: str, guid: str) -> Decision:
    """Decide from a ``getChildren`` listing whether ``ours`` holds the lock."""
    queue = queue_order(children)
    stale = tuple(c for c in queue if c != ours and guid_of(c) == guid)
    try:
        position = queue.index(ours)
    except ValueError:
        return Decision(held=False, predecessor=None, missing=True, stale=stale)
    if position == 0:
        # Two or more behind us: our next node is likely to queue right after the newest.
        newest = queue[-1] if len(queue) > 2 else None
        behind = len(queue) - 1
        return Decision(
            held=True, predecessor=None, missing=False, stale=stale, newest=newest, behind=behind
        )
    return Decision(
        held=False, predecessor=queue[position - 1], missing=False, stale=stale, ahead=position
    )
