"""The nemesis's report: what each fault hit, the history's checks and the end-of-run ones,
and their rendering as text (one small function per block of lines)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from aiozklock._recipes._traits import traits_of

from ._history_report import HistoryReport
from ._nemesis_plan import FaultGroup
from ._nemesis_tally import FaultRecord, KindTally, render_tally

__all__ = ["NemesisReport"]

Check = tuple[bool, str]  # (passed, what was checked)

_UNPROTECTED = (
    "UNPROTECTED run (negative control): holders ignored the loss of their lock and the "
    "store did not fence; it cannot pass"
)


@dataclass
class NemesisReport:
    """What a :func:`run_nemesis` run did and found: ``ok`` if every check passed,
    :meth:`failures` one line per failed check, ``str()`` the full report."""

    seed: int
    backend: str
    duration: float
    session_timeout: float
    clients: int
    processes: int
    servers: str
    plan: list[FaultGroup]
    faults: list[FaultRecord]
    history: HistoryReport
    elapsed: float = 0.0
    store_accepted: int = 0
    store_rejected: int = 0
    store_value: object = None
    integrity_errors: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    leaked_watches: dict[str, tuple[int, int]] = field(default_factory=dict)
    recovery: float | None = None  # s from the last heal to the next completed section
    errors: list[str] = field(default_factory=list)
    log_dir: str | None = None
    command: str = ""
    recipe: str = "lock"
    max_leases: int = 0  # semaphore
    #: semaphore: sections whose node the observer saw, and those whose token was not its czxid
    tokens_checked: int = 0
    token_mismatches: list[str] = field(default_factory=list)
    #: semaphore: clients that completed no critical section in the whole run
    starved: list[str] = field(default_factory=list)
    #: where the fenced counter lived: ``memory``, ``postgres`` or ``redis`` (which decided
    #: every access), and a real store's URL
    store: str = "memory"
    store_where: str = ""
    #: the negative control (``run_nemesis(unprotected=True)``): holders ignored the loss of
    #: their lock and the store did not fence, so the checks must fail (the run never passes)
    unprotected: bool = False
    #: per fault kind: how many ran, and the safety failures while one was active
    by_kind: dict[str, KindTally] = field(default_factory=dict)

    def failures(self) -> list[str]:
        problems = [_UNPROTECTED] if self.unprotected else []
        problems += self.history.failures()
        if self.integrity_errors:
            problems.append(f"fenced counter: {self.integrity_errors[0]}")
        if self.orphans:
            problems.append(f"{len(self.orphans)} orphan lock node(s): {self.orphans[:5]}")
        if self.leaked_watches:
            problems.append(f"leaked watches: {self.leaked_watches}")
        if self.recovery is None:
            problems.append("no critical section completed after the last fault healed")
        if self.history.sections == 0:
            problems.append("no critical section at all")
        if self.token_mismatches:
            problems.append(f"token is not the node's czxid: {self.token_mismatches[:5]}")
        if self.starved:
            problems.append(f"starved client(s): {self.starved}")
        problems.extend(self.errors)
        return problems

    @property
    def ok(self) -> bool:
        """Every check passed (never for an unprotected run)."""
        return not self.failures()

    @property
    def caught(self) -> bool:
        """An unprotected run's checks found what its holders did: overlapping holders and
        stale writes accepted (the negative control worked)."""
        history = self.history
        return self.unprotected and bool(history.overlaps) and bool(history.fencing_violations)

    def faults_by_kind(self) -> Counter[str]:
        return Counter(record.spec.kind for record in self.faults)

    def __str__(self) -> str:
        return "\n".join(
            [
                *_header(self),
                *_schedule(self),
                *_activity(self),
                *_store(self),
                *_margins(self),
                "checks:",
                *(f"  [{'PASS' if ok else 'FAIL'}] {text}" for ok, text in _checks(self)),
                *_footer(self),
            ]
        )


def _header(report: NemesisReport) -> list[str]:
    """The run's parameters, and the command that replays it."""
    r = report
    lines = [
        f"aiozklock nemesis: seed {r.seed}, recipe {r.recipe}, {r.duration:g} s, "
        f"backend {r.backend}, {r.clients} clients ({r.processes} in child "
        f"processes), session timeout {r.session_timeout:g} s, servers: {r.servers}",
    ]
    if r.store != "memory":
        lines.append(f"fenced store: {r.store} at {r.store_where}: the server decides each access")
    if r.unprotected:
        lines.append(
            "UNPROTECTED (negative control): workers ignore the loss notification (they keep "
            "acting and writing with their old token after LockLost) and the store's fence is "
            "off (stale writes are accepted): the checks below must find overlaps and "
            "accepted stale writes"
        )
    if r.command:
        lines.append(f"reproduce: {r.command}")
    return lines


