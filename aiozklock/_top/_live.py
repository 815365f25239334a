"""The live view: tasks that share a ``Board`` and draw it on a ``Display``.

- the watches (``_watch.TreeWatch``) mark the view stale when the tree changes;
- the reader runs the doctor when the view is stale, at most every ``REFRESH`` seconds (or,
  if a reading takes longer, as often as it takes), and when a holder crosses the hold
  warning or a lock-delay ends, times it knows in advance: the only readings without a
  change;
- the painter draws a frame when something changed and every ``TICK`` seconds, which moves
  the ages on by the local clock without asking the server;
- the keys: ``q`` quits, ``r`` reads again now, Ctrl-L repaints;
- the signals: a resize repaints for the new size; SIGINT, SIGTERM and SIGHUP quit; Ctrl-Z
  (SIGTSTP) gives the terminal back, stops, and takes it again when continued.

The session's state is shown as it changes: SUSPENDED or LOST, the last view stays, marked,
and the reads wait for the session to come back (the client reconnects by itself).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

import anyio
import anyio.abc

import aiozklock
from aiozklock._client import session_of
from aiozklock._doctor._diagnose import Options, diagnose
from aiozklock._doctor._model import Diagnosis
from aiozklock._exceptions import (
    ClientClosed,
    SessionExpired,
    ZooKeeperError,
    ZooKeeperUnavailable,
)
from aiozklock._top._screen import Line, Snapshot, frame
from aiozklock._top._watch import TreeWatch
from aiozklock._wire._core import SessionState, StateChange
from aiozklock._wire._session import Session

REFRESH = 0.2  # seconds: the least time between two readings
TICK = 1.0  # seconds between frames when nothing happens
DUE_MARGIN = 0.5  # seconds past a holder's hold warning before reading again
QUIT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Display(Protocol):
    """Where the view is drawn (``_terminal.Terminal``)."""

    def size(self) -> tuple[int, int]:
        """Columns and rows now."""

    def draw(self, lines: Sequence[Line], *, full: bool = False) -> None:
        """Show ``lines``; ``full``: repaint everything (after a resize)."""

    async def read(self) -> str:
        """The next keys typed; ``""`` once the input is closed."""

    def restore(self) -> None:
        """Give the terminal back as it was."""

    def resume(self) -> None:
        """Take the terminal again after ``restore()`` (after a stop)."""


class Board:
    """What the tasks know, for the next frame."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.state = SessionState.CONNECTING
        self.state_at = time.monotonic()
        self.reason = ""  # why the state last changed
        self.diagnosis: Diagnosis | None = None
        self.taken_at = 0.0  # time.monotonic() when ``diagnosis`` was read
        self.error: str | None = None  # the last reading's failure, or a warning logged

    def snapshot(self, now: float) -> Snapshot:
        """The view at ``now`` (``time.monotonic()``)."""
        note = self.error
        if note is None and self.state is not SessionState.CONNECTED and self.reason:
            note = f"{self.state.value.lower()}: {self.reason}; the view is the last one read"
        return Snapshot(
            prefix=self.prefix,
            state=self.state.value,
            diagnosis=self.diagnosis,
            since=now - self.taken_at,
            state_for=now - self.state_at,
            note=note,
        )

    def changed(self, change: StateChange) -> None:
        """A session state change (a listener: called by the session, synchronously)."""
        self.state, self.state_at, self.reason = change.state, change.at, change.reason


def next_due(diagnosis: Diagnosis) -> float | None:
    """Seconds after ``diagnosis`` was read when the first holder not yet older than the
    hold warning becomes so, or the first running lock-delay ends (with a margin); None if
    nothing will."""
    dues = [
        holder.enqueued_at + diagnosis.hold_warning - diagnosis.server_time
        for queue in diagnosis.queues
        for holder in queue.holders
        if holder.enqueued_at is not None
    ]
    dues += [
        queue.lock_delay.until_ms / 1000 - diagnosis.server_time
        for queue in diagnosis.queues
        if queue.lock_delay is not None and queue.lock_delay.until_ms is not None
    ]
    future = [due for due in dues if due >= 0]
    return min(future) + DUE_MARGIN if future else None


