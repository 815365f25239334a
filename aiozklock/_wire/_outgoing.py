"""Requests written "soon", and the release fold: without I/O.

A request queued here (``Session.send_soon``, ``Session.release_soon``) is written just before
the event loop next waits, or in front of this session's next request, in the same write:
whichever comes first. Its caller returns at once, and every later request of the session is
still ordered after it (ZooKeeper runs a session's requests in order).

**The release fold.** A lock's release queues the deletes of its nodes this way
(``release_soon``), so that releasing costs no round trip. If the same holder creates again
before they are written (a re-acquire in the same step of its task), ``fold`` takes the
deletes back and returns one multi: the deletes, then the creates. One transaction, one
commit on the server, one wake-up for the next waiter, one round trip for the whole cycle.
When no create follows, the deletes are flushed on their own (``take_all``). A fold happens
only

* in the generation the deletes were queued in, and while they are still queued: a lost
  connection fails the queue (``fail_all``), so nothing is ever folded across a reconnect;
* when the multi fits ``max_request_bytes``; otherwise the deletes go first, on their own.

Who writes the queue is the shell's business: the ``FlushScheduler`` it gives is told when
the queue needs a flush (``schedule``) and when it no longer does (``cancel``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from aiozklock._exceptions import AiozklockError
from aiozklock._wire._multi import MultiCreate, MultiDelete, MultiResult, multi_op
from aiozklock._wire._ops import delete_op
from aiozklock._wire._records import Op
from aiozklock._wire._requests import ReplyCallback

# The session logs on one logger, whichever of its modules speaks (docs/observability.md).
log = logging.getLogger("aiozklock._wire._session")

StripPath = Callable[[str], str]  # server path -> client path (for a multi's results)


class FlushScheduler(Protocol):
    """Arranges for the queue to be written before the event loop next waits."""

    def schedule(self) -> None: ...

    def cancel(self) -> None: ...


class Soon:
    """Requests queued to be written soon: not written yet, so not numbered yet. A release's
    also carries its nodes' server paths (``paths``), for a fold."""

    __slots__ = ("generation", "on_done", "ops", "paths")

    def __init__(
        self,
        ops: Sequence[Op[Any]],
        generation: int,
        on_done: ReplyCallback,
        paths: Sequence[str] = (),
    ) -> None:
        self.ops = ops
        self.generation = generation
        self.on_done = on_done
        self.paths = paths

    def fail(self, error_factory: Callable[[], AiozklockError]) -> None:
        """Never written: tell ``on_done`` that each request failed."""
        for _ in self.ops:
            try:
                self.on_done(None, error_factory())
            except Exception:
                log.exception("a reply callback raised")


Release = Soon  # what release_soon returns, for fold


def release_op(paths: Sequence[str], strip: StripPath) -> Op[Any]:
    """The deletes of a release: one delete, or one multi of deletes."""
    if len(paths) == 1:
        return delete_op(paths[0])
    return multi_op([MultiDelete(path) for path in paths], strip)


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

    def release(
        self, op: Op[Any], paths: Sequence[str], generation: int, on_done: ReplyCallback
    ) -> Release:
        """Queue ``op``, the deletes of the nodes at the server paths ``paths``
        (``release_op``): the release ``fold`` may take into the next create."""
        release = Soon((op,), generation, on_done, paths)
        self.queue(release)
        return release

    def take_back(self, soon: Soon) -> bool:
        """Unqueue ``soon`` if it is not written yet (True: its ``on_done`` is never
        called); False once written or failed."""
        if soon not in self._queued:
            return False
        self._queued.remove(soon)
        if not self._queued:
            self._scheduler.cancel()
        return True

    def fold(
        self,
        release: Release,
        creates: Sequence[MultiCreate],
        generation: int,
        strip: StripPath,
        max_body: int,
    ) -> Op[MultiResult] | None:
        """The multi of ``release``'s deletes then ``creates``, with the deletes taken back,
        if they are still queued, of ``generation``, and the multi's body is at most
        ``max_body`` bytes; None otherwise (the deletes are then written on their own,
        before anything written after them)."""
        if release.generation != generation or release not in self._queued:
            return None
        deletes = [MultiDelete(path) for path in release.paths]
        folded = multi_op([*deletes, *creates], strip)
        if len(folded.body) > max_body or not self.take_back(release):
            return None
        return folded

    def take_all(self) -> list[Soon]:
        """Everything queued, in order, to be written now (the queue is left empty)."""
        queued, self._queued = self._queued, []
        return queued

    def fail_all(self, error_factory: Callable[[], AiozklockError]) -> None:
        """The connection or the session is gone: nothing queued will be written."""
        for soon in self.take_all():
            soon.fail(error_factory)
