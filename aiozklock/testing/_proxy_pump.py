"""The FaultProxy's connection pump: per accepted connection, a reader and a writer per direction.

Frames are read as soon as they arrive (so observation is immediate) and forwarded by a
separate writer per direction, which is where partitions hold them and delays park them;
order is always preserved. The faults in force and the records are the proxy's state
(:class:`~._proxy_state.ProxyState`, which :class:`~._proxy.FaultProxy` sets and reads): the
pump obeys the one and feeds the other.
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket
import struct
import time
from dataclasses import dataclass, field

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ._proxy_records import ObservedRequest
from ._proxy_state import ProxyState

logger = logging.getLogger(__name__)

_LENGTH = struct.Struct("!i")
_REQUEST_HEADER = struct.Struct("!ii")  # xid, opcode
_REPLY_XID = struct.Struct("!i")  # a reply starts with xid, zxid, err
_NOTIFICATION_XID = -1  # a watch notification's
#: The path of the notifications a one-way cut's chatter writes (nobody watches it).
CHATTER_PATH = "/aiozklock-one-way-cut-chatter"


def _notification(path: str) -> bytes:
    """A framed watch notification: xid -1, zxid -1, err 0; NodeDataChanged (3),
    SyncConnected (3), ``path``."""
    encoded = path.encode()
    body = struct.pack("!iqiiii", -1, -1, 0, 3, 3, len(encoded)) + encoded
    return _LENGTH.pack(len(body)) + body


_CHATTER_FRAME = _notification(CHATTER_PATH)
#: Larger "lengths" mean the stream is not ZooKeeper framing; it is then passed through.
_MAX_FRAME = 64 * 1024 * 1024


# --- items travelling from a reader to the writer of the same direction -------------------


@dataclass(frozen=True, slots=True)
class _Data:
    payload: bytes  # a whole frame including its length prefix, or raw bytes
    t: float


class _Eof:
    """The source side closed cleanly (FIN)."""


class _Reset:
    """The source side was reset, or the proxy decided to reset the connection."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


_Item = _Data | _Eof | _Reset


@dataclass(eq=False)
class _Connection:
    index: int
    client: SocketStream
    server: SocketStream | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    closed: anyio.Event = field(default_factory=anyio.Event)
    rst: bool = False  # close with SO_LINGER 0 (RST) instead of FIN
    raw: bool = False  # not ZooKeeper framing (a four-letter word): pass bytes through
    drop_xids: dict[int, bool] = field(default_factory=dict)  # xid -> reset after it
    answered: bool = False  # the server's ConnectResponse was read
    lost_to_cut: bool = False  # a one-way cut lost bytes of the client's: reset at the heal

    def abort(self, *, rst: bool) -> None:
        self.rst = self.rst or rst
        self.scope.cancel()


