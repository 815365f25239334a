"""History checker for lock tests (fault-matrix C.3).

Every holder records its critical sections (client, fencing token, enter, exit), with
``time.monotonic()`` (one host, one clock; system-wide on Linux, so records from child
processes can be merged). :meth:`History.check` then verifies mutual exclusion and that
tokens strictly increase in grant order. :class:`FencedStore` models a resource that
accepts a write only if its token is at least the highest token seen.

For fault runs (the nemesis) a history also takes:

* process pauses (:meth:`History.record_pause`): a section of a client whose process was
  stopped (SIGSTOP) between the start of its acquire attempt and its exit is *paused*. A
  paused holder cannot be told anything, so its sections are judged by fencing instead of by
  overlap: every write it makes after a newer token reached the store must be rejected;
* acquire attempts with their bound (:meth:`History.record_attempt`): every attempt must end
  within its bound, not counting the time its process was stopped;
* the server-side release time of lock nodes (:meth:`History.record_deletion`, from an
  independent observer's NodeDeleted) and the sessions that died
  (:meth:`History.record_session_lost`): the margin ``server release - holder exit`` of every
  holder stopped by a loss whose session then died;
* counters (:meth:`History.count`): faults by kind and anything else worth reporting.

Sections may cover several resources (``resources``: a multi-lock's paths): mutual exclusion
is then "no two overlapping holders of ANY one resource", and token order and fencing are
judged per resource, against one :class:`FencedStore` per resource (``check(stores=...)``).
A section without ``resources`` covers the one default resource ``""``.

A lease section (``expires_at`` set: a TTL lease, not bound to a session) is judged by its
own validity: the server may delete the lease from ``expires_at`` on, so every write of a
non-paused lease holder must reach the store by then (``expired_writes``); a session loss
proves nothing about a lease, so its margins (cause ``ttl``) are measured from the
observer's deletion alone.

A semaphore's history (``History(max_holders=N)``) allows up to ``N`` holders of a resource at
once: the pairwise overlap check and the token order give way to a concurrency check (no
instant at which more than ``N`` grants of non-paused sections hold one resource:
``crowded``), since concurrent holders enter in any token order and share no single fenced
store. What each holder does is judged by its ``acts`` instead: every act of a non-paused
section must come before the server deleted its node (``released_acts``).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType

from ._history_checks import (
    Judged,
    check_exclusion,
    check_holders,
    check_released_acts,
    check_token_order,
    count_outcomes,
)
from ._history_fencing import check_fencing, check_lease_validity
from ._history_records import AcquireAttempt, CriticalSection, FencedStore, Pause
from ._history_report import HistoryReport
from ._history_timing import check_attempts, check_reactions, measure_margins

__all__ = ["History", "SectionRecorder"]

logger = logging.getLogger(__name__)


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
    """What happened in a run, for :meth:`check`: sections, pauses, attempts, deletions,
    sessions and counters (see the module docstring). ``History(max_holders=N)`` judges a
    semaphore of ``N`` leases; raises ``ValueError`` if ``max_holders`` < 1."""

    sections: list[CriticalSection] = field(default_factory=list)
    pauses: list[Pause] = field(default_factory=list)
    attempts: list[AcquireAttempt] = field(default_factory=list)
    #: lock node name -> when an observer saw the server delete it
    deletions: dict[str, float] = field(default_factory=dict)
    #: nodes whose deletion was seen late (the observer was disconnected)
    imprecise_deletions: set[str] = field(default_factory=set)
    #: session id -> when its client learned the session was gone
    lost_sessions: dict[int, float] = field(default_factory=dict)
    #: session id -> its client's state changes (time, state name), in time order
    session_states: dict[int, list[tuple[float, str]]] = field(default_factory=dict)
    counters: Counter[str] = field(default_factory=Counter)
    #: how many holders may hold one resource at once: 1 for a lock, ``max_leases`` for a
    #: semaphore (see the module docstring)
    max_holders: int = 1

    def __post_init__(self) -> None:
        if self.max_holders < 1:
            raise ValueError(f"max_holders must be >= 1, not {self.max_holders}")

    def record(
        self,
        client: str,
        token: int,
        enter: float,
        exit: float,
        *,
        outcome: str = "completed",
        node: str | None = None,
        session_id: int = 0,
        requested: float | None = None,
        resources: Iterable[str] = (),
        expires_at: float | None = None,
        shared: bool = False,
        acts: Iterable[float] = (),
    ) -> CriticalSection:
        """Record a finished section (times from ``time.monotonic()``); ``resources``,
        ``expires_at``, ``shared`` and ``acts``: see :class:`CriticalSection`. Raises
        ``ValueError`` if it exits before it enters."""
        if exit < enter:
            raise ValueError(f"section exits before it enters: {enter} > {exit}")
        section = CriticalSection(
            client,
            token,
            enter,
            exit,
            outcome,
            node,
            session_id,
            requested,
            tuple(resources),
            expires_at,
            shared,
            tuple(acts),
        )
        self.sections.append(section)  # list.append is atomic under the GIL
        return section

    def section(self, client: str, token: int) -> SectionRecorder:
        """``with history.section("a", token):`` (or ``async with``) around the work."""
        return SectionRecorder(self, client, token)

    def record_pause(
        self,
        client: str,
        start: float,
        end: float,
        *,
        reason: str = "SIGSTOP",
        react_within: float | None = None,
    ) -> Pause:
        """``client`` could not be told from ``start`` until ``end`` (see :class:`Pause`)."""
        if end < start:
            raise ValueError(f"pause ends before it starts: {start} > {end}")
        pause = Pause(client, start, end, reason, react_within)
        self.pauses.append(pause)
        return pause

    def record_attempt(
        self, client: str, start: float, end: float, *, bound: float, outcome: str
    ) -> AcquireAttempt:
        """An acquire attempt that took from ``start`` to ``end`` and may take ``bound`` s."""
        if end < start:
            raise ValueError(f"attempt ends before it starts: {start} > {end}")
        attempt = AcquireAttempt(client, start, end, bound, outcome)
        self.attempts.append(attempt)
        return attempt

    def record_deletion(self, node: str, t: float, *, precise: bool = True) -> None:
        """An independent observer saw the server delete lock node ``node`` at ``t``."""
        if node not in self.deletions:
            self.deletions[node] = t
            if not precise:
                self.imprecise_deletions.add(node)

    def record_session_lost(self, session_id: int, t: float) -> None:
        """The client that owned ``session_id`` learned at ``t`` that the session is gone."""
        if session_id:
            self.lost_sessions.setdefault(session_id, t)

    def record_session_state(self, session_id: int, state: str, t: float) -> None:
        """The client of ``session_id`` went to ``state`` (``CONNECTED``, ``SUSPENDED``...)."""
        if session_id:
            changes = self.session_states.setdefault(session_id, [])
            changes.append((t, state))
            changes.sort()

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] += n

    # ---------------------------------------------------------------- checks

    # ---------------------------------------------------------------- checks

    def paused(self, section: CriticalSection) -> bool:
        """Whether a pause covers ``section`` (it is then judged by fencing)."""
        return any(p.covers(section) for p in self.pauses)

    def check(
        self,
        *,
        slack: float = 0.0,
        store: FencedStore | None = None,
        stores: Mapping[str, FencedStore] | None = None,
    ) -> HistoryReport:
        """Mutual exclusion and token order; with pauses, attempts, deletions or stores, the
        checks of a fault run too (see the module docstring).

        Overlap: after sorting by ``enter``, a later section that enters before an earlier
        one exits, shares a resource with it, and belongs to a different client or token,
        by more than ``slack`` seconds (0 = strict), unless both are shared (read lock
        sections); pairs with a paused section are reported apart. Token order: per resource,
        in ``enter`` order each non-paused section's token must be strictly greater than the
        previous one's (with shared sections: see ``_token_order``), except that consecutive
        sections of the same client and token are one grant (a holder may record several
        sections per grant). With ``max_holders > 1`` (a semaphore) both give way to the
        concurrency check: no window longer than ``slack`` in which more than
        ``max_holders`` grants of non-paused sections hold one resource. Acts (any recipe
        that records them): no act of a non-paused section more than ``slack`` after an
        observer saw its node deleted (precisely). ``store`` is the store of the default
        resource ``""``; ``stores`` maps each resource to its own store. Raises
        ``ValueError`` if both are given.
        """
        if store is not None and stores is not None:
            raise ValueError("pass store= or stores=, not both")
        judged = Judged.of(self, slack, dict(stores or {}) if store is None else {"": store})
        exclusion = check_exclusion(judged)
        order = check_token_order(judged)
        holders = check_holders(judged)
        acts = check_released_acts(judged)
        fencing = check_fencing(judged)
        expired = check_lease_validity(judged)
        attempts = check_attempts(judged)
        slow = check_reactions(judged)
        margins = measure_margins(judged)
        failed: list[Sequence[object]] = [
            exclusion.overlaps,
            order,
            holders.crowded,
            acts.unpaused,
            fencing.violations,
        ]
        failed += [fencing.unpaused, expired, attempts.violations, slow]
        report = HistoryReport(
            sections=len(judged.ordered),
            overlaps=tuple(exclusion.overlaps),
            max_overlap=exclusion.max_overlap,
            token_order_violations=tuple(order),
            ok=not any(failed),
            paused_sections=len(judged.paused),
            paused_overlaps=tuple(exclusion.paused_overlaps),
            stale_writes=tuple(fencing.stale),
            fencing_violations=tuple(fencing.violations),
            unpaused_rejections=tuple(fencing.unpaused),
            late_writes=fencing.late,
            attempts=len(self.attempts),
            attempt_violations=tuple(attempts.violations),
            max_attempt_overrun=attempts.max_overrun,
            margins=tuple(margins.margins),
            imprecise_margins=margins.imprecise,
            slow_reactions=tuple(slow),
            expired_writes=tuple(expired),
            max_holders=self.max_holders,
            peak_holders=holders.peak,
            crowded=tuple(holders.crowded),
            paused_crowded=tuple(holders.paused_crowded),
            released_acts=tuple(acts.unpaused),
            paused_released_acts=acts.paused,
            counters=count_outcomes(judged, exclusion.disjoint),
        )
        if not report.ok:
            logger.warning("history check failed:\n%s", report)
        return report
