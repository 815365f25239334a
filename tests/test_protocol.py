"""The hot-path codecs of ``_wire._protocol`` agree with aiozk's jute records, byte for byte.

aiozk's records are the reference serialisation; the lock's own requests and replies are
encoded with precompiled structs for speed, and these properties keep the two identical.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from aiozk import exc as aiozk_exc
from aiozk import protocol as jute
from aiozk.protocol.acl import ACL as JuteACL
from aiozk.protocol.acl import ID as JuteID
from aiozk.protocol.primitives import Long
from aiozk.protocol.stat import Stat as JuteStat
from aiozk.protocol.transaction import MultiHeader
from hypothesis import given
from hypothesis import strategies as st

from aiozklock._acl import ACL, Perms
from aiozklock._exceptions import (
    NodeExistsError,
    RolledBackError,
    RuntimeInconsistencyError,
    ZooKeeperError,
)
from aiozklock._wire import _protocol as proto

paths = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=40,
).map(lambda text: "/" + text)
longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
ints = st.integers(min_value=-(2**31), max_value=2**31 - 1)
stats = st.tuples(longs, longs, longs, longs, ints, ints, ints, longs, ints, ints, longs)
STAT_FIELDS = (
    "created_zxid",
    "last_modified_zxid",
    "created",
    "modified",
    "version",
    "child_version",
    "acl_version",
    "ephemeral_owner",
    "data_length",
    "num_children",
    "last_modified_children",
)


def render(part: jute.Part) -> bytes:
    """What aiozk would put on the wire for a reply record (no header)."""
    fmt, data = part.render()
    return struct.pack("!" + fmt, *data)


def jute_stat(values: tuple[int, ...]) -> JuteStat:
    return JuteStat(**dict(zip(STAT_FIELDS, values, strict=True)))


@given(paths, st.binary(max_size=300), st.sampled_from(list(proto.CreateMode)))
def test_create_request_matches_aiozk(path: str, data: bytes, mode: proto.CreateMode) -> None:
    expected = jute.Create2Request(
        path=path, data=data, acl=proto.OPEN_ACL, flags=int(mode)
    ).serialize()
    assert proto.create_op(path, data, mode, str).body == expected


@given(paths, ints)
def test_delete_request_matches_aiozk(path: str, version: int) -> None:
    expected = jute.DeleteRequest(path=path, version=version).serialize()
    assert proto.delete_op(path, version).body == expected


@given(paths, st.booleans())
def test_exists_and_get_children_requests_match_aiozk(path: str, watch: bool) -> None:
    watcher = (lambda event: None) if watch else None
    assert proto.exists_op(path, watcher).body == (
        jute.ExistsRequest(path=path, watch=watch).serialize()
    )
    assert proto.get_children_op(path, watcher).body == (
        jute.GetChildrenRequest(path=path, watch=watch).serialize()
    )


@given(paths, stats)
def test_create_reply_parses_like_aiozk(path: str, stat: tuple[int, ...]) -> None:
    wire = b"junk" + render(jute.Create2Response(path=path, stat=jute_stat(stat)))
    created = proto.create_op("/x", b"", proto.CreateMode.PERSISTENT, str.upper).parse(wire, 4)
    assert created == proto.Created(path.upper(), proto.Stat(*stat))


@given(stats)
def test_exists_reply_parses_like_aiozk(stat: tuple[int, ...]) -> None:
    wire = render(jute.ExistsResponse(stat=jute_stat(stat)))
    assert proto.exists_op("/x").parse(wire, 0) == proto.Stat(*stat)


@given(st.lists(paths.map(lambda path: path[1:]), max_size=30))
def test_children_reply_parses_like_aiozk(children: list[str]) -> None:
    wire = render(jute.GetChildrenResponse(children=children))
    assert proto.get_children_op("/x").parse(wire, 0) == children


@given(ints, ints, paths)
def test_watch_event_parses_like_aiozk(event_type: int, state: int, path: str) -> None:
    wire = render(jute.WatchEvent(type=event_type, state=state, path=path))
    assert proto.parse_watch_event(wire, 0) == proto.RawWatchEvent(event_type, state, path)


def test_malformed_replies_are_rejected_not_truncated() -> None:
    children = render(jute.GetChildrenResponse(children=["lock-0000000001abc", "lock-0000000002"]))
    parse_children = proto.get_children_op("/x").parse
    with pytest.raises(ValueError, match="length"):
        parse_children(children[:-5], 0)  # the second name is cut short
    with pytest.raises(ValueError, match="length"):
        parse_children(struct.pack("!ii", 1, -5), 0)  # a negative name length
    with pytest.raises(ValueError, match="vector"):
        parse_children(struct.pack("!i", -2), 0)
    assert parse_children(struct.pack("!i", -1), 0) == []  # a null vector: no children
    created = render(jute.Create2Response(path="/a/lock-1", stat=jute_stat((0,) * 11)))
    parse_created = proto.create_op("/x", b"", proto.CreateMode.PERSISTENT, str).parse
    with pytest.raises(ValueError, match="length"):
        parse_created(struct.pack("!i", 100) + created[4:10], 0)


# ------------------------------------------------------------------ multi and CreateTTL

ERROR_CODES = [0, -2, -6, -8, -101, -102, -103, -108, -110, -111]

sub_ops = st.one_of(
    st.builds(proto.MultiCreate, paths, st.binary(max_size=100), st.sampled_from(proto.CreateMode)),
    st.builds(proto.MultiDelete, paths, ints),
    st.builds(proto.MultiCheck, paths, ints),
    st.builds(proto.MultiSetData, paths, st.binary(max_size=100), ints),
)


def jute_sub_request(subop: proto.MultiSubOp) -> jute.Request:
    if isinstance(subop, proto.MultiCreate):
        return jute.CreateRequest(
            path=subop.server_path, data=subop.data, acl=proto.OPEN_ACL, flags=int(subop.mode)
        )
    if isinstance(subop, proto.MultiDelete):
        return jute.DeleteRequest(path=subop.server_path, version=subop.version)
    if isinstance(subop, proto.MultiSetData):
        return jute.SetDataRequest(path=subop.server_path, data=subop.data, version=subop.version)
    return jute.CheckVersionRequest(path=subop.server_path, version=subop.version)


@given(st.lists(sub_ops, min_size=1, max_size=6))
def test_multi_request_matches_aiozk(subops: list[proto.MultiSubOp]) -> None:
    transaction = jute.TransactionRequest()
    for subop in subops:
        transaction.add(jute_sub_request(subop))
    assert proto.multi_op(subops, str).body == transaction.serialize()


class CreateTTLRequest(jute.Create2Request):  # type: ignore[misc]
    """zookeeper.jute's CreateTTLRequest, which aiozk lacks: Create2Request plus the TTL."""

    opcode = 21
    parts = (*jute.Create2Request.parts, ("ttl", Long))