def _set_rst_on_close(stream: SocketStream) -> None:
    # SO_LINGER with a zero timeout makes close() send RST and discard unsent data.
    with contextlib.suppress(OSError):
        sock = stream.extra(SocketAttribute.raw_socket)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class _Pump:
    """The connections of one :class:`~._proxy.FaultProxy`, accepted by :meth:`handle` and
    connected to ``upstream_host:upstream_port``, under the faults of its ``state``."""

    def __init__(self, state: ProxyState, upstream_host: str, upstream_port: int) -> None:
        self._state = state
        self._upstream = (upstream_host, upstream_port)
        self.conns: dict[int, _Connection] = {}
        self._next_index = 0  # unique over the proxy's life, unlike connections_accepted

    async def handle(self, client: SocketStream) -> None:
        index = self._next_index
        self._next_index += 1
        self._state.connections_accepted += 1
        if self._state.blackholed and self._state.new_mode == "refuse":
            logger.info("FaultProxy %s: refusing connection #%d", self._state.address, index)
            _set_rst_on_close(client)
            await client.aclose()
            return
        conn = _Connection(index, client)
        self.conns[index] = conn
        try:
            with conn.scope:
                await self._pipe(conn)
        finally:
            self.conns.pop(index, None)
            with anyio.CancelScope(shield=True):
                for stream in (conn.client, conn.server):
                    if stream is not None:
                        if conn.rst:
                            _set_rst_on_close(stream)
                        with contextlib.suppress(OSError, anyio.BrokenResourceError):
                            await stream.aclose()
            conn.closed.set()
            logger.debug(
                "FaultProxy %s: connection #%d closed (rst=%s)",
                self._state.address,
                index,
                conn.rst,
            )

    async def _pipe(self, conn: _Connection) -> None:
        c2s_send, c2s_recv = anyio.create_memory_object_stream[_Item](math.inf)
        s2c_send, s2c_recv = anyio.create_memory_object_stream[_Item](math.inf)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._read_client, conn, c2s_send)
            # A hung new connection is not even connected upstream until the partition lifts.
            await self._state.wait_lifted()
            try:
                conn.server = await anyio.connect_tcp(*self._upstream)
            except OSError as exc:
                logger.info("FaultProxy %s: upstream connect failed: %s", self._state.address, exc)
                conn.abort(rst=True)
                return
            tg.start_soon(self._write, conn, c2s_recv, conn.server, True)
            tg.start_soon(self._read_server, conn, conn.server, s2c_send)
            tg.start_soon(self._write, conn, s2c_recv, conn.client, False)
            tg.start_soon(self._chatter, conn, s2c_send.clone())

    async def _chatter(self, conn: _Connection, out: MemoryObjectSendStream[_Item]) -> None:
        """While a one-way cut with chatter lasts: a watch notification to the client every
        ``chatter`` seconds, between whole frames, once its handshake was answered."""
        state = self._state
        with out, contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            while True:
                changed = state.one_way_changed
                assert changed is not None  # set by the proxy's __aenter__
                if state.one_way and state.chatter > 0 and conn.answered and not conn.raw:
                    out.send_nowait(_Data(_CHATTER_FRAME, time.monotonic()))
                    with anyio.move_on_after(state.chatter):
                        await changed.wait()
                else:
                    await changed.wait()

    async def _receive(
        self, stream: SocketStream, out: MemoryObjectSendStream[_Item]
    ) -> bytes | None:
        """One chunk, or ``None`` after queueing the end of the stream."""
        try:
            return await stream.receive()
        except anyio.EndOfStream:
            out.send_nowait(_Eof())
        except (anyio.BrokenResourceError, OSError) as exc:
            out.send_nowait(_Reset(f"reset by peer: {exc!r}"))
        except anyio.ClosedResourceError:
            pass  # we closed it ourselves
        return None

    def _forward(
        self, conn: _Connection, out: MemoryObjectSendStream[_Item], data: bytes, now: float
    ) -> None:
        """Pass ``data`` from the client on, unless a one-way cut loses it."""
        if self._state.one_way:
            self._state.lost_to_cut += 1
            conn.lost_to_cut = True
            return
        out.send_nowait(_Data(data, now))

    async def _read_client(self, conn: _Connection, out: MemoryObjectSendStream[_Item]) -> None:
        buffer = bytearray()
        handshake_done = False
        # BrokenResourceError: the writer of this direction is gone (it failed, the connection
        # is being torn down) while this reader was already resuming with data.
        with out, contextlib.suppress(anyio.BrokenResourceError):
            while (chunk := await self._receive(conn.client, out)) is not None:
                if conn.raw:
                    self._forward(conn, out, chunk, time.monotonic())
                    continue
                buffer += chunk
                if not handshake_done and len(buffer) >= 4 and buffer[:4].isalpha():
                    # A four-letter word such as aiozk's "srvr" probe: not framed.
                    conn.raw = True
                    self._state.four_letter_words.append(buffer[:4].decode("ascii", "replace"))
                    self._forward(conn, out, bytes(buffer), time.monotonic())
                    buffer.clear()
                    continue
                for frame in self._split_frames(conn, buffer):
                    now = time.monotonic()
                    if conn.raw:
                        pass
                    elif not handshake_done:
                        handshake_done = True
                        self._state.observe_connect_request(conn.index, frame, now)
                    elif len(frame) >= 4 + _REQUEST_HEADER.size:
                        xid, opcode = _REQUEST_HEADER.unpack_from(frame, 4)
                        request = ObservedRequest(conn.index, xid, opcode, now)
                        reset = self._state.observe_request(request)
                        if reset is not None:  # an armed drop: its reply is swallowed
                            conn.drop_xids[xid] = reset
                    self._forward(conn, out, frame, now)

    async def _read_server(
        self, conn: _Connection, server: SocketStream, out: MemoryObjectSendStream[_Item]
    ) -> None:
        buffer = bytearray()
        handshake_done = False
        with out, contextlib.suppress(anyio.BrokenResourceError):  # as in _read_client
            while (chunk := await self._receive(server, out)) is not None:
                if conn.raw:
                    out.send_nowait(_Data(chunk, time.monotonic()))
                    continue
                buffer += chunk
                for frame in self._split_frames(conn, buffer):
                    now = time.monotonic()
                    if conn.raw:
                        pass
                    elif not handshake_done:
                        handshake_done = conn.answered = True
                        self._state.observe_connect_response(conn.index, frame, now)
                    elif len(frame) >= 4 + _REPLY_XID.size:
                        (xid,) = _REPLY_XID.unpack_from(frame, 4)
                        if xid == _NOTIFICATION_XID:
                            self._state.notifications += 1
                        reset = conn.drop_xids.pop(xid, None)
                        if reset is not None:
                            self._state.swallowed_replies += 1
                            if not reset:
                                continue
                            out.send_nowait(_Reset(f"swallowed the reply to xid {xid}"))
                            return
                    out.send_nowait(_Data(frame, now))

    def _split_frames(self, conn: _Connection, buffer: bytearray) -> list[bytes]:
        """Remove and return every complete frame at the start of ``buffer``."""
        frames: list[bytes] = []
        while len(buffer) >= 4 and not conn.raw:
            (length,) = _LENGTH.unpack_from(buffer)
            if length < 0 or length > _MAX_FRAME:
                logger.warning(
                    "FaultProxy %s: connection #%d is not ZooKeeper framing "
                    "(length %d); passing it through",
                    self._state.address,
                    conn.index,
                    length,
                )
                conn.raw = True
                break
            if len(buffer) < 4 + length:
                break
            frames.append(bytes(buffer[: 4 + length]))
            del buffer[: 4 + length]
        if conn.raw and buffer:
            frames.append(bytes(buffer))
            buffer.clear()
        return frames

    async def _write(
        self,
        conn: _Connection,
        items: MemoryObjectReceiveStream[_Item],
        dest: SocketStream,
        to_server: bool,
    ) -> None:
        with items:
            async for item in items:
                await self._state.wait_lifted()  # a partition holds everything, markers too
                if not to_server and not isinstance(item, _Data):
                    await self._state.wait_one_way_healed()  # the server's close: one_way_cut
                if isinstance(item, _Reset):
                    logger.info(
                        "FaultProxy %s: resetting connection #%d: %s",
                        self._state.address,
                        conn.index,
                        item.reason,
                    )
                    conn.abort(rst=True)
                    return
                if isinstance(item, _Eof):
                    if to_server:
                        # Half-close: the server answers EOF by closing, which ends the rest.
                        with contextlib.suppress(OSError, anyio.BrokenResourceError):
                            await dest.send_eof()
                    else:
                        conn.abort(rst=False)
                    return
                if to_server:
                    await self._state.wait_delay(item.t)
                    await self._state.wait_lifted()  # a partition may have started meanwhile
                try:
                    await dest.send(item.payload)
                except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                    logger.info(
                        "FaultProxy %s: send failed on #%d: %r",
                        self._state.address,
                        conn.index,
                        exc,
                    )
                    conn.abort(rst=True)
                    return
