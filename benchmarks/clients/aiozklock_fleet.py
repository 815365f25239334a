"""aiozklock's fleet worker (``benchmarks/fleet.py`` starts it; roles and protocol in
``benchmarks.clients.fleet_common``):

    python -P -m benchmarks.clients.aiozklock_fleet hosts=... root=... idle=200 ...

One task per session, one event loop for the worker's sessions. Public API only, so that any
checkout of aiozklock can be measured (the runner puts it first on PYTHONPATH).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import anyio

import aiozklock
from benchmarks.clients.fleet_common import (
    CONNECT_TIMEOUT_S,
    POLL_S,
    RETRY_S,
    FleetParams,
    Slot,
    Tally,
    emit,
    line_sizes,
    plan,
    result_fields,
)

#: Where this aiozklock was imported from (the runner checks it is the checkout asked for).
LIBRARY_FILE = os.path.realpath(aiozklock.__file__)
#: Seconds for every session to connect and take its role.
READY_TIMEOUT_S = 600.0


class Fleet:
    """This worker's sessions and their roles."""

    def __init__(self, params: FleetParams) -> None:
        self.params = params
        self.slots = plan(params)
        self.tally = Tally()
        self.sizes = line_sizes(self.slots)
        self.clients: dict[int, aiozklock.ZooKeeperClient] = {}
        self.in_role = {slot.index: anyio.Event() for slot in self.slots}
        self.held = {line: anyio.Event() for line in self.sizes}  # each line's anchor holds
        self.scopes: dict[int, anyio.CancelScope] = {}
        self.roles_left = len(self.slots)
        self.roles_done = anyio.Event()
        self.closing = anyio.Event()
        self.limiter = anyio.CapacityLimiter(params.connect_batch)

    async def session(self, slot: Slot) -> None:
        """Connect (a few at once), play the role until stopped, stay open until closing."""
        async with AsyncExitStack() as stack:
            async with self.limiter:
                zk = await stack.enter_async_context(
                    aiozklock.connect(
                        self.params.hosts,
                        session_timeout=self.params.session_timeout,
                        connect_timeout=CONNECT_TIMEOUT_S,
                    )
                )
            self.clients[slot.index] = zk
            zk.add_listener(lambda change: self._on_change(slot, change))
            role: Callable[[aiozklock.ZooKeeperClient, Slot], Awaitable[None]] = getattr(
                self, slot.kind
            )
            with anyio.CancelScope() as scope:
                self.scopes[slot.index] = scope
                await role(zk, slot)
            self.roles_left -= 1
            if self.roles_left == 0:
                self.roles_done.set()
            await self.closing.wait()

    def _on_change(self, slot: Slot, change: Any) -> None:
        if change.state.value == "LOST" and self.tally.mark_ns is not None:
            slot.lost += 1

    async def idle(self, zk: aiozklock.ZooKeeperClient, slot: Slot) -> None:
        self.in_role[slot.index].set()
        await anyio.sleep_forever()

    async def anchor(self, zk: aiozklock.ZooKeeperClient, slot: Slot) -> None:
        """Hold the line's lock (re-acquire if it is lost); beside it, once it was held,
        wait for the line's queued sessions to be in place (a loss then must not keep
        the worker from being ready)."""
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._line_in_place, zk, slot)
            lock = zk.lock(slot.path)
            while True:
                held = False
                try:
                    async with lock:
                        held = True
                        self.held[slot.line].set()
                        await anyio.sleep_forever()
                except aiozklock.AiozklockError as exc:
                    lost = "anchor lost" if held else f"anchor retry: {type(exc).__name__}"
                    self.tally.count(lost)
                    await anyio.sleep(RETRY_S)

    async def _line_in_place(self, zk: aiozklock.ZooKeeperClient, slot: Slot) -> None:
        """Once, at setup: the line's children (its anchor and queued sessions) counted
        until all are there. Polled: the public API has no watch on children (older
        checkouts must run this too)."""
        await self.held[slot.line].wait()
        while True:
            try:
                if len(await zk.get_children(slot.path)) >= self.sizes[slot.line]:
                    break
            except aiozklock.AiozklockError:
                pass  # a connection loss at setup: count again
            await anyio.sleep(POLL_S)
        for other in self.slots:
            if other.line == slot.line:
                self.in_role[other.index].set()

    async def queued(self, zk: aiozklock.ZooKeeperClient, slot: Slot) -> None:
        """Wait in the line (after its anchor holds); a grant after mark is counted (the
        anchor lost its lock, or this session lost its place and queued again)."""
        await self.held[slot.line].wait()
        lock = zk.lock(slot.path)
        while True:
            try:
                async with lock:
                    self.tally.count("queued granted")
                    await anyio.sleep_forever()
            except aiozklock.AiozklockError as exc:
                self.tally.count(f"queued failed: {type(exc).__name__}")
                await anyio.sleep(RETRY_S)

    async def cycler(self, zk: aiozklock.ZooKeeperClient, slot: Slot) -> None:
        """Acquire, hold ``hold_ms``, release, again; each section as its body saw it (the
        exit noted when the body ends, cancelled or not)."""
        lock = zk.lock(slot.path)
        hold = self.params.hold_ms / 1000
        while True:
            try:
                async with lock:
                    enter = time.monotonic_ns()
                    try:
                        await anyio.sleep(hold)
                    finally:
                        self.tally.section(slot.shared, enter, time.monotonic_ns())
                self.in_role[slot.index].set()
            except aiozklock.AiozklockError as exc:
                self.tally.count(f"cycle failed: {type(exc).__name__}")
                await anyio.sleep(RETRY_S)

    def session_ids(self) -> list[int]:
        return [
            self.clients[s.index].session_id if s.index in self.clients else 0 for s in self.slots
        ]

    async def stop_roles(self) -> None:
        for scope in self.scopes.values():
            scope.cancel()
        await self.roles_done.wait()


async def command(expected: str) -> None:
    line = await anyio.to_thread.run_sync(sys.stdin.readline)
    if line.strip() != expected:
        raise SystemExit(f"expected {expected!r} on stdin, got {line.strip()!r}")


async def main(params: FleetParams) -> None:
    fleet = Fleet(params)
    start = time.monotonic()
    async with anyio.create_task_group() as tasks:
        for slot in fleet.slots:
            tasks.start_soon(fleet.session, slot)
        with anyio.fail_after(READY_TIMEOUT_S):
            for event in fleet.in_role.values():
                await event.wait()
        emit(
            "ready",
            sessions=len(fleet.slots),
            in_role_s=round(time.monotonic() - start, 3),
            library_file=LIBRARY_FILE,
            version=aiozklock.__version__,
        )
        await command("mark")
        fleet.tally.mark()
        for slot, sid in zip(fleet.slots, fleet.session_ids(), strict=True):
            slot.id_at_mark = sid
        emit("marked")
        await command("stop")
        for slot, sid in zip(fleet.slots, fleet.session_ids(), strict=True):
            slot.id_at_stop = sid
        await fleet.stop_roles()
        emit("result", **result_fields(fleet.slots, fleet.tally))
        fleet.closing.set()


if __name__ == "__main__":
    anyio.run(main, FleetParams.from_words(sys.argv[1:]))
