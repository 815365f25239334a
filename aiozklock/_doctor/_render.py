"""The doctor's output: a few lines per finding for a person, or one JSON object.

The JSON object's shape (``--json``) is stable::

    {"prefix": str, "healthy": bool, "clock": "server"|"local", "server_time": float,
     "elapsed": float, "nodes_scanned": int, "queues": int,
     "thresholds": {"hold_warning": float, "queue_warning": int, "leftover_age": float},
     "counts": {"deadlock": int, "unsafe_mix": int, ...every kind},
     "longest_hold": float, "longest_wait": float,
     "findings": [{"kind": str, "severity": "info"|"warning"|"critical", "message": str,
                   "action": str, "paths": [str], "sessions": ["0x..."],
                   "cycle": [{"session_id": "0x...", "task": str|null, "library": str,
                              "host": str|null, "pid": int|null, "identifier": str|null,
                              "path": str, "node": str}],
                   "seconds": float|null, "count": int|null}]}
"""

from __future__ import annotations

from typing import Any

from aiozklock._doctor._model import Diagnosis, Finding, FindingKind, Severity, Wait

SHOWN = 10  # findings of one kind printed in full; --json has them all
_INDENT = " " * 4
_KIND_WORDS = {
    FindingKind.DEADLOCK: "deadlock",
    FindingKind.UNSAFE_MIX: "unsafe mix",
    FindingKind.LONG_HOLDER: "long holder",
    FindingKind.LONG_QUEUE: "long queue",
    FindingKind.EXPIRED_LEASE: "expired lease",
    FindingKind.LEFTOVER_PARENT: "leftover parent",
    FindingKind.UNREADABLE: "unreadable",
    FindingKind.LOCK_DELAY: "lock-delay",
}

Json = dict[str, Any]


def to_json(diagnosis: Diagnosis) -> Json:
    """The JSON object of a diagnosis (see the module docstring)."""
    return {
        "prefix": diagnosis.prefix,
        "healthy": diagnosis.healthy,
        "clock": diagnosis.clock,
        "server_time": diagnosis.server_time,
        "elapsed": round(diagnosis.elapsed, 6),
        "nodes_scanned": diagnosis.nodes_scanned,
        "queues": len(diagnosis.queues),
        "thresholds": {
            "hold_warning": diagnosis.hold_warning,
            "queue_warning": diagnosis.queue_warning,
            "leftover_age": diagnosis.leftover_age,
        },
        "counts": {kind.value: count for kind, count in diagnosis.counts.items()},
        "longest_hold": round(diagnosis.longest_hold, 3),
        "longest_wait": round(diagnosis.longest_wait, 3),
        "findings": [_finding_json(finding) for finding in diagnosis.findings],
    }


def _finding_json(finding: Finding) -> Json:
    return {
        "kind": finding.kind.value,
        "severity": finding.severity.name.lower(),
        "message": finding.message,
        "action": finding.action,
        "paths": list(finding.paths),
        "sessions": [f"0x{session:x}" for session in finding.sessions],
        "cycle": [_wait_json(wait) for wait in finding.cycle],
        "seconds": None if finding.seconds is None else round(finding.seconds, 3),
        "count": finding.count,
    }


def _wait_json(wait: Wait) -> Json:
    party = wait.party
    return {
        "session_id": f"0x{party.session_id:x}",
        "task": party.task,
        "library": party.library,
        "host": party.host,
        "pid": party.pid,
        "identifier": party.identifier,
        "path": wait.path,
        "node": wait.node,
    }


def to_text(diagnosis: Diagnosis) -> str:
    """The diagnosis for a person: a summary line, then each finding (the most severe
    first): its severity, kind and message, the parties of a deadlock, what to do."""
    lines = [_summary(diagnosis)]
    shown: dict[FindingKind, int] = {}
    for finding in diagnosis.findings:
        shown[finding.kind] = shown.get(finding.kind, 0) + 1
        if shown[finding.kind] <= SHOWN:
            lines += ["", *_finding_lines(finding)]
    for kind, count in shown.items():
        if count > SHOWN:
            lines += ["", f"... and {count - SHOWN} more {_KIND_WORDS[kind]} findings (--json)"]
    return "\n".join(lines)


def _summary(diagnosis: Diagnosis) -> str:
    clock = "the server's clock" if diagnosis.clock == "server" else "this machine's clock"
    read = (
        f"{_count(diagnosis.nodes_scanned, 'node')} and {_count(len(diagnosis.queues), 'queue')} "
        f"read in {diagnosis.elapsed:.3f} s, ages by {clock}"
    )
    severities = [f.severity for f in diagnosis.findings]
    if not severities:
        return f"{diagnosis.prefix}: healthy ({read})"
    counts = ", ".join(
        f"{severities.count(s)} {s.name.lower()}" for s in reversed(Severity) if s in severities
    )
    state = "healthy" if diagnosis.healthy else "problems found"
    return f"{diagnosis.prefix}: {state}: {counts} ({read})"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _finding_lines(finding: Finding) -> list[str]:
    lines = [f"{finding.severity.name} {_KIND_WORDS[finding.kind]}: {finding.message}"]
    for wait, following in zip(finding.cycle, finding.cycle[1:] + finding.cycle[:1], strict=True):
        lines.append(
            f"{_INDENT}{wait.party.describe()} waits at {wait.path} for "
            f"0x{following.party.session_id:x} (its node {wait.node})"
        )
    if finding.sessions and not finding.cycle:
        sessions = ", ".join(f"0x{session:x}" for session in finding.sessions)
        lines.append(f"{_INDENT}sessions: {sessions}")
    lines.append(f"{_INDENT}what to do: {finding.action}")
    return lines


__all__ = ("SHOWN", "to_json", "to_text")
