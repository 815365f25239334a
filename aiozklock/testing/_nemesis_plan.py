"""The nemesis's fault schedule: which faults, how long, against which role, in which order.

The schedule is a pure function of the seed and the run's parameters (:func:`plan_faults`):
a failing seed replays the same faults; the timing (and so which client holds when a fault
starts) differs between runs. Client faults are biased toward the current holder, server
faults toward the holder's server and the leader. The ensemble's cuts (``PARTITION_KINDS``)
are server faults: never two at once, nor with another server fault.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import dataclass

from aiozklock._nemesis_kinds import FAULT_KINDS, KIND_GROUPS
from aiozklock._nemesis_kinds import PARTITION_KINDS as _PARTITION_KINDS

__all__ = [
    "CLIENT_KINDS",
    "FAULT_KINDS",
    "FAULT_WEIGHTS",
    "KIND_GROUPS",
    "PARTITION_KINDS",
    "PROCESS_KINDS",
    "SERVER_KINDS",
    "FaultGroup",
    "FaultSpec",
    "plan_faults",
]

#: Every fault the nemesis knows (``FAULT_KINDS``), with its relative weight in a schedule.
FAULT_WEIGHTS: dict[str, float] = {
    "drop": 3,  # close the client's connections: RST or FIN
    "blackhole-short": 2,  # partition for 0.15-0.4 x the session timeout
    "blackhole-long": 2,  # partition for 1.3-2 x the session timeout: the session expires
    # The client's requests to its server lost, its server's frames (and a watch notification
    # every eighth of the timeout) still delivered, half-open: 0.15-0.4 or 1.3-2 x the timeout.
    "one-way-cut": 2,
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
    # The ensemble's own links cut (silently: bytes held, sockets open) for 1.3-2.2 x the
    # session timeout, and at least long enough for a follower to give up its leader:
    "isolate-follower": 2,  # a follower (the holder's server if it is one) from the rest
    "isolate-leader": 2,  # the leader from the rest: they elect another
    "split": 2,  # a minority with the holder's server (1|2 on 3 nodes, 2|3 on 5) from the rest
    "flap": 1,  # the holder's server's links cut and healed 4-8 times (0.2-1 x the timeout)
}
CLIENT_KINDS = frozenset(
    {"drop", "blackhole-short", "blackhole-long", "lost-create-reply", "lost-delete-reply"}
    | {"expire", "one-way-cut"}
)
PROCESS_KINDS = frozenset({"pause-short", "pause-long", "pause-before-write"})
PARTITION_KINDS = frozenset(_PARTITION_KINDS)
SERVER_KINDS = (
    frozenset({"server-pause", "server-kill", "leader-kill", "server-restart"}) | PARTITION_KINDS
)


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """One planned fault. ``target`` is a role resolved when the fault starts: ``holder``
    (the current holder, else a client chosen by ``pick``), ``any``, ``holder-server`` (the
    server the holder is connected to), ``holder-follower`` (that server if it is a
    follower, else a follower), ``leader`` or ``follower``. ``steps``: a flap's cut and
    healed periods, alternating (cut first)."""

    kind: str
    target: str
    offset: float  # seconds after its group starts
    duration: float  # seconds the fault lasts (0: instantaneous)
    option: str = ""  # rst/fin for drops, hang/refuse for black-holes, short/long for pauses
    # and one-way cuts
    pick: float = 0.0  # in [0, 1): chooses among candidates at run time
    window: float = 0.0  # pause-before-write: how long it stays armed before the pause
    steps: tuple[float, ...] = ()  # flap: cut, healed, cut, ... (s)

    @property
    def length(self) -> float:
        """Planned seconds from the group's start to this fault's end."""
        return self.offset + self.window + self.duration

    def __str__(self) -> str:
        option = f"({self.option})" if self.option else ""
        at = f" at +{self.offset:.1f} s" if self.offset else ""
        lasting = f" for {self.duration:.1f} s" if self.duration else ""
        armed = f" (armed up to {self.window:.1f} s)" if self.window else ""
        flaps = f" in {(len(self.steps) + 1) // 2} cuts" if self.steps else ""
        return f"{self.kind}{option} -> {self.target}{lasting}{flaps}{armed}{at}"


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


def _partition_spec(
    kind: str, rng: random.Random, timeout: float, offset: float, sync_time: float, pick: float
) -> FaultSpec:
    """A cut of the ensemble's links. ``sync_time`` (syncLimit x tickTime) is how long a
    follower waits for its leader before it gives up: an isolation outlasts it (and a tick)
    as well as the session timeout, so that the follower does give up and the leader expires
    the sessions it no longer hears of."""
    if kind == "flap":
        steps: list[float] = []
        for flap in range(rng.randint(4, 8)):
            if flap:
                steps.append(rng.uniform(0.1, 0.3) * timeout)  # healed
            steps.append(rng.uniform(0.2, 1.0) * timeout)  # cut
        return FaultSpec(
            kind, "holder-server", offset, sum(steps), "silent", pick, steps=tuple(steps)
        )
    duration = max(rng.uniform(1.3, 2.2) * timeout, sync_time + 0.2)
    target = {"isolate-follower": "holder-follower", "isolate-leader": "leader"}.get(
        kind, "holder-server"
    )
    return FaultSpec(kind, target, offset, duration, "silent", pick)


def _spec(
    kind: str, rng: random.Random, timeout: float, offset: float, sync_time: float = 1.0
) -> FaultSpec:
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
    if kind == "one-way-cut":
        option = rng.choice(("short", "long"))
        low, high = (0.15, 0.4) if option == "short" else (1.3, 2.0)
        duration = rng.uniform(low, high) * timeout
        return FaultSpec(kind, holder_biased, offset, duration, option, pick)
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
    if kind in PARTITION_KINDS:
        return _partition_spec(kind, rng, timeout, offset, sync_time, pick)
    raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(FAULT_KINDS)}")


def plan_faults(
    seed: int,
    duration: float,
    session_timeout: float,
    kinds: Collection[str] = FAULT_KINDS,
    *,
    warmup: float = 1.0,
    sync_time: float = 1.0,
) -> list[FaultGroup]:
    """The fault schedule of a run: a pure function of its arguments.

    Groups follow each other, each after a heal ``gap`` of 0.5-2 s (the first after
    ``warmup``); about one group in four has two faults of different categories (never two
    server faults: the ensemble keeps its quorum). Groups are planned while they end within
    ``duration``; a run skips the rest of the plan once a group would end more than a
    session timeout after ``duration`` (healing takes longer than planned). ``sync_time``:
    the ensemble's syncLimit x tickTime in seconds (see ``_partition_spec``).
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
        specs = [_spec(first, rng, session_timeout, 0.0, sync_time)]
        if rng.random() < 0.25:
            others = [
                (kind, weight)
                for kind, weight in zip(available, weights, strict=True)
                if _category(kind) != _category(first)
            ]
            if others:
                second = rng.choices([k for k, _ in others], [w for _, w in others])[0]
                offset = rng.uniform(0.0, 0.5) * max(specs[0].duration, 1.0)
                specs.append(_spec(second, rng, session_timeout, offset, sync_time))
        group = FaultGroup(len(groups) + 1, gap, tuple(specs))
        if planned + gap + group.length > duration:
            return groups
        groups.append(group)
        planned += gap + group.length
