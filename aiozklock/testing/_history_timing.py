"""The timing checks of a history: acquire attempts within their bound, holders reacting in
time to a closed session, and the margins between a holder's exit and the server's release
(see :mod:`._history_checks` for how checkers are composed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ._history_checks import Judged
from ._history_records import AcquireAttempt, CriticalSection, Margin, Pause, Recorded

__all__ = [
    "LOSS_OUTCOMES",
    "Attempts",
    "Margins",
    "check_attempts",
    "check_reactions",
    "measure_margins",
]

#: Section outcomes where the holder was stopped by a loss of the lock (as opposed to finishing
#: its work, or being cancelled from outside): these are the ones a margin is measured for.
LOSS_OUTCOMES = frozenset({"lost", "invalid", "rejected"})


class Attempts(NamedTuple):
    """Acquire attempts against their bound, not counting their process's pauses."""

    violations: list[tuple[AcquireAttempt, float]]  # (attempt, seconds over its bound)
    max_overrun: float  # max(duration - pauses - bound), may be negative; 0.0 if none


def check_attempts(judged: Judged) -> Attempts:
    """Every acquire attempt ends within its bound, not counting the time its process was
    stopped."""
    history = judged.history
    violations = []
    max_overrun = -float("inf") if history.attempts else 0.0
    for attempt in history.attempts:
        stopped = paused_time(history, attempt.client, attempt.start, attempt.end)
        overrun = attempt.duration - stopped - attempt.bound
        max_overrun = max(max_overrun, overrun)
        if overrun > 0:
            violations.append((attempt, overrun))
    return Attempts(violations, max_overrun)


def paused_time(history: Recorded, client: str, start: float, end: float) -> float:
    """How long ``client``'s process was stopped (SIGSTOP) between ``start`` and ``end``."""
    return sum(
        p.overlap(start, end)
        for p in history.pauses
        if p.client == client and p.reason == "SIGSTOP"
    )


def check_reactions(judged: Judged) -> list[tuple[CriticalSection, Pause]]:
    """Sections covered by a pause with ``react_within`` that exited later than that."""
    return [
        (section, pause)
        for section in judged.ordered
        for pause in judged.history.pauses
        if pause.react_within is not None
        and pause.covers(section)
        and section.exit > pause.end + pause.react_within
    ]


class Margins(NamedTuple):
    """Holders stopped by a loss whose session then died (see :class:`Margin`)."""

    margins: list[Margin]
    imprecise: int  # the observer was disconnected when the node went


def measure_margins(judged: Judged) -> Margins:
    """The margin of every section stopped by a loss whose node the server released: its
    session died (or, for a lease, its node was deleted), and the observer saw when."""
    history = judged.history
    margins: list[Margin] = []
    imprecise = 0
    for section in judged.ordered:
        if section.outcome not in LOSS_OUTCOMES or section.node is None:
            continue
        if section.expires_at is not None:
            margin = lease_margin(history, section, judged.ordered)
            if margin is not None:
                margins.append(margin)
            continue
        lost_at = history.lost_sessions.get(section.session_id)
        released = history.deletions.get(section.node)
        if lost_at is None or lost_at < section.enter or released is None:
            continue  # the session survived: the node was released by its own client
        reason = cause(history, section)
        if reason != "SIGSTOP" and connected_since(history, section.session_id, section.exit):
            continue  # still (or again) connected: it may have deleted the node itself
        if section.node in history.imprecise_deletions:
            imprecise += 1
            continue
        margins.append(Margin(section, released, reason))
    return Margins(margins, imprecise)


def lease_margin(
    history: Recorded, section: CriticalSection, sections: Sequence[CriticalSection]
) -> Margin | None:
    """A lost lease: its node's deletion (by the server's TTL reaper, or by its holder
    once it could) minus the exit, unless its holder took the same node back later
    (re-attached: then the deletion is a later release). Cause ``ttl`` unless paused."""
    released = history.deletions.get(section.node or "")
    if released is None or section.node in history.imprecise_deletions:
        return None
    if any(
        other.node == section.node and other.enter > section.exit and other.enter < released
        for other in sections
    ):
        return None
    reason = cause(history, section)
    return Margin(section, released, "ttl" if reason == "timeout" else reason)


def cause(history: Recorded, section: CriticalSection) -> str:
    """The reason of the first pause that covers ``section``, else ``timeout``."""
    for pause in history.pauses:
        if pause.covers(section):
            return pause.reason
    return "timeout"


def connected_since(history: Recorded, session_id: int, t: float) -> bool:
    """Whether the client was connected in ``session_id`` at ``t`` or at any time after
    (and so may have deleted its node itself, e.g. by its janitor)."""
    state_at_t = "CONNECTED"  # no change recorded before t: assume it was connected
    for when, state in history.session_states.get(session_id, []):
        if when <= t:
            state_at_t = state
        elif state == "CONNECTED":
            return True
    return state_at_t == "CONNECTED"
