"""What :meth:`History.check <aiozklock.testing.History.check>` found: the
:class:`HistoryReport`, its verdict and its rendering as text (one small function per kind of
finding)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ._history_records import (
    AcquireAttempt,
    CriticalSection,
    Crowding,
    FencedWrite,
    Margin,
    Pause,
    SectionPair,
    StaleWrite,
)

__all__ = ["HistoryReport"]

_SHOWN = 10  # findings of one kind listed in full


@dataclass(frozen=True)
class HistoryReport:
    """What :meth:`History.check` found: ``ok`` if every check passed, :meth:`failures` one
    line per failed check, ``str()`` the details."""

    sections: int
    overlaps: tuple[SectionPair, ...]  # (earlier, later) by enter time; non-paused sections
    max_overlap: float  # seconds; 0.0 if none
    token_order_violations: tuple[SectionPair, ...]  # (previous, offending) in enter order
    ok: bool
    #: sections of a client whose process was stopped during them (judged by fencing)
    paused_sections: int = 0
    #: overlaps with at least one paused section: allowed, as long as fencing holds
    paused_overlaps: tuple[SectionPair, ...] = ()
    #: stale writes, all of which the store must have rejected
    stale_writes: tuple[StaleWrite, ...] = ()
    #: stale writes that the store accepted: fencing failed
    fencing_violations: tuple[StaleWrite, ...] = ()
    #: writes of a *non-paused* holder that were rejected: it acted after a newer holder did
    unpaused_rejections: tuple[StaleWrite, ...] = ()
    #: accepted writes of a holder whose lock had already been granted to a newer token that
    #: had not reached the store yet: ordered before it, so fencing allows them
    late_writes: int = 0
    attempts: int = 0
    #: (attempt, seconds over its bound after discounting its process's pauses)
    attempt_violations: tuple[tuple[AcquireAttempt, float], ...] = ()
    max_attempt_overrun: float = 0.0  # max(duration - pauses - bound), may be negative
    #: holders stopped by a loss whose session then died, by cause (see Margin)
    margins: tuple[Margin, ...] = ()
    imprecise_margins: int = 0  # the observer was disconnected when the node went
    #: sections covered by a pause with ``react_within`` that exited later than that
    slow_reactions: tuple[tuple[CriticalSection, Pause], ...] = ()
    #: writes of a non-paused lease holder that reached the store after its ``expires_at``
    expired_writes: tuple[tuple[CriticalSection, FencedWrite], ...] = ()
    #: how many holders may hold one resource at once (``History.max_holders``)
    max_holders: int = 1
    #: with ``max_holders > 1``: the most non-paused grants seen holding one resource at once
    peak_holders: int = 0
    #: with ``max_holders > 1``: windows with more holders than that (non-paused sections)
    crowded: tuple[Crowding, ...] = ()
    #: ... more such windows once paused sections count too (reported, allowed: nothing
    #: stops a stopped process, and no single store can fence a semaphore's holders)
    paused_crowded: tuple[Crowding, ...] = ()
    #: (section, act time): acts of non-paused sections after the server deleted their node
    released_acts: tuple[tuple[CriticalSection, float], ...] = ()
    #: ... acts of paused sections after that: nothing could stop them (reported, allowed)
    paused_released_acts: int = 0
    counters: dict[str, int] = field(default_factory=dict)

    def margin_values(self, cause: str | None = "timeout") -> list[float]:
        """Sorted margins of one cause (``None``: all)."""
        return sorted(m.value for m in self.margins if cause is None or m.cause == cause)

    def margin_summary(self) -> str:
        """One line per cause: count, min, median, max, how many negative."""
        if not self.margins:
            return "no session died under a holder"
        parts = []
        for cause in sorted({m.cause for m in self.margins}):
            values = self.margin_values(cause)
            negative = sum(1 for value in values if value < 0)
            parts.append(
                f"{cause}: {len(values)}, min {values[0] * 1000:+.0f} ms, median "
                f"{statistics.median(values) * 1000:+.0f} ms, max {values[-1] * 1000:+.0f} ms"
                f" ({negative} negative)"
            )
        return "server release - holder exit: " + "; ".join(parts)

    def failures(self) -> list[str]:
        """One line per failed check (empty if ``ok``)."""
        problems = []
        if self.overlaps:
            problems.append(f"{len(self.overlaps)} overlapping pair(s) of non-paused sections")
        if self.token_order_violations:
            problems.append(f"{len(self.token_order_violations)} token-order violation(s)")
        if self.fencing_violations:
            problems.append(f"{len(self.fencing_violations)} stale write(s) accepted")
        if self.unpaused_rejections:
            problems.append(
                f"{len(self.unpaused_rejections)} write(s) of non-paused holders rejected"
            )
        if self.attempt_violations:
            problems.append(f"{len(self.attempt_violations)} acquire attempt(s) over bound")
        if self.slow_reactions:
            problems.append(f"{len(self.slow_reactions)} holder(s) slow to react to a loss")
        if self.expired_writes:
            problems.append(f"{len(self.expired_writes)} write(s) after the lease expired")
        if self.crowded:
            problems.append(
                f"{len(self.crowded)} window(s) with more than {self.max_holders} holders"
            )
        if self.released_acts:
            problems.append(f"{len(self.released_acts)} act(s) after the node was deleted")
        return problems

    def __str__(self) -> str:
        return "\n".join(
            [
                _verdict(self),
                *_holder_lines(self),
                *_fencing_lines(self),
                *_attempt_lines(self),
                *_loss_lines(self),
            ]
        )


def _verdict(report: HistoryReport) -> str:
    """OK or FAILED, with the counts of the exclusion checks (or of the concurrency one)."""
    r = report
    verdict = f"{r.sections} critical sections: " + ("OK" if r.ok else "FAILED")
    if r.max_holders > 1:
        return verdict + (
            f"; at most {r.peak_holders} holder(s) at once (limit {r.max_holders}); "
            f"{len(r.crowded)} window(s) over the limit"
        )
    return verdict + (
        f"; {len(r.overlaps)} overlapping pair(s)"
        + (f" (max {r.max_overlap * 1000:.1f} ms)" if r.overlaps else "")
        + f"; {len(r.token_order_violations)} token-order violation(s)"
    )


def _holder_lines(report: HistoryReport) -> list[str]:
    """Crowded windows, acts after release, overlapping pairs, token-order violations."""
    r = report
    lines = []
    for window in r.crowded[:_SHOWN]:
        holders = ", ".join(f"{s.client}#{s.token}" for s in window.holders)
        lines.append(
            f"  {len(window.holders)} holders for {(window.end - window.start) * 1000:.1f}"
            f" ms from {window.start:.3f}: {holders}"
        )
    for section, act in r.released_acts[:_SHOWN]:
        lines.append(f"  act after release: {section.describe()} acted at {act:.3f}")
    for earlier, later in r.overlaps[:_SHOWN]:
        amount = min(earlier.exit, later.exit) - later.enter
        lines.append(
            f"  overlap {amount * 1000:.1f} ms: {earlier.client}#{earlier.token} "
            f"[{earlier.enter:.3f}, {earlier.exit:.3f}] vs {later.client}#{later.token} "
            f"[{later.enter:.3f}, {later.exit:.3f}]"
        )
    for previous, offending in r.token_order_violations[:_SHOWN]:
        lines.append(
            f"  token order: {offending.client}#{offending.token} entered at "
            f"{offending.enter:.3f} after {previous.client}#{previous.token}"
        )
    return lines


def _fencing_lines(report: HistoryReport) -> list[str]:
    """Paused sections and stale writes; the writes that fencing should have stopped."""
    r = report
    lines = []
    if r.paused_sections or r.stale_writes or r.late_writes:
        lines.append(
            f"paused sections {r.paused_sections} ({len(r.paused_overlaps)} "
            f"overlapping, judged by fencing); stale writes {len(r.stale_writes)}, "
            f"accepted {len(r.fencing_violations)}; late writes before the newer "
            f"token reached the store {r.late_writes}"
        )
    for stale in [*r.fencing_violations, *r.unpaused_rejections][:_SHOWN]:
        w = stale.write
        verdict = "ACCEPTED" if w.accepted else "rejected (non-paused holder)"
        lines.append(
            f"  stale write {verdict}: {w.client}#{w.token} at {w.t:.3f} after token "
            f"{stale.newer_token}"
        )
    return lines


def _attempt_lines(report: HistoryReport) -> list[str]:
    """Acquire attempts, and those over their bound."""
    r = report
    lines = []
    if r.attempts:
        lines.append(
            f"acquire attempts {r.attempts}: {len(r.attempt_violations)} over bound"
            f" (max overrun {r.max_attempt_overrun * 1000:+.0f} ms vs bound)"
        )
    for attempt, over in r.attempt_violations[:_SHOWN]:
        lines.append(
            f"  attempt {attempt.client} [{attempt.start:.3f}, {attempt.end:.3f}] "
            f"{attempt.outcome}: {over * 1000:.0f} ms over its {attempt.bound:.1f} s bound"
        )
    return lines


def _loss_lines(report: HistoryReport) -> list[str]:
    """How holders met the loss of their lock: slow reactions, writes after a lease's
    expiry, and the margins."""
    r = report
    lines = []
    for section, pause in r.slow_reactions[:_SHOWN]:
        lines.append(
            f"  slow reaction: {section.describe()} exited "
            f"{(section.exit - pause.end) * 1000:.0f} ms after its session was closed "
            f"({pause.reason}; bound {(pause.react_within or 0) * 1000:.0f} ms)"
        )
    for section, write in r.expired_writes[:_SHOWN]:
        lines.append(
            f"  write after expiry: {section.describe()} wrote at {write.t:.3f}, "
            f"{(write.t - (section.expires_at or 0.0)) * 1000:.0f} ms after expires_at"
        )
    if r.margins or r.imprecise_margins:
        lines.append(r.margin_summary())
        if r.imprecise_margins:
            lines.append(f"  {r.imprecise_margins} margin(s) not measured precisely")
    return lines
