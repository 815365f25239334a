"""Test-kit accessors for what the public API keeps private (wire-level assertions)."""

from __future__ import annotations

from aiozklock._client import ZooKeeperClient
from aiozklock._wire._session import Session


def session_of(client: ZooKeeperClient) -> Session:
    """The wire session of a connected client: for tests that count watchers, read the
    session password or timeout, or send raw requests. Raises ``ClientClosed`` if the
    client is not connected."""
    return client._live_session()


__all__ = ("session_of",)
