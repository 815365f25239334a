"""The nemesis's clients under test (in this process or in a child, each behind its own fault
proxies), and the OS helpers that stop, resume and inspect a child process."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import anyio
import anyio.abc

from ._nemesis_worker_config import Record
from ._proxy import FaultProxy


class _Client:
    """One client under test, in this process or in a child, with its fault proxies."""

    def __init__(self, name: str, index: int, process: bool, proxies: list[FaultProxy]) -> None:
        self.name = name
        self.index = index
        self.process = process
        self.proxies = proxies
        self.session_id = 0
        self.password = b""
        self.state = "CONNECTING"
        self.ready = anyio.Event()
        self.worker_done = anyio.Event()
        self.closed = anyio.Event()
        self.exited = anyio.Event()
        self.watchers: tuple[int, int] | None = None
        self.hold_until = 0.0  # when its current section means to stop acting
        # children only
        self.pid: int | None = None
        self.proc: anyio.abc.Process | None = None
        self.stream: anyio.abc.ByteStream | None = None
        self.send_lock = anyio.Lock()
        self.stopped = False  # SIGSTOPped, by us or by itself
        self.self_stop = anyio.Event()
        self.resumed = anyio.Event()

    def __repr__(self) -> str:
        return f"<nemesis client {self.name}>"

    async def send(self, message: Record) -> None:
        assert self.stream is not None
        async with self.send_lock:
            await self.stream.send(json.dumps(message).encode() + b"\n")

    def active_member(self) -> int | None:
        for index, proxy in enumerate(self.proxies):
            if proxy.live_connections:
                return index
        return None


def _wait_stopped(pid: int, timeout: float = 2.0) -> bool:
    """Poll /proc until every thread of ``pid`` is stopped (Linux); True if so."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            states = [
                stat.read_text().rpartition(")")[2].split()[0]
                for stat in Path(f"/proc/{pid}/task").glob("*/stat")
            ]
        except OSError:
            return False
        if states and all(state == "T" for state in states):
            return True
        time.sleep(0.002)
    return False


def _process_state(pid: int) -> str:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return f"pid {pid}: no /proc entry"
    return f"pid {pid}, state {fields[0]}, {cpu:.1f} s CPU"


def _py_spy() -> str | None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return spy if Path(spy).is_file() else None


def _kill_quietly(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
