"""Node names of the queue recipes: ``<guid>-lock-<sequence>``, and the queue order.

``<sequence>`` is the 10-digit counter that ZooKeeper appends to an ``EPHEMERAL_SEQUENTIAL``
node. The queue order is the sequence order, not the name order: names start with
per-contender GUIDs. Every queue recipe (mutex, multi-lock, election) names its nodes this way,
so they can share one parent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

LOCK_MARKER = "-lock-"
# ZooKeeper formats the parent's signed 32-bit cversion with %010d: ten ASCII digits, or a
# sign and nine or ten digits once the counter has wrapped past 2**31 - 1.
_SEQUENCE = re.compile(r"[0-9]{10}|-[0-9]{9,10}")
SEQUENCE_DIGITS = 10  # width of a non-negative suffix
_WRAP = 1 << 32
_HALF = 1 << 31


def node_prefix(guid: str, marker: str = LOCK_MARKER) -> str:
    """The name a contender passes to a sequential create (ZooKeeper appends the counter);
    ``marker`` names the recipe's kind of node (the read/write lock has two)."""
    return f"{guid}{marker}"


def is_sequence(text: str) -> bool:
    """Whether ``text`` is a sequence suffix as ZooKeeper formats it."""
    return _SEQUENCE.fullmatch(text) is not None


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
    return in_sequence_order({c: sequence_of(c) for c in children if is_lock_node(c)})


def in_sequence_order(sequences: dict[str, int]) -> list[str]:
    """The names in the order of their (signed, wrapping) sequence numbers; see
    ``queue_order``. Equal sequences keep their given order."""
    keys = {c: sequence % _WRAP for c, sequence in sequences.items()}
    if keys and max(keys.values()) - min(keys.values()) >= _HALF:
        # The queue straddles the wrap from -1 to 0: the small numbers are the newest.
        keys = {c: k + _WRAP if k < _HALF else k for c, k in keys.items()}
    return sorted(keys, key=keys.__getitem__)


def nodes_of(children: Iterable[str], guid: str, marker: str = LOCK_MARKER) -> list[str]:
    """Our nodes (by GUID, named with ``marker``) in queue order: after a create whose reply
    was lost, there may be one, none or (with a blind resend elsewhere) several."""
    prefix = node_prefix(guid, marker)
    return in_sequence_order(
        {
            c: int(c[len(prefix) :])
            for c in children
            if c.startswith(prefix) and is_sequence(c[len(prefix) :])
        }
    )


__all__ = (
    "LOCK_MARKER",
    "SEQUENCE_DIGITS",
    "guid_of",
    "in_sequence_order",
    "is_lock_node",
    "is_sequence",
    "node_prefix",
    "nodes_of",
    "queue_order",
    "sequence_of",
)
