"""What ``top`` draws (pure): a ``Snapshot`` in, the screen's ``Line``s out, cut to any
width and height (``None``: not cut, as ``--once`` prints).

The frame: a title (prefix, the session's state, how old the view is), a summary (queues,
holders, waiters, the longest hold and wait, the doctor's verdict), a table of the queues
(those with waiters first, the longest waiting first; then by path: QUEUE counts their
nodes, LOCAL the tasks queued inside the contenders' processes behind those nodes, as the
nodes' data says; HOLDER says how long a running lock-delay still holds a path back) and
the doctor's findings, wrapped. Ages are the doctor's, by
``Diagnosis.server_time``, plus the seconds since it was taken: a frame drawn a second
later shows them a second older, without asking the server. Text from other clients
(names, identities) is cleaned of control characters.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from aiozklock._doctor._model import Diagnosis, Finding, QueueState, Severity, session_bound
from aiozklock._recipes._core._contenders import Contender
from aiozklock._recipes._core._delay_record import RunningLockDelay
from aiozklock._top._text import age, cells, fit, fit_left, pad

Style = Literal["plain", "title", "head", "critical", "warning"]
KEYS = "q quit  r refresh"
_HEADINGS = ("PATH", "KIND", "QUEUE", "LOCAL", "HELD", "WAITED", "HOLDER")
_RIGHT = (False, False, True, True, True, True, False)  # right-aligned columns
_GAP = "  "
_MARK = {Severity.CRITICAL: "!! ", Severity.WARNING: "!  "}
_STYLE: dict[Severity, Style] = {Severity.CRITICAL: "critical", Severity.WARNING: "warning"}


@dataclass(frozen=True, slots=True)
class Line:
    """One row of the screen: its text (cleaned, cut) and how to show it."""

    text: str
    style: Style = "plain"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What the view knows: the session's ``state`` (``CONNECTED``, ``SUSPENDED``, ``LOST``,
    ...) for ``state_for`` seconds, the last ``diagnosis`` (None before the first) taken
    ``since`` seconds ago, the last trouble worth a line (``note``), and whether this is
    the live view (key hints, "updated ... ago") or one frame for ``--once``."""

    prefix: str
    state: str
    diagnosis: Diagnosis | None = None
    since: float = 0.0
    state_for: float = 0.0
    note: str | None = None
    live: bool = True


def frame(snap: Snapshot, width: int | None = None, height: int | None = None) -> list[Line]:
    """The lines to draw, none wider than ``width`` columns, at most ``height`` of them."""
    if (width is not None and width <= 0) or (height is not None and height <= 0):
        return []
    head = [_title(snap, width), *_summary(snap, width)]
    if snap.diagnosis is None:
        body: list[Line] = [Line(""), Line(fit(f"reading {snap.prefix} ...", width))]
        return (head + body)[:height]
    diagnosis, now = snap.diagnosis, snap.diagnosis.server_time + snap.since
    table = _table(diagnosis, now, width)
    findings = _findings(diagnosis.findings, width, age(snap.since) if snap.live else None)
    if height is not None:
        table, findings = _budget(table, findings, height - len(head) - 1)
    body = [Line(""), *table, *([Line(""), *findings] if findings else [])]
    return [Line(fit(line.text, width), line.style) for line in (head + body)[:height]]


def plain(lines: Iterable[Line]) -> str:
    """The frame as plain text (``--once``): no terminal control codes at all."""
    return "\n".join(line.text.rstrip() for line in lines)


# ---------------------------------------------------------------------------- header


def _title(snap: Snapshot, width: int | None) -> Line:
    parts = [f"aiozklock top {snap.prefix}", snap.state]
    if snap.state != "CONNECTED":
        parts[-1] += f" for {age(snap.state_for)}"
    diagnosis = snap.diagnosis
    if diagnosis is not None and snap.live:
        parts.append(f"updated {age(snap.since)} ago")
    elif diagnosis is not None:
        at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(diagnosis.server_time))
        parts.append(f"at {at} (the {diagnosis.clock}'s clock)")
    text = "  ".join(parts)
    style: Style = "title" if snap.state == "CONNECTED" else "critical"
    if not snap.live:
        return Line(fit(text, width), style)
    keys = _GAP + KEYS
    if width is None or cells(text) + cells(keys) <= width:
        text = pad(text, (width or 0) - cells(keys)) + keys
    return Line(fit(text, width), style)


