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

import bisect
import itertools
import logging
import statistics
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType

__all__ = [
    "AcquireAttempt",
    "CriticalSection",
    "Crowding",
    "FencedRead",
    "FencedStore",
    "FencedWrite",
    "History",
    "HistoryReport",
    "Margin",
    "Pause",
    "SectionRecorder",
    "StaleWrite",
]

logger = logging.getLogger(__name__)

SectionPair = tuple["CriticalSection", "CriticalSection"]

#: Section outcomes where the holder was stopped by a loss of the lock (as opposed to finishing
#: its work, or being cancelled from outside): these are the ones a margin is measured for.
LOSS_OUTCOMES = frozenset({"lost", "invalid", "rejected"})


@dataclass(frozen=True, slots=True)
class CriticalSection:
    """One critical section: ``enter`` and ``exit`` are ``time.monotonic()``.

    The optional fields come from fault runs: ``outcome`` is how the holder stopped acting
    (``completed``, ``lost`` = cancelled by the loss policy or ``LockLost``, ``invalid`` = its
    own pre-write check said the lock may be gone, ``rejected`` = the fenced store refused its
    token, ``cancelled`` = cancelled from outside, ``error``); ``node`` its lock node's name,
    ``session_id`` the session that owned it, ``requested`` when the acquire attempt that led
    to it started. ``resources``: what it held (empty: the default resource ``""``);
    ``expires_at``: for a lease, the instant from which the server may delete it, as known at
    the holder's last pre-write check. ``shared``: a read lock's section, which may overlap
    other shared sections (never an exclusive one). ``acts``: when it acted on the protected
    resource (a semaphore holder, which has no single fenced store to write to).
    """

    client: str
    token: int
    enter: float
    exit: float
    outcome: str = "completed"
    node: str | None = None
    session_id: int = 0
    requested: float | None = None
    resources: tuple[str, ...] = ()
    expires_at: float | None = None
    shared: bool = False
    acts: tuple[float, ...] = ()

    @property
    def keys(self) -> tuple[str, ...]:
        """The resources it covers (``("",)`` when none are named)."""
        return self.resources or ("",)

    def shares(self, other: CriticalSection) -> bool:
        """Whether both sections cover at least one common resource."""
        return not set(self.keys).isdisjoint(other.keys)

    @property
    def duration(self) -> float:
        return self.exit - self.enter

    def same_grant(self, other: CriticalSection) -> bool:
        return self.client == other.client and self.token == other.token

    def describe(self) -> str:
        return f"{self.client}#{self.token} [{self.enter:.3f}, {self.exit:.3f}] {self.outcome}"


@dataclass(frozen=True, slots=True)
class Crowding:
    """A window from ``start`` to ``end`` in which more than ``History.max_holders`` grants
    held ``resource`` at once; ``holders``: the sections holding it when the window opened."""

    resource: str
    start: float
    end: float
    holders: tuple[CriticalSection, ...]


@dataclass(frozen=True, slots=True)
class Pause:
    """A window in which ``client`` could not be told that its lock was gone.

    ``reason="SIGSTOP"``: its process was stopped from ``start`` to ``end``; every section
    between its acquire request and its exit touching the window is judged by fencing.
    ``reason="expire"`` (or any other): its session was closed from elsewhere between
    ``start`` and ``end`` (the server deletes the ephemerals and notifies watchers *before*
    it closes the holder's connection, so no client can know first); sections entered before
    ``end`` and still running at ``start`` are judged by fencing, and must exit within
    ``react_within`` seconds after ``end`` if given.
    """

    client: str
    start: float
    end: float
    reason: str = "SIGSTOP"
    react_within: float | None = None

    def covers(self, section: CriticalSection) -> bool:
        if self.client != section.client or self.start >= section.exit:
            return False
        if self.reason == "SIGSTOP":
            begin = section.requested if section.requested is not None else section.enter
            return self.end > begin
        return section.enter < self.end

    def overlap(self, start: float, end: float) -> float:
        return max(0.0, min(self.end, end) - max(self.start, start))


