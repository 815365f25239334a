"""A randomized fault nemesis with a history checker (fault-matrix F18).

N clients, each with its own session behind its own fault proxies (one per server), loop
acquire -> fenced writes -> release with one recipe, some of them in child processes so that
a holder *process* can be stopped. Meanwhile a nemesis driven by ``random.Random(seed)`` runs a
schedule of fault groups (one fault, sometimes two at once, then a heal period): connection
drops (RST/FIN), black-holes shorter and longer than the session timeout (new connections
hung or refused), lost replies after creates and after deletes, real session expiries,
SIGSTOP/SIGCONT of a holder process (also right between its pre-write check and its write),
and SIGSTOP/SIGKILL/restart of ZooKeeper servers and of the ensemble leader. Client faults
are biased toward the current holder, server faults toward the holder's server and the
leader.

The schedule is a pure function of the seed and the run's parameters (see
:func:`plan_faults`): a failing seed replays the same faults; the timing (and so which client
holds when a fault starts) differs between runs. The report prints the schedule, what each
fault hit, and the checks of :meth:`History.check <aiozklock.testing.History.check>` plus the
end-of-run ones: no orphan lock node once every client has closed, no leaked watch, progress
after the last fault, and the integrity of the fenced counter.

Recipes (``recipe=``, ``--recipe``): ``lock`` (the fair ``zk.lock``), ``nonfair``
(``zk.lock(path, fair=False)``), ``election`` (the section runs as leader), ``multilock``
(each acquisition takes a random 2-3 of :data:`MULTI_PATHS` shared paths, in a random order;
mutual exclusion, token order and fencing are judged per path, one fenced store each; holders
of disjoint subsets run at the same time),
``lease`` (``zk.lease_lock(path, ttl)`` with the TTL equal to the session timeout),
``rwlock`` (``zk.rw_lock(path)``: each acquisition its read or its write lock, at random;
read sections are shared: they may overlap each other, never a write section, and do not
touch the fenced store) and ``semaphore`` (``zk.semaphore(path, max_leases)``). Every fault
applies to every recipe; how they differ:

* ``multilock``: its creates and its release are one ``multi`` transaction each, so the
  lost-reply faults lose the reply of the client's next ``multi`` (acquire or release) or
  plain create/delete;
* ``lease``: the lease is not bound to the session: a real expiry, or a partition longer
  than the session, does not end it by itself. It is judged by its own validity: a holder
  keeps the lease until its ``expires_at`` (renewals failing), every write of a non-paused
  holder must reach the store before it (``expired_writes``), expiries are not "windows the
  holder could not know" (they take nothing from it), and its margins (``ttl``) are the
  server's deletion of the lease minus the holder's exit. A lease needs servers that reap TTL
  nodes promptly: a :class:`ZooKeeperCluster` target must have been started with
  ``jvm_properties={"znode.container.checkIntervalMs": ...}`` of at most 1 s (see
  :data:`LEASE_JVM_PROPERTIES`), or a lost lease blocks everyone for up to a minute.
* ``semaphore``: up to ``max_leases`` holders at once, so the history is checked with
  ``History(max_holders=max_leases)``: never more than that many non-paused holders at once
  (instead of pairwise exclusion). Concurrent holders enter in any token order and share the
  resource, so there is no single fenced store whose token order could judge them (and slots
  are not identifiable: a holder does not know whose lease it follows); instead each act of
  a holder is recorded, and none of a non-paused holder may come after the server deleted
  its node (its loss must be signalled before the lease is gone). Paused holders (which
  nothing can stop from acting) are counted apart. Also: each holder's token is the czxid
  of its own node (where the observer saw the node), and every client completed a section
  (no starvation).

Use :func:`run_nemesis` from any anyio program (asyncio or trio; child processes run the same
backend), or ``python -m aiozklock nemesis``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Collection, Sequence
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

import anyio
import anyio.abc
import anyio.to_thread
from anyio.streams.buffered import BufferedByteReceiveStream

import aiozklock
from aiozklock._exceptions import ConnectionLoss, NoNodeError, SessionExpired
from aiozklock._wire._protocol import EventType, WatchedEvent, exists_op, get_children_op
from aiozklock.testing._internals import session_of

from ._expiry import expire_session
from ._history import FencedStore, History, HistoryReport
from ._nemesis_worker import (
    RECIPES,
    Record,
    WorkerConfig,
    WorkerSink,
    recorded_client,
    run_worker,
)
from ._proxy import FaultProxy, Opcode
from ._rawclient import RawConnectionClosed, RawSessionExpired, RawZooKeeperError
from ._server import ZooKeeperCluster, ZooKeeperMember

__all__ = [
    "FAULT_KINDS",
    "LEASE_JVM_PROPERTIES",
    "MULTI_PATHS",
    "RECIPES",
    "FaultGroup",
    "FaultRecord",
    "FaultSpec",
    "NemesisReport",
    "plan_faults",
    "run_nemesis",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Every fault the nemesis knows, with its relative weight in a schedule.
FAULT_WEIGHTS: dict[str, float] = {
    "drop": 3,  # close the client's connections: RST or FIN
    "blackhole-short": 2,  # partition for 0.15-0.4 x the session timeout
    "blackhole-long": 2,  # partition for 1.3-2 x the session timeout: the session expires
    "lost-create-reply": 2,  # the reply to the client's next create is lost
    "lost-delete-reply": 2,  # the reply to the client's next delete (release) is lost
    "expire": 3,  # a real session expiry (re-attach + closeSession)
    "pause-short": 1,  # SIGSTOP a client process for 0.2-0.5 x the session timeout
    "pause-long": 2,  # ... for 1.4-2.2 x: its session expires while it is stopped
    "pause-before-write": 2,  # the process stops itself after its pre-write check
    "server-pause": 2,  # SIGSTOP a ZooKeeper server, shorter or longer than the timeout
    "server-kill": 1,  # SIGKILL a server, start it again a little later
    "leader-kill": 1,  # SIGKILL the leader, start it again a little later
    "server-restart": 1,  # SIGKILL + immediate restart of a server
}
FAULT_KINDS = tuple(FAULT_WEIGHTS)
CLIENT_KINDS = frozenset(
    {"drop", "blackhole-short", "blackhole-long", "lost-create-reply", "lost-delete-reply"}
    | {"expire"}
)
PROCESS_KINDS = frozenset({"pause-short", "pause-long", "pause-before-write"})
SERVER_KINDS = frozenset({"server-pause", "server-kill", "leader-kill", "server-restart"})

_READY_TIMEOUT = 60.0  # clients connected and children started (JVMs share 2 cores)
_SERVER_TIMEOUT = 60.0  # a restarted member serving again
_ORPHAN_WAIT = 3.0  # for the observer's server to catch up with the closes
#: A holder whose session is expired must stop acting this soon after (fault-matrix F6: the
#: EOF tells it at once).
EXPIRE_REACTION = 0.5
#: multilock: how many shared paths the clients draw their 2-3 from.
MULTI_PATHS = 4  # 4, not 3: two disjoint pairs can be held at once
#: lease: what the servers need so that an expired lease goes within 0.1 s, not a minute.
LEASE_JVM_PROPERTIES = {"znode.container.checkIntervalMs": "100"}
_MAX_REAP_MS = 1000


# ---------------------------------------------------------------------------- the schedule


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """One planned fault. ``target`` is a role resolved when the fault starts: ``holder``
    (the current holder, else a client chosen by ``pick``), ``any``, ``holder-server`` (the
    server the holder is connected to), ``leader`` or ``follower``."""

    kind: str
    target: str
    offset: float  # seconds after its group starts
    duration: float  # seconds the fault lasts (0: instantaneous)
    option: str = ""  # rst/fin for drops, hang/refuse for black-holes, short/long for pauses
    pick: float = 0.0  # in [0, 1): chooses among candidates at run time
    window: float = 0.0  # pause-before-write: how long it stays armed before the pause

    @property
    def length(self) -> float:
        """Planned seconds from the group's start to this fault's end."""
        return self.offset + self.window + self.duration

    def __str__(self) -> str:
        option = f"({self.option})" if self.option else ""
        at = f" at +{self.offset:.1f} s" if self.offset else ""
        lasting = f" for {self.duration:.1f} s" if self.duration else ""
        armed = f" (armed up to {self.window:.1f} s)" if self.window else ""
        return f"{self.kind}{option} -> {self.target}{lasting}{armed}{at}"


@dataclass(frozen=True, slots=True)
class FaultGroup:
    """Faults that start together (each at its offset) after a ``gap`` without faults."""

    index: int
    gap: float
    faults: tuple[FaultSpec, ...]

    @property
    def length(self) -> float:
        return max(spec.length for spec in self.faults)

    def __str__(self) -> str:
        faults = "; ".join(str(spec) for spec in self.faults)
        return f"#{self.index} after {self.gap:.1f} s: {faults}"


def _category(kind: str) -> str:
    if kind in SERVER_KINDS:
        return "server"
    if kind in PROCESS_KINDS:
        return "process"
    return kind


def _spec(kind: str, rng: random.Random, timeout: float, offset: float) -> FaultSpec:
    """One fault of ``kind``; every random draw comes from ``rng`` in a fixed order.

    Durations are relative to the session ``timeout``, with ZooKeeper's expiry granularity in
    mind: the server expires a session between ``timeout`` and ``timeout + tickTime`` after
    it last heard from it (its expiry queue is bucketed by tick; tickTime is 200 ms here). A
    "long" fault (>= 1.2 x timeout) outlasts that whatever the tick, so the session surely
    expires; a "short" one (<= 0.5 x timeout) never expires it, even counting the client's
    idle ping interval (timeout/6), though it may outlast the client's silence detection
    (timeout/2) and so cost the holder its lock while the session survives.
    """
    holder_biased = "holder" if rng.random() < 0.7 else "any"
    pick = rng.random()
    if kind == "drop":
        return FaultSpec(kind, holder_biased, offset, 0.0, rng.choice(("rst", "fin")), pick)
    if kind in ("blackhole-short", "blackhole-long"):
        low, high = (0.15, 0.4) if kind == "blackhole-short" else (1.3, 2.0)
        mode = rng.choice(("hang", "refuse"))
        return FaultSpec(kind, holder_biased, offset, rng.uniform(low, high) * timeout, mode, pick)
    if kind in ("lost-create-reply", "lost-delete-reply"):
        # Arming window: the reply to the target's next create/delete in it is lost (the
        # holder creates again soon after its release; a waiter only after its turn).
        return FaultSpec(kind, holder_biased, offset, rng.uniform(0.5, 1.5) * timeout, "", pick)
    if kind == "expire":
        return FaultSpec(kind, holder_biased, offset, 0.0, "", pick)
    if kind in ("pause-short", "pause-long"):
        low, high = (0.2, 0.5) if kind == "pause-short" else (1.4, 2.2)
        return FaultSpec(kind, holder_biased, offset, rng.uniform(low, high) * timeout, "", pick)
    if kind == "pause-before-write":
        # duration = the pause once armed; it stays armed for up to a session timeout.
        pause = rng.uniform(1.4, 2.2) * timeout
        return FaultSpec(kind, "holder", offset, pause, "", pick, window=timeout)
    if kind == "server-pause":
        target = rng.choices(("holder-server", "leader", "follower"), (5, 3, 2))[0]
        option = rng.choice(("short", "long"))
        low, high = (0.2, 0.5) if option == "short" else (1.2, 1.8)
        return FaultSpec(kind, target, offset, rng.uniform(low, high) * timeout, option, pick)
    if kind == "server-kill":
        target = rng.choices(("holder-server", "follower"), (6, 4))[0]
        return FaultSpec(kind, target, offset, rng.uniform(0.3, 1.0) * timeout, "", pick)
    if kind == "leader-kill":
        return FaultSpec(kind, "leader", offset, rng.uniform(0.2, 0.8) * timeout, "", pick)
    if kind == "server-restart":
        target = rng.choices(("holder-server", "leader", "follower"), (4, 3, 3))[0]
        return FaultSpec(kind, target, offset, 0.0, "", pick)
    raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(FAULT_KINDS)}")


def plan_faults(
    seed: int,
    duration: float,
    session_timeout: float,
    kinds: Collection[str] = FAULT_KINDS,
    *,
    warmup: float = 1.0,
) -> list[FaultGroup]:
    """The fault schedule of a run: a pure function of its arguments.

    Groups follow each other, each after a heal ``gap`` of 0.5-2 s (the first after
    ``warmup``); about one group in four has two faults of different categories (never two
    server faults: the ensemble keeps its quorum). Groups are planned while they end within
    ``duration``; a run skips the rest of the plan once a group would end more than a
    session timeout after ``duration`` (healing takes longer than planned).
    """
    unknown = set(kinds) - set(FAULT_KINDS)
    if unknown:
        raise ValueError(f"unknown fault kind(s) {sorted(unknown)}; known: {FAULT_KINDS}")
    available = [kind for kind in FAULT_KINDS if kind in kinds]
    if not available:
        return []
    weights = [FAULT_WEIGHTS[kind] for kind in available]
    rng = random.Random(seed)
    groups: list[FaultGroup] = []
    planned = 0.0
    while True:
        gap = warmup if not groups else rng.uniform(0.5, 2.0)
        first = rng.choices(available, weights)[0]
        specs = [_spec(first, rng, session_timeout, 0.0)]
        if rng.random() < 0.25:
            others = [
                (kind, weight)
                for kind, weight in zip(available, weights, strict=True)
                if _category(kind) != _category(first)
            ]
            if others:
                second = rng.choices([k for k, _ in others], [w for _, w in others])[0]
                offset = rng.uniform(0.0, 0.5) * max(specs[0].duration, 1.0)
                specs.append(_spec(second, rng, session_timeout, offset))
        group = FaultGroup(len(groups) + 1, gap, tuple(specs))
        if planned + gap + group.length > duration:
            return groups
        groups.append(group)
        planned += gap + group.length


# ---------------------------------------------------------------------------- the report


@dataclass
class FaultRecord:
    """One executed fault: times are seconds since the run's start."""

    group: int
    spec: FaultSpec
    target: str = "?"
    start: float = 0.0
    end: float = 0.0
    note: str = ""

    def __str__(self) -> str:
        option = f"({self.spec.option})" if self.spec.option else ""
        note = f"  [{self.note}]" if self.note else ""
        return (
            f"#{self.group:<3} {self.start:7.2f}-{self.end:7.2f} s  "
            f"{self.spec.kind}{option} -> {self.target}{note}"
        )


