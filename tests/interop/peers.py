"""Peer processes for the interoperability tests, and the history check.

A peer connects, prints ``ready``, waits for a line on stdin, loops acquire → hold →
release for its time, and prints ``{"intervals": [[start, end], ...]}`` in
``time.monotonic_ns()`` time (Java's ``System.nanoTime()`` on Linux is the same clock), so
the critical sections of every process can be put on one time line.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc

from benchmarks.run import Driver, compile_curator

HERE = Path(__file__).resolve().parent
Interval = tuple[int, int, str]  # start, end, who


def curator_peer(build_dir: Path) -> tuple[str, ...] | str:
    """The command that runs ``CuratorPeer`` (compiled into ``build_dir``), or why not."""
    driver = compile_curator(build_dir, HERE / "CuratorPeer.java", "CuratorPeer")
    return driver.command if isinstance(driver, Driver) else driver


@dataclass
class Peer:
    """A running peer process: ``go()`` starts its loop, ``intervals()`` waits for its end."""

    who: str
    process: anyio.abc.Process

    async def ready(self) -> None:
        assert self.process.stdout is not None
        line = await _read_line(self.process.stdout)
        assert line == "ready", f"{self.who} said {line!r} instead of ready"

    async def go(self) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(b"go\n")

    async def intervals(self) -> list[Interval]:
        assert self.process.stdout is not None
        line = await _read_line(self.process.stdout)
        assert await self.process.wait() == 0, f"{self.who} exited with {self.process.returncode}"
        return [(start, end, self.who) for start, end in json.loads(line)["intervals"]]


async def start_peer(who: str, command: Sequence[str]) -> Peer:
    process = await anyio.open_process(
        list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    peer = Peer(who, process)
    await peer.ready()
    return peer


async def _read_line(stream: anyio.abc.ByteReceiveStream) -> str:
    data = b""
    while not data.endswith(b"\n"):
        data += await stream.receive(1 << 16)
    return data.decode().strip()


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
