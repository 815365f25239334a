"""``aiozklock.sync`` across ``fork()``: a client made (and used) before the fork works in
the child with a session of its own, opened on first use; the child never holds the
parent's locks, nor touches the parent's session, which outlives the child.

The children are real: ``os.fork()`` (a gunicorn ``--preload`` worker) and
``multiprocessing``'s 'fork' context (a Celery prefork worker). Each reports through a pipe
and ends with ``os._exit``; the parent waits for it with a bound.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import select
import threading
from collections.abc import Callable
from typing import Any

import pytest

from aiozklock import SessionState
from aiozklock.sync import SyncClient, SyncHandle, SyncLock
from tests._sync_kit import BOUND

HELD = "/locks/held"  # the parent holds it across the fork
FREE = "/locks/free"


def child_report(
    zk: SyncClient, held: SyncLock, make_free: Callable[[], SyncLock]
) -> dict[str, Any]:
    """What the child sees, with the objects the parent made before the fork (and the
    free lock's, made before it or in the child, by ``make_free``)."""
    report: dict[str, Any] = {"session_before": zk.session_id}  # not opened yet: 0
    report["holds_parents"] = held.is_held
    free = make_free()
    report["takes_free"] = free.try_acquire()
    report["session"] = zk.session_id
    report["free_token"] = free.fencing_token
    free.release()
    # The parent's holding is lost here: a reentry raises its loss (as for any lost
    # holding), and so does leaving it; then the child is a contender of its own, and
    # the parent's session holds the lock.
    report["reenters_parents"] = raised(held.try_acquire)
    report["leaves_parents"] = raised(held.release)
    report["takes_parents"] = held.try_acquire()
    zk.close()
    return report


def run_child(write_fd: int, work: Callable[[], dict[str, Any]]) -> None:
    """The child's whole life: report, then leave without running the parent's cleanup."""
    try:
        report = work()
    except BaseException as exc:
        report = {"error": repr(exc)}
    try:
        os.write(write_fd, json.dumps(report).encode())
    finally:
        os._exit(0)


def read_report(read_fd: int) -> dict[str, Any]:
    """The child's report: everything until it closes the pipe (bounded)."""
    chunks = []
    while True:
        ready, _, _ = select.select([read_fd], [], [], BOUND)
        assert ready, "the child did not report in time"
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    report: dict[str, Any] = json.loads(b"".join(chunks))
    assert "error" not in report, report["error"]
    return report


def check_parent_unharmed(zk: SyncClient, session: int, held: SyncLock, third: SyncClient) -> None:
    assert zk.session_id == session
    assert held.is_held
    assert not held.lost.is_set()
    assert not third.lock(HELD).try_acquire()  # still held by the parent, seen from afar
    assert zk.get_children(HELD)  # the parent's connection works on


def check_child(report: dict[str, Any], session: int) -> None:
    assert report["session_before"] == 0  # the parent's session is not the child's
    assert report["session"] not in (0, session)
    assert report["holds_parents"] is False
    assert report["takes_free"] is True
    assert report["reenters_parents"] == "LockLost"
    assert report["leaves_parents"] == "LockLost"
    assert report["takes_parents"] is False


def test_os_fork(szk: SyncClient, szk2: SyncClient) -> None:
    held, free = szk.lock(HELD), szk.lock(FREE)
    held.acquire()
    session = szk.session_id
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_fd)
        run_child(write_fd, lambda: child_report(szk, held, lambda: free))
    os.close(write_fd)
    try:
        report = read_report(read_fd)
    finally:
        _, status = os.waitpid(pid, 0)  # the pipe closed: it has exited
    assert os.waitstatus_to_exitcode(status) == 0
    check_child(report, session)
    check_parent_unharmed(szk, session, held, szk2)
    held.release()


