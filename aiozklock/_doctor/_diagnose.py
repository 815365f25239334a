"""``zk.diagnose(prefix)``: read the tree under a prefix and report what is wrong there.

The steps: one pipelined scan (``_scan``); ``assess``: each path's layout (``_layout``), the
queues as the recipes decide them (``_queues``), deadlocks in the wait-for graph
(``_waitfor``); ``confirm``: each deadlock listed again; the server's clock
(``_scan.server_clock``, only when something has an age to tell); ``report``: the findings
(``_mixes``, ``_checks``, the running lock-delays of ``_delays``). ``assess`` and ``report``
are pure: a live view that keeps the tree itself (by watches) calls them on every change.

A deadlock is confirmed because the scan reads paths one after another, not at one instant:
a cycle could be put together from queues read at different times. A node that existed all
along, from its path's scan to the listing again, was there at one instant with all the
others that did; the deadlock is looked for among those nodes only (leaving a node out can
only let others hold: no rule lets a node hold because of one ahead of it; those left out
came or went meanwhile, and did not unblock the cycle's parties for good), and is reported
only if it is still there. Names of sequential nodes are never reused, so listed twice
means there all along. Not so a read/write lock's downgrade node (a plain node named with
its write node's older sequence: it sorts ahead of nodes queued before it was made, and its
name comes back whenever its holder takes the read lock at that place again): a read node
listed again counts only if its czxid is the scan's (``_scan.created``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from aiozklock._doctor._checks import (
    Thresholds,
    WriteTimes,
    deadlock_finding,
    lease_findings,
    leftover_findings,
    parties_of,
    queue_findings,
    unreadable_finding,
    write_samples,
)
from aiozklock._doctor._defaults import HOLD_WARNING, LEFTOVER_AGE, QUEUE_WARNING
from aiozklock._doctor._delays import delay_findings, delays_of
from aiozklock._doctor._layout import PathLayout, classify
from aiozklock._doctor._mixes import mix_findings
from aiozklock._doctor._model import Diagnosis, Finding, FindingKind, QueueState
from aiozklock._doctor._queues import View, build_views, listed_paths, queue_state, restrict
from aiozklock._doctor._scan import Scan, created, relist, scan, server_clock
from aiozklock._doctor._waitfor import Deadlock, find_deadlocks
from aiozklock._exceptions import InvalidArgument
from aiozklock._wire._session import Session
from aiozklock._wire._validation import join, positive_seconds, validate_path

_KINDS = list(FindingKind)


@dataclass(frozen=True, slots=True)
class Options:
    """``diagnose()``'s arguments, validated."""

    prefix: str
    limits: Thresholds


def options(
    prefix: object,
    hold_warning: object = HOLD_WARNING,
    queue_warning: object = QUEUE_WARNING,
    leftover_age: object = LEFTOVER_AGE,
) -> Options:
    """The arguments checked, before any traffic: ``InvalidArgument`` for a prefix that is
    not an absolute path, a warning that is not a positive number of seconds, a queue
    warning that is not an int >= 1."""
    path = validate_path(prefix, what="prefix")
    if isinstance(queue_warning, bool) or not isinstance(queue_warning, int) or queue_warning < 1:
        raise InvalidArgument(f"queue_warning must be an int >= 1, not {queue_warning!r}")
    limits = Thresholds(
        positive_seconds("hold_warning", hold_warning),
        queue_warning,
        positive_seconds("leftover_age", leftover_age),
    )
    return Options(path, limits)


@dataclass(frozen=True, slots=True)
class Assessment:
    """What a tree holds, before any age is told: each path's layout, the queues (views) and
    the deadlocks among them."""

    layouts: list[PathLayout]
    views: list[View]
    deadlocks: list[Deadlock]


async def diagnose(session: Session, given: Options) -> Diagnosis:
    """The diagnosis of the tree under ``given.prefix`` (see ``ZooKeeperClient.diagnose``):
    scan, assess, confirm the deadlocks, read the clock, report."""
    started = time.monotonic()
    found = await scan(session, given.prefix)
    assessment = await confirm(session, assess(found))
    ages = needs_clock(found, assessment)
    clock = await server_clock(session, given.prefix) if ages else None
    return report(found, given, assessment, clock, time.monotonic() - started)


