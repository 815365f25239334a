"""A cluster's temp folder, and the folders that dead processes left behind.

A process killed by SIGKILL (a pytest worker, ``aiozklock server``) cannot remove the temp
folder of the clusters it ran. So each folder records its owner (``owner``: PID, the
process's start time where ``/proc`` tells it, host name), and every cluster's start sweeps
its parent directory first: a folder of ours (:data:`PREFIX`) whose owner is gone is
removed, after SIGKILL to any server still running from it (none on Linux, where servers
die with their owner; on macOS, where they outlive it, they would hold the client ports the
next ``aiozklock server`` wants). A folder without a readable record is left alone: it is
being created, or it is another version's.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ._process import POLL_INTERVAL

__all__ = ["PREFIX", "make_work_dir", "sweep_dead_owners", "work_dir_property"]

PREFIX = "aiozklock-zk-"
#: The JVM property that names a server's temp folder on its command line (its ``zoo.cfg``
#: may be elsewhere: ``data_dir``), so that a sweep finds the servers a dead owner left.
_PROPERTY = "aiozklock.workDir"
_RECORD = "owner"
_KILL_GRACE = 10.0  # seconds an orphaned server has to exit after SIGKILL


def make_work_dir(base_dir: Path | None) -> Path:
    """A new temp folder in ``base_dir`` (default: the system's), owned by this process;
    the dead owners' folders there are swept first."""
    sweep_dead_owners(base_dir if base_dir is not None else Path(tempfile.gettempdir()))
    work_dir = Path(tempfile.mkdtemp(prefix=PREFIX, dir=base_dir))
    # Written whole then renamed: a sweeper reads a complete record or none.
    pending = work_dir / f"{_RECORD}.new"
    pending.write_text(_identity(os.getpid()))
    pending.replace(work_dir / _RECORD)
    return work_dir


def work_dir_property(work_dir: Path | None) -> dict[str, str]:
    """The JVM property of a server run from ``work_dir`` (none without one)."""
    return {_PROPERTY: str(work_dir)} if work_dir is not None else {}


def sweep_dead_owners(parent: Path) -> None:
    """Remove the folders of :data:`PREFIX` in ``parent`` whose owner has died, and stop
    the servers still running from them. Errors are ignored: it is housekeeping."""
    try:
        folders = [path for path in parent.iterdir() if path.name.startswith(PREFIX)]
    except OSError:
        return
    for folder in folders:
        try:
            record = (folder / _RECORD).read_text().split()
        except OSError:
            continue
        if _owner_alive(record):
            continue
        _kill_servers_in(folder)
        shutil.rmtree(folder, ignore_errors=True)


def _identity(pid: int) -> str:
    """What tells the process ``pid`` from a later one with the same PID."""
    stat = _proc_stat(pid)
    return f"{pid} {stat[1] if stat else '-'} {socket.gethostname()}\n"


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """The state letter and start time (clock ticks since boot) of ``pid``, from Linux's
    ``/proc``; None where there is none."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return fields[0], fields[19]


def _owner_alive(record: list[str]) -> bool:
    """Whether the owner ``record`` names may still run (unknown counts as alive)."""
    try:
        pid_text, start, host = record
        pid = int(pid_text)
    except ValueError:
        return True
    if host != socket.gethostname():  # another machine's (a shared folder): not ours to judge
        return True
    if not _exists(pid):
        return False
    stat = _proc_stat(pid)
    # Another start time is another process that got the PID since.
    return stat is None or start == "-" or stat[1] == start


def _kill_servers_in(folder: Path) -> None:
    """SIGKILL the servers run from ``folder`` (their command line has its
    :func:`work_dir_property`), and wait (bounded) until they are gone: their ports are
    then free."""
    marker = f"-D{_PROPERTY}={folder}"
    pids = [
        pid
        for pid, argv in _command_lines()
        if pid != os.getpid() and any(arg == marker or f"{marker} " in arg for arg in argv)
    ]
    deadline = time.monotonic() + _KILL_GRACE
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for pid in pids:
        _wait_gone(pid, deadline)


def _wait_gone(pid: int, deadline: float) -> None:
    """Until ``pid`` has exited, or the monotonic ``deadline``: on its pidfd (Linux), else
    polling (not our child: nothing else to wait on)."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux, or gone already
        while time.monotonic() < deadline and _exists(pid):
            time.sleep(POLL_INTERVAL)
        return
    try:
        select.select([pidfd], [], [], max(0.0, deadline - time.monotonic()))
    finally:
        os.close(pidfd)


def _exists(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has died)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        pass
    stat = _proc_stat(pid)
    return stat is None or stat[0] != "Z"


def _command_lines() -> list[tuple[int, list[str]]]:
    """Every process's PID and arguments: ``/proc`` on Linux, else ``ps``."""
    if sys.platform.startswith("linux"):
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    argv = (entry / "cmdline").read_bytes().decode(errors="replace")
                    found.append((int(entry.name), argv.split("\0")))
        return found
    try:
        listing = subprocess.run(
            ["ps", "-axww", "-o", "pid=,command="], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    lines = (line.strip().partition(" ") for line in listing.splitlines())
    return [(int(pid), [command]) for pid, _, command in lines if pid.isdigit()]