def _summary(snap: Snapshot, width: int | None) -> list[Line]:
    lines = []
    diagnosis = snap.diagnosis
    if diagnosis is not None:
        holding = sum(len(queue.holders) for queue in diagnosis.queues)
        waiting = sum(len(queue.waiters) for queue in diagnosis.queues)
        local = sum(queue.local_waiters for queue in diagnosis.queues)
        hold, wait = diagnosis.longest_hold, diagnosis.longest_wait
        parts = [
            f"{len(diagnosis.queues)} queue{'' if len(diagnosis.queues) == 1 else 's'}",
            f"{holding} holding",
            f"{waiting} waiting" + (f" (+{local} local)" if local else ""),
            f"longest held {age(hold + snap.since) if hold else '-'}",
            f"waited {age(wait + snap.since) if wait else '-'}",
            _verdict(diagnosis),
        ]
        lines.append(Line(fit("  ".join(parts), width), _worst_style(diagnosis.findings)))
    if snap.note:
        lines.append(Line(fit(snap.note, width), "warning"))
    return lines


def _verdict(diagnosis: Diagnosis) -> str:
    severities = [finding.severity for finding in diagnosis.findings]
    counts = ", ".join(
        f"{severities.count(s)} {s.name.lower()}" for s in reversed(Severity) if s in severities
    )
    if diagnosis.healthy:
        return "healthy" + (f" ({counts})" if counts else "")
    return f"problems: {counts}"


def _worst_style(findings: Sequence[Finding]) -> Style:
    worst = max((finding.severity for finding in findings), default=Severity.INFO)
    return _STYLE.get(worst, "plain")


# ---------------------------------------------------------------------------- queues


def _table(diagnosis: Diagnosis, now: float, width: int | None) -> list[Line]:
    if not diagnosis.queues:
        return [Line(fit(f"no contender under {diagnosis.prefix}", width))]
    marks = _marks(diagnosis.findings)
    queues = _ordered(diagnosis.queues)
    rows = [_cells_of(queue, now) for queue in queues]
    widths = _widths(rows, width)
    lines = [Line(fit("   " + _join(_HEADINGS, widths), width), "head")]
    for queue, row in zip(queues, rows, strict=True):
        severity = marks.get(queue.path)
        mark = _MARK.get(severity, "   ") if severity is not None else "   "
        style = _STYLE.get(severity, "plain") if severity is not None else "plain"
        lines.append(Line(fit(mark + _join(row, widths), width), style))
    return lines


def _ordered(queues: Iterable[QueueState]) -> list[QueueState]:
    """Queues with waiters first, the one waiting longest first (an order that holds as
    time passes); then the others by path."""

    def key(queue: QueueState) -> tuple[int, float, str]:
        oldest = _oldest(queue.waiters)
        return (0, oldest, queue.path) if oldest is not None else (1, 0.0, queue.path)

    return sorted(queues, key=key)


def _oldest(contenders: Sequence[Contender]) -> float | None:
    times = [c.enqueued_at for c in contenders if c.enqueued_at is not None]
    return min(times) if times else None


def _cells_of(queue: QueueState, now: float) -> list[str]:
    held, waited = _oldest(queue.holders), _oldest(queue.waiters)
    holder = _who(queue.holders[0], queue.kind) if queue.holders else "-"
    if len(queue.holders) > 1:
        holder += f" +{len(queue.holders) - 1} more"
    if queue.lock_delay is not None:
        holder = _delayed(queue.lock_delay, now)
    return [
        queue.path,
        queue.kind,
        str(len(queue.holders) + len(queue.waiters)),
        _local(queue),
        age(now - held) if held is not None else "-",
        age(now - waited) if waited is not None else "-",
        holder,
    ]


def _delayed(delay: RunningLockDelay, now: float) -> str:
    """The holder cell of a queue that waits out a lock-delay: how long it still runs."""
    if delay.until_ms is None:
        return f"lock-delay starting, after {delay.after} vanished"
    left = max(0.0, delay.until_ms / 1000 - now)
    return f"lock-delay {age(left)} more, after {delay.after} vanished"


def _local(queue: QueueState) -> str:
    """The tasks queued inside the contenders' processes; "-" if no node publishes it."""
    contenders = (*queue.holders, *queue.waiters)
    if all(c.local_waiters is None for c in contenders):
        return "-"
    return str(queue.local_waiters)