@dataclass
class NemesisReport:
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

    def failures(self) -> list[str]:
        problems = list(self.history.failures())
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
        return not self.failures()

    def faults_by_kind(self) -> Counter[str]:
        return Counter(record.spec.kind for record in self.faults)

    def __str__(self) -> str:
        h = self.history
        c = h.counters
        lines = [
            f"aiozklock nemesis: seed {self.seed}, recipe {self.recipe}, {self.duration:g} s, "
            f"backend {self.backend}, {self.clients} clients ({self.processes} in child "
            f"processes), session timeout {self.session_timeout:g} s, servers: {self.servers}",
        ]
        if self.command:
            lines.append(f"reproduce: {self.command}")
        lines.append(f"schedule of seed {self.seed}: {len(self.plan)} fault group(s)")
        lines.extend(f"  {group}" for group in self.plan)
        lines.append(f"executed: {len(self.faults)} fault(s) in {self.elapsed:.1f} s")
        lines.extend(f"  {r}" for r in sorted(self.faults, key=lambda r: (r.group, r.start)))
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(self.faults_by_kind().items()))
        lines.append(f"faults by kind: {kinds or 'none'}")
        outcomes = ", ".join(
            f"{key.partition(':')[2]} {n}"
            for key, n in sorted(c.items())
            if key.startswith("section:")
        )
        concurrent = (
            f"; {c['concurrent:disjoint']} pair(s) at once on disjoint paths"
            if "concurrent:disjoint" in c
            else ""
        )
        lines.append(
            f"critical sections {h.sections} ({outcomes}); paused {h.paused_sections}{concurrent}"
        )
        attempts = ", ".join(
            f"{key.partition(':')[2]} {n}"
            for key, n in sorted(c.items())
            if key.startswith("attempt:")
        )
        failures = sum(
            n for key, n in c.items() if key.startswith("attempt:") and key != "attempt:acquired"
        )
        lines.append(
            f"acquire attempts {h.attempts} ({attempts}); acquire failures {failures}; "
            f"max overrun {h.max_attempt_overrun:+.2f} s vs bound"
        )
        lines.append(
            f"cancellations by the loss policy {c.get('section:lost', 0)}; pre-write check "
            f"refusals {c.get('section:invalid', 0)}; release errors {c.get('release_error', 0)}"
        )
        stale_paused = sum(1 for s in h.stale_writes if s.paused and not s.write.accepted)
        if self.recipe == "semaphore":
            acts = c.get("acts", 0)
            lines.append(
                f"leases: at most {h.peak_holders} non-paused holder(s) at once (max_leases "
                f"{self.max_leases}); {len(h.paused_crowded)} window(s) over it with paused "
                f"holders; {acts} act(s); no fenced store (holders share the resource)"
            )
        else:
            lines.append(
                f"fenced store: {self.store_accepted} writes accepted, {self.store_rejected} "
                f"rejected; stale writes {len(h.stale_writes)} ({stale_paused} of paused "
                f"holders), {len(h.fencing_violations)} accepted; late writes {h.late_writes};"
                f" counter {self.store_value}"
            )
        lines.append(f"margins: {h.margin_summary()}")
        timeouts = sorted((m for m in h.margins if m.cause == "timeout"), key=lambda m: m.value)
        lines.extend(
            f"  smallest (timeout): {m.value * 1000:+.0f} ms {m.section.describe()}"
            for m in timeouts[:3]
        )
        checks = [
            *self._exclusion_checks(),
            (
                not h.attempt_violations,
                f"bounded attempts: {len(h.attempt_violations)} of {h.attempts} over bound",
            ),
            (not self.orphans, f"orphan nodes: {len(self.orphans)}"),
            (not self.leaked_watches, f"leaked watches: {len(self.leaked_watches)} client(s)"),
            (
                self.recovery is not None,
                "progress after the last fault: "
                + ("none" if self.recovery is None else f"{self.recovery:.2f} s"),
            ),
            (not self.errors, f"nemesis errors: {len(self.errors)}"),
        ]
        if self.recipe != "semaphore":
            checks.insert(
                -1,
                (
                    not self.integrity_errors,
                    f"fenced counter integrity: {len(self.integrity_errors)} error(s)",
                ),
            )
        if self.recipe == "lease":
            checks.insert(
                3,
                (
                    not h.expired_writes,
                    f"lease validity: {len(h.expired_writes)} write(s) after expires_at",
                ),
            )
        lines.append("checks:")
        lines.extend(f"  [{'PASS' if ok else 'FAIL'}] {text}" for ok, text in checks)
        if not h.ok:
            lines.append(str(h))
        lines.extend(f"  ! {error}" for error in self.errors[:10])
        lines.extend(f"  ! {error}" for error in self.integrity_errors[:5])
        if self.log_dir:
            lines.append(f"logs: {self.log_dir}")
        lines.append(("PASSED" if self.ok else "FAILED") + f" (seed {self.seed})")
        return "\n".join(lines)

    def _exclusion_checks(self) -> list[tuple[bool, str]]:
        """The safety checks of the recipe's holders: exclusion, token order and fencing; for
        a semaphore, at most ``max_leases`` holders, acts, tokens and starvation."""
        h = self.history
        if self.recipe != "semaphore":
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
        return [
            (
                not h.crowded,
                f"at most {self.max_leases} holders: {len(h.crowded)} window(s) with more "
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
                not self.token_mismatches,
                f"token = own node's czxid: {len(self.token_mismatches)} mismatch(es) in "
                f"{self.tokens_checked} section(s) whose node the observer saw",
            ),
            (not self.starved, f"no starvation: {len(self.starved)} client(s) never held"),
        ]


