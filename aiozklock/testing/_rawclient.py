"""A tiny raw ZooKeeper connection on anyio streams, for the test kit itself.

Not a general client: one connection, no reconnects, no retries, one request at a time
(pipelining is possible with :meth:`RawZooKeeperConnection.send` and
:meth:`~RawZooKeeperConnection.read_reply`). It exists so that tests have an *independent*
observer of server state, and so :func:`~aiozklock.testing.expire_session` can re-attach to
somebody else's session. Records come from ``aiozk.protocol`` (untyped, hence ``Any``).
Runs on asyncio and trio.
"""

from __future__ import annotations

import logging
import struct
import time
from types import TracebackType
from typing import Any

import anyio
from aiozk import protocol as _protocol
from anyio.abc import SocketStream

from ._rawclient_records import (
    CloseReason,
    NodeStat,
    RawConnectionClosed,
    RawReply,
    RawSessionExpired,
    RawWatchEvent,
    RawZooKeeperError,
    ZooKeeperErrorCode,
    _stat,
)

__all__ = ["RawZooKeeperConnection"]

logger = logging.getLogger(__name__)

proto: Any = _protocol  # aiozk is untyped; keep the Any in one place

_LENGTH = struct.Struct("!i")
_REPLY_HEADER = struct.Struct("!iqi")  # xid, zxid, err
_WATCH_XID = -1
_PING_XID = -2
_DEFAULT_TIMEOUT = 5.0


def split_hosts(hosts: str) -> list[tuple[str, int]]:
    """``"h1:p1,h2:p2"`` → ``[(h1, p1), (h2, p2)]``."""
    result = []
    for entry in hosts.split(","):
        host, sep, port = entry.strip().rpartition(":")
        if not sep:
            raise ValueError(f"expected host:port, got {entry!r}")
        result.append((host or "127.0.0.1", int(port)))
    return result


