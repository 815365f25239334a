"""The records of ZooKeeper's protocol: opcodes, modes, watch kinds, ``Stat``, ``Op`` (one
serialised request and its reply parser) and the jute codecs the operations share.

Everything here is pure (bytes in, values out). The operations are ``_ops``' and ``_multi``'s,
the frames around them ``_framing``'s; ``_protocol`` re-exports all of them.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from aiozklock._acl import ACL, OPEN_ACL_UNSAFE, Perms
from aiozklock._wire import _jute as _jute_module
from aiozklock._wire._frozen import fast_init

_jute: Any = _jute_module.load()  # untyped; only the records are used

T = TypeVar("T")


class Opcode(enum.IntEnum):
    ERROR = -1  # a failed operation's result inside a multi reply
    CREATE = 1
    DELETE = 2
    EXISTS = 3
    GET_DATA = 4
    SET_DATA = 5
    GET_ACL = 6
    GET_CHILDREN = 8
    PING = 11
    GET_CHILDREN2 = 12
    CHECK = 13
    MULTI = 14
    CREATE2 = 15
    CREATE_CONTAINER = 19
    CREATE_TTL = 21
    AUTH = 100
    SET_WATCHES = 101
    CLOSE = -11


class CreateMode(enum.IntFlag):
    PERSISTENT = 0
    EPHEMERAL = 1
    SEQUENTIAL = 2
    CONTAINER = 4


class WatchKind(enum.Enum):
    """Where the server keeps a watch: it decides which events fire it and how it is re-armed."""

    DATA = "data"  # getData, or exists on a node that exists
    EXIST = "exist"  # exists on a node that does not exist (yet)
    CHILD = "child"  # getChildren


class EventType(enum.IntEnum):
    SESSION = 0  # not from the server: the session that held the watch is gone or closed
    CREATED = 1
    DELETED = 2
    CHANGED = 3
    CHILDREN = 4


# Which registries an event type fires (ZooKeeper's ZKWatchManager.materialize).
FIRES: dict[int, tuple[WatchKind, ...]] = {
    EventType.CREATED: (WatchKind.DATA, WatchKind.EXIST),
    EventType.DELETED: (WatchKind.DATA, WatchKind.EXIST, WatchKind.CHILD),
    EventType.CHANGED: (WatchKind.DATA, WatchKind.EXIST),
    EventType.CHILDREN: (WatchKind.CHILD,),
}


@dataclass(frozen=True, slots=True)
class WatchedEvent:
    type: EventType
    path: str


Watcher = Callable[[WatchedEvent], None]


@fast_init  # one per reply that carries a stat (every create): built cheaply
@dataclass(frozen=True, slots=True)
class Stat:
    """A node's metadata, as ZooKeeper keeps it (times in ms since the epoch): ``czxid``
    is the transaction that created it (a lock's fencing token), ``version`` counts data
    changes, ``cversion`` child changes, ``ephemeral_owner`` is the owning session's id
    (0 for a persistent node)."""

    czxid: int
    mzxid: int
    ctime: int
    mtime: int
    version: int
    cversion: int
    aversion: int
    ephemeral_owner: int
    data_length: int
    num_children: int
    pzxid: int


@fast_init  # one per create's reply
@dataclass(frozen=True, slots=True)
class Created:
    path: str  # with the sequence suffix, client-side (chroot removed)
    stat: Stat


# Hot-path codecs: the lock's requests and replies, encoded and decoded with precompiled
# structs instead of aiozk's generic record walker. Layouts are jute's (ZooKeeper's
# zookeeper.jute); tests check every codec against aiozk's records byte for byte.
_INT = struct.Struct("!i")
_LONG = struct.Struct("!q")
_STAT = struct.Struct("!qqqqiiiqiiq")  # czxid mzxid ctime mtime version cversion aversion
#                                        ephemeralOwner dataLength numChildren pzxid
_OPCODE = {opcode: _INT.pack(opcode) for opcode in Opcode}
_TRUE, _FALSE = b"\x01", b"\x00"


def _ustring(value: str) -> bytes:
    encoded = value.encode()
    return _INT.pack(len(encoded)) + encoded


def _read_ustring(buf: bytes, offset: int) -> tuple[str, int]:
    (size,) = _INT.unpack_from(buf, offset)
    offset += 4
    if size == -1:  # null
        return "", offset
    end = offset + size
    if size < 0 or end > len(buf):
        raise ValueError(f"bad string length {size} at offset {offset}")
    return buf[offset:end].decode(), end


def _read_stat(buf: bytes, offset: int) -> Stat:
    return Stat(*_STAT.unpack_from(buf, offset))


def _stat(raw: Any) -> Stat:
    return Stat(
        raw.created_zxid,
        raw.last_modified_zxid,
        raw.created,
        raw.modified,
        raw.version,
        raw.child_version,
        raw.acl_version,
        raw.ephemeral_owner,
        raw.data_length,
        raw.num_children,
        raw.last_modified_children,
    )


class Op(Generic[T]):
    """One request: its serialised body (opcode + payload) and how to read its reply.
    ``spares_parents``: a write that, applied, deleted no node able to have children (a
    create, a check, the delete of an ephemeral): the session records its zxid
    (``SessionCore.spared_parents``)."""

    __slots__ = ("absent_ok", "body", "parse", "path", "spares_parents", "watch", "watcher")

    def __init__(
        self,
        body: bytes,
        path: str,
        parse: Callable[[bytes, int], T],
        *,
        watch: WatchKind | None = None,
        watcher: Watcher | None = None,
        absent_ok: bool = False,
        spares_parents: bool = False,
    ) -> None:
        self.body = body
        self.path = path  # server-side path (chroot included)
        self.parse = parse
        self.watch = watch
        self.watcher = watcher
        self.absent_ok = absent_ok  # NoNode is an answer (None), not an error
        self.spares_parents = spares_parents


def _none(buf: bytes, offset: int) -> None:
    return None


OPEN_ACL = [_jute.UNRESTRICTED_ACCESS]  # aiozk's record of world:anyone ALL (for tests)


def encode_acl(acl: Sequence[ACL]) -> bytes:
    """vector<ACL>: each entry is (perms, scheme, id). Recipes encode theirs once."""
    entries = [_INT.pack(a.perms) + _ustring(a.scheme) + _ustring(a.id) for a in acl]
    return _INT.pack(len(entries)) + b"".join(entries)


_OPEN_ACL = encode_acl(OPEN_ACL_UNSAFE)


def _read_acl(buf: bytes, offset: int) -> tuple[list[ACL], int]:
    (count,) = _INT.unpack_from(buf, offset)
    offset += 4
    acl = []
    for _ in range(max(count, 0)):  # -1 (null): none
        (perms,) = _INT.unpack_from(buf, offset)
        scheme, offset = _read_ustring(buf, offset + 4)
        ident, offset = _read_ustring(buf, offset)
        acl.append(ACL(Perms(perms & Perms.ALL), scheme, ident))
    return acl, offset


def _create_payload(server_path: str, data: bytes, flags: int, acl: bytes) -> bytes:
    """CreateRequest (path, data, acl, flags), the record create, create2 and createTTL share;
    ``acl`` as ``encode_acl`` made it."""
    return b"".join((_ustring(server_path), _INT.pack(len(data)), data, acl, _INT.pack(flags)))


def _created_parser(strip: Callable[[str], str]) -> Callable[[bytes, int], Created]:
    def parse(buf: bytes, offset: int) -> Created:
        path, offset = _read_ustring(buf, offset)
        return Created(strip(path), _read_stat(buf, offset))

    return parse