@dataclass(frozen=True, slots=True)
class AcquireAttempt:
    """One acquire attempt: ``outcome`` is ``acquired``, ``timeout``, ``error:<Type>``,
    ``cancelled`` or ``unfinished``; ``bound`` the seconds it may take at most."""

    client: str
    start: float
    end: float
    bound: float
    outcome: str

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Margin:
    """``released`` (the server-side deletion of the section's node, seen by an observer)
    minus the section's ``exit``: positive when the holder stopped before the server let the
    lock go. ``cause``: ``timeout`` (the server expired a silent session), or the reason of
    the :class:`Pause` that covered the section (``SIGSTOP``, ``expire``)."""

    section: CriticalSection
    released: float
    cause: str = "timeout"

    @property
    def value(self) -> float:
        return self.released - self.section.exit


@dataclass(frozen=True, slots=True)
class StaleWrite:
    """A write whose token was below a newer token that had already reached the store."""

    write: FencedWrite
    newer_token: int
    paused: bool  # it came from a paused section (or from no known section)


@dataclass(frozen=True)
class HistoryReport:
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
        verdict = f"{self.sections} critical sections: " + ("OK" if self.ok else "FAILED")
        if self.max_holders > 1:
            verdict += (
                f"; at most {self.peak_holders} holder(s) at once (limit {self.max_holders}); "
                f"{len(self.crowded)} window(s) over the limit"
            )
        else:
            verdict += (
                f"; {len(self.overlaps)} overlapping pair(s)"
                + (f" (max {self.max_overlap * 1000:.1f} ms)" if self.overlaps else "")
                + f"; {len(self.token_order_violations)} token-order violation(s)"
            )
        lines = [verdict]
        for window in self.crowded[:10]:
            holders = ", ".join(f"{s.client}#{s.token}" for s in window.holders)
            lines.append(
                f"  {len(window.holders)} holders for {(window.end - window.start) * 1000:.1f}"
                f" ms from {window.start:.3f}: {holders}"
            )
        for section, act in self.released_acts[:10]:
            lines.append(f"  act after release: {section.describe()} acted at {act:.3f}")
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
        if self.paused_sections or self.stale_writes or self.late_writes:
            lines.append(
                f"paused sections {self.paused_sections} ({len(self.paused_overlaps)} "
                f"overlapping, judged by fencing); stale writes {len(self.stale_writes)}, "
                f"accepted {len(self.fencing_violations)}; late writes before the newer "
                f"token reached the store {self.late_writes}"
            )
        for stale in [*self.fencing_violations, *self.unpaused_rejections][:10]:
            w = stale.write
            verdict = "ACCEPTED" if w.accepted else "rejected (non-paused holder)"
            lines.append(
                f"  stale write {verdict}: {w.client}#{w.token} at {w.t:.3f} after token "
                f"{stale.newer_token}"
            )
        if self.attempts:
            lines.append(
                f"acquire attempts {self.attempts}: {len(self.attempt_violations)} over bound"
                f" (max overrun {self.max_attempt_overrun * 1000:+.0f} ms vs bound)"
            )
        for attempt, over in self.attempt_violations[:10]:
            lines.append(
                f"  attempt {attempt.client} [{attempt.start:.3f}, {attempt.end:.3f}] "
                f"{attempt.outcome}: {over * 1000:.0f} ms over its {attempt.bound:.1f} s bound"
            )
        for section, pause in self.slow_reactions[:10]:
            lines.append(
                f"  slow reaction: {section.describe()} exited "
                f"{(section.exit - pause.end) * 1000:.0f} ms after its session was closed "
                f"({pause.reason}; bound {(pause.react_within or 0) * 1000:.0f} ms)"
            )
        for section, write in self.expired_writes[:10]:
            lines.append(
                f"  write after expiry: {section.describe()} wrote at {write.t:.3f}, "
                f"{(write.t - (section.expires_at or 0.0)) * 1000:.0f} ms after expires_at"
            )
        if self.margins or self.imprecise_margins:
            lines.append(self.margin_summary())
            if self.imprecise_margins:
                lines.append(f"  {self.imprecise_margins} margin(s) not measured precisely")
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

    def _connected_since(self, session_id: int, t: float) -> bool:
        """Whether the client was connected in ``session_id`` at ``t`` or at any time after
        (and so may have deleted its node itself, e.g. by its janitor)."""
        state_at_t = "CONNECTED"  # no change recorded before t: assume it was connected
        for when, state in self.session_states.get(session_id, []):
            if when <= t:
                state_at_t = state
            elif state == "CONNECTED":
                return True
        return state_at_t == "CONNECTED"

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] += n

    # ---------------------------------------------------------------- checks

    def paused(self, section: CriticalSection) -> bool:
        """Whether a pause covers ``section`` (it is then judged by fencing)."""
        return any(p.covers(section) for p in self.pauses)

    def _cause(self, section: CriticalSection) -> str:
        for pause in self.pauses:
            if pause.covers(section):
                return pause.reason
        return "timeout"

    def _paused_time(self, client: str, start: float, end: float) -> float:
        return sum(
            p.overlap(start, end)
            for p in self.pauses
            if p.client == client and p.reason == "SIGSTOP"
        )

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
        by_resource = dict(stores or {}) if store is None else {"": store}
        ordered = sorted(self.sections, key=lambda s: (s.enter, s.exit))
        paused = {id(s) for s in ordered if self.paused(s)}
        judged = [s for s in ordered if id(s) not in paused]
        crowded, paused_crowded, peak = _concurrency(ordered, paused, self.max_holders, slack)
        if self.max_holders > 1:  # concurrent holders: neither pairs nor one token order
            overlaps: list[SectionPair] = []
            paused_overlaps: list[SectionPair] = []
            max_overlap, disjoint = 0.0, 0
            violations: list[SectionPair] = []
        else:
            overlaps, paused_overlaps, max_overlap, disjoint = _overlaps(ordered, paused, slack)
            violations = _token_order(judged)
        released_acts = self._released_acts(judged, slack)
        paused_acts = self._released_acts((s for s in ordered if id(s) in paused), slack)
        stale: list[StaleWrite] = []
        fencing_violations: list[StaleWrite] = []
        unpaused: list[StaleWrite] = []
        late = 0
        for resource, resource_store in sorted(by_resource.items()):
            covering = [s for s in ordered if resource in s.keys]
            found = _check_fencing(resource_store, covering, paused)
            stale += found[0]
            fencing_violations += found[1]
            unpaused += found[2]
            late += found[3]
        expired = _expired_writes(ordered, paused, by_resource, slack)
        attempt_violations, max_overrun = self._check_attempts()
        margins, imprecise = self._margins(ordered, paused)
        slow = [
            (section, pause)
            for section in ordered
            for pause in self.pauses
            if pause.react_within is not None
            and pause.covers(section)
            and section.exit > pause.end + pause.react_within
        ]
        outcomes = Counter(f"section:{s.outcome}" for s in ordered)
        outcomes.update(f"attempt:{a.outcome}" for a in self.attempts)
        counters = dict(self.counters + outcomes)
        if disjoint:
            counters["concurrent:disjoint"] = disjoint
        acts = sum(len(s.acts) for s in ordered)
        if acts:
            counters["acts"] = acts
        if by_resource:
            counters["store:accepted"] = sum(len(s.accepted) for s in by_resource.values())
            counters["store:rejected"] = sum(len(s.rejected) for s in by_resource.values())
        report = HistoryReport(
            sections=len(ordered),
            overlaps=tuple(overlaps),
            max_overlap=max_overlap,
            token_order_violations=tuple(violations),
            ok=not (
                overlaps
                or violations
                or fencing_violations
                or unpaused
                or attempt_violations
                or slow
                or expired
                or crowded
                or released_acts
            ),
            paused_sections=len(paused),
            paused_overlaps=tuple(paused_overlaps),
            stale_writes=tuple(stale),
            fencing_violations=tuple(fencing_violations),
            unpaused_rejections=tuple(unpaused),
            late_writes=late,
            attempts=len(self.attempts),
            attempt_violations=tuple(attempt_violations),
            max_attempt_overrun=max_overrun,
            margins=tuple(margins),
            imprecise_margins=imprecise,
            slow_reactions=tuple(slow),
            expired_writes=tuple(expired),
            max_holders=self.max_holders,
            peak_holders=peak,
            crowded=tuple(crowded),
            paused_crowded=tuple(paused_crowded),
            released_acts=tuple(released_acts),
            paused_released_acts=len(paused_acts),
            counters=counters,
        )
        if not report.ok:
            logger.warning("history check failed:\n%s", report)
        return report

    def _released_acts(
        self, sections: Iterable[CriticalSection], slack: float
    ) -> list[tuple[CriticalSection, float]]:
        """Acts of ``sections`` more than ``slack`` after the observer saw their node
        deleted; only precise deletions count (a late one proves nothing)."""
        return [
            (section, act)
            for section in sections
            if section.node is not None
            and section.node in self.deletions
            and section.node not in self.imprecise_deletions
            for act in section.acts
            if act > self.deletions[section.node] + slack
        ]

    def _check_attempts(self) -> tuple[list[tuple[AcquireAttempt, float]], float]:
        violations = []
        max_overrun = -float("inf") if self.attempts else 0.0
        for attempt in self.attempts:
            stopped = self._paused_time(attempt.client, attempt.start, attempt.end)
            overrun = attempt.duration - stopped - attempt.bound
            max_overrun = max(max_overrun, overrun)
            if overrun > 0:
                violations.append((attempt, overrun))
        return violations, max_overrun

    def _margins(
        self, ordered: Iterable[CriticalSection], paused: set[int]
    ) -> tuple[list[Margin], int]:
        margins: list[Margin] = []
        imprecise = 0
        sections = list(ordered)
        for section in sections:
            if section.outcome not in LOSS_OUTCOMES or section.node is None:
                continue
            if section.expires_at is not None:
                margin = self._lease_margin(section, sections)
                if margin is not None:
                    margins.append(margin)
                continue
            lost_at = self.lost_sessions.get(section.session_id)
            released = self.deletions.get(section.node)
            if lost_at is None or lost_at < section.enter or released is None:
                continue  # the session survived: the node was released by its own client
            cause = self._cause(section)
            if cause != "SIGSTOP" and self._connected_since(section.session_id, section.exit):
                continue  # still (or again) connected: it may have deleted the node itself
            if section.node in self.imprecise_deletions:
                imprecise += 1
                continue
            margins.append(Margin(section, released, cause))
        return margins, imprecise

    def _lease_margin(
        self, section: CriticalSection, sections: Sequence[CriticalSection]
    ) -> Margin | None:
        """A lost lease: its node's deletion (by the server's TTL reaper, or by its holder
        once it could) minus the exit, unless its holder took the same node back later
        (re-attached: then the deletion is a later release). Cause ``ttl`` unless paused."""
        released = self.deletions.get(section.node or "")
        if released is None or section.node in self.imprecise_deletions:
            return None
        if any(
            other.node == section.node and other.enter > section.exit and other.enter < released
            for other in sections
        ):
            return None
        cause = self._cause(section)
        return Margin(section, released, "ttl" if cause == "timeout" else cause)


