"""Peers whose recipes cannot order our nodes (pure): fail closed before we hold, and tell
a holder of one that came after its grant (``_newcomers.py``).

We read every library's markers, so we always order a peer's nodes; the converse depends on
the names we write (``compat=``). A node only Curator or kazoo names the way it is named
tells us whose recipe queued it (``/work/shared/interop-formats.md``): Curator's start with
its protection prefix ``_c_<uuid>-`` and are keyed by the text after the recipe's own marker
(``lock-`` for InterProcessMutex and LeaderSelector, ``latch-`` for LeaderLatch,
``__READ__``/``__WRIT__`` for the read/write lock); kazoo's are ``<32 hex>__lock__`` or
``__rlock__``, and its Lock, ReadLock, WriteLock and Election see those two only.

Such a peer that does not see our marker holds beside us (kazoo's Lock took the lock while
ours held: issue 30), so an acquisition that lists one refuses (``LayoutConflict``) rather
than queue: the queue engine checks every listing it decides on, and its cleanup removes our
node. A kazoo peer built with ``extra_lock_patterns`` would see us, but its names are the
same: it is refused too, and ``compat="kazoo"`` serves both kinds of kazoo peer. kazoo's
names are also those of our own ``compat="kazoo"`` clients (and ours carry no mark a
listing shows): one path, one ``compat`` for every aiozklock client on it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from aiozklock._exceptions import LayoutConflict, short_repr
from aiozklock._recipes._core._names import Compat, parts_of

PeerLibrary = Literal["curator", "kazoo"]
View = tuple[PeerLibrary, str]  # a peer's library and its node's marker: its recipe

# What each peer's recipe orders (markers without the "-" before them); any other node is
# misplaced (Curator: keyed by its whole name) or ignored (kazoo).
SEES: Mapping[tuple[str, str], frozenset[str]] = {
    ("curator", "lock-"): frozenset({"lock-"}),
    ("curator", "latch-"): frozenset({"latch-"}),
    ("curator", "__READ__"): frozenset({"__READ__", "__WRIT__"}),
    ("curator", "__WRIT__"): frozenset({"__READ__", "__WRIT__"}),
    ("kazoo", "__lock__"): frozenset({"__lock__", "__rlock__"}),
    ("kazoo", "__rlock__"): frozenset({"__lock__", "__rlock__"}),
}
RECIPES: Mapping[tuple[str, str], str] = {
    ("curator", "lock-"): "Curator's InterProcessMutex",
    ("curator", "latch-"): "Curator's LeaderLatch",
    ("curator", "__READ__"): "Curator's InterProcessReadWriteLock",
    ("curator", "__WRIT__"): "Curator's InterProcessReadWriteLock",
    ("kazoo", "__lock__"): "kazoo's Lock",
    ("kazoo", "__rlock__"): "kazoo's ReadLock",
}
CURATOR_GUID = re.compile(r"_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
HEX32 = re.compile(r"[0-9a-f]{32}")
_SHOWN = 3  # nodes named in a refusal

NEVER_SHARE = (
    "never share a path between Curator and kazoo: move one of them to a path of its own "
    "(no setting makes them order each other's nodes)"
)
SAME_RECIPE = (
    "beside Curator use the recipe Curator uses on the path: zk.lock() beside "
    "InterProcessMutex or LeaderSelector, zk.election() beside LeaderLatch, zk.rw_lock() "
    "beside InterProcessReadWriteLock"
)


def peer_of(name: str) -> View | None:
    """The peer recipe that queued the node ``name``, if only Curator or kazoo names a node
    so (kazoo's names are also our ``compat="kazoo"`` ones); None for any other name."""
    if not (name.startswith("_c_") or "lock__" in name):  # cheap: most names are ours
        return None
    parts = parts_of(name)
    if parts is None:
        return None
    guid, marker = parts[0].removesuffix("-"), parts[1].lstrip("-")
    if CURATOR_GUID.fullmatch(guid):
        view: View = ("curator", marker)
    elif HEX32.fullmatch(guid):
        view = ("kazoo", marker)
    else:
        return None
    return view if view in SEES else None


@dataclass(frozen=True, slots=True)
class Layout:
    """The nodes a queue recipe writes on a path: its Curator marker or its kazoo one, as
    ``compat`` picks; ``factory`` names it in messages (``"zk.lock()"``)."""

    compat: Compat
    curator: str
    kazoo: str
    factory: str

    @property
    def marker(self) -> str:
        """The marker our nodes carry."""
        return self.curator if self.compat == "curator" else self.kazoo

    def check(
        self, path: str, children: Iterable[str], guid: str, label: str, held: bool = False
    ) -> None:
        """Raises ``LayoutConflict`` if a peer's node among ``children`` (a listing of
        ``path``; ours start with ``guid``) cannot order ours; ``label`` names the recipe
        object; ``held``: the listing is a holder's (the peer came after our grant)."""
        ours = self.marker.lstrip("-")
        peers = {
            name: view
            for name in children
            if (view := peer_of(name)) is not None and not name.startswith(guid)
        }
        unseen = {name: view for name, view in peers.items() if ours not in SEES[view]}
        if unseen:
            raise LayoutConflict(self._refusal(path, label, peers, unseen, held))

    def _refusal(
        self,
        path: str,
        label: str,
        peers: dict[str, View],
        unseen: dict[str, View],
        held: bool = False,
    ) -> str:
        shown = sorted(unseen)[:_SHOWN]
        nodes = ", ".join(f"{RECIPES[unseen[name]]} node {short_repr(name)}" for name in shown)
        more = f" and {len(unseen) - len(shown)} more" if len(unseen) > len(shown) else ""
        libraries = {library for library, _ in peers.values()}
        if libraries == {"curator", "kazoo"}:
            fix = NEVER_SHARE
            if self.compat == "kazoo":  # kazoo's names may be our other clients' here
                fix += (
                    ' (if the kazoo-style nodes are aiozklock clients\' with compat="kazoo", '
                    'pass compat="curator" to all of them)'
                )
        elif "kazoo" in libraries:
            fix = (
                f'pass compat="kazoo" to {self.factory} on this path, in every aiozklock '
                "client that uses it: kazoo's recipes see those nodes, with or without "
                'extra_lock_patterns (these names are also those of compat="kazoo" clients)'
            )
        elif all(self.curator.lstrip("-") in SEES[view] for view in unseen.values()):
            fix = f'pass compat="curator" (the default) to {self.factory} on this path'
        else:
            fix = SAME_RECIPE
        what = "came after our grant and " if held else ""
        both = "may hold now" if held else "could hold at once"
        return (
            f"{label} {'lost' if held else 'refused'}: {nodes}{more} on {path} {what}cannot "
            f"order the {self.marker.lstrip('-')!r} nodes "
            f"written with compat={self.compat!r}, so both {both} (our node is "
            f"removed). Fix: {fix}"
        )


__all__ = (
    "CURATOR_GUID",
    "HEX32",
    "NEVER_SHARE",
    "RECIPES",
    "SAME_RECIPE",
    "SEES",
    "Layout",
    "View",
    "peer_of",
)
