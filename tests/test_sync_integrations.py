"""The synchronous API in the real programs it is for, each run for real from ``examples/``:
Celery workers on the prefork pool (``examples/celery_app.py``), Flask under gunicorn with
``--preload`` (``examples/flask_app.py``), and a cron-style script run twice at once
(``examples/sync_cron.py``). Real ZooKeeper, a throwaway redis-server, no mocks; every
process is stopped, bounded, in a ``finally``."""

from __future__ import annotations

import concurrent.futures
import itertools
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from celery import Celery, group  # type: ignore[import-untyped]

import aiozklock.sync
from aiozklock.testing import RedisServer
from tests._sync_processes import environment, python, running, tail

TASKS = 200  # Celery tasks per batch
AFTER_LIMIT = 8  # tasks on a lock after one of them was interrupted by its time limit
HITS = 100  # HTTP requests to the gunicorn service
CLIENT_THREADS = 10
DEADLINE = 90.0  # a hang guard for a batch or a server's start, not a timing assertion
EX_TEMPFAIL = 75


# ---------------------------------------------------------------- Celery, prefork pool


def celery_worker(name: str) -> list[str]:
    return python(
        *("-m", "celery", "-A", "examples.celery_app", "worker", "--pool", "prefork"),
        *("--concurrency", "4", "--hostname", f"{name}@%h", "--loglevel", "WARNING"),
        *("--without-gossip", "--without-mingle", "--without-heartbeat"),
    )


def wait_for_workers(client: Celery, count: int, logs: list[Path]) -> None:
    """Until ``count`` workers answer a ping (each ping waits for replies: no sleep)."""
    deadline = time.monotonic() + DEADLINE
    while len(client.control.ping(timeout=0.5) or []) < count:
        assert time.monotonic() < deadline, "workers not up:\n" + "\n".join(map(tail, logs))


def run_batch(client: Celery, counter: str, *, locked: bool) -> list[dict[str, Any]]:
    """``TASKS`` increments of ``counter``, all queued at once; their results."""
    task = "examples.celery_app.increment"
    batch = group(client.signature(task, args=(counter, locked)) for _ in range(TASKS))
    results: list[dict[str, Any]] = batch.apply_async().get(timeout=DEADLINE)
    return results


def time_limit_while_waiting(client: Celery, hosts: str) -> tuple[object, list[dict[str, Any]]]:
    """A task that waits for a lock held here until its soft time limit (Celery's signal in
    the pool child) interrupts the wait; then, the lock released, ``AFTER_LIMIT`` tasks on
    it. Returns the first one's exception and the others' results."""
    task = "examples.celery_app.increment"
    with aiozklock.sync.connect(hosts) as zk, zk.lock("/locks/counters/limited"):
        waiting = client.signature(task, args=("limited",)).apply_async(soft_time_limit=1)
        waiting.get(timeout=DEADLINE, propagate=False)
    batch = group(client.signature(task, args=("limited",)) for _ in range(AFTER_LIMIT))
    after: list[dict[str, Any]] = batch.apply_async().get(timeout=DEADLINE)
    return waiting.result, after


@pytest.mark.timeout(180)  # 2 workers x 5 processes and 408 tasks on a loaded machine
def test_celery_prefork_workers_increment_exactly_under_the_lock(
    hosts: str, tmp_path: Path
) -> None:
    logs = [tmp_path / "w1.log", tmp_path / "w2.log"]
    with RedisServer() as server:
        env = environment(hosts, CELERY_BROKER_URL=server.url)
        commands = [celery_worker("w1"), celery_worker("w2")]
        client = Celery("test", broker=server.url, backend=server.url)
        store = redis.Redis.from_url(server.url)
        try:
            with running(commands, env, logs) as workers:
                wait_for_workers(client, 2, logs)
                locked = run_batch(client, "locked", locked=True)
                unlocked = run_batch(client, "unlocked", locked=False)  # the control
                interrupted, after = time_limit_while_waiting(client, hosts)
            count, overlaps = store.get("locked"), store.get("locked:overlaps")
            tokens = [int(token) for token in store.lrange("locked:tokens", 0, -1)]
            control = store.get("unlocked"), store.get("unlocked:overlaps")
        finally:
            client.close()
            store.close()

    # Under the lock: every increment counted, no two tasks inside at once, and the
    # fencing tokens strictly increasing in the order of the writes.
    assert (int(count or 0), int(overlaps or 0)) == (TASKS, 0)
    assert sorted(result["value"] for result in locked) == list(range(1, TASKS + 1))
    assert len(tokens) == TASKS
    assert all(a < b for a, b in itertools.pairwise(tokens))
    # Without it, the same workload (every task ran) loses increments, and the detector
    # sees the overlaps: the checks above can fail.
    assert len(unlocked) == TASKS
    control_count, control_overlaps = (int(value or 0) for value in control)
    assert control_count < TASKS
    assert control_overlaps > 0

    # A task whose soft time limit struck while it waited for the lock failed with it, and
    # left nothing queued: once the lock was free, the next tasks all took it in turn.
    assert type(interrupted).__name__ == "SoftTimeLimitExceeded", repr(interrupted)
    assert sorted(result["value"] for result in after) == list(range(1, AFTER_LIMIT + 1))

    # Both workers' pool children ran tasks, each child with a session of its own, none of
    # them the session the main process opened before forking.
    sessions: dict[int, set[int]] = defaultdict(set)
    for result in locked:
        sessions[result["pid"]].add(result["session_id"])
    assert {result["worker_pid"] for result in locked} == {worker.pid for worker in workers}
    assert 2 <= len(sessions) <= 8
    assert all(len(ids) == 1 for ids in sessions.values())
    children = [next(iter(ids)) for ids in sessions.values()]
    assert len(set(children)) == len(children)
    parents = {result["parent_session_id"] for result in locked}
    assert len(parents) == 2
    assert 0 not in parents
    assert not parents & set(children)