def _schedule(report: NemesisReport) -> list[str]:
    """The planned fault groups, then the faults as executed, and a tally by kind."""
    r = report
    lines = [f"schedule of seed {r.seed}: {len(r.plan)} fault group(s)"]
    lines.extend(f"  {group}" for group in r.plan)
    lines.append(f"executed: {len(r.faults)} fault(s) in {r.elapsed:.1f} s")
    lines.extend(f"  {f}" for f in sorted(r.faults, key=lambda f: (f.group, f.start)))
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(r.faults_by_kind().items()))
    lines.append(f"faults by kind: {kinds or 'none'}")
    lines.extend(render_tally(r.by_kind))
    return lines


def _tally(counters: dict[str, int], prefix: str) -> str:
    """``name n, ...`` for the counters named ``{prefix}:{name}``, sorted."""
    return ", ".join(
        f"{key.partition(':')[2]} {n}"
        for key, n in sorted(counters.items())
        if key.startswith(f"{prefix}:")
    )


def _activity(report: NemesisReport) -> list[str]:
    """Critical sections and acquire attempts by outcome, and the holders' losses."""
    h = report.history
    c = h.counters
    concurrent = (
        f"; {c['concurrent:disjoint']} pair(s) at once on disjoint paths"
        if "concurrent:disjoint" in c
        else ""
    )
    failures = sum(
        n for key, n in c.items() if key.startswith("attempt:") and key != "attempt:acquired"
    )
    return [
        f"critical sections {h.sections} ({_tally(c, 'section')}); paused "
        f"{h.paused_sections}{concurrent}",
        f"acquire attempts {h.attempts} ({_tally(c, 'attempt')}); acquire failures {failures}; "
        f"max overrun {h.max_attempt_overrun:+.2f} s vs bound",
        f"cancellations by the loss policy {c.get('section:lost', 0)}; pre-write check "
        f"refusals {c.get('section:invalid', 0)}; release errors {c.get('release_error', 0)}",
    ]


def _store(report: NemesisReport) -> list[str]:
    """The fenced store's writes; for a semaphore (no store), its holders and acts."""
    r = report
    h = r.history
    if traits_of(r.recipe).shares_resource:
        acts = h.counters.get("acts", 0)
        return [
            f"leases: at most {h.peak_holders} non-paused holder(s) at once (max_leases "
            f"{r.max_leases}); {len(h.paused_crowded)} window(s) over it with paused "
            f"holders; {acts} act(s); no fenced store (holders share the resource)"
        ]
    stale_paused = sum(1 for s in h.stale_writes if s.paused and not s.write.accepted)
    lines = [
        f"fenced store ({r.store}): {r.store_accepted} writes accepted, {r.store_rejected} "
        f"rejected; stale writes {len(h.stale_writes)} ({stale_paused} of paused "
        f"holders), {len(h.fencing_violations)} accepted; late writes {h.late_writes};"
        f" counter {r.store_value}"
    ]
    if r.store != "memory":
        refused = len(h.stale_writes) - len(h.fencing_violations)
        lines.append(
            f"stale writes refused by {r.store}: {refused}, accepted: {len(h.fencing_violations)}"
        )
    return lines


def _margins(report: NemesisReport) -> list[str]:
    """The margins' summary, and the three smallest of a session timeout."""
    h = report.history
    timeouts = sorted((m for m in h.margins if m.cause == "timeout"), key=lambda m: m.value)
    return [
        f"margins: {h.margin_summary()}",
        *(
            f"  smallest (timeout): {m.value * 1000:+.0f} ms {m.section.describe()}"
            for m in timeouts[:3]
        ),
    ]