# ---------------------------------------------------------------------------- the clients


class _Client:
    """One client under test, in this process or in a child, with its fault proxies."""

    def __init__(self, name: str, index: int, process: bool, proxies: list[FaultProxy]) -> None:
        self.name = name
        self.index = index
        self.process = process
        self.proxies = proxies
        self.session_id = 0
        self.password = b""
        self.state = "CONNECTING"
        self.ready = anyio.Event()
        self.worker_done = anyio.Event()
        self.closed = anyio.Event()
        self.exited = anyio.Event()
        self.watchers: tuple[int, int] | None = None
        self.hold_until = 0.0  # when its current section means to stop acting
        # children only
        self.pid: int | None = None
        self.proc: anyio.abc.Process | None = None
        self.stream: anyio.abc.ByteStream | None = None
        self.send_lock = anyio.Lock()
        self.stopped = False  # SIGSTOPped, by us or by itself
        self.self_stop = anyio.Event()
        self.resumed = anyio.Event()

    def __repr__(self) -> str:
        return f"<nemesis client {self.name}>"

    async def send(self, message: Record) -> None:
        assert self.stream is not None
        async with self.send_lock:
            await self.stream.send(json.dumps(message).encode() + b"\n")

    def active_member(self) -> int | None:
        for index, proxy in enumerate(self.proxies):
            if proxy.live_connections:
                return index
        return None


class _LocalSink:
    def __init__(self, nemesis: _Nemesis, client: _Client) -> None:
        self._nemesis = nemesis
        self._client = client

    def emit(self, record: Record) -> None:
        self._nemesis.on_record(self._client, record)

    async def read(self, resource: str, token: int) -> tuple[bool, int]:
        ok, value = self._nemesis.stores[resource].read(self._client.name, token)
        return ok, value if isinstance(value, int) else 0

    async def write(self, resource: str, token: int, value: int) -> bool:
        return self._nemesis.stores[resource].write(self._client.name, token, value)

    async def before_write(self) -> None:
        pass


