"""The byte stream of one ZooKeeper connection: synchronous writes with a backlog, reads
straight from the socket (in the loop's reader callback on asyncio), the frame reader used
during the handshake, and TLS over the same socket (``TLSConnection``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import sys
from collections.abc import Callable

import anyio
import anyio.abc

from aiozklock._wire import _protocol as proto
from aiozklock._wire._diagnose import not_zookeeper

_RECEIVE_SIZE = 65536
# Where readiness honours a socket's low-water mark: epoll does (select and poll too).
_LOW_WATER = sys.platform.startswith("linux") and hasattr(socket, "SO_RCVLOWAT")
STREAM_ERRORS = (
    anyio.EndOfStream,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    OSError,
)


class HandshakeRejected(Exception):
    """The server closed the connection during the handshake (e.g. it lags behind our zxid),
    or answered something that is not ZooKeeper's."""


class TLSRejected(Exception):
    """A TLS failure that retrying the same server cannot cure (its certificate is not
    trusted, the host name does not match, or it refused our certificate); ``__cause__``
    is the ``ssl.SSLError``."""


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
        self._unread = bytearray()  # received by ``read_frame`` beyond the frame it returned
        self._low_water = _LOW_WATER
        self.wake_bytes = 1  # the socket's low-water mark (``wake_after``)

    def wake_after(self, count: int) -> None:
        """Have the reader woken only once ``count`` bytes are unread, or at the stream's
        end or an error (``SO_RCVLOWAT``; the session's rule: ``_wire/_wake.py``). Where the
        mark is not honoured, the reader wakes for any byte, as it does at ``count`` 1."""
        self.wake_bytes = count
        if self._low_water:
            try:
                self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, count)
            except OSError:  # a closed socket: the reader sees it
                self._low_water = False

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

    async def read_frame(self) -> bytes:
        """Read one length-prefixed frame (a handshake answer); ``EndOfStream`` at EOF,
        ``HandshakeRejected`` on a nonsensical length (not a ZooKeeper server: the message
        quotes what it answered)."""
        buffer = self._unread
        while True:
            if len(buffer) >= 4:
                (size,) = proto.LENGTH.unpack_from(buffer, 0)
                if size < 0 or size > 1 << 20:
                    raise HandshakeRejected(not_zookeeper(bytes(buffer)))
                if len(buffer) >= 4 + size:
                    frame = bytes(buffer[4 : 4 + size])
                    del buffer[: 4 + size]
                    return frame
            await anyio.wait_readable(self._socket)
            data = self._receive_now()
            if data is not None:
                buffer += data

    async def read_forever(self, on_data: Callable[[bytes], None]) -> None:
        """Pass every chunk received to ``on_data``; returns only by raising (EOF, a socket
        error, or what ``on_data`` raised)."""
        if self._unread:
            unread, self._unread = bytes(self._unread), bytearray()
            on_data(unread)
        loop = running_asyncio_loop()
        if loop is not None:
            await self._read_in_callback(loop, on_data)  # returns if the loop cannot
        from anyio._core._eventloop import get_async_backend

        # anyio's, looked up once: anyio.wait_readable finds the backend anew on every read.
        wait_readable = get_async_backend().wait_readable
        while True:
            await wait_readable(self._socket)
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

    def forget(self) -> None:
        """Let go of the connection without a word, in a forked child whose parent still
        uses it: this process's descriptors of the socket are pointed at ``/dev/null``. No
        shutdown, no TLS close_notify, no FIN (the parent keeps the socket open); and a
        stale object that still names one of them can only ever close ``/dev/null``."""
        raw = self.stream.extra(anyio.abc.SocketAttribute.raw_socket)
        null = os.open(os.devnull, os.O_RDWR)
        try:
            for fd in (self._socket.fileno(), raw.fileno()):
                if fd >= 0:
                    os.dup2(null, fd)
        finally:
            os.close(null)