def _checks(report: NemesisReport) -> list[Check]:
    """Every check of the run, in the order they are printed."""
    r = report
    h = r.history
    traits = traits_of(r.recipe)
    checks = _semaphore_checks(r) if traits.shares_resource else _lock_checks(r)
    if traits.ttl_lease:
        checks.append(
            (
                not h.expired_writes,
                f"lease validity: {len(h.expired_writes)} write(s) after expires_at",
            )
        )
    checks += [
        (
            not h.attempt_violations,
            f"bounded attempts: {len(h.attempt_violations)} of {h.attempts} over bound",
        ),
        (not r.orphans, f"orphan nodes: {len(r.orphans)}"),
        (not r.leaked_watches, f"leaked watches: {len(r.leaked_watches)} client(s)"),
        (
            r.recovery is not None,
            "progress after the last fault: "
            + ("none" if r.recovery is None else f"{r.recovery:.2f} s"),
        ),
    ]
    if not traits.shares_resource:
        checks.append(
            (
                not r.integrity_errors,
                f"fenced counter integrity: {len(r.integrity_errors)} error(s)",
            )
        )
    checks.append((not r.errors, f"nemesis errors: {len(r.errors)}"))
    return checks


def _lock_checks(report: NemesisReport) -> list[Check]:
    """The safety checks of exclusive holders: exclusion, token order and fencing."""
    h = report.history
    return [
        (
            not h.overlaps,
            f"mutual exclusion: {len(h.overlaps)} overlapping pair(s) of non-paused "
            f"sections ({len(h.paused_overlaps)} with paused sections, judged by "
            "fencing)",
        ),
        (
            not h.token_order_violations,
            f"token order: {len(h.token_order_violations)} violation(s)",
        ),
        (
            not h.fencing_violations and not h.unpaused_rejections,
            f"fencing: {len(h.stale_writes)} stale write(s), "
            f"{len(h.fencing_violations)} accepted, {len(h.unpaused_rejections)} of "
            "non-paused holders",
        ),
    ]


def _semaphore_checks(report: NemesisReport) -> list[Check]:
    """The safety checks of a semaphore's holders: at most ``max_leases`` at once, no act
    after release, tokens, and starvation."""
    r = report
    h = r.history
    return [
        (
            not h.crowded,
            f"at most {r.max_leases} holders: {len(h.crowded)} window(s) with more "
            f"non-paused holders (peak {h.peak_holders}; {len(h.paused_crowded)} more with "
            "paused holders: nothing can stop a stopped process, and no store fences it)",
        ),
        (
            not h.released_acts,
            f"no act after release: {len(h.released_acts)} act(s) of non-paused holders "
            f"after the server deleted their node ({h.paused_released_acts} of paused "
            "holders)",
        ),
        (
            not r.token_mismatches,
            f"token = own node's czxid: {len(r.token_mismatches)} mismatch(es) in "
            f"{r.tokens_checked} section(s) whose node the observer saw",
        ),
        (not r.starved, f"no starvation: {len(r.starved)} client(s) never held"),
    ]


def _footer(report: NemesisReport) -> list[str]:
    """The history's details if it failed, the errors, where the logs are, the verdict."""
    r = report
    lines = [] if r.history.ok else [str(r.history)]
    lines.extend(f"  ! {error}" for error in r.errors[:10])
    lines.extend(f"  ! {error}" for error in r.integrity_errors[:5])
    if r.log_dir:
        lines.append(f"logs: {r.log_dir}")
    if r.unprotected:
        h = r.history
        found = (
            f"{len(h.overlaps)} overlapping pair(s) of holders, {len(h.fencing_violations)} "
            "stale write(s) accepted"
        )
        lines.append(
            f"negative control: the checker found {found}, as it must"
            if r.caught
            else f"NEGATIVE CONTROL INCONCLUSIVE: the checker found only {found}; it must find both"
        )
    lines.append(("PASSED" if r.ok else "FAILED") + f" (seed {r.seed})")
    return lines
