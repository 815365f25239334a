"""The narrow seam to ``aiozk.protocol``: typed operations, framing and reply headers.

Everything here is pure (bytes in, values out). An ``Op`` is one request, serialised once, with
the function that parses its reply; the session adds the xid and the length prefix.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from aiozklock._acl import ACL, OPEN_ACL_UNSAFE, Perms
from aiozklock._exceptions import (
    AiozklockError,
    InvalidArgument,
    RolledBackError,
    error_for_code,
)
from aiozklock._wire import _jute as _jute_module

_jute: Any = _jute_module.load()  # untyped; only the records are used

T = TypeVar("T")

LENGTH = struct.Struct("!i")
XID_PREFIX = struct.Struct("!ii")  # frame length, xid
REPLY_HEADER = struct.Struct("!iqi")  # xid, zxid, err
REPLY_HEADER_SIZE = REPLY_HEADER.size

WATCH_XID = -1
PING_XID = -2
AUTH_XID = -4
SET_WATCHES_XID = -8
SPECIAL_XIDS = frozenset({PING_XID, AUTH_XID, SET_WATCHES_XID})

NO_NODE = -101

# Java's client splits SetWatches at 128 KiB to stay far below jute.maxbuffer.
SET_WATCHES_CHUNK = 128 * 1024


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


# Java's CreateMode flags of TTL nodes: values, not bits (5 is not EPHEMERAL | CONTAINER), so
# they are not CreateMode members.
PERSISTENT_WITH_TTL = 5
PERSISTENT_SEQUENTIAL_WITH_TTL = 6
# EphemeralType.TTL keeps the TTL in the low 40 bits of the node's ephemeralOwner.
MAX_TTL_MS = (1 << 40) - 1


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
    """One request: its serialised body (opcode + payload) and how to read its reply."""

    __slots__ = ("absent_ok", "body", "parse", "path", "watch", "watcher")

    def __init__(
        self,
        body: bytes,
        path: str,
        parse: Callable[[bytes, int], T],
        *,
        watch: WatchKind | None = None,
        watcher: Watcher | None = None,
        absent_ok: bool = False,
    ) -> None:
        self.body = body
        self.path = path  # server-side path (chroot included)
        self.parse = parse
        self.watch = watch
        self.watcher = watcher
        self.absent_ok = absent_ok  # NoNode is an answer (None), not an error


def frame(xid: int, body: bytes) -> bytes:
    return XID_PREFIX.pack(len(body) + 4, xid) + body


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


def create_op(
    server_path: str,
    data: bytes,
    mode: CreateMode,
    strip: Callable[[str], str],
    *,
    acl: bytes = _OPEN_ACL,
) -> Op[Created]:
    """create2 (path, data, acl, flags) -> (path, stat)."""
    body = _OPCODE[Opcode.CREATE2] + _create_payload(server_path, data, int(mode), acl)
    return Op(body, server_path, _created_parser(strip))


def create_ttl_op(
    server_path: str,
    data: bytes,
    ttl_ms: int,
    strip: Callable[[str], str],
    *,
    sequential: bool = False,
    acl: bytes = _OPEN_ACL,
) -> Op[Created]:
    """createTTL (path, data, acl, flags, ttl) -> (path, stat): a persistent node that the
    server deletes once it has had no children and no change for ``ttl_ms`` milliseconds.

    ``ttl_ms`` must be in ``1..MAX_TTL_MS`` (``InvalidArgument`` otherwise). A server started
    without ``zookeeper.extendedTypesEnabled=true`` answers ``UnimplementedError``.
    """
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or not 1 <= ttl_ms <= MAX_TTL_MS:
        raise InvalidArgument(f"ttl_ms must be an int in 1..{MAX_TTL_MS}, not {ttl_ms!r}")
    flags = PERSISTENT_SEQUENTIAL_WITH_TTL if sequential else PERSISTENT_WITH_TTL
    body = b"".join(
        (
            _OPCODE[Opcode.CREATE_TTL],
            _create_payload(server_path, data, flags, acl),
            _LONG.pack(ttl_ms),
        )
    )
    return Op(body, server_path, _created_parser(strip))


def delete_op(server_path: str, version: int = -1) -> Op[None]:
    """delete (path, version) -> nothing."""
    body = _OPCODE[Opcode.DELETE] + _ustring(server_path) + _INT.pack(version)
    return Op(body, server_path, _none)


def _read_exists(buf: bytes, offset: int) -> Stat | None:
    return _read_stat(buf, offset)


def exists_op(server_path: str, watcher: Watcher | None = None) -> Op[Stat | None]:
    """exists (path, watch) -> stat; NoNode is an answer (None)."""
    body = _OPCODE[Opcode.EXISTS] + _ustring(server_path) + (_TRUE if watcher else _FALSE)
    return Op(
        body,
        server_path,
        _read_exists,
        watch=WatchKind.EXIST if watcher else None,
        watcher=watcher,
        absent_ok=True,
    )


def _read_children(buf: bytes, offset: int) -> list[str]:
    (count,) = _INT.unpack_from(buf, offset)
    offset += 4
    if count < -1:
        raise ValueError(f"bad vector length {count}")
    children = []
    for _ in range(count):  # -1 (null): none
        (size,) = _INT.unpack_from(buf, offset)
        offset += 4
        end = offset + size
        if size < 0 or end > len(buf):
            raise ValueError(f"bad child name length {size} at offset {offset}")
        children.append(buf[offset:end].decode())
        offset = end
    return children


def get_children_op(server_path: str, watcher: Watcher | None = None) -> Op[list[str]]:
    """getChildren (path, watch) -> vector<ustring>."""
    body = _OPCODE[Opcode.GET_CHILDREN] + _ustring(server_path) + (_TRUE if watcher else _FALSE)
    return Op(
        body,
        server_path,
        _read_children,
        watch=WatchKind.CHILD if watcher else None,
        watcher=watcher,
    )


def get_data_op(server_path: str, watcher: Watcher | None = None) -> Op[tuple[bytes, Stat]]:
    def parse(buf: bytes, offset: int) -> tuple[bytes, Stat]:
        raw, _ = _jute.GetDataResponse.parse(buf, offset)
        return (raw.data or b"", _stat(raw.stat))

    body = _jute.GetDataRequest(path=server_path, watch=watcher is not None).serialize()
    return Op(body, server_path, parse, watch=WatchKind.DATA if watcher else None, watcher=watcher)


def set_data_op(server_path: str, data: bytes, version: int = -1) -> Op[Stat]:
    def parse(buf: bytes, offset: int) -> Stat:
        raw, _ = _jute.SetDataResponse.parse(buf, offset)
        return _stat(raw.stat)

    body = _jute.SetDataRequest(path=server_path, data=data, version=version).serialize()
    return Op(body, server_path, parse)


# --- multi (opcode 14): several writes applied atomically, in one transaction ---------------


@dataclass(frozen=True, slots=True)
class MultiCreate:
    """Create a node inside a multi. Sent as a plain create (opcode 1), whose result is the
    path alone: ZooKeeper before 3.9 sends no stat for a create2 inside a multi."""

    opcode: ClassVar[Opcode] = Opcode.CREATE
    server_path: str
    data: bytes = b""
    mode: CreateMode = CreateMode.PERSISTENT
    acl: bytes = _OPEN_ACL  # as encode_acl made it

    def payload(self) -> bytes:
        """The request record, without the multi header."""
        return _create_payload(self.server_path, self.data, int(self.mode), self.acl)


@dataclass(frozen=True, slots=True)
class MultiDelete:
    """Delete a node inside a multi (``version`` -1: any version)."""

    opcode: ClassVar[Opcode] = Opcode.DELETE
    server_path: str
    version: int = -1

    def payload(self) -> bytes:
        """The request record, without the multi header."""
        return _ustring(self.server_path) + _INT.pack(self.version)


@dataclass(frozen=True, slots=True)
class MultiCheck:
    """Fail the whole multi unless the node exists at ``version`` (checkVersion, opcode 13)."""

    opcode: ClassVar[Opcode] = Opcode.CHECK
    server_path: str
    version: int

    def payload(self) -> bytes:
        """The request record, without the multi header."""
        return _ustring(self.server_path) + _INT.pack(self.version)


MultiSubOp = MultiCreate | MultiDelete | MultiCheck

# A sub-operation's outcome: the created path (client-side) for a create, None for a delete
# or a check, the exception for its result code when the multi failed.
MultiOutcome = str | AiozklockError | None


@dataclass(frozen=True, slots=True)
class MultiResult:
    """The reply to a multi: all of its operations were applied, or none.

    ``zxid`` is the reply header's: for a write, the transaction's own zxid, hence the
    ``czxid`` of every node it created. ``results`` holds one outcome per operation, in order.
    When the multi failed, every outcome is an exception: ``RolledBackError`` before the
    operation that failed, that operation's error, ``RuntimeInconsistencyError`` after it.
    """

    zxid: int
    results: tuple[MultiOutcome, ...]

    @property
    def ok(self) -> bool:
        """Every operation was applied."""
        return not any(isinstance(result, AiozklockError) for result in self.results)

    @property
    def failure(self) -> tuple[int, AiozklockError] | None:
        """The index and error of the operation that made the multi fail; None if it did not."""
        for index, result in enumerate(self.results):
            # Java's rule: the first result whose code is not 0 is the cause.
            if isinstance(result, AiozklockError) and not isinstance(result, RolledBackError):
                return index, result
        return None


_MULTI_HEADER = struct.Struct("!i?i")  # type, done, err
_MULTI_END = _MULTI_HEADER.pack(-1, True, -1)


def _multi_error(code: int, path: str) -> AiozklockError:
    return RolledBackError(path) if code == 0 else error_for_code(code, path)


def multi_op(subops: Sequence[MultiSubOp], strip: Callable[[str], str]) -> Op[MultiResult]:
    """multi (MultiHeader + request, ..., end header) -> MultiResult.

    Refuses (``InvalidArgument``) an empty multi; its size is checked when it is sent.
    """
    if not subops:
        raise InvalidArgument("a multi needs at least one operation")
    parts = [_OPCODE[Opcode.MULTI]]
    for subop in subops:
        parts.append(_MULTI_HEADER.pack(subop.opcode, False, -1))
        parts.append(subop.payload())
    parts.append(_MULTI_END)
    body = b"".join(parts)
    paths = [strip(subop.server_path) for subop in subops]

    def parse(buf: bytes, offset: int) -> MultiResult:
        # The reply header precedes the body: its zxid is the transaction's.
        _, zxid, _ = REPLY_HEADER.unpack_from(buf, offset - REPLY_HEADER_SIZE)
        results: list[MultiOutcome] = []
        while True:
            result_type, done, _ = _MULTI_HEADER.unpack_from(buf, offset)
            offset += _MULTI_HEADER.size
            if done:
                break
            if len(results) == len(paths):
                raise ValueError(f"more results than the {len(paths)} operations of the multi")
            # By the result's own type, not the request's: a failed operation has type -1.
            if result_type in (Opcode.CREATE, Opcode.CREATE2):
                path, offset = _read_ustring(buf, offset)
                if result_type == Opcode.CREATE2:
                    offset += _STAT.size  # the created path is the outcome; the stat is dropped
                results.append(strip(path))
            elif result_type in (Opcode.DELETE, Opcode.CHECK):
                results.append(None)
            elif result_type == Opcode.ERROR:
                (code,) = _INT.unpack_from(buf, offset)
                offset += _INT.size
                results.append(_multi_error(code, paths[len(results)]))
            else:
                raise ValueError(f"unexpected result type {result_type} in a multi reply")
        if len(results) != len(paths):
            raise ValueError(f"{len(results)} results for the {len(paths)} operations of a multi")
        return MultiResult(zxid, tuple(results))

    return Op(body, "", parse)


def close_op() -> Op[None]:
    return Op(_jute.CloseRequest().serialize(), "", _none)


PING_FRAME = frame(PING_XID, _jute.PingRequest().serialize())


# A SetWatches frame without its paths: xid, opcode, relativeZxid, three vector lengths.
_SET_WATCHES_OVERHEAD = 4 + 4 + 8 + 3 * 4


def set_watches_frames(
    relative_zxid: int,
    data: list[str],
    exist: list[str],
    child: list[str],
    max_request_bytes: int = SET_WATCHES_CHUNK,
) -> list[bytes]:
    """SetWatches requests re-arming every watch after a reconnect, split into chunks of at
    most ``SET_WATCHES_CHUNK`` and ``max_request_bytes`` (a path longer than that alone
    would still go in a frame of its own: validated paths never are)."""
    frames: list[bytes] = []
    lists: tuple[list[str], list[str], list[str]] = ([], [], [])
    budget = min(SET_WATCHES_CHUNK, max_request_bytes) - _SET_WATCHES_OVERHEAD
    size = 0
    for index, paths in enumerate((data, exist, child)):
        for path in paths:
            cost = len(path.encode()) + 4
            if size + cost > budget and size:
                frames.append(_set_watches_frame(relative_zxid, *lists))
                lists = ([], [], [])
                size = 0
            lists[index].append(path)
            size += cost
    if any(lists):
        frames.append(_set_watches_frame(relative_zxid, *lists))
    return frames


def _set_watches_frame(zxid: int, data: list[str], exist: list[str], child: list[str]) -> bytes:
    body = _jute.SetWatchesRequest(
        relative_zxid=zxid, data_watches=data, exist_watches=exist, child_watches=child
    ).serialize()
    return frame(SET_WATCHES_XID, bytes(body))


def connect_frame(last_zxid: int, timeout_ms: int, session_id: int, password: bytes) -> bytes:
    body: bytes = _jute.ConnectRequest(
        protocol_version=0,
        last_seen_zxid=last_zxid,
        timeout=timeout_ms,
        session_id=session_id,
        password=password,
        read_only=False,
    ).serialize()
    return LENGTH.pack(len(body)) + body


@dataclass(frozen=True, slots=True)
class Handshake:
    timeout_ms: int
    session_id: int
    password: bytes

    @property
    def expired(self) -> bool:
        # The server answers an expired (or unknown) session with timeout 0 and then closes.
        return self.timeout_ms <= 0


def parse_connect_response(body: bytes) -> Handshake:
    raw, _ = _jute.ConnectResponse.parse(body, 0)
    return Handshake(raw.timeout, raw.session_id, raw.password or b"")


@dataclass(frozen=True, slots=True)
class RawWatchEvent:
    type: int
    state: int
    path: str


_WATCH_EVENT = struct.Struct("!ii")


def parse_watch_event(buf: bytes, offset: int) -> RawWatchEvent:
    """WatcherEvent (type, state, path)."""
    event_type, state = _WATCH_EVENT.unpack_from(buf, offset)
    path, _ = _read_ustring(buf, offset + _WATCH_EVENT.size)
    return RawWatchEvent(event_type, state, path)


def create_container_op(
    server_path: str, strip: Callable[[str], str], *, acl: bytes = _OPEN_ACL, data: bytes = b""
) -> Op[Created]:
    """createContainer (opcode 19; ZooKeeper refuses the container flag on a plain create2):
    the create2 record and reply."""
    payload = _create_payload(server_path, data, int(CreateMode.CONTAINER), acl)
    return Op(_OPCODE[Opcode.CREATE_CONTAINER] + payload, server_path, _created_parser(strip))


def container_path_ops(
    server_path: str, strip: Callable[[str], str], *, acl: bytes = _OPEN_ACL, data: bytes = b""
) -> list[Op[Created]]:
    """createContainer for ``server_path`` and each of its ancestors, top down: pipelined in
    one write, they create whatever is missing (the rest answer NodeExists). Every container
    created gets ``acl`` (as ``encode_acl`` made it); ``server_path`` itself gets ``data``."""
    parts = server_path.strip("/").split("/")
    if not parts[0]:
        return []
    last = len(parts) - 1
    return [
        create_container_op(
            "/" + "/".join(parts[: i + 1]), strip, acl=acl, data=data if i == last else b""
        )
        for i in range(len(parts))
    ]


def get_acl_op(server_path: str) -> Op[tuple[list[ACL], Stat]]:
    """getACL (path) -> (vector<ACL>, stat)."""

    def parse(buf: bytes, offset: int) -> tuple[list[ACL], Stat]:
        acl, offset = _read_acl(buf, offset)
        return acl, _read_stat(buf, offset)

    return Op(_OPCODE[Opcode.GET_ACL] + _ustring(server_path), server_path, parse)


def auth_frame(scheme: str, credential: bytes) -> bytes:
    """AuthPacket (type 0, scheme, auth) with its xid (-4) and length prefix."""
    body = b"".join(
        (_OPCODE[Opcode.AUTH], _INT.pack(0), _ustring(scheme), _INT.pack(len(credential)))
    )
    return frame(AUTH_XID, body + credential)
