"""Lock-delay's names and record (pure): what a path that uses it carries, and the arithmetic
of how long a contender still waits. The mechanism is ``_delay.py``'s; the argument is in
docs/fencing.md ("Lock-delay").

* A lock-delay contender's nodes are named with a GUID that starts with ``TAG``
  (``lockdelay`` + 23 hex digits, where any other GUID is 32 hex digits): whoever lists the
  queue sees, from the names alone, that a lock-delay contender is ahead.
* The record is a persistent child ``RECORD`` of the lock path (a name no library orders as
  a contender: Curator and kazoo sort it after every sequence, we ignore it). Its data is
  JSON: ``{"holder": <node name>, "delay": <seconds>}``, written by a lock-delay holder
  when granted; a contender that finds that holder gone adds ``"gone_by"``: a server time
  (ms) by which it was gone, or null for "by this version's mtime" (the first one to see it
  gone, which cannot know the mtime of its own write before the reply), and with a time,
  ``"gone_epoch"``: the leader epoch (a zxid's high 32 bits) whose clock wrote it.
* Whoever shows a lock's queue (``contenders()``, the command line, the doctor, top) reads
  the record too, and ``running_delay`` says whether it holds the queue's head back.
* Server times are the leader's wall clock: two of them are compared only when one leader
  wrote both (same epoch). Across a leader change the contender waits the full delay from
  its own write instead (late, never early: the two leaders' clocks may differ by any skew).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Collection, Iterable
from dataclasses import dataclass

log = logging.getLogger("aiozklock._recipes._core._delay")

TAG = "lockdelay"  # the GUID prefix of a lock-delay contender's nodes
RECORD = TAG  # the record's name under the lock path (starts with TAG: one test finds both)
ABSENT = -1  # a record's version when there is none


def delay_guid() -> str:
    """A GUID for a lock-delay contender's nodes: ``TAG`` and random hex, 32 characters."""
    return TAG + uuid.uuid4().hex[len(TAG) :]


def delay_seen(listings: Iterable[list[str]], guid: str) -> bool:
    """Whether a listing shows a record or another lock-delay contender's node (ours start
    with ``guid``): then a grant must read the record first. Sends nothing."""
    for children in listings:
        for child in children:
            if child.startswith(TAG) and not child.startswith(guid):
                return True
    return False


def epoch(zxid: int) -> int:
    """The leader epoch in which the write that made ``zxid`` was proposed."""
    return zxid >> 32


@dataclass(frozen=True, slots=True)
class Record:
    """A record's content: the ``holder`` node it names, its ``delay`` in ms, and whether it
    was seen ``gone`` (``gone_by``: the server time, ms, by which it was; None: by the
    mtime of the version that says so; ``gone_epoch``: the epoch of the leader whose clock
    wrote ``gone_by``, None if not known)."""

    holder: str
    delay: int
    gone: bool = False
    gone_by: int | None = None
    gone_epoch: int | None = None

    def marked_gone(self, mtime: int, mzxid: int) -> bytes:
        """The data that records the holder gone, written over the version read with
        ``mtime`` and ``mzxid`` (kept as ``gone_by`` if that version said "gone by my
        mtime")."""
        gone_by: int | None
        if self.gone_by is not None or not self.gone:
            gone_by, gone_epoch = self.gone_by, self.gone_epoch
        else:
            gone_by, gone_epoch = mtime, epoch(mzxid)
        return _encode(self.holder, self.delay, gone_by, gone_epoch, gone=True)

    def remaining(self, read: tuple[int, int], written: tuple[int, int]) -> float:
        """Seconds still to wait, from the reply to our write of ``marked_gone``:
        ``written`` is its ``(mtime, mzxid)``, ``read`` the version's we wrote over. Server
        time against server time of the same leader, never our own clock; the full delay
        if another leader's clock wrote the time it was gone by (a leader change since)."""
        return self._left(read, written) / 1000

    def _left(self, read: tuple[int, int], written: tuple[int, int]) -> int:
        """``remaining`` in ms."""
        written_mtime, written_zxid = written
        if not self.gone:
            return self.delay  # we are the first to see it gone: by our write
        gone_epoch: int | None
        if self.gone_by is None:
            gone_by, gone_epoch = read[0], epoch(read[1])
        else:
            gone_by, gone_epoch = self.gone_by, self.gone_epoch
        if gone_epoch != epoch(written_zxid):
            return self.delay  # two leaders' clocks: not comparable
        return max(0, gone_by + self.delay - written_mtime)

    def ends_at(self, mtime: int, mzxid: int) -> int | None:
        """When the wait of the contender that wrote this version (its ``mtime`` and
        ``mzxid``) ends, in server time (ms): what ``remaining`` told it, from that write.
        None if the version does not say the holder is gone (nobody waits for it yet)."""
        if not self.gone:
            return None
        written = (mtime, mzxid)  # a "gone by my mtime" version: gone_by is this write's
        return mtime + self._left(written, written)


