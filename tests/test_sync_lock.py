"""``aiozklock.sync``'s lock: the cycle, ownership per thread (a thread is a task of the
async core), timeouts, bodies' exceptions, the release on the wire when the call returns,
a thread that ends holding, and misuse (bad input, closed client)."""

from __future__ import annotations

import functools
import gc
import os
import signal
import threading
import weakref
from collections.abc import Callable

import pytest

import aiozklock
import aiozklock.sync
from aiozklock.sync import SyncClient
from tests._sync_kit import BOUND, Worker, in_thread, wait_children

PATH = "/locks/sync"


def test_cycle_reentrant_and_owned_by_its_thread(szk: SyncClient) -> None:
    lock = szk.lock(PATH)
    assert lock.try_acquire()
    assert lock.is_held
    token = lock.fencing_token
    with lock as same:  # reentrant in its thread: no second node, no wait
        assert same is lock
        assert lock.fencing_token == token
        assert lock.statistics().depth == 2
        assert len(szk.get_children(PATH)) == 1
    # Another thread: not the owner.
    assert in_thread(lambda: lock.is_held) is False
    with pytest.raises(aiozklock.NotLockOwner):
        in_thread(lock.release)
    assert lock.is_held  # still ours
    lock.release()
    assert not lock.is_held
    assert lock.statistics().acquisitions == 1


def test_errors_speak_of_threads(szk: SyncClient) -> None:
    """Threaded code is told about threads, not about the event loop's tasks it never saw."""
    lock, sem = szk.lock(PATH), szk.semaphore(PATH + "-sem", 2)
    failures: list[str] = []
    for call in (lock.release, sem.release, lambda: lock.fencing_token):
        with pytest.raises(aiozklock.NotLockOwner) as caught:
            call()
        failures.append(str(caught.value))
    with lock, pytest.raises(aiozklock.NotLockOwner) as caught:
        in_thread(lock.release)
    failures.append(str(caught.value))
    assert all("task" not in failure for failure in failures), failures
    assert "this thread does not hold the lock" in failures[0]
    assert "this thread does not hold the lock" in failures[-1]


def test_a_new_handle_in_the_same_thread_nests(szk: SyncClient) -> None:
    with szk.lock(PATH) as outer, szk.lock(PATH) as inner:  # one object per path: reentry
        assert inner.fencing_token == outer.fencing_token
        assert outer.is_held
        assert inner.is_held


def test_another_session_waits_then_gets_it(szk: SyncClient, szk2: SyncClient) -> None:
    mine, theirs = szk.lock(PATH), szk2.lock(PATH)
    with mine:
        assert not theirs.try_acquire()
        with pytest.raises(aiozklock.LockTimeout):
            theirs.acquire(timeout=0.2)
        # The timed-out attempt left nothing: only our node (seen through our session,
        # after the other one's delete, which was written before LockTimeout was raised).
        assert len(wait_children(szk2, PATH, lambda children: len(children) == 1)) == 1
    with theirs.acquire(timeout=BOUND) as held:  # released at our exit: granted
        assert held is theirs
        assert theirs.is_held
    assert wait_children(szk2, PATH, lambda children: children == []) == []