def _who(contender: Contender, kind: str) -> str:
    """``identifier 0x1a2b host:pid task 'name'``, with what is known."""
    parts = [str(contender.identifier)] if contender.identifier is not None else []
    parts.append(f"0x{contender.session_id:x}" if session_bound(kind) else "lease")
    host, pid = contender.host, contender.pid
    if host is not None or pid is not None:
        parts.append(f"{host if host is not None else '?'}:{pid if pid is not None else '?'}")
    if contender.task is not None:
        parts.append(f"task {contender.task!r}")
    return " ".join(parts)


def _widths(rows: Sequence[Sequence[str]], width: int | None) -> list[int]:
    """Each column's width: its widest cell; the path column at most two fifths of the
    screen (paths are cut at the start), the holder column what is left."""
    widths = [max(cells(row[i]) for row in [_HEADINGS, *rows]) for i in range(len(_HEADINGS))]
    if width is not None:
        widths[0] = min(widths[0], max(12, width * 2 // 5))
    return widths


def _join(row: Sequence[str], widths: Sequence[int]) -> str:
    """One row, each cell fitted to its column (the path cut at the start), aligned."""
    texts = [fit_left(row[0], widths[0])] + [fit(row[i], widths[i]) for i in range(1, len(row))]
    last = len(texts) - 1
    return _GAP.join(
        text if i == last else pad(text, widths[i], right=_RIGHT[i]) for i, text in enumerate(texts)
    )


def _marks(findings: Iterable[Finding]) -> dict[str, Severity]:
    """The worst severity of the findings about each path (INFO marks nothing)."""
    marks: dict[str, Severity] = {}
    for finding in findings:
        if finding.severity >= Severity.WARNING:
            for path in finding.paths:
                marks[path] = max(marks.get(path, finding.severity), finding.severity)
    return marks


# ---------------------------------------------------------------------------- findings


def _findings(findings: Sequence[Finding], width: int | None, read: str | None) -> list[Line]:
    """The findings; ``read``: how long ago (the ages in their text are of then)."""
    if not findings:
        return [Line(fit("the doctor finds nothing wrong", width))]
    head = f"FINDINGS ({len(findings)})" + (f" as read {read} ago" if read is not None else "")
    lines = [Line(fit(head, width), "head")]
    for finding in findings:
        style = _STYLE.get(finding.severity, "plain")
        kind = finding.kind.value.replace("_", " ")
        lines += _wrapped(f"{finding.severity.name} {kind}: {finding.message}", "", width, style)
        for wait, following in zip(
            finding.cycle, finding.cycle[1:] + finding.cycle[:1], strict=True
        ):
            text = (
                f"{wait.party.describe()} waits at {wait.path} for "
                f"0x{following.party.session_id:x} (its node {wait.node})"
            )
            lines += _wrapped(text, "    ", width, style)
        lines += _wrapped(f"what to do: {finding.action}", "    ", width, "plain")
    return lines


def _wrapped(text: str, indent: str, width: int | None, style: Style) -> list[Line]:
    """``text`` after ``indent``, wrapped to ``width`` (continued two columns further in)."""
    if width is None:
        return [Line(indent + text, style)]
    chunks = textwrap.wrap(
        fit(text, None),
        max(len(indent) + 8, width),
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_on_hyphens=False,
    )
    return [Line(chunk, style) for chunk in chunks or [indent]]


def _budget(table: list[Line], findings: list[Line], rows: int) -> tuple[list[Line], list[Line]]:
    """The table and the findings cut to ``rows`` lines between them (and a blank line
    between them): the findings get at least half when both do not fit."""
    if rows <= 0:
        return [], []
    if len(table) + 1 + len(findings) <= rows:
        return table, findings
    keep = min(len(findings), max(rows - len(table) - 1, rows // 2))
    shown_table = rows - keep - (1 if keep else 0)
    more = "lines (aiozklock doctor has them all)"
    return _cut(table, shown_table, "queues"), _cut(findings, keep, more)


def _cut(lines: list[Line], rows: int, what: str) -> list[Line]:
    """At most ``rows`` of ``lines``, the last one saying how many more there are."""
    if len(lines) <= rows:
        return lines
    if rows <= 1:
        return lines[:rows]
    hidden = len(lines) - rows + 1
    return [*lines[: rows - 1], Line(f"  ... {hidden} more {what}")]


__all__ = ("KEYS", "Line", "Snapshot", "Style", "frame", "plain")
