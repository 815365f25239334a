"""Queues as the recipes see them (pure): who holds and who waits at each path, decided by the
recipes' own decision functions (``decide``, ``decide_read``/``decide_write``,
``decide_leases``), and whom a waiter waits for.

A ``View`` is one recipe's queue at a path, its entries in queue order; a path with two
layouts that do not see each other (an unsafe mix) has a view for each. Each entry belongs
to a party, the session and, when its identity says, the task (``PartyKey``): the wait-for
graph (``_waitfor.py``) is drawn between parties. ``unblocked()`` answers for a subset of
entries still present, optionally ignoring a party's own other entries (a party does not
wait for itself: two threads of one Curator session, two trio tasks of one name, cannot be
told apart, so such a wait is never called a deadlock).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from aiozklock._doctor._layout import (
    READ_MARKERS,
    Member,
    PathLayout,
    identity_of,
    kazoo_lock_of,
)
from aiozklock._doctor._model import Library, QueueState
from aiozklock._recipes._core._contenders import Contender, contender_of
from aiozklock._recipes._core._delay_record import RunningLockDelay
from aiozklock._recipes._core._names import guid_of, queue_order
from aiozklock._recipes._core._plan import Decide, Decision
from aiozklock._recipes._decision import decide
from aiozklock._recipes._rwdecision import decide_read, decide_write
from aiozklock._recipes._semaphore import decide_leases

PartyKey = tuple[int, str | None]  # session id, task name (None: not told by the node)
Key = tuple[int, str]  # an entry: its view's index, its node's name
Role = Literal["queue", "fixed", "lease", "lease-wait"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One contender's node in a view. ``role``: a queue node, the non-fair lock's fixed
    node, a lease (a lease lock's or a semaphore's, held by existing), or ``lease-wait``: a
    kazoo-layout semaphore's lock holder, which waits for a lease while the leases are
    ``max_leases`` (its node is in the sibling lock's queue). ``writes``: it excludes every
    other (only a read/write lock's read nodes do not)."""

    view: int
    path: str
    node: str
    role: Role
    party: PartyKey
    library: Library
    writes: bool
    contender: Contender

    @property
    def key(self) -> Key:
        return self.view, self.node


@dataclass(frozen=True, slots=True)
class View:
    """One recipe's queue at ``path``; ``max_leases`` None when unknown (Curator keeps
    none); ``others``: children a kazoo semaphore counts as leases besides its own."""

    index: int
    path: str
    kind: str
    entries: tuple[Entry, ...]
    max_leases: int | None = 1
    others: int = 0


Party = Callable[[Entry], object]  # whose an entry is, for unblocked(): a party, or itself


def by_party(entry: Entry) -> object:
    return entry.party


def by_entry(entry: Entry) -> object:
    return entry.key


# ---------------------------------------------------------------------------- building


def build_views(layouts: Iterable[PathLayout]) -> list[View]:
    """Every view of every layout; a kazoo-layout semaphore's view gets its lock holder as
    a ``lease-wait`` entry when that holder has no lease."""
    views: list[View] = []
    for layout in layouts:
        for kind, members, max_leases in _queues_of(layout):
            views.append(_view(len(views), layout, kind, members, max_leases))
    by_path = {(view.path, view.kind): view for view in views}
    return [_with_lease_wait(view, by_path) for view in views]


def _queues_of(layout: PathLayout) -> list[tuple[str, list[Member], int | None]]:
    found: list[tuple[str, list[Member], int | None]] = []
    if layout.queue:
        names = queue_order(m.name for m in layout.queue)
        by_name = {m.name: m for m in layout.queue}
        members = [by_name[name] for name in names]
        found.append((_queue_kind(layout, members), members, layout.max_leases or 1))
    if layout.fixed is not None:
        found.append(("nonfair", [layout.fixed], 1))
    if layout.lease is not None:
        found.append(("lease", [layout.lease], 1))
    if layout.kazoo_leases:
        found.append(("kazoo-semaphore", list(layout.kazoo_leases), layout.max_leases))
    if layout.curator_leases:
        found.append(("curator-semaphore", list(layout.curator_leases), None))
    return found


def _queue_kind(layout: PathLayout, members: list[Member]) -> str:
    if layout.max_leases is not None:
        return "semaphore"
    if any(m.marker in READ_MARKERS for m in members):
        return "rwlock"
    return "election" if all(m.marker == "latch-" for m in members) else "lock"