class Live:
    """The live view of ``given.prefix`` through ``client`` on ``display``."""

    def __init__(self, client: aiozklock.ZooKeeperClient, given: Options, display: Display) -> None:
        self._client = client
        self._given = given
        self._display = display
        self.board = Board(given.prefix)
        self._stale = anyio.Event()
        self._redraw = anyio.Event()
        self._due = math.inf  # time.monotonic() of the next reading due without a change
        self._full = True  # the next frame repaints everything
        self._ended_by: int | None = None  # the signal that quit
        self._failure: BaseException | None = None

    async def run(self) -> int | None:
        """Run until ``q`` (None) or a quitting signal (its number). Raises
        ``ZooKeeperUnavailable`` if no server answers at first, and the client's failure
        (``ClientClosed``, ``ZooKeeperUnavailable``) if it gives up later."""
        self._paint()
        with _captured_warnings(self._warned):
            async with self._client as zk:
                self.board.state = zk.state
                remove = zk.add_listener(self._state_changed)
                try:
                    await self._serve(session_of(zk))
                finally:
                    remove()
                    self._display.restore()  # before the close, which may wait for a server
        if self._failure is not None:
            raise self._failure
        return self._ended_by

    async def _serve(self, session: Session) -> None:
        watch = TreeWatch(session, self._given.prefix, self._mark_stale)
        async with anyio.create_task_group() as tg:
            scope = tg.cancel_scope
            tg.start_soon(self._fatal_ends, watch.run, scope)
            tg.start_soon(self._fatal_ends, functools.partial(self._reader, session), scope)
            tg.start_soon(self._fatal_ends, self._painter, scope)
            tg.start_soon(self._fatal_ends, functools.partial(self._keys, scope), scope)
            tg.start_soon(self._signals, scope)

    async def _fatal_ends(
        self, job: Callable[[], Awaitable[object]], scope: anyio.CancelScope
    ) -> None:
        try:
            await job()
        except (ClientClosed, ZooKeeperUnavailable) as exc:  # the client gave up
            self._failure = exc
            scope.cancel()
        except OSError:  # the terminal is gone (a write failed): nobody to show anything to
            scope.cancel()

    def _mark_stale(self) -> None:
        self._stale.set()

    def _warned(self, message: str) -> None:
        self.board.error = message
        self._redraw.set()

    def _state_changed(self, change: StateChange) -> None:
        self.board.changed(change)
        self._redraw.set()

    # ---------------------------------------------------------------- the tasks

    async def _reader(self, session: Session) -> None:
        interval, last = REFRESH, -math.inf
        while True:
            with anyio.move_on_after(self._due - time.monotonic()):
                await self._stale.wait()
            pause = last + interval - time.monotonic()
            if pause > 0:
                await anyio.sleep(pause)  # changes meanwhile are read by this reading
            self._stale = anyio.Event()
            started = time.monotonic()
            try:
                diagnosis = await diagnose(session, self._given)
            except SessionExpired:  # a reply of a session lost meanwhile: read in the next
                self._stale.set()
            except ZooKeeperError as exc:
                self.board.error = f"reading {self._given.prefix} failed: {exc} (r: again)"
                self._due = math.inf
            else:
                self._took(diagnosis)
            last = time.monotonic()
            interval = max(REFRESH, last - started)
            self._redraw.set()

    def _took(self, diagnosis: Diagnosis) -> None:
        now = time.monotonic()
        self.board.diagnosis, self.board.taken_at, self.board.error = diagnosis, now, None
        due = next_due(diagnosis)
        self._due = now + due if due is not None else math.inf

    async def _painter(self) -> None:
        while True:
            self._paint()
            with anyio.move_on_after(TICK):
                await self._redraw.wait()
            self._redraw = anyio.Event()

    def _paint(self) -> None:
        columns, rows = self._display.size()
        lines = frame(self.board.snapshot(time.monotonic()), columns, rows)
        self._display.draw(lines, full=self._full)
        self._full = False

    async def _keys(self, scope: anyio.CancelScope) -> None:
        while True:
            keys = await self._display.read()
            if not keys:  # the terminal is gone
                scope.cancel()
                return
            if keys.startswith("\x1b"):  # an arrow or function key: nothing to do
                continue
            if "q" in keys.lower():
                scope.cancel()
                return
            if "r" in keys.lower():
                self._stale.set()
            if "\x0c" in keys:  # Ctrl-L
                self._full = True
                self._redraw.set()

    async def _signals(self, scope: anyio.CancelScope) -> None:
        watched = (signal.SIGWINCH, signal.SIGTSTP, *QUIT_SIGNALS)
        with anyio.open_signal_receiver(*watched) as signals:
            async for signum in signals:
                if signum == signal.SIGTSTP:  # Ctrl-Z: give the terminal back while stopped
                    self._display.restore()
                    os.kill(os.getpid(), signal.SIGSTOP)
                    self._display.resume()  # continued (fg)
                if signum in (signal.SIGWINCH, signal.SIGTSTP):
                    self._full = True
                    self._redraw.set()
                else:
                    self._ended_by = signum
                    scope.cancel()
                    return


class _Warnings(logging.Handler):
    """The client's warnings, told to the view: on stderr they would garble the screen."""

    def __init__(self, tell: Callable[[str], None]) -> None:
        super().__init__(logging.WARNING)
        self._tell = tell

    def emit(self, record: logging.LogRecord) -> None:
        self._tell(f"{record.levelname.lower()}: {record.getMessage()}")


@contextmanager
def _captured_warnings(tell: Callable[[str], None]) -> Iterator[None]:
    logger = logging.getLogger("aiozklock")
    handler = _Warnings(tell)
    propagate, logger.propagate = logger.propagate, False
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


__all__ = ("REFRESH", "TICK", "Board", "Display", "Live", "next_due")
