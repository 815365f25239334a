"""What the doctor reports: ``Diagnosis`` (``await zk.diagnose(prefix)``), its ``Finding``s,
and the queues it read (``QueueState``). Frozen values: a live view or a metrics exporter
can keep them, compare them and count them."""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from aiozklock._recipes._core._contenders import Contender
from aiozklock._recipes._core._delay_record import RunningLockDelay


class FindingKind(enum.Enum):
    """What a finding is about (its ``value`` is the name ``--json`` prints)."""

    DEADLOCK = "deadlock"  #: sessions (or tasks) that wait for each other in a cycle
    UNSAFE_MIX = "unsafe_mix"  #: contenders on one path whose layouts do not see each other
    LONG_HOLDER = "long_holder"  #: a holder older than ``hold_warning``
    LONG_QUEUE = "long_queue"  #: ``queue_warning`` waiters or more on one path (nodes + local)
    EXPIRED_LEASE = "expired_lease"  #: a TTL lease past its TTL that the server has not reaped
    LEFTOVER_PARENT = "leftover_parent"  #: an empty persistent parent left behind
    UNREADABLE = "unreadable"  #: nodes this session may not read (their ACL)
    LOCK_DELAY = "lock_delay"  #: a lock-delay running: a holder vanished without a release


class Severity(enum.IntEnum):
    """How bad a finding is; ordered (``Severity.WARNING < Severity.CRITICAL``)."""

    INFO = 0  #: worth knowing; not a problem by itself
    WARNING = 1  #: a problem to look at
    CRITICAL = 2  #: nobody progresses, or two holders at once are possible


Library = Literal["aiozklock", "curator", "kazoo", "other"]


@dataclass(frozen=True, slots=True)
class Party:
    """One side of a wait: a session, and the task when its nodes say (ours do). Threads of
    a Curator or kazoo session are not told apart: ``task`` is None for them."""

    session_id: int
    task: str | None
    library: Library
    host: str | None = None
    pid: int | None = None
    identifier: str | None = None

    def describe(self) -> str:
        """``0x1a2b (task 'worker', host h, pid 7)``, with what is known."""
        parts = [f"task {self.task!r}"] if self.task is not None else []
        parts += [f"{name} {value}" for name, value in self._known()]
        if self.library != "aiozklock":
            parts.insert(0, self.library)
        return f"0x{self.session_id:x}" + (f" ({', '.join(parts)})" if parts else "")

    def _known(self) -> list[tuple[str, object]]:
        fields = (("identifier", self.identifier), ("host", self.host), ("pid", self.pid))
        return [(name, value) for name, value in fields if value is not None]


@dataclass(frozen=True, slots=True)
class Wait:
    """One link of a deadlock's cycle: ``party`` waits at ``path`` (its node ``node``) for
    the party of the next link."""

    party: Party
    path: str
    node: str


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem found: what (``kind``), how bad (``severity``), one line each of what was
    seen (``message``) and what to do (``action``), the paths and sessions involved.

    ``cycle`` (deadlocks): the waits around the cycle, each party waiting for the next one's
    (the last for the first's). ``seconds``: the age that made the finding (how long held,
    how long the oldest waiter waited, how long since a lease expired, how long a parent has
    been empty), by the server's clock; ``count``: the number of waiters (long queues: waiting
    nodes plus local waiters, ``QueueState.size``)."""

    kind: FindingKind
    severity: Severity
    message: str
    action: str
    paths: tuple[str, ...] = ()
    sessions: tuple[int, ...] = ()
    cycle: tuple[Wait, ...] = ()
    seconds: float | None = None
    count: int | None = None


@dataclass(frozen=True, slots=True)
class QueueState:
    """A path where contenders are: its ``kind`` (``"lock"``, ``"election"``, ``"rwlock"``,
    ``"semaphore"``, ``"nonfair"``, ``"lease"``, ``"kazoo-semaphore"``,
    ``"curator-semaphore"``), its holders and waiters (nodes), in queue order; ``size``
    counts their local waiters too. ``Contender``'s
    ``enqueued_at`` is by the server's clock, as ``Diagnosis.server_time``.

    ``lock_delay``: the lock-delay running on the path (a holder vanished without a
    release, docs/fencing.md): nobody holds until it ends; the contenders that would hold
    wait it out, first among the waiters, with their ``lock_delay`` set."""

    path: str
    kind: str
    holders: tuple[Contender, ...]
    waiters: tuple[Contender, ...]
    lock_delay: RunningLockDelay | None = None

    @property
    def local_waiters(self) -> int:
        """The tasks queued inside the contenders' processes behind their nodes (holders'
        too), as the nodes' data last said (``Contender.local_waiters``; 0 where the data
        does not say)."""
        return sum(c.local_waiters or 0 for c in (*self.holders, *self.waiters))

    @property
    def size(self) -> int:
        """How many wait: the waiting nodes and the contenders' local waiters (what the
        queue warning compares with ``queue_warning``)."""
        return len(self.waiters) + self.local_waiters


Clock = Literal["server", "local"]


def session_bound(kind: str) -> bool:
    """Whether a holder of a queue of ``kind`` holds by its session: a TTL lease's node
    outlives the session that made it, so its session says nothing about who holds."""
    return kind != "lease"


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """What ``zk.diagnose(prefix)`` found under ``prefix``: ``findings`` (most severe first),
    ``queues`` (every path with contenders), how many nodes were read and how long that
    took (``elapsed``, seconds).

    Ages are measured against ``server_time`` (Unix seconds): the server's clock when
    ``clock`` is ``"server"``, this machine's when the doctor could not read the server's
    (see ``diagnose``). The thresholds it was run with are kept with it."""

    prefix: str
    findings: tuple[Finding, ...]
    queues: tuple[QueueState, ...]
    nodes_scanned: int
    elapsed: float
    server_time: float
    clock: Clock
    hold_warning: float
    queue_warning: int
    leftover_age: float

    @property
    def healthy(self) -> bool:
        """No finding of severity ``WARNING`` or worse."""
        return all(finding.severity < Severity.WARNING for finding in self.findings)

    @property
    def counts(self) -> Mapping[FindingKind, int]:
        """The number of findings of each kind (every kind present, 0 when none)."""
        found = Counter(finding.kind for finding in self.findings)
        return {kind: found[kind] for kind in FindingKind}

    def of_kind(self, kind: FindingKind) -> tuple[Finding, ...]:
        """The findings of one kind, in report order."""
        return tuple(finding for finding in self.findings if finding.kind is kind)

    @property
    def longest_hold(self) -> float:
        """Seconds the oldest holder has held, by ``server_time``; 0.0 if nobody holds."""
        return self._oldest(queue.holders for queue in self.queues)

    @property
    def longest_wait(self) -> float:
        """Seconds the oldest waiter has waited, by ``server_time``; 0.0 if nobody waits."""
        return self._oldest(queue.waiters for queue in self.queues)

    def _oldest(self, groups: Iterable[tuple[Contender, ...]]) -> float:
        times = [c.enqueued_at for group in groups for c in group if c.enqueued_at is not None]
        return max(0.0, self.server_time - min(times)) if times else 0.0


__all__ = (
    "Clock",
    "Diagnosis",
    "Finding",
    "FindingKind",
    "Library",
    "Party",
    "QueueState",
    "Severity",
    "Wait",
)
