"""What the fleet workers share (``benchmarks/fleet.py`` starts them): their parameters, the
role of each session, the tally of critical sections, and the result line.

A fleet worker holds ``idle + queued + holders`` sessions of one client library, each in one
role (the runner spreads the fleet's sessions over several workers):

* **idle**: connected, nothing held, nothing sent by the application;
* **queued**: waiting in line, for the whole run, for a lock of this worker's ``line/`` paths
  held by an *anchor*;
* **anchor** (a holding session): holds its ``line/`` lock for the whole run, the queued
  sessions of its line behind it;
* **cycler** (a holding session): acquires one of the fleet's ``shared/`` locks, holds it
  ``hold_ms``, releases, and again (grants flowing, several workers on each path).

Steady state (``anchors == holders``): every holding session holds its own path. Fault
scenarios: ``anchors`` (one per worker by default) keep the queued sessions in line, the other
holders cycle. The protocol on stdin/stdout (one JSON line per event): the worker connects
its sessions, puts each in its role, prints ``{"event": "ready", ...}``; on ``mark`` it notes
each session's id and from then on counts critical sections, prints ``{"event": "marked"}``;
on ``stop`` it notes the ids again, stops every role, prints ``{"event": "result", ...}``,
then closes its sessions and exits. Times are CLOCK_MONOTONIC nanoseconds (Python's
``time.monotonic_ns()``, Java's ``System.nanoTime()``), merged across workers by the runner.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, TextIO

#: Seconds between a failed attempt (connection loss, session expired...) and the next.
RETRY_S = 0.1
#: Seconds to connect a session (the whole ensemble may be busy with a fleet connecting).
CONNECT_TIMEOUT_S = 60.0
#: Seconds between reads of a line's children while its queued sessions take their places.
POLL_S = 0.2
ROLES = ("anchor", "cycler", "queued", "idle")


@dataclass(frozen=True)
class FleetParams:
    """One worker's share of the fleet, passed as ``key=value`` words."""

    hosts: str
    root: str  # the fleet's lock paths: {root}/line/{worker}-{a}, {root}/shared/{k}
    worker: int = 0
    idle: int = 0
    queued: int = 0
    holders: int = 0  # anchors + cyclers
    anchors: int = 0  # holders that hold their line's lock throughout
    shared_paths: int = 4  # the cyclers' paths, shared by every worker
    first_cycler: int = 0  # the fleet-wide index of this worker's first cycler
    hold_ms: float = 10.0  # how long a cycler holds its lock
    session_timeout: float = 10.0
    connect_batch: int = 20  # sessions connecting at once

    def to_words(self) -> list[str]:
        return [f"{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self)]

    @classmethod
    def from_words(cls, words: list[str]) -> FleetParams:
        kinds = {f.name: f.type for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for word in words:
            name, sep, value = word.partition("=")
            if not sep or name not in kinds:
                raise SystemExit(f"unknown parameter {word!r}; known: {', '.join(kinds)}")
            kind = kinds[name]
            values[name] = (
                int(value) if kind == "int" else float(value) if kind == "float" else value
            )
        return cls(**values).checked()

    @property
    def sessions(self) -> int:
        return self.idle + self.queued + self.holders

    def checked(self) -> FleetParams:
        """Self, or ``ValueError`` for a share no worker can play."""
        if min(self.idle, self.queued, self.holders, self.anchors) < 0:
            raise ValueError(f"negative count in {self}")
        if self.anchors > self.holders:
            raise ValueError(f"{self.anchors} anchors but only {self.holders} holders")
        if self.queued and not self.anchors:
            raise ValueError("queued sessions need an anchor (a holder) in their worker")
        if self.holders > self.anchors and self.shared_paths < 1:
            raise ValueError("cyclers need at least one shared path")
        if self.session_timeout <= 0 or self.hold_ms < 0 or self.connect_batch < 1:
            raise ValueError(f"bad timing in {self}")
        return self


@dataclass
class Slot:
    """One session of the worker: its role, its lock path, and what it saw."""

    index: int
    kind: str  # one of ROLES
    path: str  # its lock path ("" when idle)
    shared: int = -1  # a cycler's shared path index
    line: int = -1  # an anchor's or queued session's line
    id_at_mark: int = 0
    id_at_stop: int = 0
    lost: int = 0  # LOST state changes seen (session replaced)

    @property
    def role(self) -> str:
        """The role as reported: anchors and cyclers are both holding."""
        return "holding" if self.kind in ("anchor", "cycler") else self.kind


def line_path(params: FleetParams, line: int) -> str:
    return f"{params.root}/line/{params.worker}-{line}"


def shared_path(params: FleetParams, index: int) -> str:
    return f"{params.root}/shared/{index}"


def plan(params: FleetParams) -> list[Slot]:
    """Every session of this worker, in the order they are connected: anchors first (their
    queued sessions wait for them to hold), cyclers, queued, idle."""
    slots: list[Slot] = []

    def add(kind: str, path: str, **where: int) -> None:
        slots.append(Slot(len(slots), kind, path, **where))

    for a in range(params.anchors):
        add("anchor", line_path(params, a), line=a)
    for i in range(params.holders - params.anchors):
        k = (params.first_cycler + i) % params.shared_paths  # spread over every path
        add("cycler", shared_path(params, k), shared=k)
    for j in range(params.queued):
        add("queued", line_path(params, j % params.anchors), line=j % params.anchors)
    for _ in range(params.idle):
        add("idle", "")
    return slots


def line_sizes(slots: list[Slot]) -> Counter[int]:
    """Contenders per line: its anchor and its queued sessions (the children it must have)."""
    return Counter(slot.line for slot in slots if slot.line >= 0)


class Tally:
    """Critical sections of the cyclers and counts of events, from ``mark`` on (thread-safe:
    the kazoo worker's threads write here too)."""

    def __init__(self) -> None:
        self.mark_ns: int | None = None
        self.sections: list[tuple[int, int, int]] = []  # (shared path, enter_ns, exit_ns)
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def section(self, shared: int, enter_ns: int, exit_ns: int) -> None:
        if self.mark_ns is not None and enter_ns >= self.mark_ns:
            with self._lock:
                self.sections.append((shared, enter_ns, exit_ns))

    def count(self, what: str) -> None:
        """Counts only after ``mark`` (setup's retries are not the fault's)."""
        if self.mark_ns is not None:
            with self._lock:
                self.counts[what] += 1

    def mark(self) -> None:
        self.mark_ns = time.monotonic_ns()


def emit(event: str, out: TextIO = sys.stdout, **fields: Any) -> None:
    out.write(json.dumps({"event": event, **fields}) + "\n")
    out.flush()


def result_fields(slots: list[Slot], tally: Tally) -> dict[str, Any]:
    """The result line's fields: per session ``[role, id at mark, id at stop, LOST events]``,
    the sections, the counts."""
    with tally._lock:
        sections = list(tally.sections)
        counts = dict(tally.counts)
    return {
        "sessions": [[s.role, s.id_at_mark, s.id_at_stop, s.lost] for s in slots],
        "sections": sections,
        "counts": counts,
        "mark_ns": tally.mark_ns,
    }
