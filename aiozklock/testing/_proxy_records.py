"""The FaultProxy's records: request opcodes, and the requests and handshakes it observed.

Also the small records of its own bookkeeping: an armed reply drop, and a task waiting for a
request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import anyio

__all__ = [
    "ObservedHandshake",
    "ObservedRequest",
    "Opcode",
]


class Opcode:
    """ZooKeeper request opcodes, for :meth:`FaultProxy.count` and friends."""

    CREATE = 1
    DELETE = 2
    EXISTS = 3
    GET_DATA = 4
    SET_DATA = 5
    GET_ACL = 6
    SET_ACL = 7
    GET_CHILDREN = 8
    SYNC = 9
    PING = 11
    GET_CHILDREN2 = 12
    CHECK = 13
    MULTI = 14
    CREATE2 = 15
    RECONFIG = 16
    CHECK_WATCHES = 17
    REMOVE_WATCHES = 18
    CREATE_CONTAINER = 19
    DELETE_CONTAINER = 20
    CREATE_TTL = 21
    MULTI_READ = 22
    AUTH = 100
    SET_WATCHES = 101
    SASL = 102
    SET_WATCHES2 = 105
    ADD_WATCH = 106
    CLOSE = -11

    #: Every opcode that creates a node (what ``arm_drop_after`` usually targets).
    CREATES = frozenset({CREATE, CREATE2, CREATE_CONTAINER, CREATE_TTL})


class ObservedRequest(NamedTuple):
    """One client→server frame after the handshake, as the proxy received it.

    ``connection_index`` numbers the proxy's connections from 0 in accept order.
    """

    connection_index: int
    xid: int
    opcode: int
    t: float  # time.monotonic() at receipt (before any hold or delay)


class ObservedHandshake(NamedTuple):
    """A ConnectRequest (client→server) or ConnectResponse (server→client)."""

    connection_index: int
    session_id: int
    timeout_ms: int
    t: float


@dataclass
class _Arm:
    opcodes: frozenset[int]
    remaining: int
    reset: bool


@dataclass(eq=False)
class _Waiter:
    opcode: int
    count: int
    event: anyio.Event