class TLSConnection(Connection):
    """TLS over the same non-blocking socket, so that writes stay synchronous: an
    ``ssl.SSLObject`` between two memory BIOs encrypts what ``write`` is given and the
    records go out through the plain backlog; ``_receive_now`` decrypts what the kernel has.
    Only the handshake waits (``handshake``, bounded by the caller)."""

    def __init__(
        self, stream: anyio.abc.SocketStream, context: ssl.SSLContext, server_hostname: str
    ) -> None:
        super().__init__(stream)
        # A record's tail may be all the kernel holds of a frame the TLS object has begun:
        # the byte count behind the session's mark would not hold. Woken for any byte.
        self._low_water = False
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        try:
            self._tls = context.wrap_bio(
                self._incoming, self._outgoing, server_side=False, server_hostname=server_hostname
            )
        except BaseException:
            self._socket.close()  # our duplicate of the descriptor; the caller closes the stream
            raise

    async def handshake(self) -> None:
        """Complete the TLS handshake: ``ssl.SSLError`` if it fails (untrusted or expired
        certificate, host name mismatch, an alert from the server), ``HandshakeRejected`` if
        the server closes the connection, ``OSError`` on a socket error."""
        while True:
            try:
                self._tls.do_handshake()
            except ssl.SSLWantReadError:
                self._send_records()
                await self.drain()
                await anyio.wait_readable(self._socket)
                try:
                    data = Connection._receive_now(self)
                except anyio.EndOfStream:
                    raise HandshakeRejected(
                        "the server closed the connection during the TLS handshake: "
                        "is it a plain port rather than a TLS one (secureClientPort)?"
                    ) from None
                if data is not None:
                    self._incoming.write(data)
            else:
                self._send_records()
                await self.drain()
                return

    def write(self, data: bytes) -> None:
        """Encrypt and write now, or queue behind what is already waiting (raises
        ``OSError``, ``ssl.SSLError`` included)."""
        self._tls.write(data)
        self._send_records()

    def _send_records(self) -> None:
        records = self._outgoing.read()
        if records:
            Connection.write(self, records)

    def _receive_now(self) -> bytes | None:
        """The plaintext of what the kernel has (None if no whole record yet). The TLS
        object may hold more plaintext than one read returns: read until it wants bytes."""
        data = Connection._receive_now(self)
        if data is None:
            return None
        self._incoming.write(data)
        plain, closed = self._decrypt()
        self._send_records()  # e.g. the answer to a key update
        if closed and not plain:
            raise anyio.EndOfStream
        return plain or None  # after the last plaintext, the TCP end follows

    def _decrypt(self) -> tuple[bytes, bool]:
        """All the plaintext the TLS object holds, and whether the server closed TLS.
        Once neither a record nor decrypted bytes are left, another read could only fail:
        it is skipped (a reply is mostly one record)."""
        plain = bytearray()
        incoming, tls = self._incoming, self._tls
        try:
            while chunk := tls.read(_RECEIVE_SIZE):
                plain += chunk
                if not incoming.pending and not tls.pending():
                    return bytes(plain), False
        except ssl.SSLWantReadError:
            return bytes(plain), False
        except ssl.SSLZeroReturnError:
            pass
        return bytes(plain), True


def is_tls_rejection(exc: BaseException) -> bool:
    """A TLS failure that retrying cannot cure (a verification failure or an alert), as
    opposed to the connection ending in the middle of it."""
    transient = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)
    return isinstance(exc, ssl.SSLError) and not isinstance(exc, transient)


def describe_tls_failure(exc: ssl.SSLError) -> str:
    """What went wrong, in words: the verification failure, or the server's alert."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the server's certificate was not accepted: {exc.verify_message}"
    if "ALERT" in str(exc.reason):
        return f"the server refused the handshake ({exc.reason}; a client certificate needed?)"
    return f"{exc.reason or exc}"


async def open_connection(host: str, port: int, tls: ssl.SSLContext | None) -> Connection:
    """Connect to ``host:port``, with a completed TLS handshake (server name ``host``) if
    ``tls`` is given; the caller bounds the time. Raises what ``connect_tcp`` and
    ``TLSConnection.handshake`` raise, leaving nothing open."""
    stream = await anyio.connect_tcp(host, port)
    conn: Connection | None = None
    try:
        if tls is None:
            return Connection(stream)
        conn = TLSConnection(stream, tls, host)
        await conn.handshake()
        return conn
    except BaseException:
        if conn is not None:
            await conn.aclose()
        else:
            await close_quietly(stream)
        raise


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


async def close_quietly(stream: anyio.abc.ByteStream) -> None:
    with anyio.CancelScope(shield=True), anyio.move_on_after(0.5), contextlib.suppress(Exception):
        await stream.aclose()