@dataclass(frozen=True, slots=True)
class RunningLockDelay:
    """A lock-delay that holds a lock back: its holder's node ``after`` vanished without a
    release, and the next holder waits ``delay_ms`` from when that was seen, until
    ``until_ms`` (Unix time in ms by the clock of the ZooKeeper leader that recorded it,
    as a node's ``mtime``; None for the moment after the vanish before the waiting
    contender has recorded it: it then waits the whole delay from that record). See
    docs/fencing.md, "Lock-delay"."""

    after: str
    delay_ms: int
    until_ms: int | None


def running_delay(
    data: bytes, mtime: int, mzxid: int, path: str, queued: Collection[str], now_ms: int
) -> RunningLockDelay | None:
    """The lock-delay that a record (at ``path``: its ``data``, ``mtime`` and ``mzxid``)
    imposes on the head of the queue whose node names are ``queued``, as of ``now_ms``
    (Unix ms); None if there is none: not a record (logged as ``parse_record`` does), its
    holder still queued (it holds), or its delay over."""
    record = parse_record(data, path)
    if record is None or record.holder in queued:
        return None
    until = record.ends_at(mtime, mzxid)
    if until is not None and until <= now_ms:
        return None  # waited out (a record a granted contender failed to delete)
    return RunningLockDelay(record.holder, record.delay, until)


def holder_record(holder: str, delay: float) -> bytes:
    """The data a lock-delay holder writes when granted: ``holder``, its node's name."""
    return _encode(holder, round(delay * 1000), None, None, gone=False)


def _encode(
    holder: str, delay: int, gone_by: int | None, gone_epoch: int | None, *, gone: bool
) -> bytes:
    fields: dict[str, object] = {"holder": holder, "delay": delay / 1000}
    if gone:
        fields["gone_by"] = gone_by
    if gone_epoch is not None:
        fields["gone_epoch"] = gone_epoch
    return json.dumps(fields, separators=(",", ":")).encode()


def parse_record(data: bytes, path: str) -> Record | None:
    """The record in ``data``; None (logged as a warning) if it is not one."""
    try:
        fields = json.loads(data)
        holder, delay = fields["holder"], fields["delay"]
        gone_by, gone_epoch = fields.get("gone_by"), fields.get("gone_epoch")
        if (
            isinstance(holder, str)
            and isinstance(delay, int | float)
            and not isinstance(delay, bool)
            and (gone_by is None or _is_int(gone_by))
            and (gone_epoch is None or _is_int(gone_epoch))
        ):
            gone = "gone_by" in fields
            return Record(holder, round(delay * 1000), gone, gone_by, gone_epoch)
    except (ValueError, TypeError, KeyError):
        pass
    log.warning("%s is not a lock-delay record (ignored): %r", path, data[:200])
    return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def warn_short_delay(label: str, delay: float, session_timeout: float) -> None:
    """Log a warning (once per recipe object: the client shares one per arguments) that
    ``delay`` is shorter than the negotiated session timeout."""
    log.warning(
        "%s: lock_delay=%.3g s is shorter than the session timeout (%.3g s): a holder cut "
        "off from ZooKeeper notices only within about half of it (loss_policy="
        "'suspended'), later with 'expired', so it may still be running when the delay "
        "ends; use lock_delay >= the session timeout",
        label,
        delay,
        session_timeout,
    )


__all__ = (
    "ABSENT",
    "RECORD",
    "TAG",
    "Record",
    "RunningLockDelay",
    "delay_guid",
    "epoch",
    "delay_seen",
    "holder_record",
    "parse_record",
    "running_delay",
    "warn_short_delay",
)
