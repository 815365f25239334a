"""Processes the sync integration tests start (Celery workers, gunicorn, cron scripts): each
in a process group of its own, its output in a log file, stopped by its PID and then its
group (the pool children a Celery worker or gunicorn forked), bounded."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests._docs_samples import REPO

STOP_GRACE = 15.0  # seconds a process has after SIGTERM (a warm shutdown) before SIGKILL


def environment(hosts: str, **extra: str) -> dict[str, str]:
    """The child's environment: this checkout importable, the test's ZooKeeper."""
    path = os.environ.get("PYTHONPATH")
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), *([path] if path else [])]),
        "AIOZKLOCK_HOSTS": hosts,
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


def spawn(command: Sequence[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``command`` in a new session (its own process group), output into ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            list(command),
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def stop(*procs: subprocess.Popen[bytes], grace: float = STOP_GRACE) -> None:
    """SIGTERM to each process (all at once: their shutdowns overlap), SIGKILL to those
    still running ``grace`` seconds later; then SIGKILL to whatever is left of each one's
    process group (children it forked, orphaned if it was killed). Returns once every
    process has exited."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
    for proc in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # the group is ours: start_new_session


@contextlib.contextmanager
def running(
    commands: Sequence[Sequence[str]], env: dict[str, str], logs: Sequence[Path]
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start every command at once; stop them all at the end, whatever happens."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for command, log in zip(commands, logs, strict=True):
            procs.append(spawn(command, env, log))
        yield procs
    finally:
        stop(*procs)


def tail(log: Path, lines: int = 40) -> str:
    """The end of a log, for an assertion's message."""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"
