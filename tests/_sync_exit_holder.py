"""A process that exits while a daemon thread is inside ``with zk.lock(path):`` (``hold``),
or is waiting to acquire it (``wait``), for tests/test_sync_exit.py.

    python tests/_sync_exit_holder.py hold|wait HOSTS PATH RECORD SESSION_TIMEOUT

Its exit handler, registered *before* ``import aiozklock.sync`` (so it runs after the
library's, atexit being LIFO), stands for a slow telemetry flush. It reads its stdin, as
``main`` does:

* ``hold``: the daemon thread appends ``w <n> <time>`` to RECORD (O_APPEND: the file's
  order is the order of the writes, across processes) every 5 ms while it holds, without
  checking the lock (a body that never looks). ``main`` exits on the line ``exit``; the
  exit handler then waits (up to ``GRANT_WAIT``) for the line ``granted`` (the test's
  waiter was granted), and if it comes, until the thread has written 3 more times: an
  overlap made to happen, not left to timing.
* ``wait``: the daemon thread waits for the lock (the test holds it). ``main`` exits on
  ``exit``; the exit handler keeps the process alive until the line ``done`` (bounded),
  so that the test sees whether the waiter's node went while the process still lived.
"""

from __future__ import annotations

import atexit
import os
import select
import sys
import threading
import time

GRANT_WAIT = 1.5  # how long the exit handler waits for the other's grant
AFTER_GRANT = 3  # the thread's writes the handler waits for after a grant
BOUND = 10.0

mode, hosts, path, record, session_timeout = sys.argv[1:6]
written = threading.Condition()
count = [0]


def _line() -> str:
    ready, _, _ = select.select([sys.stdin], [], [], BOUND)
    return sys.stdin.readline().strip() if ready else ""


def slow_flush() -> None:
    """The exit handler that runs after aiozklock's (see the module docstring)."""
    if mode == "wait":
        _line()  # "done"
        return
    ready, _, _ = select.select([sys.stdin], [], [], GRANT_WAIT)
    if ready and sys.stdin.readline().strip() == "granted":
        with written:
            target = count[0] + AFTER_GRANT
            written.wait_for(lambda: count[0] >= target, BOUND)


atexit.register(slow_flush)  # before the import: it runs after aiozklock.sync's handler

import aiozklock.sync  # noqa: E402

zk = aiozklock.sync.connect(hosts, session_timeout=float(session_timeout))
lock = zk.lock(path)
started = threading.Event()


def hold() -> None:
    fd = os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    with lock:
        started.set()
        while True:
            with written:
                count[0] += 1
                os.write(fd, f"w {count[0]} {time.monotonic():.6f}\n".encode())
                written.notify_all()
            time.sleep(0.005)


def wait() -> None:
    started.set()
    with lock:
        pass


thread = threading.Thread(target=hold if mode == "hold" else wait, name=f"{mode}er", daemon=True)
thread.start()
started.wait(BOUND)
print("ready", flush=True)
_line()  # "exit"