# ---------------------------------------------------------------- Flask under gunicorn


def gunicorn(socket: Path) -> list[str]:
    # gthread: 4 threads per worker share its client; at most 4 connections per worker, so
    # that 8 client connections at once are served by both workers.
    return python(
        *("-m", "gunicorn", "--preload", "--workers", "2", "--threads", "4"),
        *("--worker-connections", "4", "--keep-alive", "0", "--graceful-timeout", "5"),
        *("--bind", f"unix:{socket}", "examples.flask_app:app"),
    )


def wait_for_http(http: httpx.Client, log: Path) -> None:
    """Until the service answers (polling: nothing announces a bound socket)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        try:
            http.get("/session").raise_for_status()
            return
        except httpx.TransportError:
            assert time.monotonic() < deadline, f"gunicorn not up:\n{tail(log)}"
            time.sleep(0.05)


@pytest.mark.timeout(120)
def test_flask_under_gunicorn_preload_counts_exactly(hosts: str, tmp_path: Path) -> None:
    socket, log = tmp_path / "gunicorn.sock", tmp_path / "gunicorn.log"
    with running([gunicorn(socket)], environment(hosts), [log]) as [master]:
        with http_client(socket) as probe:
            wait_for_http(probe, log)

        per = HITS // CLIENT_THREADS

        def hits(_: int) -> list[dict[str, Any]]:
            with http_client(socket) as http:  # one connection per client thread
                return [http.post("/hits").raise_for_status().json() for _ in range(per)]

        with concurrent.futures.ThreadPoolExecutor(CLIENT_THREADS) as pool:
            answers = [a for batch in pool.map(hits, range(CLIENT_THREADS)) for a in batch]
        with aiozklock.sync.connect(hosts) as zk:
            data, _ = zk.get_data("/counters/hits")
        assert master.poll() is None, tail(log)

    total = per * CLIENT_THREADS
    assert int(data) == total
    assert sorted(answer["value"] for answer in answers) == list(range(1, total + 1))
    assert not any(answer["overlapped"] for answer in answers)
    by_value = sorted(answers, key=lambda answer: answer["value"])
    tokens = [answer["fencing_token"] for answer in by_value]
    assert all(a < b for a, b in itertools.pairwise(tokens))
    # Two workers, each with a session of its own, neither the master's (it used the
    # client at import, before the fork).
    sessions: dict[int, set[int]] = defaultdict(set)
    for answer in answers:
        sessions[answer["pid"]].add(answer["session_id"])
    assert len(sessions) == 2
    assert master.pid not in sessions
    assert all(len(ids) == 1 for ids in sessions.values())
    worker_sessions = {next(iter(ids)) for ids in sessions.values()}
    parents = {answer["parent_session_id"] for answer in answers}
    assert len(worker_sessions) == 2
    assert len(parents) == 1
    assert 0 not in parents | worker_sessions
    assert not parents & worker_sessions


def http_client(socket: Path) -> httpx.Client:
    transport = httpx.HTTPTransport(uds=str(socket))
    return httpx.Client(transport=transport, base_url="http://gunicorn", timeout=DEADLINE)


# ---------------------------------------------------------------- a cron-style script


@pytest.mark.timeout(120)
def test_two_cron_runs_at_once_one_does_the_work(hosts: str, tmp_path: Path) -> None:
    out, release = tmp_path / "report.log", tmp_path / "release"
    command = python("examples/sync_cron.py", "--hosts", hosts, "--lock", "/locks/cron")
    command += ["--out", str(out), "--hold-until", str(release)]
    logs = [tmp_path / "run1.log", tmp_path / "run2.log"]
    # The run that holds keeps the lock until `release` exists, which is made only once the
    # other has exited: the two overlap for sure.
    with (
        running([command, command], environment(hosts), logs) as runs,
        concurrent.futures.ThreadPoolExecutor(2) as pool,
    ):
        waits = {pool.submit(run.wait, DEADLINE): run for run in runs}
        done, _ = concurrent.futures.wait(
            waits, timeout=DEADLINE, return_when=concurrent.futures.FIRST_COMPLETED
        )
        assert done, "\n".join(map(tail, logs))
        [skipped] = [waits[future] for future in done]
        [worked] = [run for run in runs if run is not skipped]
        assert skipped.returncode == EX_TEMPFAIL, "\n".join(map(tail, logs))
        assert worked.poll() is None  # still holding while the other skipped
        release.touch()
        assert worked.wait(DEADLINE) == 0, "\n".join(map(tail, logs))

    assert "held by another run: skipped" in logs[runs.index(skipped)].read_text()
    steps = [line.split()[:3] for line in out.read_text().splitlines()]
    assert steps == [[str(worked.pid), "step", str(step)] for step in range(3)]
    with aiozklock.sync.connect(hosts) as zk:
        data, _ = zk.get_data("/jobs/report")
    assert data.startswith(b"done by ")