def test_multiprocessing_fork_with_a_client_never_opened(
    szk: SyncClient, szk2: SyncClient, hosts: str
) -> None:
    import aiozklock.sync

    held = szk.lock(HELD)
    held.acquire()
    session = szk.session_id
    fresh = aiozklock.sync.connect(hosts, session_timeout=4.0)  # opened in the child only

    def work() -> dict[str, Any]:
        report = child_report(szk, held, lambda: szk.lock(FREE))
        report["fresh"] = fresh.exists("/") is not None and fresh.session_id not in (0, session)
        fresh.close()
        return report

    context = multiprocessing.get_context("fork")
    read_fd, write_fd = os.pipe()
    process = context.Process(target=run_child, args=(write_fd, work))
    process.start()
    os.close(write_fd)
    try:
        report = read_report(read_fd)
    finally:
        process.join(BOUND)
    assert process.exitcode == 0
    check_child(report, session)
    assert report["fresh"] is True
    assert fresh.state is SessionState.CONNECTING  # never opened here
    check_parent_unharmed(szk, session, held, szk2)
    held.release()
    fresh.close()


def child_in_bodies(
    zk: SyncClient, bodies: dict[str, SyncHandle[Any]], events: dict[str, threading.Event]
) -> dict[str, Any]:
    """What a child forked inside the parent's bodies sees of each holding, then what
    leaving each body does (``__exit__``, as the ``with`` statement calls it)."""
    report: dict[str, Any] = {}
    for name, body in bodies.items():
        steps: dict[str, Callable[[], object]] = {
            "event_taken_before": events[name].is_set,
            "lost": body.lost.is_set,
            "is_held": lambda body=body: body.is_held,
            "valid_until": lambda body=body: body.valid_until,
            "check": body.check,
            "fencing_token": lambda body=body: body.fencing_token,
            "reenter": body.try_acquire,
            "guarded_write": lambda body=body: zk.create("/written", guard=body),
            "exit": lambda body=body: body.__exit__(None, None, None),
        }
        report[name] = {step: outcome(func) for step, func in steps.items()}
    report["session"] = zk.session_id  # nothing above opened one: 0
    return report


def outcome(func: Callable[[], object]) -> str:
    """``repr(func())``, or the name of the exception it raises."""
    try:
        return repr(func())
    except Exception as exc:
        return type(exc).__name__


def raised(func: Callable[[], object]) -> str:
    """The name of the exception ``func()`` raises, or "" if none."""
    try:
        func()
    except Exception as exc:
        return type(exc).__name__
    return ""


def test_a_child_forked_inside_a_body_has_lost_every_holding_of_the_parent(
    szk: SyncClient, szk2: SyncClient
) -> None:
    """The docs' watchdog pattern in a child: the body's copy there must stop. Every
    holding is lost in the child at once (the event the body took before the fork is set,
    ``check()`` raises), leaving the body raises the loss, and nothing reaches the
    parent's nodes (no session is opened in the child)."""
    lock, election = szk.lock(HELD), szk.election("/election")
    bodies: dict[str, SyncHandle[Any]] = {"lock": lock, "election": election}
    read_fd, write_fd = os.pipe()
    with lock, election:
        events = {name: body.lost for name, body in bodies.items()}  # a watchdog's
        session = szk.session_id
        pid = os.fork()
        if pid == 0:  # the child, inside both bodies
            os.close(read_fd)
            run_child(write_fd, lambda: child_in_bodies(szk, bodies, events))
        os.close(write_fd)
        try:
            report = read_report(read_fd)
        finally:
            _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        lost = {"lock": "LockLost", "election": "LeadershipLost"}
        for name, error in lost.items():
            assert report[name] == {
                "event_taken_before": "True",
                "lost": "True",
                "is_held": "False",
                "valid_until": "-inf",
                "check": error,
                "fencing_token": error,
                "reenter": error,
                "guarded_write": "StaleFencingToken",
                "exit": error,
            }, (name, report)
        assert report["session"] == 0
        check_parent_unharmed(szk, session, lock, szk2)
        assert not events["election"].is_set()
        assert election.is_leader


@pytest.fixture(autouse=True)
def _chroot_made(szk: SyncClient) -> None:
    """The chroot exists before the fork (``exists('/')`` in the child reads it)."""
    szk.ensure_path("/")
