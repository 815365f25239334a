"""Celery tasks that increment a shared counter under a ZooKeeper lock, on the prefork pool.

    export AIOZKLOCK_HOSTS=127.0.0.1:2181/app CELERY_BROKER_URL=redis://127.0.0.1:6379/0
    celery -A examples.celery_app worker --pool prefork --concurrency 4

(``pip install aiozklock celery redis``.) Then, from Python::

    from examples.celery_app import increment
    increment.delay("visits")

The client is made at import, in the worker's main process, before the pool forks its
children (that is where a Celery app's module-level objects are made). Each child opens a
ZooKeeper session of its own on first use: none of them touches the main process's session
(which ``worker_init`` below uses, to create the paths once), nor holds its locks.

The counter lives in Redis and is incremented by a read, a slow step, then a write: without
the lock, two tasks that overlap both read the same value and one increment is lost.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import Celery  # type: ignore[import-untyped]
from celery.signals import worker_init  # type: ignore[import-untyped]

import aiozklock.sync

HOSTS = os.environ.get("AIOZKLOCK_HOSTS", "127.0.0.1:2181/app")
BROKER = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")

app = Celery("celery_app", broker=BROKER, backend=BROKER)
app.conf.update(
    worker_prefetch_multiplier=1,  # a child takes one task at a time: the others stay queued
    broker_connection_retry_on_startup=True,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
)

# Made at import, before the pool forks: each child gets its own session on first use.
zk = aiozklock.sync.connect(HOSTS, session_timeout=10.0)
# redis-py's pool re-opens its connections in a forked child by itself.
store = redis.Redis.from_url(BROKER)

# The session of the main process, if it opened one (worker_init below); a child's differs.
parent_session_id = 0


@worker_init.connect  # type: ignore[untyped-decorator]
def _create_paths(**_: Any) -> None:
    """In the worker's main process, before the pool starts: the paths exist once."""
    global parent_session_id
    zk.ensure_path("/locks/counters")
    parent_session_id = zk.session_id


@app.task  # type: ignore[untyped-decorator]
def increment(counter: str, locked: bool = True, pause: float = 0.005) -> dict[str, Any]:
    """Add one to ``counter`` (a Redis key): under ``zk.lock`` if ``locked``, else bare
    (the control that shows what the lock prevents). ``pause``: the slow part of the work,
    between the read and the write."""
    if not locked:
        return _read_modify_write(counter, pause, fencing_token=None)
    with zk.lock(f"/locks/counters/{counter}") as lock:
        return _read_modify_write(counter, pause, fencing_token=lock.fencing_token, lock=lock)


def _read_modify_write(
    counter: str,
    pause: float,
    fencing_token: int | None,
    lock: aiozklock.sync.SyncLock | None = None,
) -> dict[str, Any]:
    # The overlap detector: how many tasks are inside a read-modify-write of this counter.
    if store.incr(f"{counter}:inside") > 1:
        store.incr(f"{counter}:overlaps")
    try:
        value = int(store.get(counter) or 0)
        time.sleep(pause)  # the slow part of the work
        if lock is not None:
            lock.check()  # raises LockLost (nothing written) if the lock was lost meanwhile
        store.set(counter, value + 1)
        if fencing_token is not None:  # the tokens in the order of the writes
            store.rpush(f"{counter}:tokens", fencing_token)
    finally:
        store.decr(f"{counter}:inside")
    return {
        "value": value + 1,
        "fencing_token": fencing_token,
        "pid": os.getpid(),
        "worker_pid": os.getppid(),  # the worker's main process, which forked this child
        "session_id": zk.session_id if lock is not None else 0,
        "parent_session_id": parent_session_id,
    }