class _Observer:
    """An independent client, straight to the servers: the server-side release time of every
    lock node it sees under the lock paths (an exists-watch per node, keyed
    ``{node path}#{czxid}`` as the workers name their nodes: a fixed node name is reused), and
    the lock paths' children at the end."""

    def __init__(
        self, zk: aiozklock.ZooKeeperClient, paths: Sequence[str], history: History
    ) -> None:
        self.zk = zk
        self.paths = tuple(paths)
        self.history = history
        self.watched: set[str] = set()  # node paths with a live exists-watch
        self.owners: dict[str, int] = {}  # node path -> ephemeral owner (0: persistent)
        self.czxids: dict[str, int] = {}  # node path -> its czxid (the last one seen)
        self.reconnected_at = -math.inf
        self._suspended = False
        self._rewatch, self._rewatch_receive = anyio.create_memory_object_stream[str](math.inf)
        zk.add_listener(self._on_state)

    def _on_state(self, change: aiozklock.StateChange) -> None:
        if change.state is aiozklock.SessionState.CONNECTED and self._suspended:
            self.reconnected_at = change.at
        self._suspended = change.state is not aiozklock.SessionState.CONNECTED

    def _precise(self, now: float) -> bool:
        # An event delivered right after a reconnect may have happened while we were away.
        return not self._suspended and now - self.reconnected_at > 0.25

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._rewatch_loop)
            for path in self.paths:
                tg.start_soon(self._list_loop, path)

    async def _rewatch_loop(self) -> None:
        # A data change on a node (some client writing to it) consumes the watch.
        async with self._rewatch_receive:
            async for node in self._rewatch_receive:
                await self._watch_node(node)

    async def _list_loop(self, path: str) -> None:
        session = session_of(self.zk)
        server_path = session.server_path(path)
        while True:
            changed = anyio.Event()

            def wake(_: WatchedEvent, changed: anyio.Event = changed) -> None:
                changed.set()

            try:
                children = await session.call(get_children_op(server_path, wake))
            except NoNodeError:
                # Not created yet, or reaped (it is a container): wait for it.
                try:
                    if await session.call(exists_op(server_path, wake)) is None:
                        await changed.wait()
                except (ConnectionLoss, SessionExpired):
                    pass
                continue
            except (ConnectionLoss, SessionExpired):
                continue
            for name in children:
                node = f"{path}/{name}"
                if node not in self.watched:
                    self.watched.add(node)
                    await self._watch_node(node)
            await changed.wait()

    async def _watch_node(self, node: str) -> None:
        session = session_of(self.zk)
        node_path = session.server_path(node)
        # The key needs the czxid from the reply; an event may be handled before we resume.
        key: list[str] = []
        early: list[tuple[float, bool]] = []

        def deleted(now: float, precise: bool) -> None:
            if key:
                self.history.record_deletion(key[0], now, precise=precise)
            else:
                early.append((now, precise))

        def on_event(event: WatchedEvent) -> None:
            now = time.monotonic()
            if event.type is EventType.DELETED:
                self.watched.discard(node)  # a fixed name may be created again
                deleted(now, self._precise(now))
            elif event.type is EventType.CHANGED:
                self._rewatch.send_nowait(node)
            elif event.type is EventType.SESSION:
                deleted(now, False)

        while True:
            try:
                stat = await session.call(exists_op(node_path, on_event))
            except ConnectionLoss:
                continue
            except SessionExpired:
                return
            if stat is None:  # gone before we looked: when, and which one, is unknown
                session.remove_watcher(node_path, on_event)
                self.watched.discard(node)
            else:
                self.owners[node] = stat.ephemeral_owner
                self.czxids[node] = stat.czxid
                key.append(f"{node}#{stat.czxid}")
                for now, precise in early:
                    self.history.record_deletion(key[0], now, precise=precise)
            return

    async def leftovers(self, bound: float) -> list[str]:
        """The lock paths' children (full paths), waiting up to ``bound`` s for them to go."""
        deadline = time.monotonic() + bound
        found: list[str] = []
        for path in self.paths:
            found += await self._leftovers(path, deadline)
        return found

    async def _leftovers(self, path: str, deadline: float) -> list[str]:
        session = session_of(self.zk)
        server_path = session.server_path(path)
        while True:
            changed = anyio.Event()

            def wake(_: WatchedEvent, changed: anyio.Event = changed) -> None:
                changed.set()

            try:
                children = await session.call(get_children_op(server_path, wake))
            except NoNodeError:
                return []
            except (ConnectionLoss, SessionExpired):
                continue
            if not children:
                session.remove_watcher(server_path, wake)
                return []
            with anyio.move_on_after(deadline - time.monotonic()):
                await changed.wait()
            if not changed.is_set():
                session.remove_watcher(server_path, wake)
                return sorted(f"{path}/{name}" for name in children)


# ---------------------------------------------------------------------------- the nemesis


