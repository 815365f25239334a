"""Every synchronous client of the process, for the two moments that concern them all: a
``fork()`` (the child drops what it inherited, and opens sessions of its own on first use)
and the interpreter's exit (sessions are closed, so their ephemeral nodes go at once rather
than a session timeout later).

One hook of each kind for the whole process, registered at import; the clients are held
weakly.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiozklock.sync._client import SyncClient

log = logging.getLogger(__name__)

_CLIENTS: weakref.WeakSet[SyncClient] = weakref.WeakSet()


def track(client: SyncClient) -> None:
    """Include ``client`` in the fork and exit hooks (as long as it lives)."""
    _CLIENTS.add(client)


def _after_fork_in_child() -> None:
    # The child has one thread, this one: the clients' loop threads are not here.
    for client in list(_CLIENTS):
        try:
            client._forked()
        except Exception:  # one client's failure must not leave the others bound
            log.exception("aiozklock: a sync client failed to drop its parent's session")


def _close_all() -> None:
    for client in list(_CLIENTS):
        with contextlib.suppress(Exception):
            client.close()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all)

__all__ = ("track",)
