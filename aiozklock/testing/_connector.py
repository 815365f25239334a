"""Clients made on demand, each in a chroot of its own: one per example of a hypothesis
``@given`` test, or as many sessions as a test needs."""

from __future__ import annotations

import uuid
from typing import Any

from aiozklock._client import ZooKeeperClient, connect
from aiozklock._wire._validation import parse_hosts, validate_path

__all__ = ["ZooKeeperConnector", "fresh_chroot"]

#: ``session_timeout`` of the clients it makes, unless told otherwise: as ``zk_client``'s.
TEST_SESSION_TIMEOUT = 4.0


def fresh_chroot() -> str:
    """A chroot path no other test uses: ``/aiozklock-test-<12 hex digits>``."""
    return f"/aiozklock-test-{uuid.uuid4().hex[:12]}"


class ZooKeeperConnector:
    """Makes clients of the servers at ``hosts``: ``async with connector() as zk:``.

    Each call returns a new client (its own session, not yet connected: ``async with``
    connects it in the event loop that enters it, and closes it on leaving) rooted in a
    fresh chroot, so what one client writes is invisible to the next. Pass
    ``chroot=other.chroot`` for clients that share a tree, e.g. two contenders for one lock.
    The pytest plugin's ``zk_connect`` fixture is one, for the session's servers; being
    session-scoped, it can be used in a hypothesis ``@given`` test, with one client per
    example, where the function-scoped ``zk_client`` fails hypothesis's
    ``function_scoped_fixture`` health check.

    Raises ``InvalidArgument`` if ``hosts`` is not a connection string; ``hosts`` may have a
    chroot of its own, under which the fresh ones are made.
    """

    def __init__(self, hosts: str) -> None:
        _, self._base = parse_hosts(hosts)  # validated here, not at the first call
        #: The connection string without its chroot.
        self.hosts = hosts.strip().partition("/")[0]

    def __repr__(self) -> str:
        return f"<ZooKeeperConnector hosts={self.hosts + self._base!r}>"

    def __call__(self, chroot: str | None = None, **options: Any) -> ZooKeeperClient:
        """A new client rooted in ``chroot`` (absolute on the servers; a fresh one by
        default), made by :func:`aiozklock.connect` with ``options`` (its keyword
        arguments; ``session_timeout`` is 4 s unless given). Raises ``InvalidArgument``
        for a bad chroot or option."""
        if chroot is None:
            chroot = self._base + fresh_chroot()
        validate_path(chroot, what="chroot")
        options.setdefault("session_timeout", TEST_SESSION_TIMEOUT)
        return connect(self.hosts + chroot, **options)
