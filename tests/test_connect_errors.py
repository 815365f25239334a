"""What ``connect()`` says when it cannot be used: a malformed host list before any traffic,
and, when no server could be used, each host and why (refused, not ZooKeeper...).

The foreign servers here are real local listeners (an HTTP server, one that answers random
bytes), nothing mocked.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import pytest

import aiozklock
from tests.test_faults import free_port

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


@asynccontextmanager
async def _server(answer: bytes) -> AsyncIterator[str]:
    """A local TCP server that reads the client's handshake and sends ``answer``."""

    async def handle(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            try:
                await stream.receive()
                await stream.send(answer)
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                pass

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        yield f"127.0.0.1:{port}"
        tg.cancel_scope.cancel()


@pytest.fixture
async def http_server() -> AsyncIterator[str]:
    """An HTTP server that answers anything with 400 (as most do)."""
    async with _server(HTTP_ANSWER) as address:
        yield address


@pytest.fixture
async def garbage_server() -> AsyncIterator[str]:
    async with _server(GARBAGE) as address:
        yield address


async def _unavailable(hosts: str) -> str:
    with pytest.raises(aiozklock.ZooKeeperUnavailable) as excinfo:
        async with aiozklock.connect(hosts, connect_timeout=1.0):
            pytest.fail("connected to something that is not ZooKeeper")
    return str(excinfo.value)


async def test_an_http_server_is_named_as_such(http_server: str) -> None:
    message = await _unavailable(http_server)
    assert f"{http_server}: does not speak ZooKeeper's protocol" in message, message
    assert "it answered b'HTTP/1.1 400 Bad Request\\r\\n" in message, message
    assert "(an HTTP server?)" in message, message


async def test_a_server_answering_random_bytes_is_not_zookeeper(garbage_server: str) -> None:
    message = await _unavailable(garbage_server)
    assert f"{garbage_server}: does not speak ZooKeeper's protocol" in message, message
    assert repr(GARBAGE[:8])[:-1] in message, message  # the first bytes, quoted


async def test_each_host_is_named_with_why_it_failed(http_server: str) -> None:
    refused = f"127.0.0.1:{free_port()}"
    message = await _unavailable(f"{refused},{http_server}")
    assert f"{refused}: connection refused" in message, message
    assert f"{http_server}: does not speak ZooKeeper's protocol" in message, message
