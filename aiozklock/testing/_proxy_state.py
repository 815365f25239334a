"""The FaultProxy's state between its API and its pump: the faults in force (set by
:class:`~._proxy.FaultProxy`'s fault methods, obeyed by the pump as it forwards: see
:mod:`._proxy_pump`) and what it observed (fed by the pump for each frame, read through the
proxy's observation attributes). One per proxy; used from the event loop thread that
entered it.
"""

from __future__ import annotations

import contextlib
import logging
import struct
import time
from typing import Literal

import anyio

from ._proxy_records import ObservedHandshake, ObservedRequest, _Arm, _Waiter

__all__ = ["ProxyState"]

# The proxy's own logger: what it observed is logged as the proxy's, as its API's lines are.
logger = logging.getLogger("aiozklock.testing._proxy")

_CONNECT_REQUEST = struct.Struct("!iqiq")  # protocol_version, last_zxid, timeout, session_id
_CONNECT_RESPONSE = struct.Struct("!iiq")  # protocol_version, timeout, session_id


class ProxyState:
    """One proxy's faults and observations (see the module docstring)."""

    def __init__(self) -> None:
        #: the proxy's listening address, for log lines ("" until it is entered)
        self.address = ""
        # faults
        self.blackholed = False
        self.new_mode: Literal["hang", "refuse"] = "hang"
        self.lifted: anyio.Event | None = None
        self.one_way = False
        self.chatter = 0.0
        self.one_way_changed: anyio.Event | None = None  # set (and replaced) at each change
        self.delay = 0.0
        self.delay_changed: anyio.Event | None = None
        self.armed: _Arm | None = None
        self.waiters: list[_Waiter] = []
        # observation (all reset by reset)
        self.requests: list[ObservedRequest] = []
        self.connect_requests: list[ObservedHandshake] = []
        self.connect_responses: list[ObservedHandshake] = []
        self.four_letter_words: list[str] = []
        self.connections_accepted = 0
        self.swallowed_replies = 0
        self.notifications = 0
        self.lost_to_cut = 0

    def start(self) -> None:
        """The events the pump waits on, made in the event loop that enters the proxy."""
        self.lifted = anyio.Event()
        self.lifted.set()
        self.one_way_changed = anyio.Event()
        self.delay_changed = anyio.Event()

    # --- what the pump waits for --------------------------------------------------------

    async def wait_lifted(self) -> None:
        """Until no partition (black-hole) is on."""
        while self.blackholed and self.lifted is not None:
            await self.lifted.wait()

    async def wait_one_way_healed(self) -> None:
        """Until no one-way cut is on."""
        while self.one_way and self.one_way_changed is not None:
            await self.one_way_changed.wait()

    async def wait_delay(self, received: float) -> None:
        """Until the delay in force has passed since ``received`` (re-timed if it changes)."""
        while True:
            remaining = received + self.delay - time.monotonic()
            if remaining <= 0 or self.delay_changed is None:
                return
            with anyio.move_on_after(remaining):
                await self.delay_changed.wait()

    # --- observation ----------------------------------------------------------------------

    def count(self, opcode: int | None = None) -> int:
        """Requests seen since the last reset, of ``opcode`` or of any opcode."""
        if opcode is None:
            return len(self.requests)
        return sum(1 for request in self.requests if request.opcode == opcode)

    async def wait_for_request(self, opcode: int, count: int) -> None:
        """Until at least ``count`` requests of ``opcode`` were seen since the last reset."""
        if self.count(opcode) >= count:
            return
        waiter = _Waiter(opcode, count, anyio.Event())
        self.waiters.append(waiter)
        try:
            await waiter.event.wait()
        finally:
            with contextlib.suppress(ValueError):
                self.waiters.remove(waiter)

    def reset(self) -> None:
        """Forget every observation so far."""
        self.requests.clear()
        self.connect_requests.clear()
        self.connect_responses.clear()
        self.four_letter_words.clear()
        self.connections_accepted = 0
        self.swallowed_replies = 0
        self.notifications = 0
        self.lost_to_cut = 0

    def observe_connect_request(self, index: int, frame: bytes, now: float) -> None:
        """Connection ``index``'s ConnectRequest ``frame``, received at ``now``."""
        if len(frame) >= 4 + _CONNECT_REQUEST.size:
            _, _, timeout, session_id = _CONNECT_REQUEST.unpack_from(frame, 4)
            self.connect_requests.append(ObservedHandshake(index, session_id, timeout, now))

    def observe_connect_response(self, index: int, frame: bytes, now: float) -> None:
        """Connection ``index``'s ConnectResponse ``frame``, received at ``now``."""
        if len(frame) >= 4 + _CONNECT_RESPONSE.size:
            _, timeout, session_id = _CONNECT_RESPONSE.unpack_from(frame, 4)
            self.connect_responses.append(ObservedHandshake(index, session_id, timeout, now))
            logger.debug(
                "FaultProxy %s: #%d session 0x%x timeout %d ms",
                self.address,
                index,
                session_id,
                timeout,
            )

    def observe_request(self, request: ObservedRequest) -> bool | None:
        """A request after the handshake. Returns, if an armed drop targets its reply,
        whether to reset the connection after swallowing it; None otherwise."""
        self.requests.append(request)
        armed, dropped = self.armed, None
        if armed is not None and request.opcode in armed.opcodes:
            armed.remaining -= 1
            if armed.remaining == 0:
                self.armed = None
                dropped = armed.reset
                logger.info(
                    "FaultProxy %s: will swallow the reply to xid %d (opcode %d) on #%d",
                    self.address,
                    request.xid,
                    request.opcode,
                    request.connection_index,
                )
        for waiter in list(self.waiters):
            if waiter.opcode == request.opcode and self.count(waiter.opcode) >= waiter.count:
                self.waiters.remove(waiter)
                waiter.event.set()
        return dropped
