"""The operations: one ``Op`` per request (serialised once, with its reply parser). Pure."""

from __future__ import annotations

from collections.abc import Callable

from aiozklock._acl import ACL
from aiozklock._wire._records import (
    _FALSE,
    _INT,
    _OPCODE,
    _OPEN_ACL,
    _TRUE,
    Created,
    CreateMode,
    Op,
    Opcode,
    Stat,
    Watcher,
    WatchKind,
    _create_payload,
    _created_parser,
    _jute,
    _none,
    _read_acl,
    _read_stat,
    _stat,
    _ustring,
)


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
    return Op(body, server_path, _created_parser(strip), spares_parents=True)


def delete_op(server_path: str, version: int = -1, *, ephemeral: bool = False) -> Op[None]:
    """delete (path, version) -> nothing; ``ephemeral``: the caller knows the node is one
    (it cannot have children: ``Op.spares_parents``)."""
    body = _OPCODE[Opcode.DELETE] + _ustring(server_path) + _INT.pack(version)
    return Op(body, server_path, _none, spares_parents=ephemeral)


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


def close_op() -> Op[None]:
    return Op(_jute.CloseRequest().serialize(), "", _none)


def create_container_op(
    server_path: str, strip: Callable[[str], str], *, acl: bytes = _OPEN_ACL, data: bytes = b""
) -> Op[Created]:
    """createContainer (opcode 19; ZooKeeper refuses the container flag on a plain create2):
    the create2 record and reply."""
    payload = _create_payload(server_path, data, int(CreateMode.CONTAINER), acl)
    body = _OPCODE[Opcode.CREATE_CONTAINER] + payload
    return Op(body, server_path, _created_parser(strip), spares_parents=True)


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