@given(paths, st.binary(max_size=300), st.integers(1, proto.MAX_TTL_MS), st.booleans())
def test_create_ttl_request_matches_jute(
    path: str, data: bytes, ttl: int, sequential: bool
) -> None:
    flags = proto.PERSISTENT_SEQUENTIAL_WITH_TTL if sequential else proto.PERSISTENT_WITH_TTL
    expected = CreateTTLRequest(
        path=path, data=data, acl=proto.OPEN_ACL, flags=flags, ttl=ttl
    ).serialize()
    assert proto.create_ttl_op(path, data, ttl, str, sequential=sequential).body == expected


@given(paths, stats)
def test_create_ttl_reply_parses_like_aiozk(path: str, stat: tuple[int, ...]) -> None:
    wire = render(jute.Create2Response(path=path, stat=jute_stat(stat)))
    created = proto.create_ttl_op("/x", b"", 1000, str.upper).parse(wire, 0)
    assert created == proto.Created(path.upper(), proto.Stat(*stat))


# One operation's result in a multi reply: (result type, path, stat or error code).
multi_results = st.one_of(
    st.tuples(st.just(proto.Opcode.CREATE), paths, st.none()),
    st.tuples(st.just(proto.Opcode.CREATE2), paths, stats),
    st.tuples(st.sampled_from([proto.Opcode.DELETE, proto.Opcode.CHECK]), st.none(), st.none()),
    st.tuples(st.just(proto.Opcode.SET_DATA), st.none(), stats),
    st.tuples(st.just(proto.Opcode.ERROR), st.none(), st.sampled_from(ERROR_CODES)),
)


def multi_reply(zxid: int, results: list[tuple[int, Any, Any]]) -> bytes:
    """A whole multi reply frame as the server sends it (MultiResponse.serialize)."""
    parts = [proto.REPLY_HEADER.pack(7, zxid, 0)]
    for result_type, path, extra in results:
        error = extra if result_type == proto.Opcode.ERROR else 0
        parts.append(render(MultiHeader(type=result_type, done=False, error=error)))
        if result_type == proto.Opcode.CREATE:
            parts.append(render(jute.CreateResponse(path=path)))
        elif result_type == proto.Opcode.CREATE2:
            parts.append(render(jute.Create2Response(path=path, stat=jute_stat(extra))))
        elif result_type == proto.Opcode.SET_DATA:
            parts.append(render(jute.SetDataResponse(stat=jute_stat(extra))))
        elif result_type == proto.Opcode.ERROR:
            parts.append(struct.pack("!i", extra))  # ErrorResponse
    parts.append(render(MultiHeader(type=-1, done=True, error=-1)))
    return b"".join(parts)


