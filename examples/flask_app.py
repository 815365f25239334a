"""A Flask service that counts hits in ZooKeeper under a lock, served by gunicorn with
``--preload`` (the app is imported once in the master, then the workers are forked).

    export AIOZKLOCK_HOSTS=127.0.0.1:2181/app
    gunicorn --preload --workers 2 --threads 4 examples.flask_app:app

(``pip install aiozklock flask gunicorn``.) Then ``curl -X POST localhost:8000/hits``: each
call adds one to ``/counters/hits`` under ``zk.lock("/locks/hits")``, whichever worker and
thread serves it; ``curl localhost:8000/session`` tells which process and session served.

The client is made at import, so with ``--preload`` it is made in gunicorn's master, which
also uses it there (to create the counter). Each worker forked from the master opens a
ZooKeeper session of its own on first use; the master's session stays the master's. In a
worker, the threads share the client: the lock is owned by the thread that took it.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from flask import Flask

import aiozklock
import aiozklock.sync

HOSTS = os.environ.get("AIOZKLOCK_HOSTS", "127.0.0.1:2181/app")
COUNTER = "/counters/hits"
INSIDE = "/counters/inside"  # exists while a request is between its read and its write

zk = aiozklock.sync.connect(HOSTS, session_timeout=10.0)
zk.ensure_path("/counters")
with contextlib.suppress(aiozklock.NodeExistsError):
    zk.create(COUNTER, b"0")
# The master's session (with --preload: the app is imported there, before the fork).
PARENT_SESSION_ID = zk.session_id

app = Flask(__name__)


@app.post("/hits")
def hit() -> dict[str, Any]:
    """Read the counter, add one, write it back: under the lock, and fenced by it (the write
    is refused, nothing written, if the lock is no longer ours)."""
    with zk.lock("/locks/hits") as lock:
        try:  # the overlap detector: an ephemeral node only one request may hold
            zk.create(INSIDE, ephemeral=True)
            overlapped = False
        except aiozklock.NodeExistsError:
            overlapped = True
        data, _ = zk.get_data(COUNTER)
        value = int(data) + 1
        zk.set_data(COUNTER, str(value).encode(), guard=lock)
        if not overlapped:
            zk.delete(INSIDE)
        token = lock.fencing_token
    return {"value": value, "fencing_token": token, "overlapped": overlapped, **_whoami()}


@app.get("/session")
def session() -> dict[str, Any]:
    """Which worker answers, its ZooKeeper session, and the master's."""
    zk.exists("/")  # the first use in this worker opens its session
    return _whoami()


def _whoami() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "session_id": zk.session_id,
        "parent_session_id": PARENT_SESSION_ID,
    }
