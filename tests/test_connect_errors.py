"""What ``connect()`` says when it cannot be used: a malformed host list before any traffic,
and, when no server could be used, each host and why (refused, not ZooKeeper...).

The foreign servers here are real local listeners (an HTTP server, one that answers random
bytes), nothing mocked.
"""

from __future__ import annotations

import random

import pytest

import aiozklock

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

HTTP_ANSWER = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n"
    b"Connection: close\r\n\r\nBad Request"
)
# Random, but with a negative length prefix (a frame no ZooKeeper server sends), and no
# quote (which would change how repr() quotes the whole).
_UNQUOTED = [byte for byte in range(256) if byte not in b"'\""]
GARBAGE = bytes([0x80 | random.randrange(256), *random.choices(_UNQUOTED, k=63)])


@pytest.mark.parametrize(
    ("hosts", "says"),
    [
        ("[::1", "unclosed '['"),
        ("zk1:2181,[::1/app", "unclosed '['"),
        ("[::1]x:2181", "'x:2181' after ']'"),
        ("[]:2181", "empty host name"),
        ("host:2181:junk", "more than one ':'"),
        ("::1", "IPv6 in brackets"),
        ("zk1:2181,,zk2:2181", "empty entry"),
        ("zk1:2181,", "empty entry"),
        ("zk1:", "bad port ''"),
        ("zk1:+2181", "bad port '+2181'"),
        ("zk1:2_181", "bad port '2_181'"),
        ("zk1:0", "port 0 out of range"),
        ("zk1:65536", "port 65536 out of range"),
        ("zk 1:2181", "whitespace"),
    ],
)
def test_malformed_hosts_are_refused_before_any_traffic(hosts: str, says: str) -> None:
    # connect() is synchronous and opens nothing: the error comes before any connection.
    with pytest.raises(aiozklock.InvalidArgument) as excinfo:
        aiozklock.connect(hosts)
    assert says in str(excinfo.value)


def test_well_formed_hosts_are_accepted() -> None:
    client = aiozklock.connect("zk1,zk2:2182,[::1]:2183,[fe80::1%eth0]/app")
    assert client.chroot == "/app"
