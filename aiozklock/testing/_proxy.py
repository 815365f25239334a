"""FaultProxy: a ZooKeeper-aware TCP proxy that injects network faults for one client.

The client under test connects to :attr:`FaultProxy.address` instead of the server. The
proxy splits both byte streams into ZooKeeper frames (4-byte big-endian length + payload),
so it can record every request (xid, opcode), the session ids handed out, and drop exactly
the reply to one request ("request executed, response lost"), with the connection reset or
going on, or lose every request while the server's frames still arrive (a one-way cut).

This module has its API (lifecycle, faults, observation) and its records of what it saw;
the connections themselves are pumped by :mod:`._proxy_pump`, and the record types are in
:mod:`._proxy_records`. Runs on asyncio and trio via anyio. All methods must be called from
the event loop thread that entered the proxy.
"""

from __future__ import annotations

import contextlib
import logging
import struct
from collections.abc import Iterable
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Literal

import anyio
from anyio.abc import SocketAttribute, TaskGroup

from ._proxy_pump import _Connection, _Pump
from ._proxy_records import ObservedHandshake, ObservedRequest, Opcode, _Arm, _Waiter

__all__ = ["FaultProxy"]

logger = logging.getLogger(__name__)

_CONNECT_REQUEST = struct.Struct("!iqiq")  # protocol_version, last_zxid, timeout, session_id
_CONNECT_RESPONSE = struct.Struct("!iiq")  # protocol_version, timeout, session_id


def _split_upstream(upstream: str) -> tuple[str, int]:
    first = upstream.split(",")[0].strip()
    host, sep, port = first.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"upstream must be host:port, got {upstream!r}")
    return host or "127.0.0.1", int(port)


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
        self._pump = _Pump(self)
        # fault state
        self._blackholed = False
        self._one_way = False
        self._chatter = 0.0
        self._one_way_changed: anyio.Event | None = None  # set (and replaced) at each change
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
        #: watch notifications the server sent (frames with xid -1), on every connection
        self.notifications = 0
        #: frames (or, unframed, chunks of bytes) from the client lost to a one-way cut
        self.lost_to_cut = 0

    def __repr__(self) -> str:
        return f"<FaultProxy {self.address or '(not started)'} -> {self.upstream}>"

    # --- lifecycle --------------------------------------------------------------------

    async def __aenter__(self) -> FaultProxy:
        if self._exit_stack is not None:
            raise RuntimeError("FaultProxy is already running")
        self._lifted = anyio.Event()
        self._lifted.set()
        self._one_way_changed = anyio.Event()
        self._delay_changed = anyio.Event()
        async with AsyncExitStack() as stack:
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
            stack.push_async_callback(listener.aclose)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._tg.cancel_scope.cancel)  # runs first on exit
            self.port = listener.extra(SocketAttribute.local_port)
            self.address = f"127.0.0.1:{self.port}"
            self._tg.start_soon(listener.serve, self._pump.handle, self._tg)
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
        self.one_way_cut(False)
        result = await stack.__aexit__(exc_type, exc, tb)
        logger.info("FaultProxy %s closed", self.address)
        return result

    # --- faults -----------------------------------------------------------------------

    async def drop_all(self, rst: bool = True) -> None:
        """Close every live connection on both sides, and wait until they are closed.

        ``rst=True`` resets them (SO_LINGER 0, the peer sees ECONNRESET); ``rst=False``
        closes them with FIN (the peer sees EOF). Held or parked frames are discarded.
        """
        conns = list(self._pump.conns.values())
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

    def one_way_cut(self, on: bool, *, chatter: float = 0.0) -> None:
        """Start (``on=True``) or heal (``on=False``) a one-way cut: a half-open path.

        While on, every frame the client sends is **lost** (discarded, never delivered: the
        server does not read it, so it does not touch the session), while everything the
        server sends is still delivered, and the client's sockets stay open: the server
        closing a connection (e.g. when it expires the session) reaches the client only when
        the cut heals, as when its FIN is stuck behind data that the client can no longer
        acknowledge. The client hears the replies to what it sent before the cut and its
        watch events, nothing else, and no end.

        New connections made during the cut are accepted and connected upstream, and what
        their clients send is lost too: their handshakes go unanswered. A client closing its
        side still closes the connection. Healing delivers nothing that was lost, and resets
        (both sides) every connection that lost something: a TCP stream has no gaps, so a
        connection cannot go on past lost bytes (one that lost nothing goes on). Frames
        received before the cut (held by a black-hole or a delay) are still delivered. Lost
        requests are still recorded in :attr:`requests`; ``lost_to_cut`` counts the lost
        frames (over TLS, which the proxy passes through unframed: chunks of bytes).

        ``chatter`` (seconds, > 0): while the cut lasts, the proxy also writes a watch
        notification (``NodeDataChanged`` of ``/aiozklock-one-way-cut-chatter``, which nobody
        watches) to the client of every connection whose handshake was answered, that often:
        a stand-in for the watch events a busy session keeps hearing, which prove nothing
        about the session. Framed (plain) connections only.
        """
        if chatter < 0:
            raise ValueError("chatter must be >= 0")
        chatter = chatter if on else 0.0
        if (on, chatter) == (self._one_way, self._chatter):
            return
        self._one_way, self._chatter = on, chatter
        changed, self._one_way_changed = self._one_way_changed, anyio.Event()
        if changed is not None:
            changed.set()
        if not on:
            for conn in self._pump.conns.values():
                if conn.lost_to_cut:
                    conn.abort(rst=True)
        logger.info("FaultProxy %s: one-way cut %s (chatter %g s)", self.address, on, chatter)

    @property
    def one_way_cut_active(self) -> bool:
        """Whether a one-way cut is on (:meth:`one_way_cut`)."""
        return self._one_way

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
        return len(self._pump.conns)

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
        """Forget every observation so far (requests, handshakes, connection count,
        notifications, lost frames).
        Connection indexes keep counting, so they stay unique."""
        self.requests.clear()
        self.connect_requests.clear()
        self.connect_responses.clear()
        self.four_letter_words.clear()
        self.connections_accepted = 0
        self.swallowed_replies = 0
        self.notifications = 0
        self.lost_to_cut = 0

    # --- observation helpers, called by the pump for each frame -----------------------

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
