"""Multi (opcode 14: several writes in one transaction) and TTL nodes (createTTL). Pure."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from aiozklock._exceptions import AiozklockError, InvalidArgument, RolledBackError, error_for_code
from aiozklock._wire._framing import REPLY_HEADER, REPLY_HEADER_SIZE
from aiozklock._wire._frozen import fast_init
from aiozklock._wire._records import (
    _INT,
    _LONG,
    _OPCODE,
    _OPEN_ACL,
    _STAT,
    Created,
    CreateMode,
    Op,
    Opcode,
    Stat,
    _create_payload,
    _created_parser,
    _read_stat,
    _read_ustring,
    _ustring,
)

# Java's CreateMode flags of TTL nodes: values, not bits (5 is not EPHEMERAL | CONTAINER), so
# they are not CreateMode members.
PERSISTENT_WITH_TTL = 5
PERSISTENT_SEQUENTIAL_WITH_TTL = 6
# EphemeralType.TTL keeps the TTL in the low 40 bits of the node's ephemeralOwner.
MAX_TTL_MS = (1 << 40) - 1


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
    return Op(body, server_path, _created_parser(strip), spares_parents=True)


# --- multi (opcode 14): several writes applied atomically, in one transaction ---------------


@fast_init  # the multi-lock's every create, release and reply
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


@fast_init  # the multi-lock's every create, release and reply
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


@dataclass(frozen=True, slots=True)
class MultiSetData:
    """Set a node's data inside a multi (``version`` -1: any version); its outcome is the
    node's new ``Stat``."""

    opcode: ClassVar[Opcode] = Opcode.SET_DATA
    server_path: str
    data: bytes
    version: int = -1

    def payload(self) -> bytes:
        """The request record, without the multi header."""
        return (
            _ustring(self.server_path)
            + _INT.pack(len(self.data))
            + self.data
            + _INT.pack(self.version)
        )


MultiSubOp = MultiCreate | MultiDelete | MultiCheck | MultiSetData

# A sub-operation's outcome: the created path (client-side) for a create, None for a delete
# or a check, the new Stat for a setData, the exception for its result code when the multi
# failed.
MultiOutcome = str | Stat | AiozklockError | None


@fast_init  # the multi-lock's every create, release and reply
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
            elif result_type == Opcode.SET_DATA:
                results.append(_read_stat(buf, offset))
                offset += _STAT.size
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
