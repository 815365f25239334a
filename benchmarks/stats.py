"""Summaries of raw samples, computed the same way for every client (Python or Java)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (``q`` in [0, 100])."""
    if not sorted_values:
        return math.nan
    position = (len(sorted_values) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


@dataclass(frozen=True)
class Summary:
    """Durations in microseconds."""

    n: int
    mean_us: float
    median_us: float
    p90_us: float
    p99_us: float
    min_us: float
    max_us: float

    @classmethod
    def of_ns(cls, samples_ns: Sequence[int]) -> Summary:
        values = sorted(sample / 1000 for sample in samples_ns)
        if not values:
            return cls(0, *(math.nan,) * 6)
        return cls(
            n=len(values),
            mean_us=sum(values) / len(values),
            median_us=percentile(values, 50),
            p90_us=percentile(values, 90),
            p99_us=percentile(values, 99),
            min_us=values[0],
            max_us=values[-1],
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Grants:
    """Critical sections ``(enter_ns, exit_ns)`` of every contender of one lock, merged."""

    count: int
    per_second: float  # grants / (last exit - first entry)
    handoff: Summary  # from one holder's exit to the next holder's entry
    overlaps: int  # a section entered before the previous one exited: mutual exclusion broken

    @classmethod
    def of(cls, intervals: Sequence[Sequence[int]]) -> Grants:
        ordered = sorted((enter, exit_) for enter, exit_ in intervals)
        if not ordered:
            return cls(0, math.nan, Summary.of_ns([]), 0)
        handoffs = []
        overlaps = 0
        for (_, previous_exit), (enter, _) in itertools.pairwise(ordered):
            if enter < previous_exit:
                overlaps += 1
            handoffs.append(enter - previous_exit)
        span_ns = max(exit_ for _, exit_ in ordered) - ordered[0][0]
        per_second = len(ordered) / (span_ns / 1e9) if span_ns > 0 else math.nan
        return cls(len(ordered), per_second, Summary.of_ns(handoffs), overlaps)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "handoff": self.handoff.as_dict()}


def held_at_entries(
    reads: Sequence[Sequence[int]], writes: Sequence[Sequence[int]] = ()
) -> list[tuple[bool, int, int]]:
    """For each section's entry, in time order: (is a write, readers held, writers held)
    just before it. A section exiting at the very instant another enters does not overlap it."""
    events = [(enter, 1, False) for enter, _ in reads] + [(enter, 1, True) for enter, _ in writes]
    events += [(exit_, 0, False) for _, exit_ in reads] + [(exit_, 0, True) for _, exit_ in writes]
    held = {False: 0, True: 0}
    entries = []
    for _, entering, is_write in sorted(events):  # exits (0) before entries (1) at a tie
        if entering:
            entries.append((is_write, held[False], held[True]))
            held[is_write] += 1
        else:
            held[is_write] -= 1
    return entries


@dataclass(frozen=True)
class SharedGrants:
    """The sections of a read/write lock's readers and writers, merged on one time line."""

    reads: int
    writes: int
    reads_per_second: float  # over the span of all sections (first entry to last exit)
    writes_per_second: float
    conflicts: int  # entries while a writer held, or of a writer while anyone held
    most_readers: int  # the most read sections held at once

    @classmethod
    def of(cls, reads: Sequence[Sequence[int]], writes: Sequence[Sequence[int]]) -> SharedGrants:
        both = [*reads, *writes]
        if not both:
            return cls(0, 0, math.nan, math.nan, 0, 0)
        span_s = (max(exit_ for _, exit_ in both) - min(enter for enter, _ in both)) / 1e9
        entries = held_at_entries(reads, writes)
        conflicts = sum(1 for is_write, r, w in entries if w or (is_write and r))
        most = max((r + 1 for is_write, r, _ in entries if not is_write), default=0)

        def rate(count: int) -> float:
            return count / span_s if span_s > 0 else math.nan

        return cls(len(reads), len(writes), rate(len(reads)), rate(len(writes)), conflicts, most)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LeaseGrants:
    """The sections of a semaphore's holders, merged on one time line."""

    count: int
    per_second: float  # grants / (last exit - first entry)
    most_held: int  # the most sections held at once
    over_limit: int  # entries that made more than ``limit`` held at once

    @classmethod
    def of(cls, intervals: Sequence[Sequence[int]], limit: int) -> LeaseGrants:
        grants = Grants.of(intervals)
        held = [r + 1 for _, r, _ in held_at_entries(intervals)]
        over = sum(1 for n in held if n > limit)
        return cls(grants.count, grants.per_second, max(held, default=0), over)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def median(samples: Sequence[float]) -> float:
    """The median of the samples that are not NaN (NaN if there is none)."""
    ordered = sorted(x for x in samples if not math.isnan(x))
    if not ordered:
        return math.nan
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


@dataclass(frozen=True)
class RatioRange:
    """Per-round ratios of one row: their median and min-max over the rounds."""

    ratios: tuple[float, ...]  # the rounds' ratios that could be computed, in round order
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, ratios: Sequence[float | None]) -> RatioRange | None:
        known = tuple(r for r in ratios if r is not None and not math.isnan(r))
        if not known:
            return None
        return cls(known, median(known), min(known), max(known))

    @property
    def significant(self) -> bool:
        """False when the min-max range straddles (or touches) 1.00: the rounds disagree on
        which side is better, or there is no difference. One round alone has no range."""
        return len(self.ratios) < 2 or not self.low <= 1.0 <= self.high

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "significant": self.significant}


#: The fields of the ``cpu`` line of /proc/stat, in order (jiffies since boot). ``guest``
#: and ``guest_nice`` are already counted in ``user`` and ``nice``.
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpu_times(proc_stat: str) -> dict[str, int]:
    """The aggregate ``cpu`` line of /proc/stat's text, as jiffies per field."""
    for line in proc_stat.splitlines():
        name, *numbers = line.split()
        if name == "cpu":
            padded = [*numbers, *("0",) * len(CPU_FIELDS)]  # old kernels: fewer fields
            return {field: int(padded[i]) for i, field in enumerate(CPU_FIELDS)}
    raise ValueError("no aggregate 'cpu' line in /proc/stat")


@dataclass(frozen=True)
class CpuShare:
    """How the machine's CPUs spent an interval, in percent of all their jiffies."""

    steal_pct: float  # taken by the hypervisor for other guests: this machine could not run
    busy_pct: float  # user, system, irq... (neither idle, iowait nor steal)

    @classmethod
    def between(cls, before: dict[str, int], after: dict[str, int]) -> CpuShare:
        delta = {field: after[field] - before[field] for field in CPU_FIELDS}
        total = sum(delta.values())
        if total <= 0:
            return cls(math.nan, math.nan)
        idle = delta["idle"] + delta["iowait"] + delta["steal"]
        return cls(100 * delta["steal"] / total, 100 * (total - idle) / total)
