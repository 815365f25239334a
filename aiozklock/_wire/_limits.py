"""How large a request may be: ZooKeeper's ``jute.maxbuffer``, checked before sending.

ZooKeeper drops the connection, with no error reply, on a request frame (xid, opcode and
record, without the length prefix) longer than its ``jute.maxbuffer``: ``0xfffff`` by
default (``BinaryInputArchive.maxBuffer``, compared in ``NIOServerCnxn``/``NettyServerCnxn``
before anything is read). That would take every lock of the session with it, so the session
refuses such a request before writing it (``Session.call``/``pipeline``/``send``/
``send_soon``), with the error made here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiozklock._exceptions import InvalidArgument, short_repr, shorten
from aiozklock._wire._protocol import LENGTH, Op, Opcode, auth_frame

DEFAULT_MAX_REQUEST_BYTES = 0xFFFFF
# The floor: a watch re-armed after a reconnect (SetWatches, which we cannot refuse to
# anyone) on the longest path, chroot included (2 x _validation.MAX_PATH_BYTES), must always fit.
MIN_MAX_REQUEST_BYTES = 128 * 1024
MAX_MAX_REQUEST_BYTES = 2**31 - 1  # a frame length is a Java int
FRAME_OVERHEAD = 4  # the xid, before an op's body: both count against the limit


def validate_max_request_bytes(value: object) -> int:
    """``connect()``'s ``max_request_bytes``: an int in ``MIN_MAX_REQUEST_BYTES ..
    MAX_MAX_REQUEST_BYTES``; raises ``InvalidArgument`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(
            "max_request_bytes must be an int (the servers' jute.maxbuffer, default "
            f"{DEFAULT_MAX_REQUEST_BYTES}), not {short_repr(value)}"
        )
    if not MIN_MAX_REQUEST_BYTES <= value <= MAX_MAX_REQUEST_BYTES:
        raise InvalidArgument(
            f"max_request_bytes must be between {MIN_MAX_REQUEST_BYTES} and "
            f"{MAX_MAX_REQUEST_BYTES} (the servers' jute.maxbuffer, default "
            f"{DEFAULT_MAX_REQUEST_BYTES}), not {value}"
        )
    return value


def oversized(op: Op[Any], limit: int, client_path: str) -> InvalidArgument:
    """The error for ``op``, whose frame is longer than ``limit``: names the request (as
    ZooKeeper does), its node, its size and the limit."""
    (opcode,) = LENGTH.unpack_from(op.body)  # the body starts with the opcode, an int
    name = _REQUEST_NAMES.get(opcode, f"opcode {opcode}")
    where = f" on {shorten(client_path)}" if op.path else ""
    return InvalidArgument(
        f"the {name} request{where} is {len(op.body) + FRAME_OVERHEAD} bytes, more than "
        f"max_request_bytes={limit} (the servers' jute.maxbuffer: ZooKeeper would drop the "
        "connection, and with it this session's locks): not sent"
    )


_REQUEST_NAMES = {
    Opcode.CREATE: "create",
    Opcode.DELETE: "delete",
    Opcode.EXISTS: "exists",
    Opcode.GET_DATA: "getData",
    Opcode.SET_DATA: "setData",
    Opcode.GET_ACL: "getACL",
    Opcode.GET_CHILDREN: "getChildren",
    Opcode.GET_CHILDREN2: "getChildren2",
    Opcode.CHECK: "check",
    Opcode.MULTI: "multi (transaction)",
    Opcode.CREATE2: "create",
    Opcode.CREATE_CONTAINER: "createContainer",
    Opcode.CREATE_TTL: "createTTL",
}


def check_auth_size(auth: Sequence[tuple[str, bytes]], max_request_bytes: int) -> None:
    """Raise ``InvalidArgument`` if a credential's AuthPacket would be longer than
    ``max_request_bytes``: the server would drop every connection that sends it."""
    for scheme, credential in auth:
        size = len(auth_frame(scheme, credential)) - LENGTH.size
        if size > max_request_bytes:
            raise InvalidArgument(
                f"the {shorten(scheme)!r} credential makes a {size}-byte request, more than "
                f"max_request_bytes={max_request_bytes} (the servers' jute.maxbuffer)"
            )