def _overlaps(
    ordered: Sequence[CriticalSection], paused: set[int], slack: float
) -> tuple[list[SectionPair], list[SectionPair], float, int]:
    """Pairs of sections of different grants that share a resource and overlap in time by
    more than ``slack``: (non-paused pairs, pairs with a paused section, max non-paused, and
    how many pairs overlapped in time on disjoint resources: allowed, and worth knowing)."""
    overlaps: list[SectionPair] = []
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
                    overlaps.append((earlier, later))
                    max_overlap = max(max_overlap, amount)
    return overlaps, paused_overlaps, max_overlap, disjoint


def _concurrency(
    ordered: Sequence[CriticalSection], paused: set[int], limit: int, slack: float
) -> tuple[list[Crowding], list[Crowding], int]:
    """With ``limit > 1``: the windows over it among non-paused sections, those among all
    sections that involve a paused one, and the non-paused peak; nothing with ``limit`` 1
    (the pairwise overlap check judges a lock)."""
    if limit <= 1:
        return [], [], 0
    crowded, peak = _crowding([s for s in ordered if id(s) not in paused], limit, slack)
    with_paused = [
        window
        for window in _crowding(ordered, limit, slack)[0]
        if any(id(s) in paused for s in window.holders)
    ]
    return crowded, with_paused, peak