def _wait_stopped(pid: int, timeout: float = 2.0) -> bool:
    """Poll /proc until every thread of ``pid`` is stopped (Linux); True if so."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            states = [
                stat.read_text().rpartition(")")[2].split()[0]
                for stat in Path(f"/proc/{pid}/task").glob("*/stat")
            ]
        except OSError:
            return False
        if states and all(state == "T" for state in states):
            return True
        time.sleep(0.002)
    return False


def _process_state(pid: int) -> str:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return f"pid {pid}: no /proc entry"
    return f"pid {pid}, state {fields[0]}, {cpu:.1f} s CPU"


def _py_spy() -> str | None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return spy if Path(spy).is_file() else None


def _kill_quietly(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


class _Nemesis:
    def __init__(
        self,
        *,
        seed: int,
        duration: float,
        session_timeout: float,
        acquire_timeout: tuple[float, float],
        attempt_grace: float,
        n_clients: int,
        processes: int,
        kinds: Sequence[str],
        loss_policy: str,
        backend: str,
        path: str,
        recipe: str,
        max_leases: int,
        cluster: ZooKeeperCluster | None,
        hosts: list[str],
        log_dir: Path,
    ) -> None:
        self.seed = seed
        self.duration = duration
        self.session_timeout = session_timeout
        self.acquire_timeout = acquire_timeout
        self.attempt_grace = attempt_grace
        self.n_clients = n_clients
        self.processes = processes
        self.kinds = kinds
        self.loss_policy = loss_policy
        self.backend = backend
        self.path = path
        self.recipe = recipe
        self.max_leases = max_leases
        #: the lock paths: one, or the multi-lock's shared ones (each a fenced resource)
        self.paths = (
            tuple(f"{path}/m{i}" for i in range(1, MULTI_PATHS + 1))
            if recipe == "multilock"
            else (path,)
        )
        self.cluster = cluster
        self.hosts = hosts
        self.log_dir = log_dir
        semaphore = recipe == "semaphore"
        self.history = History(max_holders=max_leases if semaphore else 1)
        #: one fenced store per lock path; none for a semaphore (its holders share it)
        self.stores = {} if semaphore else {resource: FencedStore() for resource in self.paths}
        self.clients: list[_Client] = []
        self.by_name: dict[str, _Client] = {}
        self.sessions: dict[int, str] = {}
        self.faults: list[FaultRecord] = []
        self.expiries: list[tuple[str, float, float, FaultRecord]] = []
        self.errors: list[str] = []
        self.holder: _Client | None = None
        self.holder_changed = anyio.Event()
        self.started = time.monotonic()
        self.healed_at: float | None = None
        self.progress = anyio.Event()
        self.stop = anyio.Event()
        self.close_clients = anyio.Event()
        self.control_address = ""
        self._resumes: set[_Client] = set()
        self._resumes_done = anyio.Event()
        self._resumes_done.set()
        self._tg: anyio.abc.TaskGroup | None = None
        self._faulted_members: set[ZooKeeperMember] = set()

    def now(self) -> float:
        return time.monotonic() - self.started

    # -------------------------------------------------------------- records

    def on_record(self, client: _Client, record: Record) -> None:
        kind = record.get("type")
        history = self.history
        if kind == "session":
            client.state = str(record["state"])
            session_id = int(record["session_id"])
            if session_id:
                client.session_id = session_id
                client.password = bytes.fromhex(str(record["password"]))
                self.sessions[session_id] = client.name
                if client.state == "CONNECTED":
                    client.ready.set()
            lost = record.get("lost_session_id")
            if lost:
                history.record_session_lost(int(lost), float(record["t"]))
                history.count("session:lost")
            history.record_session_state(int(lost or session_id), client.state, float(record["t"]))
        elif kind == "enter":
            self.holder = client
            client.hold_until = float(record["t"]) + float(record.get("hold", 0.0))
            self.holder_changed.set()
            self.holder_changed = anyio.Event()
        elif kind == "section":
            if self.holder is client:
                self.holder = None
            section = history.record(
                client.name,
                int(record["token"]),
                float(record["enter"]),
                float(record["exit"]),
                outcome=str(record["outcome"]),
                node=record.get("node"),
                session_id=int(record["session_id"]),
                requested=float(record["requested"]),
                resources=[str(r) for r in record.get("resources", ())],
                expires_at=record.get("expires_at"),
                shared=bool(record.get("shared", False)),
                acts=[float(t) for t in record.get("acts", ())],
            )
            if (
                section.outcome == "completed"
                and self.healed_at is not None
                and section.enter > self.healed_at
            ):
                self.progress.set()
        elif kind == "attempt":
            history.record_attempt(
                client.name,
                float(record["start"]),
                float(record["end"]),
                bound=float(record["bound"]),
                outcome=str(record["outcome"]),
            )
        elif kind == "watchers":
            client.watchers = (int(record["count"]), int(record["baseline"]))
            client.worker_done.set()
        elif kind == "release_error":
            history.count("release_error")
            logger.info("%s: release error %s", client.name, record.get("error"))
        elif kind == "self_stop":
            client.stopped = True
            client.self_stop.set()
            assert self._tg is not None
            self._tg.start_soon(
                self._resume_later, client, float(record["t"]), float(record["duration"])
            )
        elif kind == "closed":
            client.closed.set()
        elif kind == "hello":
            client.pid = int(record["pid"])

    # -------------------------------------------------------------- children

    async def serve_child(self, stream: anyio.abc.SocketStream) -> None:
        lines = BufferedByteReceiveStream(stream)
        client: _Client | None = None
        try:
            while True:
                record: Record = json.loads(await lines.receive_until(b"\n", 1 << 20))
                if client is None:
                    client = self.by_name[str(record["name"])]
                    client.stream = stream
                kind = record.get("type")
                if kind == "read":
                    store = self.stores[str(record["resource"])]
                    ok, value = store.read(client.name, int(record["token"]))
                    await client.send(
                        {"type": "reply", "id": record["id"], "ok": ok, "value": value}
                    )
                elif kind == "write":
                    store = self.stores[str(record["resource"])]
                    ok = store.write(client.name, int(record["token"]), int(record["value"]))
                    await client.send({"type": "reply", "id": record["id"], "ok": ok})
                else:
                    self.on_record(client, record)
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
            pass
        finally:
            if client is not None:
                client.stream = None
                client.closed.set()
                client.worker_done.set()

    async def run_child(self, client: _Client, config: WorkerConfig) -> None:
        log = (self.log_dir / f"{client.name}.log").open("ab")
        try:
            proc = await anyio.open_process(
                [sys.executable, "-m", "aiozklock.testing._nemesis_child", config.to_json()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        finally:
            log.close()
        client.proc = proc
        client.pid = proc.pid
        try:
            rc = await proc.wait()
        finally:
            with anyio.CancelScope(shield=True):
                await self._end_child(client)
        if rc != 0:
            when = "at the end" if self.close_clients.is_set() else "during the run"
            self.errors.append(f"{client.name} (pid {proc.pid}) exited with {rc} {when}")
        client.closed.set()
        client.worker_done.set()
        client.exited.set()

    async def diagnose(self, client: _Client) -> str:
        """What a stuck client is doing: its CPU time, and for a child its Python stacks
        (``py-spy dump``, if installed) in ``<log dir>/<name>.stack``."""
        if not client.process or client.pid is None:
            return "in this process"
        pid = client.pid
        where = _process_state(pid)
        spy = _py_spy()
        if spy is not None:
            with anyio.move_on_after(20):
                result = await anyio.run_process(
                    [spy, "dump", "--pid", str(pid), "--locals"], check=False
                )
                stack = self.log_dir / f"{client.name}.stack"
                stack.write_bytes(result.stdout + result.stderr)
                where += f", stacks in {stack}"
        return where

    async def _end_child(self, client: _Client) -> None:
        proc = client.proc
        if proc is None or proc.returncode is not None:
            return
        _kill_quietly(proc.pid, signal.SIGCONT)
        proc.terminate()
        with anyio.move_on_after(5):
            await proc.wait()
            return
        _kill_quietly(proc.pid, signal.SIGCONT)
        proc.kill()
        await proc.wait()

    async def _resume_later(self, client: _Client, stopped_at: float, duration: float) -> None:
        """SIGCONT a child that stopped itself, ``duration`` after it did."""
        self._resumes.add(client)
        self._resumes_done = anyio.Event()
        try:
            await anyio.sleep(max(0.0, stopped_at + duration - time.monotonic()))
        finally:
            with anyio.CancelScope(shield=True):
                if client.pid is not None:
                    # It announced the stop just before stopping: make sure it did, or our
                    # SIGCONT could come first and leave it stopped for good.
                    await anyio.to_thread.run_sync(_wait_stopped, client.pid)
                    _kill_quietly(client.pid, signal.SIGCONT)
                end = time.monotonic()
                self.history.record_pause(client.name, stopped_at, end)
                client.stopped = False
                client.resumed.set()
                self._resumes.discard(client)
                if not self._resumes:
                    self._resumes_done.set()

    # -------------------------------------------------------------- in-process clients

    async def run_local(self, client: _Client, config: WorkerConfig) -> None:
        sink: WorkerSink = _LocalSink(self, client)
        async with recorded_client(config, sink) as zk:
            baseline = session_of(zk).watcher_count()
            try:
                await run_worker(zk, config, sink, self.stop)
                client.watchers = (session_of(zk).watcher_count(), baseline)
            except Exception as exc:
                logger.exception("%s: worker failed", client.name)
                self.errors.append(f"{client.name}: worker failed: {exc!r}")
            finally:
                client.worker_done.set()
            await self.close_clients.wait()
        client.closed.set()
        client.exited.set()

    # -------------------------------------------------------------- targets

    def _pick(self, candidates: Sequence[T], pick: float) -> T:
        return candidates[min(int(pick * len(candidates)), len(candidates) - 1)]

    async def _long_holder(self, pool: Sequence[_Client]) -> _Client | None:
        """The holder, once one of ``pool`` holds for long enough that a fault lands while
        it still acts (at most a session timeout's wait); else whoever holds now."""
        with anyio.move_on_after(self.session_timeout):
            while True:
                holder = self.holder
                if (
                    holder in pool
                    and holder is not None
                    and holder.hold_until - time.monotonic() > self.session_timeout / 2
                ):
                    return holder
                await self.holder_changed.wait()
        return self.holder if self.holder in pool else None

    async def _client_target(
        self, spec: FaultSpec, pool: Sequence[_Client] | None = None
    ) -> _Client:
        candidates = list(pool if pool is not None else self.clients)
        if spec.target == "holder":
            holder = await self._long_holder(candidates)
            if holder is not None:
                return holder
        return self._pick(candidates, spec.pick)

    async def _member_target(self, spec: FaultSpec) -> ZooKeeperMember:
        assert self.cluster is not None
        cluster = self.cluster
        healthy = [m for m in cluster.members if m.running and not m.paused]
        if spec.target == "leader":
            with contextlib.suppress(LookupError):
                return await anyio.to_thread.run_sync(cluster.leader)
        elif spec.target == "holder-server":
            holder = await self._long_holder(self.clients)
            index = holder.active_member() if holder is not None else None
            if index is not None and cluster.members[index] in healthy:
                return cluster.members[index]
        elif spec.target == "follower":
            followers = await anyio.to_thread.run_sync(cluster.followers)
            if followers:
                return self._pick(followers, spec.pick)
        return self._pick(healthy, spec.pick)

    def _direct_hosts(self) -> str:
        if self.cluster is None:
            return ",".join(self.hosts)
        members = [m for m in self.cluster.members if m.running and not m.paused]
        return ",".join(m.address for m in members) or self.cluster.hosts

    # -------------------------------------------------------------- faults

    async def run_group(self, group: FaultGroup) -> None:
        async with anyio.create_task_group() as tg:
            for spec in group.faults:
                record = FaultRecord(group.index, spec)
                self.faults.append(record)
                tg.start_soon(self._run_fault, spec, record)

    async def _run_fault(self, spec: FaultSpec, record: FaultRecord) -> None:
        await anyio.sleep(spec.offset)
        record.start = self.now()
        self.history.count(f"fault:{spec.kind}")
        try:
            if spec.kind in SERVER_KINDS:
                await self._server_fault(spec, record)
            elif spec.kind in PROCESS_KINDS:
                await self._process_fault(spec, record)
            else:
                await self._client_fault(spec, record)
        except Exception as exc:
            logger.exception("fault %s failed", spec)
            record.note = f"ERROR {exc!r}"
            self.errors.append(f"fault {spec} failed: {exc!r}")
        finally:
            record.end = self.now()
            logger.info("fault done: %s", record)

    def _described(self, client: _Client) -> str:
        if client is not self.holder:
            return client.name
        left = client.hold_until - time.monotonic()
        return (
            f"{client.name} (holder, {left:.1f} s left)"
            if left > 0.5
            else f"{client.name} (holder)"
        )

    async def _client_fault(self, spec: FaultSpec, record: FaultRecord) -> None:
        client = await self._client_target(spec)
        record.start = self.now()
        record.target = self._described(client)
        proxies = client.proxies
        if spec.kind == "drop":
            for proxy in proxies:
                await proxy.drop_all(rst=spec.option == "rst")
        elif spec.kind.startswith("blackhole"):
            mode: Literal["hang", "refuse"] = "refuse" if spec.option == "refuse" else "hang"
            for proxy in proxies:
                proxy.blackhole(True, new=mode)
            try:
                await anyio.sleep(spec.duration)
            finally:
                for proxy in proxies:
                    proxy.blackhole(False)
        elif spec.kind in ("lost-create-reply", "lost-delete-reply"):
            opcodes = set(Opcode.CREATES if spec.kind == "lost-create-reply" else {Opcode.DELETE})
            if self.recipe == "multilock":
                opcodes.add(Opcode.MULTI)  # its acquire and its release are one multi each
            before = sum(proxy.swallowed_replies for proxy in proxies)
            active = client.active_member()
            for index, proxy in enumerate(proxies):
                if active is None or index == active:
                    proxy.arm_drop_after(opcodes, 1)
            try:
                await anyio.sleep(spec.duration)
            finally:
                for proxy in proxies:
                    proxy.disarm()
            fired = sum(proxy.swallowed_replies for proxy in proxies) - before
            record.note = f"{fired} reply(ies) lost"
        elif spec.kind == "expire":
            session_id, password = client.session_id, client.password
            if client.state != "CONNECTED" or not session_id:
                record.note = f"not connected ({client.state}): skipped"
                return
            start = time.monotonic()
            try:
                await expire_session(self._direct_hosts(), session_id, password, timeout=5.0)
                record.note = f"session 0x{session_id:x} expired"
            except RawSessionExpired:
                record.note = f"session 0x{session_id:x} already gone"
                return
            except (
                TimeoutError,
                ConnectionError,
                RawConnectionClosed,
                RawZooKeeperError,
            ) as exc:
                # The closeSession may have been executed all the same: judge it as if.
                record.note = f"may not have expired: {exc!r}"
            self.expiries.append((client.name, start, time.monotonic(), record))
        else:
            raise ValueError(f"not a client fault: {spec.kind}")

    async def _process_fault(self, spec: FaultSpec, record: FaultRecord) -> None:
        children = [c for c in self.clients if c.process and c.pid and not c.stopped]
        if not children:
            record.note = "no running child process: skipped"
            return
        client = await self._client_target(spec, children)
        record.start = self.now()
        record.target = self._described(client)
        assert client.pid is not None
        if spec.kind == "pause-before-write":
            client.self_stop = anyio.Event()
            client.resumed = anyio.Event()
            await client.send({"type": "pause_before_write", "duration": spec.duration})
            with anyio.move_on_after(spec.window):
                await client.self_stop.wait()
            if not client.self_stop.is_set():
                await client.send({"type": "disarm"})
                record.note = "armed, but it wrote nothing in time"
                return
            record.note = "stopped itself after its pre-write check"
            await client.resumed.wait()
            return
        client.stopped = True
        start = time.monotonic()
        _kill_quietly(client.pid, signal.SIGSTOP)
        try:
            await anyio.sleep(spec.duration)
        finally:
            _kill_quietly(client.pid, signal.SIGCONT)
            self.history.record_pause(client.name, start, time.monotonic())
            client.stopped = False

    async def _server_fault(self, spec: FaultSpec, record: FaultRecord) -> None:
        assert self.cluster is not None
        cluster = self.cluster
        if any(not m.running or m.paused for m in cluster.members):
            record.note = "a member is still down: skipped"
            return
        member = await self._member_target(spec)
        record.start = self.now()
        mode = await anyio.to_thread.run_sync(member.mode)
        record.target = f"zk{member.id} ({mode})"
        self._faulted_members.add(member)
        try:
            if spec.kind == "server-pause":
                await anyio.to_thread.run_sync(member.pause)
                try:
                    await anyio.sleep(spec.duration)
                finally:
                    with anyio.CancelScope(shield=True):
                        await anyio.to_thread.run_sync(member.resume)
            elif spec.kind in ("server-kill", "leader-kill"):
                await anyio.to_thread.run_sync(member.kill)
                try:
                    await anyio.sleep(spec.duration)
                finally:
                    with anyio.CancelScope(shield=True):
                        await member.astart(wait=False)
            elif spec.kind == "server-restart":
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(member.kill)
                    await member.astart(wait=False)
            else:
                raise ValueError(f"not a server fault: {spec.kind}")
            started = time.monotonic()
            await cluster.await_serving(timeout=_SERVER_TIMEOUT)
            record.note = f"serving again {time.monotonic() - started:.2f} s after the heal"
        finally:
            self._faulted_members.discard(member)

    def register_expiries(self) -> None:
        """Each real expiry is a window in which its holder could not know (the server
        notifies the other clients before it closes the holder's connection): its sections
        are judged by fencing, and must end within ``EXPIRE_REACTION`` of the expiry (the
        holder hears the EOF), or within half a session timeout more if another fault was
        active meanwhile (a partition hides the EOF: only silence tells). No bound if the
        holder's process was stopped meanwhile (that pause is judged by itself). None for a
        lease: it is not bound to the session, so an expiry takes nothing from its holder
        (its sections are judged by their ``expires_at``)."""
        if self.recipe == "lease":
            return
        for name, start, end, record in self.expiries:
            window = (start - self.started, end - self.started + EXPIRE_REACTION)
            busy = any(
                other is not record and other.start < window[1] and other.end > window[0]
                for other in self.faults
            )
            bound = EXPIRE_REACTION + (self.session_timeout / 2 if busy else 0.0)
            stopped = any(
                p.client == name and p.reason == "SIGSTOP" and p.overlap(start, end + bound) > 0
                for p in self.history.pauses
            )
            self.history.record_pause(
                name, start, end, reason="expire", react_within=None if stopped else bound
            )

    async def heal_all(self) -> None:
        """Lift every fault (they heal themselves; this is the safety net)."""
        with anyio.CancelScope(shield=True):
            for client in self.clients:
                for proxy in client.proxies:
                    proxy.blackhole(False)
                    proxy.disarm()
                if client.pid is not None and client.stopped and client not in self._resumes:
                    _kill_quietly(client.pid, signal.SIGCONT)
                    client.stopped = False
            with anyio.move_on_after(30):
                await self._resumes_done.wait()
            if self.cluster is not None:
                await restore_cluster(self.cluster)


async def restore_cluster(cluster: ZooKeeperCluster) -> None:
    """Resume paused members, start stopped ones, and wait until all serve (shielded)."""
    with anyio.CancelScope(shield=True):
        for member in cluster.members:
            if member.paused:
                await anyio.to_thread.run_sync(member.resume)
            if not member.running:
                await member.astart(wait=False)
        await cluster.await_serving(timeout=_SERVER_TIMEOUT)


def _current_backend() -> str:
    """``trio`` when called from trio, else ``asyncio`` (the children run the same)."""
    try:
        import trio.lowlevel

        trio.lowlevel.current_task()
    except (ImportError, RuntimeError):
        return "asyncio"
    return "trio"


async def run_nemesis(
    target: ZooKeeperCluster | str,
    *,
    seed: int,
    duration: float = 60.0,
    clients: int = 4,
    processes: int = 2,
    session_timeout: float = 6.0,
    acquire_timeout: tuple[float, float] | None = None,
    attempt_grace: float | None = None,
    kinds: Collection[str] | None = None,
    loss_policy: str = "suspended",
    path: str | None = None,
    log_dir: str | os.PathLike[str] | None = None,
    command: str = "",
    recipe: str = "lock",
    max_leases: int = 2,
) -> NemesisReport:
    """Run the nemesis for ``duration`` seconds (plus healing and the end checks).

    ``target``: a :class:`ZooKeeperCluster` started by the caller (server faults need one of
    at least 3 members; they are restored in any case before this returns) or a connection
    string of running servers (no server faults then). ``clients`` clients take part,
    ``processes`` of them in child processes (process faults need at least one); each has
    ``session_timeout`` and the default ``loss_policy``. Every acquire attempt draws its
    timeout from ``acquire_timeout`` (default: 0.25-1 x the session timeout) and must end
    within it plus ``attempt_grace`` (default: one session timeout: a request in flight is
    not abandoned, and the cleanup of a failed attempt is bounded by half of it). ``kinds``
    restricts the fault kinds (default: every kind that the target allows). ``recipe``: one of
    :data:`RECIPES` (see the module docstring); ``path`` is its lock path (the multi-lock's
    paths are ``{path}/m1`` ...), default a fresh one. ``max_leases``: the semaphore's.

    Logs of the child processes go to ``log_dir`` (default: a temporary directory, removed
    if the run passes). Returns the report; raises only if the run could not take place
    (e.g. ``ZooKeeperUnavailable``), and ``ValueError`` for bad arguments (an unknown
    recipe; a lease on a cluster started without :data:`LEASE_JVM_PROPERTIES`;
    ``max_leases`` < 1).
    """
    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; known: {', '.join(RECIPES)}")
    if max_leases < 1:
        raise ValueError(f"max_leases must be >= 1, not {max_leases}")
    if clients < 1 or not 0 <= processes <= clients:
        raise ValueError("need clients >= 1 and 0 <= processes <= clients")
    if duration < 0 or session_timeout <= 0:
        raise ValueError("duration must be >= 0 and session_timeout > 0")
    cluster = target if isinstance(target, ZooKeeperCluster) else None
    if recipe == "lease" and cluster is not None:
        _check_reaping(cluster)
    hosts = (
        [m.address for m in target.members]
        if isinstance(target, ZooKeeperCluster)
        else [h.strip() for h in target.split("/")[0].split(",") if h.strip()]
    )
    allowed = set(FAULT_KINDS if kinds is None else kinds)
    if cluster is None or len(cluster.members) < 3:
        allowed -= SERVER_KINDS
    if processes == 0:
        allowed -= PROCESS_KINDS
    plan = plan_faults(seed, duration, session_timeout, [k for k in FAULT_KINDS if k in allowed])
    backend = _current_backend()
    keep_logs = log_dir is not None
    logs = (
        Path(log_dir)
        if log_dir is not None
        else Path(tempfile.mkdtemp(prefix="aiozklock-nemesis-"))
    )
    logs.mkdir(parents=True, exist_ok=True)
    nemesis = _Nemesis(
        seed=seed,
        duration=duration,
        session_timeout=session_timeout,
        acquire_timeout=acquire_timeout or (0.25 * session_timeout, session_timeout),
        attempt_grace=session_timeout if attempt_grace is None else attempt_grace,
        n_clients=clients,
        processes=processes,
        kinds=sorted(allowed),
        loss_policy=loss_policy,
        backend=backend,
        path=path or f"/aiozklock-nemesis/{seed}-{uuid.uuid4().hex[:8]}/{recipe}",
        recipe=recipe,
        max_leases=max_leases,
        cluster=cluster,
        hosts=hosts,
        log_dir=logs,
    )
    servers = (
        f"{len(cluster.members)}-node {'ensemble' if len(cluster.members) > 1 else 'standalone'}"
        f" at {cluster.hosts}"
        if cluster is not None
        else ",".join(hosts)
    )
    report = NemesisReport(
        seed=seed,
        backend=backend,
        duration=duration,
        session_timeout=session_timeout,
        clients=clients,
        processes=processes,
        servers=servers,
        plan=plan,
        faults=nemesis.faults,
        history=HistoryReport(0, (), 0.0, (), True),
        command=command,
        recipe=recipe,
        max_leases=max_leases if recipe == "semaphore" else 0,
    )
    try:
        await _run(nemesis, plan, report)
    finally:
        if cluster is not None:
            await restore_cluster(cluster)
    nemesis.register_expiries()
    stores = nemesis.stores
    report.history = nemesis.history.check(stores=stores)
    report.errors = nemesis.errors
    report.store_accepted = sum(len(store.accepted) for store in stores.values())
    report.store_rejected = sum(len(store.rejected) for store in stores.values())
    values = {resource.rpartition("/")[2]: store.value for resource, store in stores.items()}
    report.store_value = values if len(values) != 1 else next(iter(values.values()))
    report.integrity_errors = [
        error for store in stores.values() for error in _counter_integrity(store)
    ]
    _dump(nemesis, report, logs / "history.json")
    if report.ok and not keep_logs:
        shutil.rmtree(logs, ignore_errors=True)
    else:
        report.log_dir = str(logs)
    return report


def _check_leases(nemesis: _Nemesis, observer: _Observer, report: NemesisReport) -> None:
    """Semaphore: each section's token is the czxid of its own node (its key is
    ``{node}#{token}``; checked where the observer saw the node: sequential names are never
    reused), and every client completed a section (nobody starved)."""
    completed: set[str] = set()
    for section in nemesis.history.sections:
        if section.outcome == "completed":
            completed.add(section.client)
        node, _, token = (section.node or "").rpartition("#")
        czxid = observer.czxids.get(node)
        if czxid is None:
            continue
        report.tokens_checked += 1
        if str(czxid) != token:
            report.token_mismatches.append(f"{section.describe()}: {node} has czxid {czxid}")
    report.starved = [c.name for c in nemesis.clients if c.name not in completed]


def _check_reaping(cluster: ZooKeeperCluster) -> None:
    """A lease run needs servers that reap expired TTL nodes within a second (else a lost
    lease blocks everyone for up to a minute): raises ``ValueError`` if not configured."""
    key = next(iter(LEASE_JVM_PROPERTIES))
    interval = cluster.jvm_properties.get(key)
    if interval is None or not interval.isdigit() or int(interval) > _MAX_REAP_MS:
        raise ValueError(
            f"recipe lease needs a cluster started with jvm_properties={{{key!r}: '100'}} "
            f"(at most {_MAX_REAP_MS} ms; see LEASE_JVM_PROPERTIES), not {interval!r}"
        )


def _dump(nemesis: _Nemesis, report: NemesisReport, path: Path) -> None:
    """Everything recorded, as JSON, for a closer look at a failing seed."""
    history = nemesis.history
    writes = [w for store in nemesis.stores.values() for w in [*store.accepted, *store.rejected]]
    data = {
        "seed": report.seed,
        "recipe": report.recipe,
        "started": nemesis.started,
        "faults": [{**asdict(record), "spec": asdict(record.spec)} for record in report.faults],
        "sections": [asdict(section) for section in history.sections],
        "pauses": [asdict(pause) for pause in history.pauses],
        "attempts": [asdict(attempt) for attempt in history.attempts],
        "deletions": history.deletions,
        "imprecise_deletions": sorted(history.imprecise_deletions),
        "lost_sessions": {str(k): v for k, v in history.lost_sessions.items()},
        "session_states": {str(k): v for k, v in history.session_states.items()},
        "reads": {
            resource: [asdict(read) for read in store.reads]
            for resource, store in nemesis.stores.items()
        },
        "writes": [asdict(w) for w in sorted(writes, key=lambda w: w.seq)],
        "sessions": {str(k): v for k, v in nemesis.sessions.items()},
    }
    with contextlib.suppress(OSError, TypeError, ValueError):
        path.write_text(json.dumps(data, default=repr))


def _log_tail(log_dir: Path, client: _Client, lines: int = 5) -> str:
    if not client.process:
        return f"state {client.state}"
    try:
        text = (log_dir / f"{client.name}.log").read_text("utf-8", "replace")
    except OSError as exc:
        return f"no log: {exc}"
    return " | ".join(text.splitlines()[-lines:]) or "empty log"


def _counter_integrity(store: FencedStore) -> list[str]:
    """Every accepted write incremented the value it replaced: no update was lost."""
    errors = []
    for write in store.accepted:
        previous = write.previous if isinstance(write.previous, int) else 0
        if write.value != previous + 1:
            errors.append(
                f"{write.client}#{write.token} wrote {write.value} over {previous} at {write.t:.3f}"
            )
    if store.accepted and store.value != len(store.accepted):
        errors.append(f"counter {store.value} != {len(store.accepted)} accepted writes")
    return errors


async def _run(nemesis: _Nemesis, plan: list[FaultGroup], report: NemesisReport) -> None:
    n = nemesis
    direct = ",".join(n.hosts)
    async with AsyncExitStack() as stack:
        observer_client = await stack.enter_async_context(
            aiozklock.connect(direct, session_timeout=20.0, connect_timeout=30.0)
        )
        for path in n.paths:
            await observer_client.ensure_path(path)
        observer = _Observer(observer_client, n.paths, n.history)
        listener = await stack.enter_async_context(
            await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        )
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        n.control_address = f"127.0.0.1:{port}"
        n_local = n.n_clients - n.processes
        for i in range(n.n_clients):
            process = i >= n_local
            name = f"p{i - n_local + 1}" if process else f"w{i + 1}"
            proxies = [await stack.enter_async_context(FaultProxy(host)) for host in n.hosts]
            client = _Client(name, i, process, proxies)
            n.clients.append(client)
            n.by_name[name] = client
        async with anyio.create_task_group() as tg:
            n._tg = tg
            tg.start_soon(observer.run)
            tg.start_soon(listener.serve, n.serve_child)
            for client in n.clients:
                config = WorkerConfig(
                    name=client.name,
                    hosts=",".join(p.address for p in client.proxies),
                    path=n.path,
                    seed=n.seed,
                    session_timeout=n.session_timeout,
                    loss_policy=n.loss_policy,
                    acquire_timeout=n.acquire_timeout,
                    attempt_grace=n.attempt_grace,
                    long_hold=(0.3 * n.session_timeout, n.session_timeout),
                    long_hold_probability=0.06,
                    backend=n.backend,
                    control=n.control_address,
                    recipe=n.recipe,
                    paths=n.paths if n.recipe == "multilock" else (),
                    lease_ttl=n.session_timeout if n.recipe == "lease" else 0.0,
                    max_leases=n.max_leases,
                )
                if client.process:
                    tg.start_soon(n.run_child, client, config)
                else:
                    tg.start_soon(n.run_local, client, config)
            try:
                with anyio.move_on_after(_READY_TIMEOUT):
                    for client in n.clients:
                        await client.ready.wait()
                late = [c for c in n.clients if not c.ready.is_set()]
                if late:
                    raise RuntimeError(
                        f"client(s) not connected within {_READY_TIMEOUT:g} s: "
                        + "; ".join(f"{c.name}: {_log_tail(n.log_dir, c)}" for c in late)
                    )
                n.started = time.monotonic()
                logger.info("nemesis seed %d: %d client(s) ready", n.seed, len(n.clients))
                try:
                    for group in plan:
                        if n.now() + group.gap + group.length > n.duration + n.session_timeout:
                            break
                        await anyio.sleep(group.gap)
                        await n.run_group(group)
                    remaining = n.duration - n.now()
                    if remaining > 0:
                        await anyio.sleep(remaining)
                finally:
                    await n.heal_all()
                n.healed_at = time.monotonic()
                # Liveness: a section completes after the last fault, within a bound that
                # covers a session expiring and an attempt running out.
                bound = 2 * n.session_timeout + n.acquire_timeout[1] + n.attempt_grace + 5
                with anyio.move_on_after(bound):
                    await n.progress.wait()
                if n.progress.is_set():
                    report.recovery = (
                        min(
                            s.enter
                            for s in n.history.sections
                            if s.outcome == "completed" and s.enter > n.healed_at
                        )
                        - n.healed_at
                    )
                # Stop: each worker finishes its iteration (an attempt ends within its
                # bound), then reports its watches.
                n.stop.set()
                for client in n.clients:
                    if client.process and client.stream is not None:
                        with contextlib.suppress(anyio.BrokenResourceError, OSError):
                            await client.send({"type": "stop"})
                stop_bound = n.acquire_timeout[1] + n.attempt_grace + 10
                with anyio.move_on_after(stop_bound):
                    for client in n.clients:
                        await client.worker_done.wait()
                for client in n.clients:
                    if not client.worker_done.is_set():
                        where = await n.diagnose(client)
                        n.errors.append(
                            f"{client.name}: worker did not stop within {stop_bound:.0f} s"
                            f" ({where})"
                        )
                    elif client.watchers is None:
                        n.errors.append(f"{client.name}: reported no watch count")
                    elif client.watchers[0] != client.watchers[1]:
                        report.leaked_watches[client.name] = client.watchers
                n.close_clients.set()
                with anyio.move_on_after(15):
                    for client in n.clients:
                        await client.closed.wait()
                        await client.exited.wait()
                # A lease lost in the run may stay until its TTL runs out (then reaped).
                wait = _ORPHAN_WAIT + (n.session_timeout if n.recipe == "lease" else 0.0)
                leftovers = await observer.leftovers(wait)
                for node in leftovers:
                    owner = observer.owners.get(node, 0)
                    report.orphans.append(
                        f"{node} (session 0x{owner:x}: {n.sessions.get(owner, '?')})"
                    )
                if n.recipe == "semaphore":
                    _check_leases(n, observer, report)
            finally:
                report.elapsed = n.now()
                with anyio.CancelScope(shield=True):
                    await n.heal_all()
                    for client in n.clients:
                        await n._end_child(client)
                tg.cancel_scope.cancel()
