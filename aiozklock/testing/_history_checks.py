"""The checks of a history, one small function each, composed by
:meth:`History.check <aiozklock.testing.History.check>`: here mutual exclusion, token order,
max holders and acts after release; fencing in :mod:`._history_fencing`, and attempts,
reactions and margins in :mod:`._history_timing`.

Each checker takes a :class:`Judged` (the history, its sections in enter order, which of them
are paused, the ``slack`` and the fenced stores) and returns what it found; none depends on
another, so each can be run and tested alone: ``check_exclusion(Judged.of(history))``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from ._history_records import CriticalSection, Crowding, FencedStore, Recorded, SectionPair

__all__ = [
    "Exclusion",
    "Holders",
    "Judged",
    "ReleasedActs",
    "check_exclusion",
    "check_holders",
    "check_released_acts",
    "check_token_order",
    "count_outcomes",
    "crowding",
    "overlaps",
    "released_acts",
    "token_order",
]


@dataclass(frozen=True)
class Judged:
    """What every checker looks at: ``history``, its sections ordered by ``(enter, exit)``,
    the ``id()`` of those a pause covers (judged by fencing), the ``slack`` allowed, and the
    fenced store of each resource."""

    history: Recorded
    ordered: tuple[CriticalSection, ...]
    paused: frozenset[int]
    slack: float = 0.0
    stores: Mapping[str, FencedStore] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        history: Recorded,
        slack: float = 0.0,
        stores: Mapping[str, FencedStore] | None = None,
    ) -> Judged:
        """The view of ``history`` that every checker takes."""
        ordered = tuple(sorted(history.sections, key=lambda s: (s.enter, s.exit)))
        paused = frozenset(id(s) for s in ordered if history.paused(s))
        return cls(history, ordered, paused, slack, dict(stores or {}))

    @property
    def unpaused(self) -> list[CriticalSection]:
        """The sections no pause covers, in order: those judged by exclusion and order."""
        return [s for s in self.ordered if id(s) not in self.paused]


# ---------------------------------------------------------------- exclusion and order


class Exclusion(NamedTuple):
    """Pairs of sections of different grants that share a resource and overlap in time by
    more than ``slack``."""

    overlaps: list[SectionPair]  # both non-paused: a failure
    paused_overlaps: list[SectionPair]  # at least one paused: judged by fencing
    max_overlap: float  # the largest non-paused overlap (0.0 if none)
    disjoint: int  # pairs at once on disjoint resources: allowed, and worth knowing


def check_exclusion(judged: Judged) -> Exclusion:
    """Mutual exclusion (nothing with ``max_holders > 1``: see :func:`check_holders`)."""
    if judged.history.max_holders > 1:  # concurrent holders: no pairwise exclusion
        return Exclusion([], [], 0.0, 0)
    return overlaps(judged.ordered, judged.paused, judged.slack)


def overlaps(ordered: Sequence[CriticalSection], paused: frozenset[int], slack: float) -> Exclusion:
    """The overlapping pairs of ``ordered`` (sorted by enter), unless both are shared."""
    found: list[SectionPair] = []
    paused_overlaps: list[SectionPair] = []
    max_overlap = 0.0
    disjoint = 0
    for i, earlier in enumerate(ordered):
        for later in ordered[i + 1 :]:
            if later.enter >= earlier.exit:
                break  # sorted by enter: nothing further can overlap `earlier`
            if earlier.same_grant(later) or (earlier.shared and later.shared):
                continue
            if not earlier.shares(later):
                disjoint += 1
                continue
            amount = min(earlier.exit, later.exit) - later.enter
            if amount > slack:
                if id(earlier) in paused or id(later) in paused:
                    paused_overlaps.append((earlier, later))
                else:
                    found.append((earlier, later))
                    max_overlap = max(max_overlap, amount)
    return Exclusion(found, paused_overlaps, max_overlap, disjoint)


def check_token_order(judged: Judged) -> list[SectionPair]:
    """Token order of the non-paused sections (nothing with ``max_holders > 1``: concurrent
    holders enter in any token order)."""
    if judged.history.max_holders > 1:
        return []
    return token_order(judged.unpaused)


def token_order(judged: Sequence[CriticalSection]) -> list[SectionPair]:
    """Per resource, in enter order, sections whose token does not exceed the one it must: an
    exclusive section's, the greatest token before it since (and including) the last
    exclusive section; a shared section's, the last exclusive section's (shared sections
    among themselves enter in any order). Without shared sections, that is each section's
    predecessor. A pair found on several resources is reported once."""
    violations: list[SectionPair] = []
    seen: set[tuple[int, int]] = set()
    for resource in sorted({key for s in judged for key in s.keys}):
        exclusive: CriticalSection | None = None  # the last exclusive section
        greatest: CriticalSection | None = None  # the greatest token since then
        for current in (s for s in judged if resource in s.keys):
            previous = exclusive if current.shared else greatest
            if previous is not None and current.token <= previous.token:
                pair = (id(previous), id(current))
                if not current.same_grant(previous) and pair not in seen:
                    seen.add(pair)
                    violations.append((previous, current))
            if not current.shared:
                exclusive = greatest = current
            elif greatest is None or current.token > greatest.token:
                greatest = current
    return violations


# ---------------------------------------------------------------- max holders and acts


class Holders(NamedTuple):
    """With ``max_holders > 1``: windows with more holders of one resource than that."""

    crowded: list[Crowding]  # among non-paused sections: a failure
    paused_crowded: list[Crowding]  # ... only once paused sections count: allowed
    peak: int  # the most non-paused grants seen holding one resource at once


def check_holders(judged: Judged) -> Holders:
    """The windows over ``max_holders``; nothing with ``max_holders`` 1 (the pairwise
    overlap check judges a lock)."""
    limit, slack = judged.history.max_holders, judged.slack
    if limit <= 1:
        return Holders([], [], 0)
    crowded, peak = crowding(judged.unpaused, limit, slack)
    with_paused = [
        window
        for window in crowding(judged.ordered, limit, slack)[0]
        if any(id(s) in judged.paused for s in window.holders)
    ]
    return Holders(crowded, with_paused, peak)


def crowding(
    sections: Sequence[CriticalSection], limit: int, slack: float
) -> tuple[list[Crowding], int]:
    """Per resource, a sweep over the sections' enters and exits: the windows longer than
    ``slack`` in which more than ``limit`` grants (distinct client and token) hold it, and
    the most grants seen at once. A section that exits as another enters does not overlap it."""
    windows: list[Crowding] = []
    peak = 0
    for resource in sorted({key for s in sections for key in s.keys}):
        covering = [s for s in sections if resource in s.keys and s.exit > s.enter]
        events = sorted(
            [(s.enter, 1, i) for i, s in enumerate(covering)]
            + [(s.exit, 0, i) for i, s in enumerate(covering)]
        )
        active: dict[int, CriticalSection] = {}
        opened: tuple[float, tuple[CriticalSection, ...]] | None = None
        for t, entering, i in events:
            if entering:
                active[i] = covering[i]
            else:
                del active[i]
            count = len({(s.client, s.token) for s in active.values()})
            peak = max(peak, count)
            if count > limit and opened is None:
                opened = (t, tuple(active.values()))
            elif count <= limit and opened is not None:
                if t - opened[0] > slack:
                    windows.append(Crowding(resource, opened[0], t, opened[1]))
                opened = None
    return windows, peak


class ReleasedActs(NamedTuple):
    """Acts more than ``slack`` after an observer saw the section's node deleted."""

    unpaused: list[tuple[CriticalSection, float]]  # (section, act time): a failure
    paused: int  # acts of paused sections: nothing could stop them (allowed)


