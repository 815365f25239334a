"""Deadlocks (pure): parties that wait for each other, found in the wait-for graph.

A party (a session, and its task when its nodes say) is *free* when none of its entries is
blocked: it will finish and let everything go. Removing the free parties' entries may
unblock others, which are then free too; what is left when nothing more can be freed waits
forever (Holt's reduction, which is exact for queues of any rule: a mutex, a read/write lock,
a semaphore of ``max_leases``, where a cycle in the graph alone would not prove a deadlock).

Among those left, an edge goes from a party to each party it waits for (``waits``); each
strongly connected component of two or more is one deadlock, reported with its shortest
cycle through its first party (``party → path → party → ... → party``); the parties left
that are in no cycle are stuck behind one (``stuck``).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass

from aiozklock._doctor._queues import (
    Entry,
    Key,
    PartyKey,
    View,
    by_party,
    unblocked,
    waits,
)

Edges = dict[PartyKey, dict[PartyKey, Entry]]  # waiter -> whom it waits for -> its entry


@dataclass(frozen=True, slots=True)
class Deadlock:
    """One cycle of waits: ``cycle`` holds each party's waiting entry, each waiting for the
    next one's party (the last for the first's); ``stuck``: the other parties that wait for
    ever because of it (in its component, or waiting for it, directly or not)."""

    cycle: tuple[Entry, ...]
    stuck: tuple[PartyKey, ...]

    @property
    def parties(self) -> tuple[PartyKey, ...]:
        return tuple(entry.party for entry in self.cycle)


def find_deadlocks(views: Sequence[View]) -> list[Deadlock]:
    """Every deadlock among the views' entries, in the order of their first party."""
    present, holding, left = _reduce(views)
    if not left:
        return []
    edges = _edges(views, present, holding, left)
    components = [c for c in _components(sorted(left, key=_order), edges) if len(c) > 1]
    components.sort(key=lambda c: _order(min(c, key=_order)))
    rest = left.difference(*components)
    found = []
    for component in components:
        members = set(component)
        cycle = _cycle(min(component, key=_order), members, edges)
        # Beside the cycle: its component's other members, and whoever waits for them.
        others = members - {entry.party for entry in cycle}
        stuck = sorted([*others, *(p for p in rest if _reaches(p, members, edges))], key=_order)
        found.append(Deadlock(tuple(cycle), tuple(stuck)))
    return found


def _order(party: PartyKey) -> tuple[int, str]:
    return party[0], party[1] or ""


def _reduce(views: Sequence[View]) -> tuple[set[Key], set[Key], set[PartyKey]]:
    """The entries still present, those of them that hold, and the parties left blocked."""
    entries: dict[PartyKey, list[Entry]] = defaultdict(list)
    for view in views:
        for entry in view.entries:
            entries[entry.party].append(entry)
    present = {entry.key for view in views for entry in view.entries}
    holding: set[Key] = set()
    pending = {party: len(own) for party, own in entries.items()}
    first = [0] * len(views)  # per view, the index of its first entry still present
    dirty = set(range(len(views)))
    while dirty:
        freed = []
        for index in sorted(dirty):
            view = views[index]
            while first[index] < len(view.entries) and (
                view.entries[first[index]].key not in present
            ):
                first[index] += 1
            for entry in unblocked(view, present, by_party, first[index]):
                if entry.key not in holding:  # unblocked once, unblocked for good
                    holding.add(entry.key)
                    pending[entry.party] -= 1
                    if pending[entry.party] == 0:
                        freed.append(entry.party)
        dirty = set()
        for party in freed:
            for entry in entries[party]:
                present.discard(entry.key)
                dirty.add(entry.view)
    return present, holding, {party for party, count in pending.items() if count}


def _edges(
    views: Sequence[View], present: set[Key], holding: set[Key], left: set[PartyKey]
) -> Edges:
    edges: Edges = defaultdict(dict)
    for view in views:
        for entry, blocker in waits(view, present, holding):
            if entry.party in left:
                edges[entry.party].setdefault(blocker.party, entry)
    return edges


def _components(parties: list[PartyKey], edges: Edges) -> list[list[PartyKey]]:
    """Strongly connected components (Tarjan's algorithm, without recursion)."""
    index: dict[PartyKey, int] = {}
    low: dict[PartyKey, int] = {}
    stack: list[PartyKey] = []
    on_stack: set[PartyKey] = set()
    found: list[list[PartyKey]] = []
    for root in parties:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, {}), key=_order)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            successor = next(successors, None)
            if successor is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    found.append(_pop_component(node, stack, on_stack))
            elif successor not in index:
                index[successor] = low[successor] = len(index)
                stack.append(successor)
                on_stack.add(successor)
                work.append((successor, iter(sorted(edges.get(successor, {}), key=_order))))
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
    return found


def _pop_component(
    node: PartyKey, stack: list[PartyKey], on_stack: set[PartyKey]
) -> list[PartyKey]:
    component = []
    while True:
        member = stack.pop()
        on_stack.discard(member)
        component.append(member)
        if member == node:
            return component


def _cycle(start: PartyKey, members: set[PartyKey], edges: Edges) -> list[Entry]:
    """The shortest cycle through ``start`` within ``members`` (breadth first), as each
    party's waiting entry."""
    previous: dict[PartyKey, PartyKey] = {}
    queue = deque([start])
    while queue:
        party = queue.popleft()
        for successor in sorted(edges.get(party, {}), key=_order):
            if successor not in members:
                continue
            if successor == start:
                chain = [party]
                while chain[-1] != start:
                    chain.append(previous[chain[-1]])
                chain.reverse()
                return [edges[p][chain[(i + 1) % len(chain)]] for i, p in enumerate(chain)]
            if successor not in previous:
                previous[successor] = party
                queue.append(successor)
    raise AssertionError("a strongly connected component without a cycle")


def _reaches(party: PartyKey, targets: set[PartyKey], edges: Edges) -> bool:
    """Whether ``party`` waits, directly or not, for one of ``targets``."""
    seen = {party}
    queue = deque([party])
    while queue:
        for successor in edges.get(queue.popleft(), {}):
            if successor in targets:
                return True
            if successor not in seen:
                seen.add(successor)
                queue.append(successor)
    return False


__all__ = ("Deadlock", "find_deadlocks")