class RawZooKeeperConnection:
    """One raw ZooKeeper connection and session. Create with :meth:`open`.

    As an async context manager it closes the session on exit (best effort, bounded), so
    its ephemeral nodes go away at once.
    """

    def __init__(self, stream: SocketStream, address: str, request_timeout: float) -> None:
        self._stream = stream
        self.address = address
        #: Bound on each request/reply round trip (wrap waits in ``anyio.fail_after``).
        self.request_timeout = request_timeout
        self.session_id = 0
        self.password = b""
        self.negotiated_timeout_ms = 0
        self.last_zxid = 0
        self.watch_events: list[RawWatchEvent] = []
        self.closed_reason: CloseReason | None = None
        self._buffer = bytearray()
        self._next_xid = 1
        self._opcodes: dict[int, int] = {}

    def __repr__(self) -> str:
        return f"<RawZooKeeperConnection {self.address} session=0x{self.session_id:x}>"

    @classmethod
    async def open(
        cls,
        address: str,
        *,
        session_timeout_ms: int = 10_000,
        session_id: int = 0,
        password: bytes = b"\x00" * 16,
        request_timeout: float = _DEFAULT_TIMEOUT,
    ) -> RawZooKeeperConnection:
        """Connect to the first server of ``address`` and handshake.

        Pass ``session_id``/``password`` to re-attach to an existing session (raises
        :class:`RawSessionExpired` if the server refuses). ``request_timeout`` bounds the
        connect+handshake and then every request (``TimeoutError``).
        """
        host, port = split_hosts(address)[0]
        with anyio.fail_after(request_timeout):
            stream = await anyio.connect_tcp(host, port)
            conn = cls(stream, f"{host}:{port}", request_timeout)
            try:
                await conn._handshake(session_timeout_ms, session_id, password)
            except BaseException:
                with anyio.CancelScope(shield=True):  # close even when cancelled/timed out
                    await conn.aclose()
                raise
        return conn

    async def _handshake(self, timeout_ms: int, session_id: int, password: bytes) -> None:
        request = proto.ConnectRequest(
            protocol_version=0,
            last_seen_zxid=0,
            timeout=timeout_ms,
            session_id=session_id,
            password=password,
            read_only=False,
        )
        await self._send_frame(request.serialize())
        frame = await self._read_frame()
        # A trailing read_only byte may follow; the parser ignores it.
        response = proto.ConnectResponse.deserialize(frame)
        if int(response.timeout) <= 0:
            raise RawSessionExpired(
                f"server refused session 0x{session_id:x} (expired or wrong password)"
            )
        self.session_id = int(response.session_id)
        self.password = bytes(response.password)
        self.negotiated_timeout_ms = int(response.timeout)
        logger.debug("%r: connected, timeout %d ms", self, self.negotiated_timeout_ms)

    async def __aenter__(self) -> RawZooKeeperConnection:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.closed_reason is None:
            try:
                with anyio.move_on_after(2.0, shield=True):
                    await self.close_session()
            except (RawConnectionClosed, RawZooKeeperError, OSError):
                pass
        await self.aclose()

    @property
    def is_closed(self) -> bool:
        return self.closed_reason is not None

    async def aclose(self) -> None:
        """Close the socket without closing the session (the session lives on until it
        times out, as after a client crash)."""
        if self.closed_reason is None:
            self.closed_reason = "closed"
        await self._stream.aclose()

    # --- low level --------------------------------------------------------------------

    async def _send_frame(self, payload: bytes) -> None:
        if self.closed_reason is not None:
            raise RawConnectionClosed(self.closed_reason)
        try:
            await self._stream.send(_LENGTH.pack(len(payload)) + payload)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            self.closed_reason = self.closed_reason or "reset"
            raise RawConnectionClosed(self.closed_reason) from exc

    async def _read_frame(self) -> bytes:
        # anyio's receive() is cancellation-safe, and partial frames stay in the buffer,
        # so a timeout around this never loses bytes.
        while True:
            if len(self._buffer) >= 4:
                (length,) = _LENGTH.unpack_from(self._buffer)
                if len(self._buffer) >= 4 + length:
                    frame = bytes(self._buffer[4 : 4 + length])
                    del self._buffer[: 4 + length]
                    return frame
            if self.closed_reason is not None:
                raise RawConnectionClosed(self.closed_reason)
            try:
                chunk = await self._stream.receive()
            except anyio.EndOfStream:
                self.closed_reason = "eof"
                raise RawConnectionClosed("eof") from None
            except (anyio.BrokenResourceError, OSError) as exc:
                self.closed_reason = "reset"
                raise RawConnectionClosed("reset") from exc
            except anyio.ClosedResourceError:
                self.closed_reason = self.closed_reason or "closed"
                raise RawConnectionClosed(self.closed_reason) from None
            self._buffer += chunk

    async def _read_reply(self) -> RawReply:
        """The next reply of any kind; watch events are recorded and returned too."""
        frame = await self._read_frame()
        now = time.monotonic()
        xid, zxid, err = _REPLY_HEADER.unpack_from(frame)
        body = frame[_REPLY_HEADER.size :]
        if zxid > 0:
            self.last_zxid = max(self.last_zxid, zxid)
        response: Any = None
        if xid == _WATCH_XID:
            response = proto.WatchEvent.deserialize(body)
            event = RawWatchEvent(int(response.type), int(response.state), str(response.path), now)
            self.watch_events.append(event)
            logger.debug("%r: watch event %s", self, event)
        elif err == 0 and xid != _PING_XID:
            opcode = self._opcodes.pop(xid, None)
            if opcode is not None:
                response = proto.response_xref[opcode].deserialize(body)
        else:
            self._opcodes.pop(xid, None)
        return RawReply(xid, zxid, err, response, now)

    async def send(self, request: Any, xid: int | None = None) -> int:
        """Send one ``aiozk.protocol`` request without waiting; returns its xid."""
        if xid is None:
            xid = self._next_xid
            self._next_xid += 1
        self._opcodes[xid] = int(request.opcode)
        await self._send_frame(request.serialize(xid))
        return xid

    async def read_reply(self, xid: int) -> RawReply:
        """Read until the reply with ``xid``, recording watch events on the way."""
        with anyio.fail_after(self.request_timeout):
            while True:
                reply = await self._read_reply()
                if reply.xid == xid:
                    return reply
                if reply.xid not in (_WATCH_XID, _PING_XID):
                    logger.warning("%r: unexpected reply xid %d", self, reply.xid)

    async def request(self, request: Any) -> RawReply:
        """Send ``request`` and return its reply (``err`` may be non-zero)."""
        xid = await self.send(request)
        return await self.read_reply(xid)

    async def _call(self, request: Any, path: str | None) -> Any:
        reply = await self.request(request)
        if reply.err:
            raise RawZooKeeperError(reply.err, path)
        return reply.response

    # --- typed helpers ----------------------------------------------------------------

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> str:
        """Create a node (world-readable/writable ACL); returns the created path."""
        request = proto.CreateRequest(
            path=path, data=data, acl=[proto.UNRESTRICTED_ACCESS], flags=0
        )
        request.set_flags(ephemeral=ephemeral, sequential=sequential)
        response = await self._call(request, path)
        return str(response.path)

    async def exists(self, path: str, *, watch: bool = False) -> NodeStat | None:
        """The node's stat, or ``None`` if it does not exist (a watch is set either way)."""
        reply = await self.request(proto.ExistsRequest(path=path, watch=watch))
        if reply.err == ZooKeeperErrorCode.NO_NODE:
            return None
        if reply.err:
            raise RawZooKeeperError(reply.err, path)
        return _stat(reply.response.stat)

    async def get_data(self, path: str, *, watch: bool = False) -> tuple[bytes, NodeStat]:
        response = await self._call(proto.GetDataRequest(path=path, watch=watch), path)
        return bytes(response.data or b""), _stat(response.stat)

    async def get_children(self, path: str, *, watch: bool = False) -> list[str]:
        request = proto.GetChildrenRequest(path=path, watch=watch)
        response = await self._call(request, path)
        return sorted(str(child) for child in response.children)

    async def delete(self, path: str, version: int = -1) -> None:
        await self._call(proto.DeleteRequest(path=path, version=version), path)

    async def ping(self) -> None:
        """Send a ping (xid -2) and wait for its reply: keeps the session alive."""
        xid = await self.send(proto.PingRequest(), xid=_PING_XID)
        await self.read_reply(xid)

    async def close_session(self) -> None:
        """closeSession: the server deletes the session's ephemerals and then closes the
        connection. Waits for the reply, then closes the socket."""
        try:
            reply = await self.request(proto.CloseRequest())
            if reply.err:
                raise RawZooKeeperError(reply.err)
        finally:
            await self.aclose()

    # --- waiting ----------------------------------------------------------------------

    async def wait_for_event(
        self,
        *,
        path: str | None = None,
        type: int | None = None,
    ) -> RawWatchEvent:
        """The first watch event (already recorded or arriving) matching ``path`` and
        ``type``; consumed from :attr:`watch_events`. Pings while waiting, so the session
        survives long waits. Unbounded: wrap it in ``anyio.fail_after``."""
        interval = max(self.negotiated_timeout_ms / 3000, 0.1)
        while True:
            for event in self.watch_events:
                if (path is None or event.path == path) and (type is None or event.type == type):
                    self.watch_events.remove(event)
                    return event
            with anyio.move_on_after(interval) as scope:
                await self._read_reply()
            if scope.cancelled_caught:
                await self.send(proto.PingRequest(), xid=_PING_XID)

    async def wait_closed(self) -> CloseReason:
        """Read (recording watch events) until the server side closes the connection;
        returns how: ``"eof"`` or ``"reset"``. Unbounded: wrap it in ``anyio.fail_after``."""
        while True:
            try:
                await self._read_reply()
            except RawConnectionClosed as exc:
                return exc.reason
