"""Every synchronous client of the process, for the two moments that concern them all: a
``fork()`` (the child drops what it inherited, and opens sessions of its own on first use;
what the parent held is lost in the child) and the interpreter's exit (sessions are closed,
so their ephemeral nodes go at once rather than a session timeout later, except a session
through which a thread that is still alive holds: see ``SyncClient._close_at_exit``).

One hook of each kind for the whole process, registered at import; the clients are held
weakly.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import weakref
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from aiozklock.sync._portal import Portal

log = logging.getLogger(__name__)


class Tracked(Protocol):
    """A synchronous client, as the two hooks see it (``SyncClient`` is one): a protocol,
    so that this module, which the client imports, does not import it."""

    def _forked(self) -> None:
        """In a forked child: drop the parent's session without a word."""

    def _close_at_exit(self) -> None:
        """At the interpreter's exit: close, unless threads still alive hold through it."""


_CLIENTS: weakref.WeakSet[Tracked] = weakref.WeakSet()


def track(client: Tracked) -> None:
    """Include ``client`` in the fork and exit hooks (as long as it lives)."""
    _CLIENTS.add(client)


def forsake(portal: Portal) -> None:
    """In a forked child: drop the parent's portal without a word. Its loop thread does
    not exist here, and the parent still uses the connection and the loop's descriptors:
    this process's copies of them are pointed at /dev/null (nothing is sent, no FIN, no
    TLS close_notify), and the objects are kept, so that no destructor of theirs runs."""
    portal.client._disown_session()
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in portal.descriptors():
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.dup2(null, fd)
    finally:
        os.close(null)
    _FORSAKEN.append(portal)


# Portals dropped in forked children: kept, so that no destructor of theirs ever runs.
_FORSAKEN: list[Portal] = []


def _after_fork_in_child() -> None:
    # The child has one thread, this one: the clients' loop threads are not here.
    for client in list(_CLIENTS):
        try:
            client._forked()
        except Exception:  # one client's failure must not leave the others bound
            log.exception("aiozklock: a sync client failed to drop its parent's session")


def _close_all() -> None:
    # Not close(): a client through which a thread still alive holds is left open.
    for client in list(_CLIENTS):
        try:
            client._close_at_exit()
        except Exception:  # one client's failure must not leave the others open
            log.exception("aiozklock: closing a sync client at exit failed")


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all)

__all__ = ("Tracked", "forsake", "track")
