"""The byte stream of one ZooKeeper connection: synchronous writes with a backlog, reads
straight from the socket (in the loop's reader callback on asyncio), and the frame reader
used during the handshake."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable

import anyio
import anyio.abc

from aiozklock._wire import _protocol as proto

_RECEIVE_SIZE = 65536
STREAM_ERRORS = (
    anyio.EndOfStream,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    OSError,
)


class HandshakeRejected(Exception):
    """The server closed the connection during the handshake (e.g. it lags behind our zxid)."""


class Connection:
    """One TCP connection to a server.

    anyio's stream connects, reads the handshake answer and closes; everything else goes
    through a duplicate of its descriptor, synchronously: a request is on the wire before its
    caller first yields, and on asyncio replies are read in the loop's reader callback, with
    no task switch and no reader (de)registration per reply. What the kernel does not take
    at once is kept, in order, and flushed by ``drain``.
    """

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        self._socket = socket.socket(fileno=os.dup(raw.fileno()))
        self._socket.setblocking(False)
        self._backlog = bytearray()
        self._backlog_ready = anyio.Event()

    def write(self, data: bytes) -> None:
        """Write now, or queue behind what is already waiting (raises ``OSError``)."""
        if self._backlog:
            self._backlog += data
            return
        try:
            sent = self._socket.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        if sent < len(data):
            self._backlog += data[sent:]
            self._backlog_ready.set()

    async def drain(self) -> None:
        """Return once everything written so far is in the kernel (raises ``OSError``)."""
        while self._backlog:
            await anyio.wait_writable(self._socket)
            try:
                sent = self._socket.send(self._backlog)
            except (BlockingIOError, InterruptedError):
                continue
            del self._backlog[:sent]

    async def flush_forever(self, bound: float) -> None:
        """Drain the backlog whenever there is one; ``TimeoutError`` if it is stuck for
        ``bound`` seconds (the connection is dead)."""
        while True:
            await self._backlog_ready.wait()
            self._backlog_ready = anyio.Event()
            with anyio.fail_after(bound):
                await self.drain()

    def _receive_now(self) -> bytes | None:
        """What the kernel has (None if nothing yet); ``EndOfStream`` at EOF."""
        try:
            data = self._socket.recv(_RECEIVE_SIZE)
        except (BlockingIOError, InterruptedError):
            return None
        if not data:
            raise anyio.EndOfStream
        return data

    async def read_forever(self, on_data: Callable[[bytes], None]) -> None:
        """Pass every chunk received to ``on_data``; returns only by raising (EOF, a socket
        error, or what ``on_data`` raised)."""
        loop = running_asyncio_loop()
        if loop is not None:
            await self._read_in_callback(loop, on_data)  # returns if the loop cannot
        while True:
            await anyio.wait_readable(self._socket)
            data = self._receive_now()
            if data is not None:
                on_data(data)

    async def _read_in_callback(
        self, loop: asyncio.AbstractEventLoop, on_data: Callable[[bytes], None]
    ) -> None:
        """Read in the loop's reader callback; returns at once if the loop has no
        ``add_reader`` (Windows' proactor), else only by raising."""
        ended: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            try:
                data = self._receive_now()
                if data is not None:
                    on_data(data)
            except BaseException as exc:  # handed to the awaiting task
                loop.remove_reader(fd)
                if not ended.done():
                    ended.set_exception(exc)

        fd = self._socket.fileno()
        try:
            loop.add_reader(fd, readable)
        except NotImplementedError:
            return
        try:
            await ended
        finally:
            loop.remove_reader(fd)

    async def aclose(self) -> None:
        self._socket.close()
        await close_quietly(self.stream)


def running_asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop if asyncio runs this task (trio, even as asyncio's guest, is
    not asyncio: its tasks must not be served from asyncio callbacks)."""
    try:
        import sniffio
    except ImportError:  # then trio is not installed either: trio depends on sniffio
        pass
    else:
        try:
            if sniffio.current_async_library() != "asyncio":
                return None
        except sniffio.AsyncLibraryNotFoundError:
            return None
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def read_frame(stream: anyio.abc.ByteStream) -> bytes:
    """Read one length-prefixed frame (a handshake answer) from ``stream``."""
    buffer = bytearray()
    while len(buffer) < 4:
        chunk = await stream.receive()
        buffer += chunk
    (size,) = proto.LENGTH.unpack_from(buffer, 0)
    if size < 0 or size > 1 << 20:
        raise HandshakeRejected(f"bad frame length {size}")
    while len(buffer) < 4 + size:
        buffer += await stream.receive()
    return bytes(buffer[4 : 4 + size])


async def close_quietly(stream: anyio.abc.ByteStream) -> None:
    with anyio.CancelScope(shield=True), anyio.move_on_after(0.5), contextlib.suppress(Exception):
        await stream.aclose()
