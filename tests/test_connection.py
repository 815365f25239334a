"""The write side of a connection when the kernel does not take everything at once.

Requests are written synchronously; what the socket cannot take is kept in order and flushed
later. A local TCP peer that stops reading fills the kernel buffers for real (no ZooKeeper is
needed for that, and none is mocked: this is the byte path only).
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import anyio
import anyio.to_thread
import pytest

from aiozklock._wire._connection import Connection

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

CHUNK = 64 * 1024


class Peer:
    """The accepting end, a plain socket: nothing reads from it until ``read_all``."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def read_all(self) -> bytes:
        """Read until EOF (blocking: run it in a thread)."""
        received = bytearray()
        while chunk := self.sock.recv(1 << 20):
            received += chunk
        return bytes(received)


@pytest.fixture
async def peer_and_connection() -> AsyncIterator[tuple[Peer, Connection]]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        conn = Connection(await anyio.connect_tcp("127.0.0.1", port))
        accepted, _ = listener.accept()  # already established: does not block
        with accepted:
            try:
                yield Peer(accepted), conn
            finally:
                await conn.aclose()


def pattern(index: int) -> bytes:
    return index.to_bytes(4, "big") * (CHUNK // 4)


async def test_writes_beyond_the_kernel_buffer_arrive_complete_and_in_order(
    peer_and_connection: tuple[Peer, Connection],
) -> None:
    peer, conn = peer_and_connection
    chunks = 0
    while not conn._backlog:  # until the kernel refuses: the peer reads nothing yet
        conn.write(pattern(chunks))
        chunks += 1
        assert chunks < 10_000, "the kernel took 640 MiB without a reader"
    for _ in range(10):  # more writes queue behind the backlog, in order
        conn.write(pattern(chunks))
        chunks += 1
    received: list[bytes] = []

    async def read() -> None:
        received.append(await anyio.to_thread.run_sync(peer.read_all))

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            await conn.drain()
            assert not conn._backlog
            await conn.aclose()  # EOF ends read_all
    assert len(received[0]) == chunks * CHUNK
    assert received[0] == b"".join(pattern(index) for index in range(chunks))


async def test_a_backlog_stuck_beyond_the_bound_fails_the_flush(
    peer_and_connection: tuple[Peer, Connection],
) -> None:
    _, conn = peer_and_connection
    while not conn._backlog:
        conn.write(pattern(0))
    with anyio.fail_after(5), pytest.raises(TimeoutError):
        await conn.flush_forever(0.2)