def _crowding(
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


def _token_order(judged: Sequence[CriticalSection]) -> list[SectionPair]:
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


def _check_fencing(
    store: FencedStore, ordered: Sequence[CriticalSection], paused: set[int]
) -> tuple[list[StaleWrite], list[StaleWrite], list[StaleWrite], int]:
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
    stale: list[StaleWrite] = []
    violations: list[StaleWrite] = []
    unpaused: list[StaleWrite] = []
    for _, _, access in events:
        if isinstance(access, FencedWrite) and highest is not None and access.token < highest:
            grant = grants.get((access.client, access.token))
            entry = StaleWrite(access, highest, grant is None or id(grant) in paused)
            stale.append(entry)
            if access.accepted:
                violations.append(entry)
            elif not entry.paused:
                unpaused.append(entry)
        if access.accepted and (highest is None or access.token > highest):
            highest = access.token
    # Accepted writes made after a newer token's grant (enter), before it reached the store.
    enters = sorted((s.enter, s.token) for s in ordered)
    times = [enter for enter, _ in enters]
    newest = list(itertools.accumulate((token for _, token in enters), max))
    late = 0
    for write in store.accepted:
        granted = bisect.bisect_left(times, write.t)  # sections that entered before it
        if granted and newest[granted - 1] > write.token:
            late += 1
    return stale, violations, unpaused, late


def _expired_writes(
    ordered: Sequence[CriticalSection],
    paused: set[int],
    stores: Mapping[str, FencedStore],
    slack: float,
) -> list[tuple[CriticalSection, FencedWrite]]:
    """Writes of non-paused lease sections that reached a store after the section's
    ``expires_at`` (+ ``slack``): the server could have given the lease away by then."""
    found: list[tuple[CriticalSection, FencedWrite]] = []
    for section in ordered:
        if section.expires_at is None or id(section) in paused:
            continue
        for resource in section.keys:
            store = stores.get(resource)
            if store is None:
                continue
            found.extend(
                (section, write)
                for write in [*store.accepted, *store.rejected]
                if write.client == section.client
                and write.token == section.token
                and section.enter <= write.t <= section.exit
                and write.t > section.expires_at + slack
            )
    return found


_sequence = itertools.count()


@dataclass(frozen=True, slots=True)
class FencedWrite:
    client: str
    token: int
    value: object
    t: float
    accepted: bool
    previous: object = None  # the store's value before this write (if accepted)
    seq: int = field(default_factory=lambda: next(_sequence), compare=False)


@dataclass(frozen=True, slots=True)
class FencedRead:
    """A fenced read: it registers its token, so that it fences older holders too."""

    client: str
    token: int
    t: float
    accepted: bool
    seq: int = field(default_factory=lambda: next(_sequence), compare=False)


@dataclass
class FencedStore:
    """A resource protected by fencing tokens: stale writes are rejected and recorded.

    A holder should :meth:`read` (or write) as soon as it is granted the lock: its token then
    fences every older holder from that moment on, not only from its first write.
    """

    accepted: list[FencedWrite] = field(default_factory=list)
    rejected: list[FencedWrite] = field(default_factory=list)
    max_token: int | None = None
    value: object = None
    reads: list[FencedRead] = field(default_factory=list)

    def write(self, client: str, token: int, value: object) -> bool:
        """Apply the write iff ``token >= max_token``; returns whether it was accepted."""
        ok = self.max_token is None or token >= self.max_token
        record = FencedWrite(client, token, value, time.monotonic(), ok, self.value)
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

    def read(self, client: str, token: int) -> tuple[bool, object]:
        """A fenced read: ``(True, value)`` and ``token`` is registered iff it is at least
        ``max_token``; ``(False, None)`` for a stale token."""
        ok = self.max_token is None or token >= self.max_token
        self.reads.append(FencedRead(client, token, time.monotonic(), ok))
        if not ok:
            return False, None
        self.max_token = token
        return True, self.value