def assess(found: Scan) -> Assessment:
    """The layouts, queues and deadlocks of a tree as read (pure: a live view that keeps
    its own tree by watches can call it, and ``report``, on every change)."""
    layouts = [
        layout
        for path, node in sorted(found.tree.items())
        if node.children and not (layout := classify(found.tree, path)).empty
    ]
    views = build_views(layouts)
    return Assessment(layouts, views, find_deadlocks(views))


async def confirm(session: Session, assessment: Assessment) -> Assessment:
    """The assessment with only the deadlocks still there among the nodes listed again (see
    the module docstring); no request when there is none."""
    if not assessment.deadlocks:
        return assessment
    deadlocks = assessment.deadlocks
    parties = {party for d in deadlocks for party in (*d.parties, *d.stuck)}
    involved = [v for v in assessment.views if any(e.party in parties for e in v.entries)]
    listings = await relist(session, set().union(*(listed_paths(v) for v in involved)))
    listings = await _there_all_along(session, involved, listings)
    confirmed = find_deadlocks(restrict(involved, listings))
    return Assessment(assessment.layouts, assessment.views, confirmed)


async def _there_all_along(
    session: Session, views: list[View], listings: dict[str, frozenset[str]]
) -> dict[str, frozenset[str]]:
    """``listings`` without the read nodes listed again that are not the nodes the scan
    read (another czxid: gone and made again under the same name, see the docstring)."""
    scanned = {
        join(view.path, entry.node): entry.contender.fencing_token
        for view in views
        if view.kind == "rwlock"
        for entry in view.entries
        if not entry.writes and entry.node in listings.get(view.path, frozenset())
    }
    if not scanned:
        return listings
    now = await created(session, scanned)
    remade = {path for path, czxid in scanned.items() if now[path] != czxid}
    return {
        path: frozenset(name for name in names if join(path, name) not in remade)
        for path, names in listings.items()
    }


def needs_clock(found: Scan, assessment: Assessment) -> bool:
    """Whether anything has an age to tell: a contender, or an empty parent."""
    return bool(assessment.views) or any(
        node.stat.cversion and not node.stat.num_children for node in found.tree.values()
    )


def report(
    found: Scan,
    given: Options,
    assessment: Assessment,
    clock: tuple[int, float] | None,
    elapsed: float,
) -> Diagnosis:
    """The diagnosis: the findings (the most severe first), by the server's ``clock`` (the
    zxid and time of a write) when known, else this machine's."""
    now = clock[1] if clock is not None else time.time()
    views = assessment.views
    delays = delays_of(found.tree, views, now)
    queues = [queue_state(view, delays.get(view.index)) for view in views]
    findings = [deadlock_finding(d, parties_of(views)) for d in assessment.deadlocks]
    findings += [finding for layout in assessment.layouts for finding in mix_findings(layout)]
    findings += _aged(found, given, views, queues, clock, now)
    findings += delay_findings(queues, now)
    return Diagnosis(
        prefix=given.prefix,
        findings=tuple(sorted(findings, key=_report_order)),
        queues=tuple(queues),
        nodes_scanned=len(found.tree),
        elapsed=elapsed,
        server_time=now,
        clock="server" if clock is not None else "local",
        hold_warning=given.limits.hold_warning,
        queue_warning=given.limits.queue_warning,
        leftover_age=given.limits.leftover_age,
    )


def _aged(
    found: Scan,
    given: Options,
    views: list[View],
    queues: list[QueueState],
    clock: tuple[int, float] | None,
    now: float,
) -> list[Finding]:
    """The findings that an age makes: expired leases, long holders and queues, leftover
    parents; and the nodes that could not be read."""
    findings = lease_findings(views, found.tree, now)
    lapsed = {path for finding in findings for path in finding.paths}
    findings += queue_findings(queues, now, given.limits, lapsed)
    times = WriteTimes([*write_samples(found.tree), *([clock] if clock else [])])
    findings += leftover_findings(found.tree, given.prefix, times, now, given.limits)
    if found.unreadable:
        findings.append(unreadable_finding(found.unreadable))
    return findings


def _report_order(finding: Finding) -> tuple[int, int, tuple[str, ...], float]:
    seconds = finding.seconds if finding.seconds is not None else 0.0
    return -finding.severity, _KINDS.index(finding.kind), finding.paths, -seconds


__all__ = (
    "HOLD_WARNING",
    "LEFTOVER_AGE",
    "QUEUE_WARNING",
    "Assessment",
    "Options",
    "assess",
    "confirm",
    "diagnose",
    "needs_clock",
    "options",
    "report",
)