@given(longs, st.lists(multi_results, min_size=1, max_size=6))
def test_multi_reply_parses_like_aiozk(zxid: int, results: list[tuple[int, Any, Any]]) -> None:
    wire = multi_reply(zxid, results)
    subops = [proto.MultiCheck(f"/op{i}", 0) for i in range(len(results))]
    parsed = proto.multi_op(subops, str.upper).parse(wire, proto.REPLY_HEADER_SIZE)
    reference = jute.TransactionResponse.deserialize(wire[proto.REPLY_HEADER_SIZE :]).responses

    assert parsed.zxid == zxid
    assert len(parsed.results) == len(reference) == len(results)
    for index, (ours, theirs) in enumerate(zip(parsed.results, reference, strict=True)):
        if isinstance(theirs, aiozk_exc.ResponseError):
            assert isinstance(ours, ZooKeeperError)
            assert ours.code == theirs.error_code
            assert ours.path == f"/OP{index}"  # the operation's own path, client-side
        elif hasattr(theirs, "path"):
            assert ours == theirs.path.upper()
        elif hasattr(theirs, "stat"):  # setData: the node's new stat
            assert ours == proto.Stat(*(getattr(theirs.stat, f) for f in STAT_FIELDS))
        else:
            assert ours is None
    errors = [code for kind, _, code in results if kind == proto.Opcode.ERROR]
    assert parsed.ok == (not errors)
    failing = [
        index
        for index, (kind, _, code) in enumerate(results)
        if kind == proto.Opcode.ERROR and code != 0
    ]
    assert parsed.failure == ((failing[0], parsed.results[failing[0]]) if failing else None)


def test_multi_failure_maps_codes_to_exceptions() -> None:
    wire = multi_reply(
        5,
        [
            (proto.Opcode.ERROR, None, 0),
            (proto.Opcode.ERROR, None, -110),
            (proto.Opcode.ERROR, None, -2),
            (proto.Opcode.ERROR, None, -999),
        ],
    )
    subops = [proto.MultiDelete(f"/n{i}") for i in range(4)]
    result = proto.multi_op(subops, str).parse(wire, proto.REPLY_HEADER_SIZE)
    rolled_back, exists, inconsistent, unknown = result.results
    assert type(rolled_back) is RolledBackError
    assert type(exists) is NodeExistsError
    assert type(inconsistent) is RuntimeInconsistencyError
    assert type(unknown) is ZooKeeperError
    assert unknown.code == -999
    assert result.failure == (1, exists)


def test_malformed_multi_replies_are_rejected() -> None:
    parse = proto.multi_op([proto.MultiDelete("/a")], str).parse
    header = proto.REPLY_HEADER_SIZE
    assert parse(multi_reply(1, [(proto.Opcode.DELETE, None, None)]), header).results == (None,)
    with pytest.raises(ValueError, match="result type 4"):  # getData: never asked for
        parse(multi_reply(1, [(4, None, None)]), header)
    with pytest.raises(ValueError, match="more results"):
        parse(multi_reply(1, [(proto.Opcode.DELETE, None, None)] * 2), header)
    with pytest.raises(ValueError, match="0 results"):
        parse(multi_reply(1, []), header)


acls = st.lists(
    st.builds(
        ACL,
        st.integers(0, 31).map(Perms),
        st.text(min_size=1, max_size=10),
        st.text(max_size=40),
    ),
    min_size=1,
    max_size=4,
)


def jute_acl(acl: list[ACL]) -> list[Any]:
    return [JuteACL(perms=int(a.perms), id=JuteID(scheme=a.scheme, id=a.id)) for a in acl]


@given(paths, st.binary(max_size=100), acls)
def test_create_with_an_acl_matches_aiozk(path: str, data: bytes, acl: list[ACL]) -> None:
    expected = jute.Create2Request(path=path, data=data, acl=jute_acl(acl), flags=0).serialize()
    mode = proto.CreateMode.PERSISTENT
    assert proto.create_op(path, data, mode, str, acl=proto.encode_acl(acl)).body == expected
    container = proto.create_container_op(path, str, acl=proto.encode_acl(acl)).body
    assert (
        container[4:]
        == jute.Create2Request(
            path=path, data=b"", acl=jute_acl(acl), flags=int(proto.CreateMode.CONTAINER)
        ).serialize()[4:]
    )


@given(paths, acls, st.tuples(*[ints] * 11))
def test_get_acl_matches_aiozk(path: str, acl: list[ACL], stat: tuple[int, ...]) -> None:
    assert proto.get_acl_op(path).body == jute.GetACLRequest(path=path).serialize()
    reply = proto.encode_acl(acl) + struct.pack("!qqqqiiiqiiq", *stat)
    parsed, _ = jute.GetACLResponse.parse(reply, 0)  # aiozk reads our encoding ...
    assert [(a.perms, a.id.scheme, a.id.id) for a in parsed.acl] == [
        (int(a.perms), a.scheme, a.id) for a in acl
    ]
    assert parsed.stat == jute_stat(stat)
    assert proto.get_acl_op(path).parse(reply, 0) == (acl, proto.Stat(*stat))  # ... and we


def test_auth_frame_matches_aiozk() -> None:
    body = jute.AuthRequest(type=0, scheme="digest", auth=b"alice:pw").serialize()
    assert proto.auth_frame("digest", b"alice:pw") == struct.pack("!ii", len(body) + 4, -4) + body
