"""The lock recipe's decision core: pure functions, no I/O.

Given the children of a lock node and the name of our own child, decide whether we hold the
lock and, if not, whose deletion to wait for. Every lock contender in ZooKeeper runs exactly
this logic, so it is tested exhaustively on its own (tests/test_decision.py).

Child names are ``<guid>-lock-<sequence>`` where ``<sequence>`` is the 10-digit counter that
ZooKeeper appends to an ``EPHEMERAL_SEQUENTIAL`` node. The queue order is the sequence order,
not the name order: names start with per-contender GUIDs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

LOCK_MARKER = "-lock-"
# ZooKeeper formats the parent's signed 32-bit cversion with %010d: ten ASCII digits, or a
# sign and nine or ten digits once the counter has wrapped past 2**31 - 1.
_SEQUENCE = re.compile(r"[0-9]{10}|-[0-9]{9,10}")
SEQUENCE_DIGITS = 10  # width of a non-negative suffix
_WRAP = 1 << 32
_HALF = 1 << 31


def node_prefix(guid: str) -> str:
    """The name a contender passes to a sequential create (ZooKeeper appends the counter)."""
    return f"{guid}{LOCK_MARKER}"


def is_lock_node(name: str) -> bool:
    """Whether ``name`` looks like a contender's node (other children are ignored)."""
    head, marker, tail = name.rpartition(LOCK_MARKER)
    return bool(head) and bool(marker) and _SEQUENCE.fullmatch(tail) is not None


def sequence_of(name: str) -> int:
    """The (signed) sequence number ZooKeeper appended to ``name``."""
    return int(name.rpartition(LOCK_MARKER)[2])


def guid_of(name: str) -> str:
    """The contender GUID a node name starts with."""
    return name.rpartition(LOCK_MARKER)[0]


def queue_order(children: Iterable[str]) -> list[str]:
    """The contenders' nodes in queue order (holder first); non-lock children are dropped.

    The counter wraps (2**31 - 1 is followed by -2**31, and -1 by 0), so the order is taken
    modulo 2**32: correct while the live nodes span less than 2**31 sequence numbers, which
    ephemeral contenders always do.
    """
    keys = {c: sequence_of(c) % _WRAP for c in children if is_lock_node(c)}
    if keys and max(keys.values()) - min(keys.values()) >= _HALF:
        # The queue straddles the wrap from -1 to 0: the small numbers are the newest.
        keys = {c: k + _WRAP if k < _HALF else k for c, k in keys.items()}
    return sorted(keys, key=keys.__getitem__)


def nodes_of(children: Iterable[str], guid: str) -> list[str]:
    """Our nodes (by GUID) in queue order: after a create whose reply was lost, there may be
    one, none or (with a blind resend elsewhere) several."""
    return [c for c in queue_order(children) if guid_of(c) == guid]


@dataclass(frozen=True, slots=True)
class Decision:
    """What a contender should do next.

    ``held``: our node is first in the queue. ``predecessor``: the node right before ours,
    the only one we watch (no herd effect); ``None`` when held or when our node is missing.
    ``ahead``: how many nodes are queued ahead of ours (0 when held or missing); nothing can
    ever queue ahead of a node later, so this only shrinks.
    ``missing``: our node is not among the children (deleted, or the session that owned it is
    gone) and must be created again. ``stale``: other nodes carrying our GUID, left behind by
    an earlier attempt of the same lock object; they must be deleted, and they still count in
    the queue until they are (others wait on them).
    """

    held: bool
    predecessor: str | None
    missing: bool
    stale: tuple[str, ...]
    ahead: int = field(default=0, compare=False)


def decide(children: Iterable[str], ours: str, guid: str) -> Decision:
    """Decide from a ``getChildren`` listing whether ``ours`` holds the lock."""
    queue = queue_order(children)
    stale = tuple(c for c in queue if c != ours and guid_of(c) == guid)
    try:
        position = queue.index(ours)
    except ValueError:
        return Decision(held=False, predecessor=None, missing=True, stale=stale)
    if position == 0:
        return Decision(held=True, predecessor=None, missing=False, stale=stale)
    return Decision(
        held=False, predecessor=queue[position - 1], missing=False, stale=stale, ahead=position
    )
