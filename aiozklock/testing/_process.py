"""The server processes the test kit starts (ZooKeeper members, redis-server): stopping one
by its PID, never by name; the registry whose ``atexit`` hook kills whatever is still
running when the interpreter exits; the tail of a server's log, for error messages; and how
often their waits poll.

``log_tail`` is the kit's API for ``aiozklock server`` too (a member that exited is reported
with the end of its log).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import signal
import subprocess
import threading
from pathlib import Path

__all__ = [
    "POLL_INTERVAL",
    "STOP_GRACE",
    "log_tail",
    "register_process",
    "stop_process",
    "unregister_process",
]

logger = logging.getLogger(__name__)

STOP_GRACE = 10.0  # seconds a server has to exit after SIGTERM before it is killed
#: Seconds between two looks at a starting server (polling readiness: nothing to await).
POLL_INTERVAL = 0.05


def stop_process(proc: subprocess.Popen[bytes], what: str, grace: float = STOP_GRACE) -> None:
    """SIGCONT (a paused process cannot handle SIGTERM) and SIGTERM to ``proc``, then SIGKILL
    if it has not exited within ``grace`` seconds; returns once it has exited. ``what``
    names it in the log."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        logger.warning("%s ignored SIGTERM; killing pid %d", what, proc.pid)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of the log at ``path``, or why there is none."""
    try:
        text = path.read_text("utf-8", "replace")
    except OSError as exc:
        return f"(no log at {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])


# --- process registry: kill whatever we started when the interpreter exits ------------

_live: dict[int, subprocess.Popen[bytes]] = {}
_live_lock = threading.Lock()


def register_process(proc: subprocess.Popen[bytes]) -> None:
    """Kill ``proc`` at the interpreter's exit if it still runs then."""
    with _live_lock:
        _live[proc.pid] = proc


def unregister_process(proc: subprocess.Popen[bytes]) -> None:
    """``proc`` was stopped: forget it."""
    with _live_lock:
        _live.pop(proc.pid, None)


@atexit.register
def _kill_leftovers() -> None:
    with _live_lock:
        procs = list(_live.values())
        _live.clear()
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.send_signal(signal.SIGCONT)
                proc.kill()
    for proc in procs:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            proc.wait(timeout=5)