def test_threads_take_turns_without_overlap(szk: SyncClient) -> None:
    lock, inside, overlaps = szk.lock(PATH), [], []
    guard = threading.Lock()

    def work() -> None:
        for _ in range(5):
            with lock:
                with guard:
                    inside.append(1)
                    if len(inside) > 1:
                        overlaps.append(1)
                with guard:
                    inside.pop()

    workers = [threading.Thread(target=work) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(BOUND)
    assert overlaps == []
    assert lock.statistics().acquisitions == 20


def test_the_body_exception_passes_unchanged(szk: SyncClient) -> None:
    lock = szk.lock(PATH)
    error = KeyError("mine")
    with pytest.raises(KeyError) as raised, lock:
        raise error
    assert raised.value is error
    assert not lock.is_held
    assert lock.try_acquire()  # released: free again
    lock.release()


def test_acquire_context_and_timeout_errors(szk: SyncClient) -> None:
    lock = szk.lock(PATH)
    with lock.acquire(timeout=1.0) as held:
        assert held is lock
        assert lock.is_held
    assert not lock.is_held
    with pytest.raises(aiozklock.InvalidArgument):
        lock.acquire(timeout=-1)
    with pytest.raises(aiozklock.InvalidArgument):
        lock.release(confirm="yes")  # type: ignore[arg-type,unused-ignore]
    with pytest.raises(aiozklock.NotLockOwner):
        lock.release()


def test_release_is_on_the_wire_when_it_returns(szk: SyncClient, szk2: SyncClient) -> None:
    """Right after release() returns, the client's event loop thread is blocked (nothing
    of it can run): another session is still granted the lock, so the delete was written
    before release() returned."""
    mine, theirs = szk.lock(PATH), szk2.lock(PATH)
    mine.acquire()
    mine.release()
    blocked, unblock = threading.Event(), threading.Event()

    def block() -> None:
        blocked.set()
        unblock.wait(BOUND)

    portal = szk._portal
    assert portal is not None
    portal.loop.call_soon_threadsafe(block)
    try:
        assert blocked.wait(BOUND)
        with theirs.acquire(timeout=BOUND):  # a wait on a watch, the bound a hang guard
            assert theirs.is_held
    finally:
        unblock.set()


def test_a_thread_that_ends_holding_is_released(
    szk: SyncClient, szk2: SyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    lock = szk.lock(PATH)
    in_thread(lock.acquire, name="forgetful")  # ends without releasing
    with szk2.lock(PATH).acquire(timeout=BOUND):  # the orphan sweep releases it
        pass
    assert any("forgetful" in record.getMessage() for record in caplog.records)


def test_bad_input_raises_in_the_caller_before_any_traffic(hosts: str) -> None:
    with pytest.raises(aiozklock.InvalidArgument):
        aiozklock.sync.connect(hosts, session_timeout=-1)
    with pytest.raises(aiozklock.InvalidArgument):
        aiozklock.sync.connect("")
    zk = aiozklock.sync.connect(hosts)
    try:
        with pytest.raises(aiozklock.InvalidArgument):
            zk.lock("relative/path")
        with pytest.raises(aiozklock.InvalidArgument):
            zk.lock(PATH, fair="no")  # type: ignore[call-overload]
        with pytest.raises(aiozklock.InvalidArgument):
            zk.lock(PATH, on_lost=42)  # type: ignore[call-overload]
        with pytest.raises(aiozklock.InvalidArgument):
            zk.semaphore(PATH, 0)
        with pytest.raises(aiozklock.InvalidArgument):
            zk.exists("no-slash")
        with pytest.raises(aiozklock.InvalidArgument):
            zk.multi_lock([])
        assert zk.state is aiozklock.SessionState.CONNECTING  # nothing opened, nothing sent
        # What only the async factory checks (in the loop thread) is raised here too.
        with pytest.raises(aiozklock.InvalidArgument, match="no identity"):
            zk.lock(PATH, acl=aiozklock.CREATOR_ALL_ACL)
        zk.ensure_path(PATH)  # the client works on
        assert zk.exists(PATH) is not None
    finally:
        zk.close()


def test_close_is_idempotent_bounded_and_final(hosts: str) -> None:
    zk = aiozklock.sync.connect(hosts)
    lock = zk.lock(PATH)
    waiter_ready = threading.Event()
    zk2 = aiozklock.sync.connect(hosts)
    held = zk2.lock(PATH)
    held.acquire()
    outcome: list[BaseException | None] = []

    def wait_for_it() -> None:
        waiter_ready.set()
        try:
            lock.acquire()
        except BaseException as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    assert waiter_ready.wait(BOUND)
    wait_children(zk2, PATH, lambda children: len(children) == 2)  # it waits in the queue
    # And one behind another thread of the same client (a local wait, not on the server).
    # Whether it is waiting yet or arrives after close(), it must fail, never hang.
    local, done = zk.lock("/locks/local"), threading.Event()
    holder = Worker(lambda: _raised(lambda: local.acquire() and done.wait(BOUND)))
    behind = threading.Thread(target=lambda: outcome.append(_raised(local.acquire)))
    behind.start()
    zk.close()
    zk.close()
    done.set()
    holder.join()
    waiter.join(BOUND)
    behind.join(BOUND)
    assert len(outcome) == 2
    assert all(isinstance(exc, aiozklock.ClientClosed) for exc in outcome)
    with pytest.raises(aiozklock.ClientClosed):
        lock.acquire()
    with pytest.raises(aiozklock.ClientClosed):
        zk.exists("/")
    with pytest.raises(aiozklock.ClientClosed):
        zk.lock(PATH)
    assert zk.state is aiozklock.SessionState.CLOSED
    zk2.close()


def _raised(func: Callable[[], object]) -> BaseException | None:
    try:
        func()
    except BaseException as exc:
        return exc
    return None


def test_import_aiozklock_does_not_import_sync() -> None:
    import subprocess
    import sys

    code = "import sys, aiozklock; print('aiozklock.sync' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=BOUND, check=True
    )
    assert result.stdout.strip() == "False"


class Interrupt(Exception):
    """What the test's signal handler raises (as a Celery time limit does)."""


def test_an_interrupted_acquire_withdraws(szk: SyncClient, szk2: SyncClient) -> None:
    """A signal handler's exception in a thread waiting to acquire (Ctrl-C, a Celery soft
    time limit) cancels the attempt: nothing of it is left, nothing is held for nobody."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers run in the main thread only")
    theirs, mine = szk2.lock(PATH), szk.lock(PATH)
    theirs.acquire()

    def handler(signum: int, frame: object) -> None:
        raise Interrupt

    def interrupt_once_queued() -> None:
        wait_children(szk2, PATH, lambda children: len(children) == 2)  # we wait in line
        os.kill(os.getpid(), signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        interrupter = Worker(interrupt_once_queued)
        with pytest.raises(Interrupt):
            mine.acquire()
        interrupter.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert len(wait_children(szk2, PATH, lambda children: len(children) == 1)) == 1
    assert not mine.is_held
    theirs.release()
    with mine.acquire(timeout=BOUND):
        assert mine.is_held


def test_a_closed_client_leaves_nothing_behind(hosts: str) -> None:
    """Its threads' tasks, its loop and its session are freed with it (no reference from
    a thread's local or a finalizer outlives close())."""
    zk = aiozklock.sync.connect(hosts)
    zk.ensure_path(PATH)
    in_thread(functools.partial(zk.exists, PATH))  # a second thread, which ends
    portal = zk._portal
    assert portal is not None
    loop_thread = portal._thread
    freed = weakref.ref(portal)
    zk.close()
    del zk, portal
    gc.collect()
    assert freed() is None
    assert not loop_thread.is_alive()


def test_a_thread_pool_shares_one_lock_without_overlap_or_orphans(
    szk: SyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Pool threads come and go (each its own task in the client's loop): every holding is
    released by its own thread, none is left for the orphan sweep."""
    import concurrent.futures

    lock, inside = szk.lock(PATH), threading.Semaphore(1)

    def once(_: int) -> bool:
        with lock:
            alone = inside.acquire(blocking=False)  # fails if another thread is inside
            try:
                return alone and lock.is_held  # a hop while inside: others get their turn
            finally:
                if alone:
                    inside.release()

    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(once, range(30)))
    assert all(results)
    assert lock.statistics().acquisitions == 30
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


def test_kazoo_s_non_blocking_acquire_points_to_try_acquire(szk: SyncClient) -> None:
    """kazoo's ``acquire(blocking=False)`` / ``acquire(False)``: refused in the calling
    thread before the session is used, naming ``try_acquire()``; ``blocking=True`` works."""
    lock = szk.lock(PATH)
    for attempt in (
        lambda: lock.acquire(blocking=False),  # type: ignore[arg-type]
        lambda: lock.acquire(False),
    ):
        with pytest.raises(aiozklock.InvalidArgument) as caught:
            attempt()
        assert "try_acquire()" in str(caught.value)
    assert szk.get_children(PATH, missing_ok=True) == []
    with lock.acquire(timeout=BOUND, blocking=True):
        assert lock.is_held
