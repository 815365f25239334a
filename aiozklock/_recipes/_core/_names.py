"""Node names of the queue recipes: ``<guid><marker><sequence>``, and the queue order.

``<sequence>`` is the 10-digit counter that ZooKeeper appends to an ``EPHEMERAL_SEQUENTIAL``
node. The queue order is the sequence order, not the name order: names start with
per-contender GUIDs, and the counter is the parent's, so it orders every child whatever its
prefix. Our markers are Curator's (``-lock-`` for a mutex, ``-latch-`` for an election) or,
with ``compat="kazoo"``, kazoo's (``__lock__``); reading, every lock-like node another
library leaves (``lock-``, ``latch-``, ``__lock__``, ``__rlock__``, ``__READ__``,
``__WRIT__`` right before the suffix) is a contender, and any other child is ignored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

from aiozklock._exceptions import InvalidArgument

Compat = Literal["curator", "kazoo"]

LOCK_MARKER = "-lock-"  # Curator's InterProcessMutex reads it (the text after "lock-")
LATCH_MARKER = "-latch-"  # Curator's LeaderLatch
KAZOO_MARKER = "__lock__"  # kazoo's Lock, WriteLock and Election
# ZooKeeper formats the parent's signed 32-bit cversion with %010d: ten ASCII digits, or a
# sign and nine or ten digits once the counter has wrapped past 2**31 - 1.
_SEQUENCE = re.compile(r"[0-9]{10}|-[0-9]{9,10}")
# A contender's node of any library: the leftmost marker that the suffix ends the name after.
_NODE = re.compile(
    r"(?:-lock-|lock-|-latch-|latch-|__lock__|__rlock__|__READ__|__WRIT__)"
    r"(?P<seq>[0-9]{10}|-[0-9]{9,10})\Z"
)
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


def validate_compat(compat: object) -> Compat:
    """``compat=``: ``"curator"`` or ``"kazoo"``; ``InvalidArgument`` otherwise."""
    if compat == "curator" or compat == "kazoo":
        return compat
    raise InvalidArgument(f"compat must be 'curator' or 'kazoo', not {compat!r}")


def marker_for(compat: Compat, curator: str) -> str:
    """The marker a recipe names its nodes with: ``curator`` (the recipe's Curator marker,
    which Curator's own recipe orders by the suffix) or kazoo's."""
    return curator if compat == "curator" else KAZOO_MARKER


def _match(name: str) -> re.Match[str] | None:
    """The marker and suffix of a contender's node: after a non-empty GUID, or None."""
    found = _NODE.search(name)
    return found if found is not None and found.start() > 0 else None


def parts_of(name: str) -> tuple[str, str] | None:
    """What precedes the marker of a contender's node ``name`` (its GUID, with the ``-``
    that Curator's read/write markers follow), and the marker; None for another child."""
    found = _match(name)
    if found is None:
        return None
    return name[: found.start()], name[found.start() : found.start("seq")]


def is_lock_node(name: str) -> bool:
    """Whether ``name`` looks like a contender's node, ours or another library's (other
    children are ignored)."""
    return _match(name) is not None


def sequence_of(name: str) -> int:
    """The (signed) sequence number ZooKeeper appended to a contender's node ``name``."""
    found = _match(name)
    assert found is not None, name
    return int(found.group("seq"))


def guid_of(name: str) -> str:
    """The contender GUID a node name starts with (what precedes its marker)."""
    found = _match(name)
    return name if found is None else name[: found.start()]


def queue_order(children: Iterable[str]) -> list[str]:
    """The contenders' nodes in queue order (holder first); non-lock children are dropped.

    The counter wraps (2**31 - 1 is followed by -2**31, and -1 by 0), so the order is taken
    modulo 2**32: correct while the live nodes span less than 2**31 sequence numbers, which
    ephemeral contenders always do.
    """
    matches = {c: m for c in children if (m := _match(c)) is not None}  # one search each
    return in_sequence_order({c: int(m.group("seq")) for c, m in matches.items()})


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
    "KAZOO_MARKER",
    "Compat",
    "LATCH_MARKER",
    "LOCK_MARKER",
    "SEQUENCE_DIGITS",
    "guid_of",
    "in_sequence_order",
    "is_lock_node",
    "is_sequence",
    "marker_for",
    "validate_compat",
    "node_prefix",
    "nodes_of",
    "parts_of",
    "queue_order",
    "sequence_of",
)
