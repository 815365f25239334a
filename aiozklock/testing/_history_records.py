"""What a history is made of: critical sections, pauses, acquire attempts, and the fenced
store that holders write to; what its checks read of it (``Recorded``, which ``History``
is); and what they find: margins, stale writes, crowding.

Times are ``time.monotonic()`` (one host, one clock; system-wide on Linux, so records from
child processes can be merged).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "AcquireAttempt",
    "CriticalSection",
    "Crowding",
    "FencedRead",
    "FencedStore",
    "FencedWrite",
    "Margin",
    "Pause",
    "Recorded",
    "SectionPair",
    "StaleWrite",
]

logger = logging.getLogger(__name__)

SectionPair = tuple["CriticalSection", "CriticalSection"]


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


_sequence = itertools.count()


@dataclass(frozen=True, slots=True)
class FencedWrite:
    """A write a :class:`FencedStore` decided: its client, token and value, and whether the
    store accepted it."""

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

    ``fenced=False`` switches the fence off (the nemesis's negative control): every access is
    accepted, stale or not, and recorded as such, so that the history's replay must find the
    stale writes it let through.
    """

    accepted: list[FencedWrite] = field(default_factory=list)
    rejected: list[FencedWrite] = field(default_factory=list)
    max_token: int | None = None
    value: object = None
    reads: list[FencedRead] = field(default_factory=list)
    fenced: bool = True

    def _admits(self, token: int) -> bool:
        return not self.fenced or self.max_token is None or token >= self.max_token

    def write(self, client: str, token: int, value: object) -> bool:
        """Apply the write iff ``token >= max_token`` (or the fence is off); returns whether
        it was accepted."""
        ok = self._admits(token)
        record = FencedWrite(client, token, value, time.monotonic(), ok, self.value)
        if ok:
            self.max_token = max(token, self.max_token or token)
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
        ``max_token`` (or the fence is off); ``(False, None)`` for a stale token."""
        ok = self._admits(token)
        self.reads.append(FencedRead(client, token, time.monotonic(), ok))
        if not ok:
            return False, None
        self.max_token = max(token, self.max_token or token)
        return True, self.value


class Recorded(Protocol):
    """What the checks (``_history_checks``, ``_history_fencing``, ``_history_timing``) read
    of a history: ``History``'s records (see there), read-only. A protocol, so that they do
    not import ``History``, which composes them in ``check()``."""

    @property
    def sections(self) -> Sequence[CriticalSection]: ...

    @property
    def pauses(self) -> Sequence[Pause]: ...

    @property
    def attempts(self) -> Sequence[AcquireAttempt]: ...

    @property
    def deletions(self) -> Mapping[str, float]: ...

    @property
    def imprecise_deletions(self) -> Set[str]: ...

    @property
    def lost_sessions(self) -> Mapping[int, float]: ...

    @property
    def session_states(self) -> Mapping[int, Sequence[tuple[float, str]]]: ...

    @property
    def counters(self) -> Counter[str]: ...

    @property
    def max_holders(self) -> int: ...

    def paused(self, section: CriticalSection) -> bool:
        """Whether a pause covers ``section`` (it is then judged by fencing)."""
        ...
