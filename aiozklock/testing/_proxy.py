"""FaultProxy: a ZooKeeper-aware TCP proxy that injects network faults for one client.

The client under test connects to :attr:`FaultProxy.address` instead of the server. The
proxy splits both byte streams into ZooKeeper frames (4-byte big-endian length + payload),
so it can record every request (xid, opcode), the session ids handed out, and drop exactly
the reply to one request ("request executed, response lost"), with the connection reset or
going on, or lose every request while the server's frames still arrive (a one-way cut).

This module has its API (lifecycle, faults, observation); the faults in force and what it
saw are kept in :mod:`._proxy_state`, the connections themselves are pumped by
:mod:`._proxy_pump`, and the record types are in :mod:`._proxy_records`. Runs on asyncio and
trio via anyio. All methods must be called from the event loop thread that entered the
proxy.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Literal

import anyio
from anyio.abc import SocketAttribute, TaskGroup

from ._proxy_pump import _Pump
from ._proxy_records import ObservedHandshake, ObservedRequest, Opcode, _Arm
from ._proxy_state import ProxyState

__all__ = ["FaultProxy"]

logger = logging.getLogger(__name__)


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
        self.address = ""
        self.port = 0
        self._exit_stack: AsyncExitStack | None = None
        self._tg: TaskGroup | None = None
        self._state = ProxyState()
        self._pump = _Pump(self._state, *_split_upstream(upstream))

    def __repr__(self) -> str:
        return f"<FaultProxy {self.address or '(not started)'} -> {self.upstream}>"

    # --- lifecycle --------------------------------------------------------------------

    async def __aenter__(self) -> FaultProxy:
        if self._exit_stack is not None:
            raise RuntimeError("FaultProxy is already running")
        self._state.start()
        async with AsyncExitStack() as stack:
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
            stack.push_async_callback(listener.aclose)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._tg.cancel_scope.cancel)  # runs first on exit
            self.port = listener.extra(SocketAttribute.local_port)
            self.address = self._state.address = f"127.0.0.1:{self.port}"
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
        state = self._state
        state.blackholed = False
        if state.lifted is not None:
            state.lifted.set()
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
        state = self._state
        state.new_mode = new
        if on and not state.blackholed:
            state.lifted = anyio.Event()
        elif not on and state.blackholed and state.lifted is not None:
            state.lifted.set()
        state.blackholed = on
        logger.info("FaultProxy %s: blackhole %s (new=%s)", self.address, on, new)

    @property
    def blackholed(self) -> bool:
        return self._state.blackholed

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
        state = self._state
        if (on, chatter) == (state.one_way, state.chatter):
            return
        state.one_way, state.chatter = on, chatter
        changed, state.one_way_changed = state.one_way_changed, anyio.Event()
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
        return self._state.one_way

    def set_delay(self, seconds: float) -> None:
        """Delay every client→server frame by ``seconds`` after its receipt before
        forwarding it; order is preserved. Frames already parked are re-timed, so
        ``set_delay(0)`` releases them at once."""
        if seconds < 0:
            raise ValueError("delay must be >= 0")
        state = self._state
        state.delay = seconds
        if state.delay_changed is not None:
            state.delay_changed.set()
            state.delay_changed = anyio.Event()

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
        armed = self._state.armed = _Arm(frozenset(opcodes), n, reset)
        logger.info(
            "FaultProxy %s: armed drop of reply to request #%d of %s (reset=%s)",
            self.address,
            n,
            sorted(armed.opcodes),
            reset,
        )

    def disarm(self) -> None:
        """Cancel a pending :meth:`arm_drop_after` (a reply already targeted still drops)."""
        self._state.armed = None

    # --- observation ------------------------------------------------------------------

    @property
    def requests(self) -> list[ObservedRequest]:
        """Every client→server frame after the handshake, in order of receipt."""
        return self._state.requests

    @property
    def connect_requests(self) -> list[ObservedHandshake]:
        """Every ConnectRequest the clients sent, in order of receipt."""
        return self._state.connect_requests

    @property
    def connect_responses(self) -> list[ObservedHandshake]:
        """Every ConnectResponse the server sent, in order of receipt."""
        return self._state.connect_responses

    @property
    def four_letter_words(self) -> list[str]:
        """The four-letter words sent instead of a handshake (e.g. aiozk's "srvr" probe)."""
        return self._state.four_letter_words

    @property
    def connections_accepted(self) -> int:
        """TCP connections accepted, including refused ones and four-letter-word probes."""
        return self._state.connections_accepted

    @property
    def swallowed_replies(self) -> int:
        """Replies swallowed by :meth:`arm_drop_after`."""
        return self._state.swallowed_replies

    @property
    def notifications(self) -> int:
        """Watch notifications the server sent (frames with xid -1), on every connection."""
        return self._state.notifications

    @property
    def lost_to_cut(self) -> int:
        """Frames (or, unframed, chunks of bytes) from the client lost to a one-way cut."""
        return self._state.lost_to_cut

    def count(self, opcode: int | None = None) -> int:
        """Requests seen since the last reset, of ``opcode`` or of any opcode."""
        return self._state.count(opcode)

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
        await self._state.wait_for_request(opcode, count)

    def reset_counters(self) -> None:
        """Forget every observation so far (requests, handshakes, connection count,
        notifications, lost frames).
        Connection indexes keep counting, so they stay unique."""
        self._state.reset()
