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
