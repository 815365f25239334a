"""The nemesis's faults as they ran (``FaultRecord``: what each hit, when) and their count per
kind: how many faults of each kind ran (and were skipped), and the safety failures found
while one was active: overlapping pairs of holders and stale writes the store accepted. A
failure is put down to each fault active from its start to a session timeout after its heal
(what a fault breaks may show only once a session expires)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ._history_records import CriticalSection, StaleWrite
from ._nemesis_plan import FaultSpec

__all__ = ["FaultRecord", "KindTally", "render_tally", "tally_by_kind"]


@dataclass
class FaultRecord:
    """One executed fault: times are seconds since the run's start."""

    group: int
    spec: FaultSpec
    target: str = "?"
    start: float = 0.0
    end: float = 0.0
    note: str = ""

    def __str__(self) -> str:
        option = f"({self.spec.option})" if self.spec.option else ""
        note = f"  [{self.note}]" if self.note else ""
        return (
            f"#{self.group:<3} {self.start:7.2f}-{self.end:7.2f} s  "
            f"{self.spec.kind}{option} -> {self.target}{note}"
        )


@dataclass
class KindTally:
    """One fault kind's count in a run."""

    run: int = 0  # faults executed (skipped ones included)
    skipped: int = 0  # ... that found nothing to hit (e.g. a member still down)
    overlaps: int = 0  # overlapping pairs of non-paused holders while one was active
    stale_accepted: int = 0  # stale writes accepted by the store while one was active


def tally_by_kind(
    faults: Sequence[FaultRecord],
    overlaps: Sequence[tuple[CriticalSection, CriticalSection]],
    stale_accepted: Sequence[StaleWrite],
    *,
    started: float,
    session_timeout: float,
) -> dict[str, KindTally]:
    """The count of each kind that ran; ``started`` is the run's start (``time.monotonic()``,
    the faults' times are relative to it)."""
    tallies: dict[str, KindTally] = {}
    pairs: dict[str, set[int]] = {}  # each pair and write counted once per kind
    writes: dict[str, set[int]] = {}
    for record in faults:
        kind = record.spec.kind
        tally = tallies.setdefault(kind, KindTally())
        tally.run += 1
        tally.skipped += "skipped" in record.note
        low, high = record.start + started, record.end + started + session_timeout
        pairs.setdefault(kind, set()).update(
            i
            for i, (a, b) in enumerate(overlaps)
            if max(a.enter, b.enter) <= high and min(a.exit, b.exit) >= low
        )
        writes.setdefault(kind, set()).update(
            i for i, stale in enumerate(stale_accepted) if low <= stale.write.t <= high
        )
    for kind, tally in tallies.items():
        tally.overlaps, tally.stale_accepted = len(pairs[kind]), len(writes[kind])
    return dict(sorted(tallies.items()))


def render_tally(tallies: dict[str, KindTally]) -> list[str]:
    """One line per kind: ``kind: N run (S skipped), O overlap(s), W stale write(s) accepted``."""
    return [
        f"  {kind}: {t.run} run"
        + (f" ({t.skipped} skipped)" if t.skipped else "")
        + f", {t.overlaps} overlapping pair(s), {t.stale_accepted} stale write(s) accepted "
        "while active"
        for kind, t in tallies.items()
    ]
