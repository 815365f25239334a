"""The fencing checks of a history: stale writes replayed against each fenced store, late
writes, and writes after a lease expired (see :mod:`._history_checks` for how checkers are
composed)."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from typing import NamedTuple

from ._history_checks import Judged
from ._history_records import CriticalSection, FencedRead, FencedStore, FencedWrite, StaleWrite

__all__ = ["Fencing", "check_fencing", "check_lease_validity", "fencing", "late_writes"]


class Fencing(NamedTuple):
    """One store's accesses replayed (or several stores', added up)."""

    stale: list[StaleWrite]  # writes below a newer token that had reached the store
    violations: list[StaleWrite]  # ... that the store accepted: fencing failed
    unpaused: list[StaleWrite]  # ... rejected, of a non-paused holder: it acted too late
    late: int  # accepted writes after a newer grant, before that token reached the store


def check_fencing(judged: Judged) -> Fencing:
    """Fencing, per resource against its own store, added up."""
    total = Fencing([], [], [], 0)
    for resource, store in sorted(judged.stores.items()):
        covering = [s for s in judged.ordered if resource in s.keys]
        found = fencing(store, covering, judged.paused)
        total = Fencing(
            total.stale + found.stale,
            total.violations + found.violations,
            total.unpaused + found.unpaused,
            total.late + found.late,
        )
    return total


def fencing(
    store: FencedStore, ordered: Sequence[CriticalSection], paused: frozenset[int]
) -> Fencing:
    """Replays one store's accesses in time order, independently of its own decisions: a
    write is stale if a greater token had already been accepted (read or written).
    ``ordered``: the sections that cover the store's resource."""
    grants: dict[tuple[str, int], CriticalSection] = {}
    for section in ordered:
        grants.setdefault((section.client, section.token), section)
    events: list[tuple[float, int, FencedRead | FencedWrite]] = [
        (read.t, read.seq, read) for read in store.reads
    ]
    events += [(write.t, write.seq, write) for write in [*store.accepted, *store.rejected]]
    events.sort(key=lambda e: (e[0], e[1]))
    highest: int | None = None
    result = Fencing([], [], [], late_writes(store, ordered))
    for _, _, access in events:
        if isinstance(access, FencedWrite) and highest is not None and access.token < highest:
            grant = grants.get((access.client, access.token))
            entry = StaleWrite(access, highest, grant is None or id(grant) in paused)
            result.stale.append(entry)
            if access.accepted:
                result.violations.append(entry)
            elif not entry.paused:
                result.unpaused.append(entry)
        if access.accepted and (highest is None or access.token > highest):
            highest = access.token
    return result


def late_writes(store: FencedStore, ordered: Sequence[CriticalSection]) -> int:
    """Accepted writes made after a newer token's grant (enter), before it reached the
    store: ordered before it, so fencing allows them."""
    enters = sorted((s.enter, s.token) for s in ordered)
    times = [enter for enter, _ in enters]
    newest = list(itertools.accumulate((token for _, token in enters), max))
    late = 0
    for write in store.accepted:
        granted = bisect.bisect_left(times, write.t)  # sections that entered before it
        if granted and newest[granted - 1] > write.token:
            late += 1
    return late


def check_lease_validity(judged: Judged) -> list[tuple[CriticalSection, FencedWrite]]:
    """Writes of non-paused lease sections that reached a store after the section's
    ``expires_at`` (+ ``slack``): the server could have given the lease away by then."""
    found: list[tuple[CriticalSection, FencedWrite]] = []
    for section in judged.unpaused:
        if section.expires_at is None:
            continue
        for resource in section.keys:
            store = judged.stores.get(resource)
            if store is None:
                continue
            found.extend(
                (section, write)
                for write in [*store.accepted, *store.rejected]
                if write.client == section.client
                and write.token == section.token
                and section.enter <= write.t <= section.exit
                and write.t > section.expires_at + judged.slack
            )
    return found
