"""``aiozklock.sync`` at the interpreter's exit: a session through which a thread that is
still alive holds (a daemon thread inside ``with lock:``) is not closed, so no other
process is granted its lock while that thread runs on through the exit handlers that
follow ours; a session with no live holder is still closed at once.

The processes are real (``tests/_sync_exit_holder.py``); their order of events is read
from a file they append to (O_APPEND: one order for every process's writes), and from
whether the holder process had ended when the other was granted: no clock is compared.
"""

from __future__ import annotations

import logging
import os
import select
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aiozklock import SessionState
from aiozklock.sync import SyncClient, SyncHandle
from tests._docs_samples import REPO
from tests._sync_kit import BOUND, Worker, wait_children
from tests._sync_processes import environment, python, stop, tail

HOLDER_SESSION = 2.0  # the holder process's session timeout: the wait after it ends


def _append(record: Path, line: str) -> None:
    fd = os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def _tell(proc: subprocess.Popen[bytes], line: str) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(f"{line}\n".encode())
        proc.stdin.flush()
    except OSError:  # it has exited (the fixed behaviour, for "granted")
        pass


@pytest.fixture
def holder(hosts: str, tmp_path: Path) -> Iterator[Callable[[str, str], subprocess.Popen[bytes]]]:
    """``holder(mode, path)``: the holder script started, its thread ready; stopped at the
    end, whatever happens."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(mode: str, path: str) -> subprocess.Popen[bytes]:
        log = (tmp_path / "holder.log").open("wb")
        command = python(
            "tests/_sync_exit_holder.py",
            mode,
            hosts,
            path,
            str(tmp_path / "record"),
            str(HOLDER_SESSION),
        )
        proc = subprocess.Popen(
            command,
            cwd=REPO,
            env=environment(hosts),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        log.close()
        procs.append(proc)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], BOUND)
        assert ready, tail(tmp_path / "holder.log")
        assert proc.stdout.readline() == b"ready\n", tail(tmp_path / "holder.log")
        return proc

    yield start
    stop(*procs, grace=BOUND)


def test_a_daemon_thread_holding_at_exit_keeps_the_lock_until_its_process_ends(
    szk: SyncClient, holder: Callable[[str, str], subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    path = "/locks/exit"
    record = tmp_path / "record"
    proc = holder("hold", path)
    wait_children(szk, path, lambda children: len(children) == 1)  # its thread holds
    holder_alive_at_grant: list[bool] = []

    def wait_for_the_lock() -> None:
        szk.lock(path).acquire(timeout=BOUND)
        holder_alive_at_grant.append(proc.poll() is None)
        _append(record, f"granted {time.monotonic():.6f}")
        _tell(proc, "granted")  # its exit handler then waits for 3 more writes, if alive

    waiter = Worker(wait_for_the_lock, "waiter")
    wait_children(szk, path, lambda children: len(children) == 2)  # queued behind it
    _tell(proc, "exit")  # main returns: the interpreter exits, the daemon thread writing on
    waiter.join()
    proc.wait(BOUND)
    log = tail(tmp_path / "holder.log")

    lines = record.read_text().splitlines()
    granted = next(i for i, line in enumerate(lines) if line.startswith("granted "))
    late = [line for line in lines[granted:] if line.startswith("w ")]
    if late:  # the figures (time.monotonic() is system-wide on Linux)
        after = float(late[-1].split()[2]) - float(lines[granted].split()[1])
        pytest.fail(f"{len(late)} writes after the other's grant, the last {after:.3f} s after")
    assert holder_alive_at_grant == [False], log  # granted only once the holder had ended
    # The WARNING names the thread and what it holds.
    assert "left open" in log, log
    assert f"thread 'holder' holds lock {path}" in log, log


def test_a_session_without_a_live_holder_is_still_closed_at_exit(
    szk: SyncClient, holder: Callable[[str, str], subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    path = "/locks/exit-waiter"
    with szk.lock(path):
        proc = holder("wait", path)
        wait_children(szk, path, lambda children: len(children) == 2)  # its thread waits
        _tell(proc, "exit")  # its exit handler keeps it alive until "done"
        wait_children(szk, path, lambda children: len(children) == 1)
        # The waiter's node went while its process still lived (and pinged): its session
        # was closed at exit, not expired.
        assert proc.poll() is None, tail(tmp_path / "holder.log")
        _tell(proc, "done")
    assert proc.wait(BOUND) == 0, tail(tmp_path / "holder.log")
    assert "left open" not in tail(tmp_path / "holder.log")


PATHS = {
    "lock": "/exit/lock",
    "nonfair": "/exit/nonfair",
    "multi": "/exit/multi/a",
    "read": "/exit/read",
    "write": "/exit/write",
    "semaphore": "/exit/semaphore",
    "lease": "/exit/lease",
    "election": "/exit/election",
}


def test_every_recipe_held_by_a_live_thread_keeps_the_session(
    open_sync: Callable[..., SyncClient], caplog: pytest.LogCaptureFixture
) -> None:
    """What the exit handler decides (``SyncClient._close_at_exit``, what it calls for
    each client), with a live thread holding each recipe of the sync face, and the
    calling (main) thread holding one too; then, once all is released, it closes."""
    zk, other = open_sync(), open_sync()
    recipes: dict[str, Callable[[], SyncHandle[Any]]] = {
        "lock": lambda: zk.lock(PATHS["lock"]),
        "nonfair": lambda: zk.lock(PATHS["nonfair"], fair=False),
        "multi": lambda: zk.multi_lock([PATHS["multi"], "/exit/multi/b"]),
        "read": lambda: zk.rw_lock(PATHS["read"]).read_lock,
        "write": lambda: zk.rw_lock(PATHS["write"]).write_lock,
        "semaphore": lambda: zk.semaphore(PATHS["semaphore"], 2),
        "lease": lambda: zk.lease_lock(PATHS["lease"], ttl=10.0),
        "election": lambda: zk.election(PATHS["election"]),
    }
    release = threading.Event()
    holding = threading.Barrier(len(recipes) + 1, timeout=BOUND)

    def hold(make: Callable[[], SyncHandle[Any]]) -> None:
        with make():
            holding.wait()
            release.wait(BOUND)

    workers = [
        Worker(lambda make=make: hold(make), f"holds-{name}") for name, make in recipes.items()
    ]
    holding.wait()
    main_lock = zk.lock("/exit/main")
    main_lock.acquire()
    with caplog.at_level(logging.WARNING, logger="aiozklock.sync._client"):
        zk._close_at_exit()
    assert zk.state is SessionState.CONNECTED  # kept
    assert not other.lock(PATHS["lock"]).try_acquire()  # still held, seen from afar
    warning = caplog.text
    for name, path in PATHS.items():
        assert f"thread 'holds-{name}' holds " in warning, warning
        assert path in warning, (name, warning)
    assert "'MainThread' holds lock /exit/main" in warning
    main_lock.release()
    release.set()
    for worker in workers:
        worker.join()
    caplog.clear()
    zk._close_at_exit()  # nothing held any more: closed
    assert zk.state is SessionState.CLOSED
    assert "left open" not in caplog.text
    assert other.lock(PATHS["lock"]).try_acquire()
