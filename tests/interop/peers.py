"""Peer processes for the interoperability tests, and the history checks.

A peer connects and prints ``ready``; on a line on stdin (``go``) its threads loop acquire →
hold → release, each printing ``held START`` once it holds and ``released START END`` once
it let go, until another line (``stop``, or the end of stdin): then every thread ends its
turn and the peer prints ``{"intervals": [[start, end], ...]}`` (all its sections) and exits.
A thread that fails prints ``error ...``. Times are ``time.monotonic_ns()`` (Java's
``System.nanoTime()`` on Linux is the same clock), so that the critical sections of every
process can be put on one time line. The lines stream so that a test runs until what it
checks has happened, whatever the machine's speed, instead of for a fixed time.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import json
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from benchmarks.run import Driver, compile_curator

HERE = Path(__file__).resolve().parent
Interval = tuple[int, int, str]  # start, end, who
HANG = 45.0  # a hang bound, not a duration: the tests stop once what they check happened


def compiled_java(cache: Path, source: Path, name: str) -> tuple[str, ...] | str:
    """The command that runs the Curator program ``source``, or why it cannot run.

    Compiled once into ``cache`` (shared by the run's xdist workers) for every worker that
    asks: javac costs seconds of CPU, which a loaded 2-core machine has least of. The key is
    the source's text, so an edited program is compiled again; a lock file serialises the
    workers, and a finished build is marked only once javac succeeded."""
    key = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    build_dir = cache / f"java-{source.stem}-{key}"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"java-{source.stem}-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = build_dir / "compiled"
        if done.is_file():
            return tuple(json.loads(done.read_text()))
        shutil.rmtree(build_dir, ignore_errors=True)  # a build that did not finish
        build_dir.mkdir()
        driver = compile_curator(build_dir, source, name)
        if not isinstance(driver, Driver):
            return driver  # not marked: the reason is found again by the next asker
        done.write_text(json.dumps(driver.command))
        return driver.command


def java_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory that every xdist worker of this run sees (a worker's own base temporary
    directory is ``popen-gwN`` inside the run's)."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if base.name.startswith("popen-gw") else base) / "java"


def curator_peer(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ...] | str:
    """The command that runs ``CuratorPeer``, or why it cannot run."""
    return compiled_java(java_cache(tmp_path_factory), HERE / "CuratorPeer.java", "CuratorPeer")


class Changes:
    """Progress of a test's contenders: ``notify()`` on every change wakes the tasks in
    ``until(done)``, which return once ``done()`` (no polling, no fixed duration)."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = anyio.Event()

    async def until(self, done: Callable[[], bool]) -> None:
        while not done():
            await self._event.wait()


class Lines:
    """The lines a process prints, one at a time."""

    def __init__(self, stream: anyio.abc.ByteReceiveStream) -> None:
        self._stream = BufferedByteReceiveStream(stream)

    async def next(self) -> str:
        return (await self._stream.receive_until(b"\n", 1 << 26)).decode().strip()


@dataclass
class Peer:
    """A running peer process; ``follow()`` (a task for its whole run) reads what it
    prints: ``intervals``, the sections it finished so far, and ``latest_start``, the latest
    start of a section it reported holding."""

    who: str
    process: anyio.abc.Process
    changes: Changes
    lines: Lines
    intervals: list[Interval] = field(default_factory=list)
    latest_start: int = -1
    final: list[Interval] | None = None

    async def go(self) -> None:
        await self._send(b"go\n")

    async def stop(self) -> None:
        await self._send(b"stop\n")

    async def follow(self) -> None:
        """Reads the peer's lines until its final one, notifying ``changes`` of each."""
        while self.final is None:
            line = await self.lines.next()
            word, *numbers = line.split(" ")
            if word == "held":
                self.latest_start = max(self.latest_start, int(numbers[0]))
            elif word == "released":
                self.intervals.append((int(numbers[0]), int(numbers[1]), self.who))
            elif line.startswith("{"):
                self.final = [(s, e, self.who) for s, e in json.loads(line)["intervals"]]
            else:
                raise AssertionError(f"{self.who} said {line!r}")
            self.changes.notify()

    async def finish(self) -> list[Interval]:
        """Every section of the peer, once it exited (after ``follow()`` returned)."""
        assert await self.process.wait() == 0, f"{self.who} exited with {self.process.returncode}"
        assert self.final is not None
        assert sorted(self.final) == sorted(self.intervals)  # it reported every section
        return self.final

    async def _send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(data)


@contextlib.asynccontextmanager
async def running(command: Sequence[str]) -> AsyncIterator[anyio.abc.Process]:
    """``command`` started with pipes for stdin and stdout; killed on the way out if it
    has not exited (a test that failed or hit its hang bound leaves no process behind)."""
    process = await anyio.open_process(
        list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None
    )
    try:
        yield process
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.aclose()


@contextlib.asynccontextmanager
async def start_peer(who: str, command: Sequence[str], changes: Changes) -> AsyncIterator[Peer]:
    """A peer process, connected (it said ``ready``) and waiting for ``go()``."""
    async with running(command) as process:
        assert process.stdout is not None
        peer = Peer(who, process, changes, Lines(process.stdout))
        with anyio.fail_after(HANG):
            line = await peer.lines.next()
        assert line == "ready", f"{who} said {line!r} instead of ready"
        yield peer


async def contend(
    peer: Peer,
    ours: Sequence[Callable[[anyio.Event], Awaitable[None]]],
    missing: Callable[[], list[str]],
) -> list[Interval]:
    """Runs the peer's loop and our tasks (each ``task(stop)`` loops until ``stop`` is set)
    until nothing is ``missing()`` any more, then stops both; returns the peer's sections.
    Something still missing after ``HANG`` seconds (a side starved, say) fails the test."""
    stop = anyio.Event()
    theirs: list[Interval] = []
    with anyio.move_on_after(HANG) as bound:
        async with anyio.create_task_group() as tg:
            tg.start_soon(peer.follow)
            await peer.go()
            for task in ours:
                tg.start_soon(task, stop)
            await peer.changes.until(lambda: not missing())
            stop.set()
            await peer.stop()
        theirs = await peer.finish()
    assert not bound.cancelled_caught, (
        f"not done within {HANG} s: {missing() or 'a side did not stop'}"
    )
    return theirs


def overlaps(intervals: Iterable[Interval]) -> list[tuple[Interval, Interval]]:
    """Pairs of critical sections that overlap in time (a mutex allows none)."""
    found = []
    ordered = sorted(intervals)
    for before, after in itertools.pairwise(ordered):
        if after[0] < before[1]:
            found.append((before, after))
    return found


def hand_offs(intervals: Iterable[Interval]) -> set[tuple[str, str]]:
    """The (from, to) pairs of holders seen in succession, between different holders."""
    ordered = sorted(intervals)
    return {(a[2], b[2]) for a, b in itertools.pairwise(ordered) if a[2] != b[2]}


def max_concurrency(intervals: Iterable[Interval]) -> int:
    """The most critical sections in progress at one instant (a semaphore allows at most
    its ``max_leases``); one that ends when another starts does not overlap it."""
    events = sorted(
        [(start, 1) for start, _, _ in intervals] + [(end, -1) for _, end, _ in intervals]
    )  # at one instant, -1 sorts first: an end before a start
    most = current = 0
    for _, step in events:
        current += step
        most = max(most, current)
    return most
