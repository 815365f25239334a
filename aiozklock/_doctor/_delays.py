"""Running lock-delays (pure): which queues a lock-delay record holds back, as of the doctor's
clock, the information finding that says until when, and the words every view uses for one
(the command line's tables, ``top``). The record's parsing and arithmetic are the recipes'
(``_recipes/_core/_delay_record.py``); what lock-delay is: docs/fencing.md, "Lock-delay".

A running lock-delay is not a problem: it is the lock doing what its holder asked for (a
holder that vanished without a release may still be acting on a resource that cannot check a
fencing token). It is shown so that a waiter that waits it out is not taken for a holder.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence

from aiozklock._doctor._checks import duration
from aiozklock._doctor._model import Finding, FindingKind, QueueState, Severity
from aiozklock._doctor._queues import View
from aiozklock._doctor._scan import Znode
from aiozklock._recipes._core._delay_record import RECORD, RunningLockDelay, running_delay
from aiozklock._wire._validation import join

#: The queues whose recipes honor a record (locks, multi-lock members, elections); a
#: read/write lock or a semaphore ignores one.
HONORED_BY = frozenset({"lock", "election"})


def delays_of(
    tree: Mapping[str, Znode], views: Iterable[View], now: float
) -> dict[int, RunningLockDelay]:
    """The running lock-delay of each view (by its index) that has one, as of ``now``
    (Unix seconds): its path's record names a node no longer queued, and its end is later."""
    found = {}
    for view in views:
        path = join(view.path, RECORD)
        record = tree.get(path)
        if record is None or view.kind not in HONORED_BY:
            continue
        queued = [entry.node for entry in view.entries]
        stat, now_ms = record.stat, round(now * 1000)
        delay = running_delay(record.data, stat.mtime, stat.mzxid, path, queued, now_ms)
        if delay is not None:
            found[view.index] = delay
    return found


def server_time(ms: int) -> str:
    """A server time (Unix ms) as ``2025-05-01 12:00:05.123 UTC``."""
    seconds, millis = divmod(ms, 1000)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds)) + f".{millis:03d} UTC"


def delay_words(path: str, delay: RunningLockDelay, now: float) -> str:
    """``lock-delay running on PATH until WHEN (N s more), after NODE vanished``; ``now``:
    Unix seconds (what "more" counts from)."""
    if delay.until_ms is None:
        return (
            f"lock-delay starting on {path}: {delay.after} vanished, and the next holder "
            f"waits {duration(delay.delay_ms / 1000)} from when a contender records it"
        )
    left = max(0.0, delay.until_ms / 1000 - now)
    return (
        f"lock-delay running on {path} until {server_time(delay.until_ms)} "
        f"({duration(left)} more), after {delay.after} vanished"
    )


def delay_findings(queues: Sequence[QueueState], now: float) -> Iterator[Finding]:
    """An information finding per queue that waits out a lock-delay."""
    for queue in queues:
        delay = queue.lock_delay
        if delay is None:
            continue
        left = delay.delay_ms / 1000
        if delay.until_ms is not None:
            left = max(0.0, delay.until_ms / 1000 - now)
        waiting = [c for c in queue.waiters if c.lock_delay is not None and c.session_id]
        yield Finding(
            FindingKind.LOCK_DELAY,
            Severity.INFO,
            f"{delay_words(queue.path, delay, now)} without a release: nobody holds it until then",
            "nothing: the holder vanished without a release (killed, cut off, its "
            "session expired), and the delay gives what it had started time to stop "
            "before the next holder begins; nothing ends it early (docs/fencing.md, "
            "Lock-delay)",
            paths=(queue.path,),
            sessions=tuple(sorted({c.session_id for c in waiting})),
            seconds=left,
        )


__all__ = ("HONORED_BY", "delay_findings", "delay_words", "delays_of", "server_time")