def _view(
    index: int, layout: PathLayout, kind: str, members: list[Member], max_leases: int | None
) -> View:
    role: Role = "queue" if kind in _QUEUES else "fixed" if kind == "nonfair" else "lease"
    entries = tuple(_entry(index, layout.path, member, role) for member in members)
    # kazoo's semaphore counts every child of its path as a lease, whatever its name.
    others = layout.children - len(members) if kind == "kazoo-semaphore" else 0
    return View(index, layout.path, kind, entries, max_leases, others)


def _entry(view: int, path: str, member: Member, role: Role) -> Entry:
    identity = identity_of(member.data) or {}
    task = identity.get("task")
    session = member.stat.ephemeral_owner
    # A lease has no session: each is a party of its own, which nobody visible waits for.
    party: PartyKey = (session, task if isinstance(task, str) else None)
    if role == "lease" and not session:
        party = (0, f"{path}/{member.name}")
    writes = member.marker not in READ_MARKERS
    sequence = 0 if role != "queue" else None
    contender = contender_of(
        member.name, member.data, member.stat, is_holder=False, sequence=sequence
    )
    return Entry(view, path, member.name, role, party, member.library, writes, contender)


def _with_lease_wait(view: View, by_path: dict[tuple[str, str], View]) -> View:
    if view.kind != "kazoo-semaphore":
        return view
    lock = by_path.get((kazoo_lock_of(view.path), "lock"))
    if lock is None or not lock.entries:
        return view
    holder = lock.entries[0]
    if holder.party in {entry.party for entry in view.entries}:
        return view  # it holds a lease: it is about to let the lock go
    waiting = dataclasses.replace(holder, view=view.index, path=view.path, role="lease-wait")
    return dataclasses.replace(view, entries=(*view.entries, waiting))


_QUEUES = frozenset({"lock", "election", "rwlock", "semaphore"})


# ---------------------------------------------------------------------------- the rules


def _decision(view: View, entry: Entry, names: list[str]) -> Decision:
    rule: Decide = decide
    if view.kind == "semaphore":
        rule = decide_leases(view.max_leases or 1)
    elif view.kind == "rwlock":
        rule = decide_write if entry.writes else decide_read
    return rule(names, entry.node, guid_of(entry.node))


def held(view: View, ahead: Sequence[Entry], entry: Entry, party: Party) -> bool:
    """Whether ``entry`` holds, given ``ahead``: the view's present entries before it (and
    any with its sequence, which its rule counts as ahead), its party's own ignored."""
    if entry.role in ("fixed", "lease") or view.kind not in (*_QUEUES, "kazoo-semaphore"):
        return True
    own = party(entry)
    if entry.role == "lease-wait":
        if view.max_leases is None:
            return True  # the limit is unknown: never call it blocked
        leases = sum(1 for e in ahead if e.role == "lease" and party(e) != own)
        return leases + view.others < view.max_leases
    names = [e.node for e in ahead if party(e) != own]
    return _decision(view, entry, [*names, entry.node]).held


def _exhausted(view: View, seen: Counter[object], writers: set[object]) -> bool:
    """Whether every later entry is surely blocked, given the parties seen ahead (and those
    of their write nodes): the scan of a long queue stops early."""
    if view.kind in ("lock", "election"):
        return len(seen) >= 2  # each later one is behind a node of another party
    if view.kind == "semaphore" and view.max_leases is not None and seen:
        return seen.total() - max(seen.values()) >= view.max_leases
    if view.kind == "rwlock":
        return len(writers) >= 2
    return False


def unblocked(
    view: View, present: Collection[Key], party: Party = by_entry, start: int = 0
) -> list[Entry]:
    """The entries of ``view`` still ``present`` that hold (``party``: whose each entry is;
    the default makes every entry its own, as the recipes decide). ``start``: the index of
    its first entry that may be present. Only the head of a queue is read: what is behind
    is blocked (``_exhausted``), so a long queue costs little."""
    found: list[Entry] = []
    ahead: list[Entry] = []
    seen: Counter[object] = Counter()
    writers: set[object] = set()
    entries = view.entries
    for index in range(start, len(entries)):
        entry = entries[index]
        if entry.key not in present:
            continue
        if _exhausted(view, seen, writers):
            break
        # Behind another party's write node, a read/write lock's entry is blocked.
        behind = view.kind == "rwlock" and bool(writers - {party(entry)})
        if not behind and held(view, [*ahead, *_same_sequence(view, index, present)], entry, party):
            found.append(entry)
        ahead.append(entry)
        seen[party(entry)] += 1
        if entry.writes:
            writers.add(party(entry))
    return found


