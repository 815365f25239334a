"""The server processes the test kit starts (ZooKeeper members, redis-server): starting one
bound to this process's life; stopping one by its PID, never by name; the registry whose
``atexit`` hook kills whatever is still running when the interpreter exits; the tail of a
server's log, for error messages; and how often their waits poll.

A process killed by a signal it cannot handle (SIGKILL: a killed pytest worker, a killed
``aiozklock server``) runs no ``atexit`` hook. On Linux the servers die with it all the
same: :func:`start_bound` asks the kernel (``PR_SET_PDEATHSIG``) to SIGKILL each one when
its parent dies. The kernel's "parent" is the *thread* that forked it, so every bound
server is forked by one daemon thread that lives as long as the process: a server started
from a worker thread (``astart()``) must not die when that thread ends. Elsewhere (macOS)
there is no such signal: the ``atexit`` hook and the next start's sweep of dead owners'
folders (:mod:`._server_workdir`) are all there is.

``log_tail`` is the kit's API for ``aiozklock server`` too (a member that exited is reported
with the end of its log).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import IO

__all__ = [
    "POLL_INTERVAL",
    "STOP_GRACE",
    "log_tail",
    "register_process",
    "start_bound",
    "stop_process",
    "unregister_process",
]

logger = logging.getLogger(__name__)

STOP_GRACE = 10.0  # seconds a server has to exit after SIGTERM before it is killed
#: Seconds between two looks at a starting server (polling readiness: nothing to await).
POLL_INTERVAL = 0.05


def start_bound(argv: Sequence[str], *, cwd: Path, output: IO[bytes]) -> subprocess.Popen[bytes]:
    """Start ``argv`` in ``cwd`` (stdin from /dev/null, stdout and stderr to ``output``),
    registered (killed at the interpreter's exit) and, on Linux, killed by the kernel when
    this process dies, whatever kills it (see the module's docstring)."""

    def popen(bind: Callable[[], None] | None = None) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            preexec_fn=bind,
        )
        register_process(proc)  # here: a caller interrupted while waiting must not lose it
        return proc

    if not sys.platform.startswith("linux"):
        return popen()
    bind = _death_binding(os.getpid())
    return _forker().call(lambda: popen(bind))


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _death_binding(parent: int) -> Callable[[], None]:
    """What the child runs between fork and exec: ask for SIGKILL at its parent's death;
    if the parent died before it asked (it has been reparented), die now."""
    import ctypes  # loaded here, before the fork: the child only calls it

    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def bind() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # a failure leaves it unbound
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return bind


class _Forker:
    """A daemon thread that runs the calls it is given, one at a time, and never ends
    before the process does: the parent thread of every bound server."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[
            tuple[Callable[[], subprocess.Popen[bytes]], Future[subprocess.Popen[bytes]]]
        ] = queue.SimpleQueue()
        threading.Thread(target=self._run, name="aiozklock-forker", daemon=True).start()

    def call(self, fn: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        """``fn()`` run on the thread; its result, or its exception raised here."""
        future: Future[subprocess.Popen[bytes]] = Future()
        self._calls.put((fn, future))
        return future.result()

    def _run(self) -> None:
        while True:
            fn, future = self._calls.get()
            try:
                future.set_result(fn())
            except BaseException as exc:  # the caller's to handle
                future.set_exception(exc)


_the_forker: _Forker | None = None
_forker_lock = threading.Lock()


def _forker() -> _Forker:
    global _the_forker
    with _forker_lock:
        if _the_forker is None:
            _the_forker = _Forker()
        return _the_forker


def _forget_forker() -> None:
    # A child made by os.fork() has no thread of ours: it must start its own, not wait on
    # a queue nobody reads.
    global _the_forker, _forker_lock
    _the_forker, _forker_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_forker)


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
