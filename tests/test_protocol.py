"""The hot-path codecs of ``_wire._protocol`` agree with aiozk's jute records, byte for byte.

aiozk's records are the reference serialisation; the lock's own requests and replies are
encoded with precompiled structs for speed, and these properties keep the two identical.
"""

from __future__ import annotations

import struct

import pytest
from aiozk import protocol as jute
from aiozk.protocol.stat import Stat as JuteStat
from hypothesis import given
from hypothesis import strategies as st

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