def _same_sequence(view: View, index: int, present: Collection[Key]) -> list[Entry]:
    """The present entries after ``index`` with its sequence (a read/write lock's downgrade
    node shares its write node's)."""
    entries, sequence = view.entries, view.entries[index].contender.sequence
    same = []
    for later in entries[index + 1 :]:
        if later.role != "queue" or later.contender.sequence != sequence:
            break
        if later.key in present:
            same.append(later)
    return same


def waits(
    view: View, present: Collection[Key], holding: Collection[Key]
) -> Iterator[tuple[Entry, Entry]]:
    """Who waits for whom in ``view``: each present entry not ``holding``, with each other
    party's present entry that blocks it: the nearest one ahead that excludes it (a read
    node excludes only write nodes), and those ahead that hold and exclude it. A kazoo
    semaphore's lock holder waits for every lease. One pass, whatever the queue's length."""
    ordered = [e for e in view.entries if e.key in present]
    holders: list[Entry] = []
    recent: list[Entry] = []  # the latest entry, and the latest of another party
    writers: list[Entry] = []  # the same, of write nodes
    for entry in ordered:
        if entry.role == "lease-wait":
            yield from ((entry, e) for e in ordered if e.role == "lease" and e.party != entry.party)
        elif entry.key not in holding:
            nearest = _nearest(recent if entry.writes else writers, entry.party)
            if nearest is not None:
                yield entry, nearest
            for holder in holders:
                excludes = holder.writes or entry.writes
                if holder is not nearest and holder.party != entry.party and excludes:
                    yield entry, holder
        else:
            holders.append(entry)
        _remember(recent, entry)
        if entry.writes:
            _remember(writers, entry)


def _nearest(recent: list[Entry], party: PartyKey) -> Entry | None:
    return next((entry for entry in recent if entry.party != party), None)


def _remember(recent: list[Entry], entry: Entry) -> None:
    recent[:] = [entry, *[e for e in recent if e.party != entry.party][:1]]


# ---------------------------------------------------------------------------- states


def queue_state(view: View, delay: RunningLockDelay | None = None) -> QueueState:
    """The view's holders and waiters, in queue order, as the recipes decide; with a
    running lock-delay ``delay``, those that would hold wait it out: nobody holds."""
    holding = {e.key for e in unblocked(view, {e.key for e in view.entries})}
    if delay is not None:
        waiting = tuple(
            dataclasses.replace(e.contender, lock_delay=delay) if e.key in holding else e.contender
            for e in view.entries
        )
        return QueueState(view.path, view.kind, (), waiting, delay)
    holders = tuple(
        dataclasses.replace(e.contender, is_holder=True) for e in view.entries if e.key in holding
    )
    waiters = tuple(e.contender for e in view.entries if e.key not in holding)
    return QueueState(view.path, view.kind, holders, waiters)


def restrict(views: Iterable[View], listings: dict[str, frozenset[str]]) -> list[View]:
    """The views at the listed paths, renumbered, with only the entries listed again (a
    ``lease-wait`` entry is listed at its lock's path)."""
    kept: list[View] = []
    for view in views:
        if view.path not in listings:
            continue
        index = len(kept)
        entries = tuple(
            dataclasses.replace(e, view=index)
            for e in view.entries
            if e.node in listings.get(_listed_at(view, e), frozenset())
        )
        kept.append(dataclasses.replace(view, index=index, entries=entries))
    return kept


def listed_paths(view: View) -> set[str]:
    """Where the view's entries are listed: its path, and its lock's for a lease-wait."""
    return {_listed_at(view, entry) for entry in view.entries} | {view.path}


def _listed_at(view: View, entry: Entry) -> str:
    return kazoo_lock_of(view.path) if entry.role == "lease-wait" else view.path


__all__ = (
    "Entry",
    "Key",
    "PartyKey",
    "View",
    "waits",
    "build_views",
    "by_entry",
    "by_party",
    "held",
    "listed_paths",
    "queue_state",
    "restrict",
    "unblocked",
)
