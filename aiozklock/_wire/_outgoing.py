"""Requests written "soon": without I/O.

A request queued here (``Session.send_soon``: a grant's mark, which nobody waits for) is
written just before the event loop next waits, or in front of this session's next request,
in the same write: whichever comes first. Its caller returns at once, and every later
request of the session is still ordered after it (ZooKeeper runs a session's requests in
order). A queued request can be taken back until it is written; a lost connection fails
the queue (``fail_all``), so nothing is written across a reconnect.

Releases are not queued here: a release's deletes are written at the call (``Session.send``),
so that a caller that blocks the event loop next keeps nothing from anyone (issue 30).

Who writes the queue is the shell's business: the ``FlushScheduler`` it gives is told when
the queue needs a flush (``schedule``) and when it no longer does (``cancel``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from aiozklock._exceptions import AiozklockError
from aiozklock._wire._records import Op
from aiozklock._wire._requests import ReplyCallback

# The session logs on one logger, whichever of its modules speaks (docs/observability.md).
log = logging.getLogger("aiozklock._wire._session")


class FlushScheduler(Protocol):
    """Arranges for the queue to be written before the event loop next waits."""

    def schedule(self) -> None: ...

    def cancel(self) -> None: ...


class Soon:
    """Requests queued to be written soon: not written yet, so not numbered yet."""

    __slots__ = ("generation", "on_done", "ops")

    def __init__(self, ops: Sequence[Op[Any]], generation: int, on_done: ReplyCallback) -> None:
        self.ops = ops
        self.generation = generation
        self.on_done = on_done

    def fail(self, error_factory: Callable[[], AiozklockError]) -> None:
        """Never written: tell ``on_done`` that each request failed."""
        for _ in self.ops:
            try:
                self.on_done(None, error_factory())
            except Exception:
                log.exception("a reply callback raised")


class OutgoingQueue:
    """The requests queued to be written soon, in order, less any taken back."""

    __slots__ = ("_queued", "_scheduler")

    def __init__(self, scheduler: FlushScheduler) -> None:
        self._queued: list[Soon] = []
        self._scheduler = scheduler

    def __bool__(self) -> bool:
        return bool(self._queued)

    def queue(self, soon: Soon) -> None:
        """Queue ``soon`` behind what is queued, and have it written soon."""
        self._queued.append(soon)
        self._scheduler.schedule()

    def take_back(self, soon: Soon) -> bool:
        """Unqueue ``soon`` if it is not written yet (True: its ``on_done`` is never
        called); False once written or failed."""
        if soon not in self._queued:
            return False
        self._queued.remove(soon)
        if not self._queued:
            self._scheduler.cancel()
        return True

    def take_all(self) -> list[Soon]:
        """Everything queued, in order, to be written now (the queue is left empty)."""
        queued, self._queued = self._queued, []
        return queued

    def fail_all(self, error_factory: Callable[[], AiozklockError]) -> None:
        """The connection or the session is gone: nothing queued will be written."""
        for soon in self.take_all():
            soon.fail(error_factory)
