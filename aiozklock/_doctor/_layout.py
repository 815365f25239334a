"""What is at a path, by the names and data of its children (pure): whose contenders
(aiozklock's, Curator's, kazoo's, another library's), which recipe's layout.

Names are parsed by the recipes' own parser (``_recipes/_core/_names.py``): a contender's
node is ``<guid><marker><sequence>``. Who wrote it: our nodes carry our identity (JSON with
``host`` and ``pid``); Curator's start with its protection prefix ``_c_<uuid>-``; kazoo's are
``<32 hex>__lock__`` or ``__rlock__`` (``/work/shared/interop-formats.md``,
``docs/mixed-fleets.md``). Besides queues, a path may hold the non-fair lock's fixed node
``lock``, a lease's ``lease``, kazoo's semaphore leases (``<32 hex>``, ephemeral, under the
semaphore's path, its lock at the sibling ``<path>-__lock__``) or Curator's (``<path>/leases``, its
mutex at ``<path>/locks``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiozklock._doctor._model import Library
from aiozklock._doctor._scan import Znode
from aiozklock._recipes._core._names import KAZOO_MARKER, guid_of, is_lock_node, sequence_of
from aiozklock._recipes._lease import LEASE_NODE
from aiozklock._recipes._nonfair import NODE_NAME
from aiozklock._recipes._rwdecision import KAZOO_READ_MARKER, READ_MARKER
from aiozklock._recipes._semaphore_compat import CURATOR, KAZOO
from aiozklock._recipes._traits import is_lease
from aiozklock._wire._protocol import Stat
from aiozklock._wire._validation import join

READ_MARKERS = frozenset({READ_MARKER.lstrip("-"), KAZOO_READ_MARKER})
KAZOO_MARKERS = frozenset({KAZOO_MARKER, KAZOO_READ_MARKER})
_CURATOR_GUID = re.compile(r"_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_HEX32 = re.compile(r"[0-9a-f]{32}")
_CURATOR_LEASE = re.compile(_CURATOR_GUID.pattern + r"-lease-(?:[0-9]{10}|-[0-9]{9,10})")
_DECIMAL = re.compile(rb"[1-9][0-9]{0,8}")


@dataclass(frozen=True, slots=True)
class Member:
    """A contender's node at a path: its name, data and ``Stat``, who wrote it, and its
    marker (``lock-``, ``latch-``, ``__READ__``, ``__WRIT__``, ``__lock__``, ``__rlock__``;
    None for a node without one: a fixed node, a lease, a semaphore's lease)."""

    name: str
    data: bytes
    stat: Stat
    library: Library
    marker: str | None


@dataclass(frozen=True, slots=True)
class PathLayout:
    """The contenders found at ``path``, by layout.

    ``queue``: nodes of a queue (any library's markers), in no order; ``fixed``: the
    non-fair lock's node; ``lease``: a lease lock's node; ``kazoo_leases``: kazoo's
    semaphore leases; ``curator_leases``: Curator's semaphore leases (at ``<path>/leases``,
    read from there); ``max_leases``: the limit stored in the path's data, if any;
    ``kazoo_lock``: the sibling ``<path>-__lock__`` when contenders are there (a kazoo-layout
    semaphore's lock); ``curator_semaphore``: the path has Curator's ``leases``/``locks``;
    ``children``: how many children the path has (kazoo's semaphore counts them all)."""

    path: str
    queue: tuple[Member, ...] = ()
    fixed: Member | None = None
    lease: Member | None = None
    kazoo_leases: tuple[Member, ...] = ()
    curator_leases: tuple[Member, ...] = ()
    max_leases: int | None = None
    kazoo_lock: str | None = None
    curator_semaphore: bool = False
    children: int = 0

    @property
    def empty(self) -> bool:
        """No contender at all."""
        return not (
            self.queue or self.fixed or self.lease or self.kazoo_leases or self.curator_leases
        )


def identity_of(data: bytes) -> dict[str, Any] | None:
    """Our nodes' identity JSON (with ``host`` and ``pid``), or None for other data."""
    try:
        fields = json.loads(data) if data[:1] == b"{" else None
    except ValueError:
        return None
    return fields if isinstance(fields, dict) and "pid" in fields and "host" in fields else None


def marker_of(name: str) -> str:
    """The marker of a contender's node ``name`` (``is_lock_node``), without the leading
    ``-`` that our and Curator's names put before it."""
    rest = name[len(guid_of(name)) :].rstrip("0123456789")
    if sequence_of(name) < 0:  # a wrapped counter: "-" then the digits
        rest = rest[:-1]
    return rest.lstrip("-")


def library_of(name: str, data: bytes, marker: str | None) -> Library:
    """Who wrote a node, by its data (ours) and the shape of its name."""
    if identity_of(data) is not None:
        return "aiozklock"
    # Our and Curator's read/write markers follow a "-" that the names' parser leaves in.
    guid = guid_of(name).removesuffix("-") if marker else name
    if _CURATOR_GUID.fullmatch(guid):
        return "curator"
    if _HEX32.fullmatch(guid) and (marker is None or marker in KAZOO_MARKERS):
        return "kazoo"
    return "other"


def _member(name: str, node: Znode, *, queued: bool) -> Member:
    marker = marker_of(name) if queued else None
    return Member(name, node.data, node.stat, library_of(name, node.data, marker), marker)


def classify(tree: Mapping[str, Znode], path: str) -> PathLayout:
    """The layout at ``path`` (a node of ``tree``), from its children as read."""
    node = tree[path]
    children = [(name, tree.get(join(path, name))) for name in node.children]
    read = [(name, child) for name, child in children if child is not None]
    queue = tuple(_member(n, c, queued=True) for n, c in read if is_lock_node(n))
    fixed = _fixed(read)
    lease = _lease(read)
    kazoo = tuple(
        _member(n, c, queued=False)
        for n, c in read
        if _HEX32.fullmatch(n) and c.stat.ephemeral_owner and not c.children
    )
    curator = tuple(_member(n, c, queued=False) for n, c in read if _CURATOR_LEASE.fullmatch(n))
    return PathLayout(
        path,
        queue=queue,
        fixed=fixed,
        lease=lease,
        kazoo_leases=kazoo,
        curator_leases=curator,
        max_leases=int(node.data) if _DECIMAL.fullmatch(node.data) else None,
        kazoo_lock=_kazoo_lock(tree, path),
        curator_semaphore=_curator_semaphore(tree, path),
        children=len(node.children),
    )


def _fixed(read: list[tuple[str, Znode]]) -> Member | None:
    for name, child in read:
        if name == NODE_NAME and child.stat.ephemeral_owner:  # a plain "lock" has no owner
            return _member(name, child, queued=False)
    return None


def _lease(read: list[tuple[str, Znode]]) -> Member | None:
    for name, child in read:
        if name == LEASE_NODE and is_lease(child.data):  # a TTL node shows no owner
            return _member(name, child, queued=False)
    return None


def kazoo_lock_of(path: str) -> str:
    """Where kazoo's semaphore at ``path`` takes its lock (and ours with compat="kazoo")."""
    return KAZOO.mutex.format(path)


def _kazoo_lock(tree: Mapping[str, Znode], path: str) -> str | None:
    sibling = kazoo_lock_of(path)
    node = tree.get(sibling)
    return sibling if node is not None and any(map(is_lock_node, node.children)) else None


def _curator_semaphore(tree: Mapping[str, Znode], path: str) -> bool:
    leases = tree.get(CURATOR.leases.format(path))
    locks = tree.get(CURATOR.mutex.format(path))
    return any(
        _CURATOR_LEASE.fullmatch(name) for name in (leases.children if leases else ())
    ) or any(_CURATOR_GUID.match(name) for name in (locks.children if locks else ()))


__all__ = (
    "KAZOO_MARKERS",
    "READ_MARKERS",
    "Member",
    "PathLayout",
    "classify",
    "identity_of",
    "kazoo_lock_of",
    "library_of",
    "marker_of",
)
