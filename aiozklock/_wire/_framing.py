"""Frames: the length prefix, the xid, reply headers, and the frames the session writes
itself (connect, ping, auth, SetWatches) or reads itself (the handshake answer, a watch
event). Pure (bytes in, values out)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from aiozklock._wire._frozen import fast_init
from aiozklock._wire._records import _INT, _OPCODE, Opcode, _jute, _read_ustring, _ustring

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


def frame(xid: int, body: bytes) -> bytes:
    return XID_PREFIX.pack(len(body) + 4, xid) + body


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


@fast_init  # one per watch event
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


def auth_frame(scheme: str, credential: bytes) -> bytes:
    """AuthPacket (type 0, scheme, auth) with its xid (-4) and length prefix."""
    body = b"".join(
        (_OPCODE[Opcode.AUTH], _INT.pack(0), _ustring(scheme), _INT.pack(len(credential)))
    )
    return frame(AUTH_XID, body + credential)
