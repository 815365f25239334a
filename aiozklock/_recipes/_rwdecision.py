"""The read/write lock's decision core: pure functions, no I/O (tested in tests/test_rwlock.py).

Nodes are named as Curator's ``InterProcessReadWriteLock`` names them, after our GUID:
``<guid>-__READ__<sequence>`` and ``<guid>-__WRIT__<sequence>``, so Curator orders them by
the sequence just as we do. Reading, the nodes other libraries leave on a lock path are
recognised by what precedes their sequence suffix:

* read nodes: ``__READ__`` (Curator, us) and ``__rlock__`` (kazoo ``ReadLock``);
* write nodes: ``__WRIT__`` (Curator, us), ``__lock__`` (kazoo ``Lock``/``WriteLock``) and
  ``lock-`` (a mutex: Curator's ``InterProcessMutex``, our ``Lock``): exclusive, so counted
  as writers;
* anything else (``.keep``, ``config``, a name without a sequence suffix) is ignored.

The queue is in sequence order (ZooKeeper's counter is per parent, so suffixes compare across
prefixes). A writer holds when first, and waits on its immediate predecessor. A reader holds
when no write node precedes it, and waits on the nearest preceding write node only: a writer's
release wakes the readers queued right behind it, not those behind the next writer.

Equal sequences: a write lock's holder may take the read lock at its write node's place
(a plain ephemeral node with the same suffix: Curator's downgrade, and ours); a node with our
sequence that is not ours counts as ahead of us.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from aiozklock._recipes._core._names import in_sequence_order
from aiozklock._recipes._core._plan import Decision

READ_MARKER = "-__READ__"
WRITE_MARKER = "-__WRIT__"
KAZOO_READ_MARKER = "__rlock__"  # compat="kazoo": kazoo's ReadLock and WriteLock read them
KAZOO_WRITE_MARKER = "__lock__"
# The marker right before the suffix decides (no marker is a suffix of another, so at most
# one matches); the suffix as ZooKeeper formats it.
_NODE = re.compile(
    r"(?:(?P<read>__READ__|__rlock__)|__WRIT__|__lock__|lock-)(?P<seq>[0-9]{10}|-[0-9]{9,10})\Z"
)

Node = tuple[str, bool, int]  # name, is a write node, sequence


def parse(name: str) -> tuple[bool, int] | None:
    """``(is_write, sequence)`` of a read/write lock node; None for any other child."""
    found = _NODE.search(name)
    if found is None:
        return None
    return found.group("read") is None, int(found.group("seq"))


def rw_order(children: Iterable[str]) -> list[Node]:
    """The read/write lock's nodes in queue order: ``(name, is_write, sequence)``."""
    parsed = {c: p for c in children if (p := parse(c)) is not None}
    order = in_sequence_order({c: sequence for c, (_, sequence) in parsed.items()})
    return [(c, *parsed[c]) for c in order]


def _ahead(
    children: Iterable[str], ours: str, guid: str
) -> tuple[list[Node] | None, tuple[str, ...]]:
    """The nodes ahead of ours (None if ours is missing), and our stale nodes (other nodes
    with our GUID, from an earlier attempt)."""
    queue = rw_order(children)
    stale = tuple(name for name, _, _ in queue if name != ours and name.startswith(guid))
    for index, (name, _, sequence) in enumerate(queue):
        if name == ours:
            # Equal sequences sit together: one that is not ours counts as ahead.
            later = [node for node in queue[index + 1 :] if node[2] == sequence]
            return queue[:index] + later, stale
    return None, stale


def decide_write(children: Iterable[str], ours: str, guid: str) -> Decision:
    """A writer holds when first; otherwise it waits on its immediate predecessor.

    ``ahead`` counts each write node ahead twice: its holder may still add a read node at its
    place (a downgrade), so the deletion of a write node alone never tells us we are first."""
    ahead, stale = _ahead(children, ours, guid)
    if ahead is None:
        return Decision(held=False, predecessor=None, missing=True, stale=stale)
    if not ahead:
        return Decision(held=True, predecessor=None, missing=False, stale=stale)
    count = len(ahead) + sum(1 for _, is_write, _ in ahead if is_write)
    return Decision(held=False, predecessor=ahead[-1][0], missing=False, stale=stale, ahead=count)


def decide_read(children: Iterable[str], ours: str, guid: str) -> Decision:
    """A reader holds when no write node is ahead; otherwise it waits on the nearest write
    node ahead. ``ahead`` counts the write nodes ahead (only they block a reader)."""
    ahead, stale = _ahead(children, ours, guid)
    if ahead is None:
        return Decision(held=False, predecessor=None, missing=True, stale=stale)
    writers = [name for name, is_write, _ in ahead if is_write]
    if not writers:
        return Decision(held=True, predecessor=None, missing=False, stale=stale)
    return Decision(
        held=False, predecessor=writers[-1], missing=False, stale=stale, ahead=len(writers)
    )


__all__ = (
    "KAZOO_READ_MARKER",
    "KAZOO_WRITE_MARKER",
    "READ_MARKER",
    "WRITE_MARKER",
    "decide_read",
    "decide_write",
    "parse",
    "rw_order",
)
