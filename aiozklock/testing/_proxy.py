"""FaultProxy: a ZooKeeper-aware TCP proxy that injects network faults for one client.

The client under test connects to :attr:`FaultProxy.address` instead of the server. The
proxy splits both byte streams into ZooKeeper frames (4-byte big-endian length + payload),
so it can record every request (xid, opcode), the session ids handed out, and drop exactly
the reply to one request ("request executed, response lost"), with the connection reset or
going on.

Frames are read as soon as they arrive (so observation is immediate) and forwarded by a
separate writer per direction, which is where partitions hold them and delays park them;
order is always preserved. Runs on asyncio and trio via anyio. All methods must be called
from the event loop thread that entered the proxy.
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket
import struct
import time
from collections.abc import Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal, NamedTuple

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = [
    "FaultProxy",
    "ObservedHandshake",
    "ObservedRequest",
    "Opcode",
]

logger = logging.getLogger(__name__)

_LENGTH = struct.Struct("!i")
_REQUEST_HEADER = struct.Struct("!ii")  # xid, opcode
_REPLY_XID = struct.Struct("!i")  # a reply starts with xid, zxid, err
_CONNECT_REQUEST = struct.Struct("!iqiq")  # protocol_version, last_zxid, timeout, session_id
_CONNECT_RESPONSE = struct.Struct("!iiq")  # protocol_version, timeout, session_id
#: Larger "lengths" mean the stream is not ZooKeeper framing; it is then passed through.
_MAX_FRAME = 64 * 1024 * 1024


class Opcode:
    """ZooKeeper request opcodes, for :meth:`FaultProxy.count` and friends."""

    CREATE = 1
    DELETE = 2
    EXISTS = 3
    GET_DATA = 4
    SET_DATA = 5
    GET_ACL = 6
    SET_ACL = 7
    GET_CHILDREN = 8
    SYNC = 9
    PING = 11
    GET_CHILDREN2 = 12
    CHECK = 13
    MULTI = 14
    CREATE2 = 15
    RECONFIG = 16
    CHECK_WATCHES = 17
    REMOVE_WATCHES = 18
    CREATE_CONTAINER = 19
    DELETE_CONTAINER = 20
    CREATE_TTL = 21
    MULTI_READ = 22
    AUTH = 100
    SET_WATCHES = 101
    SASL = 102
    SET_WATCHES2 = 105
    ADD_WATCH = 106
    CLOSE = -11

    #: Every opcode that creates a node (what ``arm_drop_after`` usually targets).
    CREATES = frozenset({CREATE, CREATE2, CREATE_CONTAINER, CREATE_TTL})


class ObservedRequest(NamedTuple):
    """One client→server frame after the handshake, as the proxy received it.

    ``connection_index`` numbers the proxy's connections from 0 in accept order.
    """

    connection_index: int
    xid: int
    opcode: int
    t: float  # time.monotonic() at receipt (before any hold or delay)


class ObservedHandshake(NamedTuple):
    """A ConnectRequest (client→server) or ConnectResponse (server→client)."""

    connection_index: int
    session_id: int
    timeout_ms: int
    t: float


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

    def abort(self, *, rst: bool) -> None:
        self.rst = self.rst or rst
        self.scope.cancel()


@dataclass
class _Arm:
    opcodes: frozenset[int]
    remaining: int
    reset: bool


@dataclass(eq=False)
class _Waiter:
    opcode: int
    count: int
    event: anyio.Event


def _split_upstream(upstream: str) -> tuple[str, int]:
    first = upstream.split(",")[0].strip()
    host, sep, port = first.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"upstream must be host:port, got {upstream!r}")
    return host or "127.0.0.1", int(port)


def _set_rst_on_close(stream: SocketStream) -> None:
    # SO_LINGER with a zero timeout makes close() send RST and discard unsent data.
    with contextlib.suppress(OSError):
        sock = stream.extra(SocketAttribute.raw_socket)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class FaultProxy:
    """A fault-injecting TCP proxy in front of one ZooKeeper client.

    Usage::

        async with FaultProxy(zk_hosts) as proxy:
            client = connect(proxy.address)
            proxy.blackhole(True)
            ...
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self._upstream_host, self._upstream_port = _split_upstream(upstream)
        self.address = ""
        self.port = 0
        self._exit_stack: AsyncExitStack | None = None
        self._tg: TaskGroup | None = None
        self._conns: dict[int, _Connection] = {}
        self._next_index = 0  # unique over the proxy's life, unlike connections_accepted
        # fault state
        self._blackholed = False
        self._new_mode: Literal["hang", "refuse"] = "hang"
        self._lifted: anyio.Event | None = None
        self._delay = 0.0
        self._delay_changed: anyio.Event | None = None
        self._armed: _Arm | None = None
        self._waiters: list[_Waiter] = []
        # observation (all reset by reset_counters)
        #: every client→server frame after the handshake, in order of receipt
        self.requests: list[ObservedRequest] = []
        self.connect_requests: list[ObservedHandshake] = []
        self.connect_responses: list[ObservedHandshake] = []
        self.four_letter_words: list[str] = []  # e.g. aiozk's "srvr" probe
        #: TCP connections accepted, including refused ones and four-letter-word probes
        self.connections_accepted = 0
        #: replies swallowed by arm_drop_after
        self.swallowed_replies = 0

    def __repr__(self) -> str:
        return f"<FaultProxy {self.address or '(not started)'} -> {self.upstream}>"

    # --- lifecycle --------------------------------------------------------------------

    async def __aenter__(self) -> FaultProxy:
        if self._exit_stack is not None:
            raise RuntimeError("FaultProxy is already running")
        self._lifted = anyio.Event()
        self._lifted.set()
        self._delay_changed = anyio.Event()
        async with AsyncExitStack() as stack:
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
            stack.push_async_callback(listener.aclose)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._tg.cancel_scope.cancel)  # runs first on exit
            self.port = listener.extra(SocketAttribute.local_port)
            self.address = f"127.0.0.1:{self.port}"
            self._tg.start_soon(listener.serve, self._handle, self._tg)
            self._exit_stack = stack.pop_all()
        logger.info("FaultProxy %s -> %s listening", self.address, self.upstream)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        stack, self._exit_stack = self._exit_stack, None
        if stack is None:
            return None
        # Unblock held writers so that nothing waits on a fault that no one will lift.
        self._blackholed = False
        if self._lifted is not None:
            self._lifted.set()
        result = await stack.__aexit__(exc_type, exc, tb)
        logger.info("FaultProxy %s closed", self.address)
        return result

    # --- faults -----------------------------------------------------------------------

    async def drop_all(self, rst: bool = True) -> None:
        """Close every live connection on both sides, and wait until they are closed.

        ``rst=True`` resets them (SO_LINGER 0, the peer sees ECONNRESET); ``rst=False``
        closes them with FIN (the peer sees EOF). Held or parked frames are discarded.
        """
        conns = list(self._conns.values())
        logger.info(
            "FaultProxy %s: dropping %d connection(s), rst=%s", self.address, len(conns), rst
        )
        for conn in conns:
            conn.abort(rst=rst)
        for conn in conns:
            await conn.closed.wait()

    def blackhole(self, on: bool, new: Literal["hang", "refuse"] = "hang") -> None:
        """Start (``on=True``) or heal (``on=False``) a partition.

        While on, bytes in both directions are held, not discarded, and delivered in order
        when it lifts, as TCP would after a partition heals; a side that closed meanwhile
        closes the other afterwards. New connections are accepted and then either hang
        (``new="hang"``: not even connected upstream until the partition lifts) or are
        reset immediately (``new="refuse"``).
        """
        if new not in ("hang", "refuse"):
            raise ValueError(f"new must be 'hang' or 'refuse', got {new!r}")
        self._new_mode = new
        if on and not self._blackholed:
            self._lifted = anyio.Event()
        elif not on and self._blackholed and self._lifted is not None:
            self._lifted.set()
        self._blackholed = on
        logger.info("FaultProxy %s: blackhole %s (new=%s)", self.address, on, new)

    @property
    def blackholed(self) -> bool:
        return self._blackholed

    def set_delay(self, seconds: float) -> None:
        """Delay every client→server frame by ``seconds`` after its receipt before
        forwarding it; order is preserved. Frames already parked are re-timed, so
        ``set_delay(0)`` releases them at once."""
        if seconds < 0:
            raise ValueError("delay must be >= 0")
        self._delay = seconds
        if self._delay_changed is not None:
            self._delay_changed.set()
            self._delay_changed = anyio.Event()

    def arm_drop_after(self, opcodes: Iterable[int], n: int = 1, *, reset: bool = True) -> None:
        """Lose the reply to the ``n``-th next client request whose opcode is in
        ``opcodes`` (counted over all connections from now on).

        The request is forwarded and executed by the server; when the server's reply with
        that xid arrives it is swallowed and both sides of that connection are reset. With
        ``reset=False`` the connection goes on and the replies after it are delivered, as
        ZooKeeper may do when it refuses a write of a session that moved to another server
        (no reply to the write, then the replies to the reads sent after it). One-shot;
        arming again replaces a pending arm.
        """
        if n < 1:
            raise ValueError("n must be >= 1")
        self._armed = _Arm(frozenset(opcodes), n, reset)
        logger.info(
            "FaultProxy %s: armed drop of reply to request #%d of %s (reset=%s)",
            self.address,
            n,
            sorted(self._armed.opcodes),
            reset,
        )

    def disarm(self) -> None:
        """Cancel a pending :meth:`arm_drop_after` (a reply already targeted still drops)."""
        self._armed = None

    # --- observation ------------------------------------------------------------------

    def count(self, opcode: int | None = None) -> int:
        """Requests seen since the last reset, of ``opcode`` or of any opcode."""
        if opcode is None:
            return len(self.requests)
        return sum(1 for request in self.requests if request.opcode == opcode)

    @property
    def session_ids(self) -> list[int]:
        """Session id of every ConnectResponse seen (0 = the server refused/expired it)."""
        return [handshake.session_id for handshake in self.connect_responses]

    @property
    def set_watches_seen(self) -> int:
        return self.count(Opcode.SET_WATCHES) + self.count(Opcode.SET_WATCHES2)

    @property
    def live_connections(self) -> int:
        return len(self._conns)

    async def wait_for_request(self, opcode: int, count: int = 1) -> None:
        """Wait until at least ``count`` requests of ``opcode`` have been received since
        the last :meth:`reset_counters` (they may still be held or delayed)."""
        if self.count(opcode) >= count:
            return
        waiter = _Waiter(opcode, count, anyio.Event())
        self._waiters.append(waiter)
        try:
            await waiter.event.wait()
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)

    def reset_counters(self) -> None:
        """Forget every observation so far (requests, handshakes, connection count).
        Connection indexes keep counting, so they stay unique."""
        self.requests.clear()
        self.connect_requests.clear()
        self.connect_responses.clear()
        self.four_letter_words.clear()
        self.connections_accepted = 0
        self.swallowed_replies = 0

    # --- connection handling ----------------------------------------------------------

    async def _handle(self, client: SocketStream) -> None:
        index = self._next_index
        self._next_index += 1
        self.connections_accepted += 1
        if self._blackholed and self._new_mode == "refuse":
            logger.info("FaultProxy %s: refusing connection #%d", self.address, index)
            _set_rst_on_close(client)
            await client.aclose()
            return
        conn = _Connection(index, client)
        self._conns[index] = conn
        try:
            with conn.scope:
                await self._pipe(conn)
        finally:
            self._conns.pop(index, None)
            with anyio.CancelScope(shield=True):
                for stream in (conn.client, conn.server):
                    if stream is not None:
                        if conn.rst:
                            _set_rst_on_close(stream)
                        with contextlib.suppress(OSError, anyio.BrokenResourceError):
                            await stream.aclose()
            conn.closed.set()
            logger.debug(
                "FaultProxy %s: connection #%d closed (rst=%s)", self.address, index, conn.rst
            )

    async def _pipe(self, conn: _Connection) -> None:
        c2s_send, c2s_recv = anyio.create_memory_object_stream[_Item](math.inf)
        s2c_send, s2c_recv = anyio.create_memory_object_stream[_Item](math.inf)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._read_client, conn, c2s_send)
            # A hung new connection is not even connected upstream until the partition lifts.
            await self._wait_lifted()
            try:
                conn.server = await anyio.connect_tcp(self._upstream_host, self._upstream_port)
            except OSError as exc:
                logger.info("FaultProxy %s: upstream connect failed: %s", self.address, exc)
                conn.abort(rst=True)
                return
            tg.start_soon(self._write, conn, c2s_recv, conn.server, True)
            tg.start_soon(self._read_server, conn, conn.server, s2c_send)
            tg.start_soon(self._write, conn, s2c_recv, conn.client, False)

    async def _wait_lifted(self) -> None:
        while self._blackholed and self._lifted is not None:
            await self._lifted.wait()

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

    async def _read_client(self, conn: _Connection, out: MemoryObjectSendStream[_Item]) -> None:
        buffer = bytearray()
        handshake_done = False
        # BrokenResourceError: the writer of this direction is gone (it failed, the connection
        # is being torn down) while this reader was already resuming with data.
        with out, contextlib.suppress(anyio.BrokenResourceError):
            while (chunk := await self._receive(conn.client, out)) is not None:
                if conn.raw:
                    out.send_nowait(_Data(chunk, time.monotonic()))
                    continue
                buffer += chunk
                if not handshake_done and len(buffer) >= 4 and buffer[:4].isalpha():
                    # A four-letter word such as aiozk's "srvr" probe: not framed.
                    conn.raw = True
                    self.four_letter_words.append(buffer[:4].decode("ascii", "replace"))
                    out.send_nowait(_Data(bytes(buffer), time.monotonic()))
                    buffer.clear()
                    continue
                for frame in self._split_frames(conn, buffer):
                    now = time.monotonic()
                    if conn.raw:
                        pass
                    elif not handshake_done:
                        handshake_done = True
                        self._observe_connect_request(conn, frame, now)
                    elif len(frame) >= 4 + _REQUEST_HEADER.size:
                        xid, opcode = _REQUEST_HEADER.unpack_from(frame, 4)
                        self._observe_request(conn, ObservedRequest(conn.index, xid, opcode, now))
                    out.send_nowait(_Data(frame, now))

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
                        handshake_done = True
                        self._observe_connect_response(conn, frame, now)
                    elif len(frame) >= 4 + _REPLY_XID.size:
                        (xid,) = _REPLY_XID.unpack_from(frame, 4)
                        reset = conn.drop_xids.pop(xid, None)
                        if reset is not None:
                            self.swallowed_replies += 1
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
                    self.address,
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
                await self._wait_lifted()  # a partition holds everything, markers included
                if isinstance(item, _Reset):
                    logger.info(
                        "FaultProxy %s: resetting connection #%d: %s",
                        self.address,
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
                    await self._wait_delay(item.t)
                    await self._wait_lifted()  # a partition may have started meanwhile
                try:
                    await dest.send(item.payload)
                except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                    logger.info(
                        "FaultProxy %s: send failed on #%d: %r", self.address, conn.index, exc
                    )
                    conn.abort(rst=True)
                    return

    async def _wait_delay(self, received: float) -> None:
        while True:
            remaining = received + self._delay - time.monotonic()
            if remaining <= 0 or self._delay_changed is None:
                return
            with anyio.move_on_after(remaining):
                await self._delay_changed.wait()

    # --- observation helpers ----------------------------------------------------------

    def _observe_connect_request(self, conn: _Connection, frame: bytes, now: float) -> None:
        if len(frame) >= 4 + _CONNECT_REQUEST.size:
            _, _, timeout, session_id = _CONNECT_REQUEST.unpack_from(frame, 4)
            self.connect_requests.append(ObservedHandshake(conn.index, session_id, timeout, now))

    def _observe_connect_response(self, conn: _Connection, frame: bytes, now: float) -> None:
        if len(frame) >= 4 + _CONNECT_RESPONSE.size:
            _, timeout, session_id = _CONNECT_RESPONSE.unpack_from(frame, 4)
            self.connect_responses.append(ObservedHandshake(conn.index, session_id, timeout, now))
            logger.debug(
                "FaultProxy %s: #%d session 0x%x timeout %d ms",
                self.address,
                conn.index,
                session_id,
                timeout,
            )

    def _observe_request(self, conn: _Connection, request: ObservedRequest) -> None:
        self.requests.append(request)
        armed = self._armed
        if armed is not None and request.opcode in armed.opcodes:
            armed.remaining -= 1
            if armed.remaining == 0:
                self._armed = None
                conn.drop_xids[request.xid] = armed.reset
                logger.info(
                    "FaultProxy %s: will swallow the reply to xid %d (opcode %d) on #%d",
                    self.address,
                    request.xid,
                    request.opcode,
                    conn.index,
                )
        for waiter in list(self._waiters):
            if waiter.opcode == request.opcode and self.count(waiter.opcode) >= waiter.count:
                self._waiters.remove(waiter)
                waiter.event.set()
