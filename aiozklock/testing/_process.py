"""Stopping a server process the test kit started: by its PID, never by name."""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess

logger = logging.getLogger(__name__)

STOP_GRACE = 10.0  # seconds a server has to exit after SIGTERM before it is killed


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
