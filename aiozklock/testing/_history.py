"""History checker for lock tests (fault-matrix C.3).

Every holder records its critical sections (client, fencing token, enter, exit), with
``time.monotonic()`` (one host, one clock; system-wide on Linux, so records from child
processes can be merged). :meth:`History.check` then verifies mutual exclusion and that
tokens strictly increase in grant order. :class:`FencedStore` models a resource that
accepts a write only if its token is at least the highest token seen.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass, field
from types import TracebackType

__all__ = [
    "CriticalSection",
    "FencedStore",
    "FencedWrite",
    "History",
    "HistoryReport",
    "SectionRecorder",
]

logger = logging.getLogger(__name__)

SectionPair = tuple["CriticalSection", "CriticalSection"]


@dataclass(frozen=True, slots=True)
class CriticalSection:
    client: str
    token: int
    enter: float
    exit: float

    @property
    def duration(self) -> float:
        return self.exit - self.enter

    def same_grant(self, other: CriticalSection) -> bool:
        return self.client == other.client and self.token == other.token


@dataclass(frozen=True)
class HistoryReport:
    sections: int
    overlaps: tuple[SectionPair, ...]  # (earlier, later) by enter time
    max_overlap: float  # seconds; 0.0 if none
    token_order_violations: tuple[SectionPair, ...]  # (previous, offending) in enter order
    ok: bool

    def __str__(self) -> str:
        lines = [
            f"{self.sections} critical sections: "
            + ("OK" if self.ok else "FAILED")
            + f"; {len(self.overlaps)} overlapping pair(s)"
            + (f" (max {self.max_overlap * 1000:.1f} ms)" if self.overlaps else "")
            + f"; {len(self.token_order_violations)} token-order violation(s)"
        ]
        for earlier, later in self.overlaps[:10]:
            amount = min(earlier.exit, later.exit) - later.enter
            lines.append(
                f"  overlap {amount * 1000:.1f} ms: {earlier.client}#{earlier.token} "
                f"[{earlier.enter:.3f}, {earlier.exit:.3f}] vs {later.client}#{later.token} "
                f"[{later.enter:.3f}, {later.exit:.3f}]"
            )
        for previous, offending in self.token_order_violations[:10]:
            lines.append(
                f"  token order: {offending.client}#{offending.token} entered at "
                f"{offending.enter:.3f} after {previous.client}#{previous.token}"
            )
        return "\n".join(lines)


class SectionRecorder:
    """Records one critical section; usable with ``with`` and ``async with``.

    ``exit`` is taken in the equivalent of a ``finally``: on completion, cancellation or
    an exception such as ``LockLost``.
    """

    def __init__(self, history: History, client: str, token: int) -> None:
        self._history = history
        self._client = client
        self._token = token
        self._enter: float | None = None

    def __enter__(self) -> SectionRecorder:
        self._enter = time.monotonic()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        exit_time = time.monotonic()
        assert self._enter is not None, "section exited without being entered"
        self._history.record(self._client, self._token, self._enter, exit_time)

    async def __aenter__(self) -> SectionRecorder:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


@dataclass
class History:
    sections: list[CriticalSection] = field(default_factory=list)

    def record(self, client: str, token: int, enter: float, exit: float) -> CriticalSection:
        """Record a finished section (times from ``time.monotonic()``)."""
        if exit < enter:
            raise ValueError(f"section exits before it enters: {enter} > {exit}")
        section = CriticalSection(client, token, enter, exit)
        self.sections.append(section)  # list.append is atomic under the GIL
        return section

    def section(self, client: str, token: int) -> SectionRecorder:
        """``with history.section("a", token):`` (or ``async with``) around the work."""
        return SectionRecorder(self, client, token)

    def check(self, *, slack: float = 0.0) -> HistoryReport:
        """Mutual exclusion and token order.

        Overlap: after sorting by ``enter``, a later section that enters before an earlier
        one exits, belonging to a different client or token, by more than ``slack``
        seconds (0 = strict). Token order: in ``enter`` order each token must be strictly
        greater than the previous section's, except that consecutive sections of the same
        client and token are one grant (a holder may record several sections per grant).
        """
        ordered = sorted(self.sections, key=lambda s: (s.enter, s.exit))
        overlaps: list[SectionPair] = []
        max_overlap = 0.0
        for i, earlier in enumerate(ordered):
            for later in ordered[i + 1 :]:
                if later.enter >= earlier.exit:
                    break  # sorted by enter: nothing further can overlap `earlier`
                if earlier.same_grant(later):
                    continue
                amount = min(earlier.exit, later.exit) - later.enter
                if amount > slack:
                    overlaps.append((earlier, later))
                    max_overlap = max(max_overlap, amount)
        violations: list[SectionPair] = []
        for previous, current in itertools.pairwise(ordered):
            if current.token <= previous.token and not current.same_grant(previous):
                violations.append((previous, current))
        report = HistoryReport(
            sections=len(ordered),
            overlaps=tuple(overlaps),
            max_overlap=max_overlap,
            token_order_violations=tuple(violations),
            ok=not overlaps and not violations,
        )
        if not report.ok:
            logger.warning("history check failed:\n%s", report)
        return report


@dataclass(frozen=True, slots=True)
class FencedWrite:
    client: str
    token: int
    value: object
    t: float
    accepted: bool


@dataclass
class FencedStore:
    """A resource protected by fencing tokens: stale writes are rejected and recorded."""

    accepted: list[FencedWrite] = field(default_factory=list)
    rejected: list[FencedWrite] = field(default_factory=list)
    max_token: int | None = None
    value: object = None

    def write(self, client: str, token: int, value: object) -> bool:
        """Apply the write iff ``token >= max_token``; returns whether it was accepted."""
        ok = self.max_token is None or token >= self.max_token
        record = FencedWrite(client, token, value, time.monotonic(), ok)
        if ok:
            self.max_token = token
            self.value = value
            self.accepted.append(record)
        else:
            self.rejected.append(record)
            logger.debug(
                "rejected stale write by %s with token %d < %s", client, token, self.max_token
            )
        return ok