def check_released_acts(judged: Judged) -> ReleasedActs:
    """Acts after release, of non-paused and of paused sections."""
    paused = [s for s in judged.ordered if id(s) in judged.paused]
    return ReleasedActs(
        released_acts(judged.history, judged.unpaused, judged.slack),
        len(released_acts(judged.history, paused, judged.slack)),
    )


def released_acts(
    history: Recorded, sections: Iterable[CriticalSection], slack: float
) -> list[tuple[CriticalSection, float]]:
    """Acts of ``sections`` more than ``slack`` after the observer saw their node
    deleted; only precise deletions count (a late one proves nothing)."""
    return [
        (section, act)
        for section in sections
        if section.node is not None
        and section.node in history.deletions
        and section.node not in history.imprecise_deletions
        for act in section.acts
        if act > history.deletions[section.node] + slack
    ]


# ---------------------------------------------------------------- counters


def count_outcomes(judged: Judged, disjoint: int = 0) -> dict[str, int]:
    """The history's counters, plus sections and attempts by outcome, ``disjoint`` pairs at
    once on disjoint resources, the acts, and the stores' accepted and rejected writes."""
    history = judged.history
    outcomes = Counter(f"section:{s.outcome}" for s in judged.ordered)
    outcomes.update(f"attempt:{a.outcome}" for a in history.attempts)
    counters = dict(history.counters + outcomes)
    if disjoint:
        counters["concurrent:disjoint"] = disjoint
    acts = sum(len(s.acts) for s in judged.ordered)
    if acts:
        counters["acts"] = acts
    if judged.stores:
        counters["store:accepted"] = sum(len(s.accepted) for s in judged.stores.values())
        counters["store:rejected"] = sum(len(s.rejected) for s in judged.stores.values())
    return counters
