"""The requests in flight, without I/O: xid assignment, reply matching, and the skipped-reply
rule.

ZooKeeper answers a session's requests in the order it received them. So a reply whose xid
is not the oldest request written tells us that the server dropped the older ones (it does
so with a write of a session that moved to another server, and may still answer the reads
after it before it closes the connection): they fail with ``ConnectionLoss``, outcome
unknown, and nothing is resent blindly.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from aiozklock._exceptions import AiozklockError, ConnectionLoss
from aiozklock._wire._framing import frame
from aiozklock._wire._records import Op
from aiozklock._wire._watches import WatchRegistry

# The session logs on one logger, whichever of its modules speaks (docs/observability.md).
log = logging.getLogger("aiozklock._wire._session")

ReplyCallback = Callable[[Any, "AiozklockError | None"], None]


class Waker(Protocol):
    """What a caller waiting for a reply waits on (the shell gives the backend's: a bare
    future on asyncio, ``trio.Event`` on trio); the core only sets it."""

    def set(self) -> None: ...

    def wait(self) -> Awaitable[object]: ...


class Pending:
    """One request written and not answered yet."""

    __slots__ = ("error", "event", "on_done", "op", "result", "xid")

    def __init__(self, xid: int, op: Op[Any], on_done: ReplyCallback | None) -> None:
        self.xid = xid
        self.op = op
        self.on_done = on_done  # a request sent without waiting: told instead of a waiter
        # Replies come in order: a pipeline's caller awaits only its last one.
        self.event: Waker | None = None
        self.result: Any = None
        self.error: AiozklockError | None = None

    def finish(self) -> None:
        """The reply, or the failure, is in: wake the waiter or call ``on_done``."""
        if self.on_done is None:
            if self.event is not None:
                self.event.set()
            return
        try:
            self.on_done(self.result, self.error)
        except Exception:
            log.exception("a reply callback raised")


class RequestTable:
    """The requests written on the current connection, by xid and in wire order.

    ``sent_at`` is the liveness clock's deque (one send time per expected reply), shared so
    that numbering a request records its send time in the same step.
    """

    __slots__ = ("_new_waker", "_sent_at", "_watches", "pending", "written", "xid")

    def __init__(
        self,
        watches: WatchRegistry,
        sent_at: collections.deque[float],
        new_waker: Callable[[], Waker],
    ) -> None:
        self._watches = watches
        self._sent_at = sent_at
        self._new_waker = new_waker
        self.xid = 0
        self.pending: dict[int, Pending] = {}
        self.written: collections.deque[Pending] = collections.deque()  # in wire order

    def number(
        self,
        ops: Sequence[Op[Any]],
        on_done: ReplyCallback | None,
        frames: list[bytes],
        now: float,
    ) -> list[Pending]:
        """Number ``ops``, expect their replies (the last one awaited, unless ``on_done``
        is told instead), register their watchers, and add their frames to ``frames``."""
        pendings = []
        pending_by_xid, written, sent_at = self.pending, self.written, self._sent_at
        for op in ops:
            self.xid = xid = (self.xid + 1) & 0x7FFFFFFF or 1
            pending = Pending(xid, op, on_done)
            pending_by_xid[xid] = pending
            written.append(pending)
            pendings.append(pending)
            if op.watcher is not None and op.watch is not None:
                self._watches.add(op.watch, op.path, op.watcher)
            frames.append(frame(xid, op.body))
            sent_at.append(now)
        if on_done is None:
            pendings[-1].event = self._new_waker()
        return pendings

    def take(self, xid: int) -> Pending | None:
        """The request ``xid`` answers, failing those written before it that are still
        unanswered (``ConnectionLoss``: the server answers in order, so it dropped them);
        None if nobody waits for it any more (its caller was cancelled)."""
        pending = self.pending.pop(xid, None)
        if pending is not None:
            written = self.written
            if written and written[0] is pending:
                written.popleft()  # in order, as nearly always: nothing was skipped
            else:
                self._fail_skipped(pending)
        return pending

    def _fail_skipped(self, answered: Pending) -> None:
        written, pending_by_xid = self.written, self.pending
        while written:
            pending = written.popleft()
            if pending is answered:
                return
            if pending_by_xid.get(pending.xid) is not pending:
                continue  # forgotten: its caller was cancelled
            del pending_by_xid[pending.xid]
            pending.error = ConnectionLoss("no reply: the server answered a later request")
            self._watches.settle(pending.op, True, None)
            pending.finish()

    def forget(self, pendings: Sequence[Pending]) -> None:
        """Their callers are gone (cancelled): late replies are skipped, watchers dropped."""
        for pending in pendings:
            if self.pending.get(pending.xid) is pending:
                del self.pending[pending.xid]
                op = pending.op
                if op.watcher is not None and op.watch is not None:
                    self._watches.remove(op.path, op.watcher)

    def fail_all(self, error_factory: Callable[[], AiozklockError]) -> None:
        """The connection is gone: every request in flight fails with a fresh error."""
        pendings = list(self.pending.values())
        self.pending.clear()
        self.written.clear()
        for pending in pendings:
            pending.error = error_factory()
            self._watches.settle(pending.op, True, pending.result)
            pending.finish()
