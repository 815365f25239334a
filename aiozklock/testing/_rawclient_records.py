"""The raw connection's records and errors: error codes, watch events, stats, replies.

See :mod:`._rawclient` for the connection itself. Records come from ``aiozk.protocol``
(untyped, hence ``Any``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

__all__ = [
    "NodeStat",
    "RawConnectionClosed",
    "RawReply",
    "RawSessionExpired",
    "RawWatchEvent",
    "RawZooKeeperError",
    "CloseReason",
    "ZooKeeperErrorCode",
    "WatchEventType",
]


class ZooKeeperErrorCode:
    """The error codes the kit's tests care about (see ZooKeeper's ``KeeperException``)."""

    CONNECTION_LOSS = -4
    BAD_ARGUMENTS = -8
    NO_NODE = -101
    NO_AUTH = -102
    BAD_VERSION = -103
    NO_CHILDREN_FOR_EPHEMERALS = -108
    NODE_EXISTS = -110
    NOT_EMPTY = -111
    SESSION_EXPIRED = -112
    SESSION_MOVED = -118


_ERROR_NAMES = {
    value: name for name, value in vars(ZooKeeperErrorCode).items() if not name.startswith("_")
}


class WatchEventType:
    """The ``type`` of a :class:`RawWatchEvent`: ZooKeeper's watch event codes."""

    NONE = -1
    NODE_CREATED = 1
    NODE_DELETED = 2
    NODE_DATA_CHANGED = 3
    NODE_CHILDREN_CHANGED = 4


class RawZooKeeperError(Exception):
    """A reply carried a non-zero error code."""

    def __init__(self, code: int, path: str | None = None) -> None:
        self.code = code
        self.path = path
        self.name = _ERROR_NAMES.get(code, f"error {code}")
        super().__init__(f"{self.name} ({code})" + (f" for {path}" if path else ""))


CloseReason = Literal["eof", "reset", "closed"]


class RawConnectionClosed(ConnectionError):
    """The connection ended: ``reason`` is ``"eof"`` (FIN), ``"reset"`` (RST) or
    ``"closed"`` (by us)."""

    def __init__(self, reason: CloseReason) -> None:
        self.reason = reason
        super().__init__(f"ZooKeeper connection {reason}")


class RawSessionExpired(Exception):
    """The server refused to (re)attach the session: it has expired (or bad password)."""


@dataclass(frozen=True, slots=True)
class NodeStat:
    """The parts of a node's stat the raw client reports (``exists``, ``get_data``)."""

    czxid: int
    mzxid: int
    version: int
    ephemeral_owner: int  # the owning session id, 0 for persistent nodes
    data_length: int
    num_children: int


@dataclass(frozen=True, slots=True)
class RawWatchEvent:
    """A watch notification read by :class:`RawZooKeeperConnection`."""

    type: int  # WatchEventType
    state: int
    path: str
    t: float  # time.monotonic() when it was read


class RawReply(NamedTuple):
    xid: int
    zxid: int
    err: int
    response: Any  # an aiozk.protocol response, None if err != 0
    t: float


def _stat(raw: Any) -> NodeStat:
    return NodeStat(
        czxid=int(raw.created_zxid),
        mzxid=int(raw.last_modified_zxid),
        version=int(raw.version),
        ephemeral_owner=int(raw.ephemeral_owner),
        data_length=int(raw.data_length),
        num_children=int(raw.num_children),
    )
