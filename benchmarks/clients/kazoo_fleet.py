"""kazoo's fleet worker (``benchmarks/fleet.py`` starts it; roles and protocol in
``benchmarks.clients.fleet_common``):

    python -P -m benchmarks.clients.kazoo_fleet hosts=... root=... idle=200 ...

kazoo is a blocking client with threads of its own (a connection thread and a callback
thread per client): each session is a ``KazooClient``; each non-idle role runs in a thread
of ours (a kazoo ``Lock`` is not owned by a thread, but its ``acquire`` blocks).
"""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kazoo.client import KazooClient, KazooState  # type: ignore[import-untyped]
from kazoo.exceptions import KazooException  # type: ignore[import-untyped]

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

#: What a role's attempt may raise during a fault (kazoo's errors, a lost socket, a timeout).
FAILURES = (KazooException, OSError, TimeoutError)


class Fleet:
    def __init__(self, params: FleetParams) -> None:
        self.params = params
        self.slots = plan(params)
        self.tally = Tally()
        self.sizes = line_sizes(self.slots)
        self.clients: dict[int, KazooClient] = {}
        self.locks: dict[int, Any] = {}
        self.in_role = {slot.index: threading.Event() for slot in self.slots}
        self.held = {line: threading.Event() for line in self.sizes}
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []

    def connect(self, slot: Slot) -> None:
        client = KazooClient(hosts=self.params.hosts, timeout=self.params.session_timeout)
        client.add_listener(lambda state: self._on_state(slot, state))
        client.start(timeout=CONNECT_TIMEOUT_S)
        self.clients[slot.index] = client

    def _on_state(self, slot: Slot, state: str) -> None:
        if state == KazooState.LOST and self.tally.mark_ns is not None:
            slot.lost += 1

    def start_roles(self) -> None:
        for slot in self.slots:
            if slot.kind == "idle":
                self.in_role[slot.index].set()
                continue
            self.locks[slot.index] = self.clients[slot.index].Lock(slot.path)
            thread = threading.Thread(target=getattr(self, slot.kind), args=(slot,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def anchor(self, slot: Slot) -> None:
        lock = self.locks[slot.index]
        while not self.stopping.is_set():
            held = False
            try:
                with lock:
                    held = True
                    if not self.held[slot.line].is_set():
                        self.held[slot.line].set()
                        self._line_in_place(slot)
                    self.stopping.wait()
            except FAILURES as exc:
                if self.stopping.is_set():  # cancelled by stop_roles
                    return
                self.tally.count("anchor lost" if held else f"anchor retry: {type(exc).__name__}")
                time.sleep(RETRY_S)

    def _line_in_place(self, slot: Slot) -> None:
        """The line's children counted until all are there (a kazoo holder's body is not
        interrupted by a loss: counting inside it is safe)."""
        client = self.clients[slot.index]
        while True:
            try:
                if len(client.get_children(slot.path)) >= self.sizes[slot.line]:
                    break
            except FAILURES:
                pass  # a connection loss at setup: count again
            time.sleep(POLL_S)
        for other in self.slots:
            if other.line == slot.line:
                self.in_role[other.index].set()

    def queued(self, slot: Slot) -> None:
        self.held[slot.line].wait()
        lock = self.locks[slot.index]
        while not self.stopping.is_set():
            try:
                if lock.acquire():  # False once cancelled (stop)
                    self.tally.count("queued granted")
                    self.stopping.wait()
                    lock.release()
            except FAILURES as exc:
                if self.stopping.is_set():  # cancelled by stop_roles
                    return
                self.tally.count(f"queued failed: {type(exc).__name__}")
                time.sleep(RETRY_S)

    def cycler(self, slot: Slot) -> None:
        lock = self.locks[slot.index]
        hold = self.params.hold_ms / 1000
        while not self.stopping.is_set():
            try:
                if not lock.acquire():
                    continue
                enter = time.monotonic_ns()
                time.sleep(hold)
                self.tally.section(slot.shared, enter, time.monotonic_ns())
                lock.release()
                self.in_role[slot.index].set()
            except FAILURES as exc:
                if self.stopping.is_set():  # cancelled by stop_roles
                    return
                self.tally.count(f"cycle failed: {type(exc).__name__}")
                time.sleep(RETRY_S)

    def session_ids(self) -> list[int]:
        ids = []
        for slot in self.slots:
            client = self.clients.get(slot.index)
            found = client.client_id if client is not None else None
            ids.append(found[0] if found else 0)
        return ids

    def stop_roles(self) -> None:
        self.stopping.set()
        for lock in self.locks.values():
            lock.cancel()  # a waiting acquire returns False
        for thread in self.threads:
            thread.join(30)

    def close(self) -> None:
        with ThreadPoolExecutor(self.params.connect_batch) as pool:
            list(pool.map(_close, self.clients.values()))


def _close(client: KazooClient) -> None:
    try:
        client.stop()
    finally:
        client.close()


def command(expected: str) -> None:
    line = sys.stdin.readline().strip()
    if line != expected:
        raise SystemExit(f"expected {expected!r} on stdin, got {line!r}")


def main(params: FleetParams) -> None:
    fleet = Fleet(params)
    start = time.monotonic()
    try:
        with ThreadPoolExecutor(params.connect_batch) as pool:
            list(pool.map(fleet.connect, fleet.slots))
        fleet.start_roles()
        for event in fleet.in_role.values():
            if not event.wait(600):
                raise SystemExit("a session did not take its role within 600 s")
        emit("ready", sessions=len(fleet.slots), in_role_s=round(time.monotonic() - start, 3))
        command("mark")
        fleet.tally.mark()
        for slot, sid in zip(fleet.slots, fleet.session_ids(), strict=True):
            slot.id_at_mark = sid
        emit("marked")
        command("stop")
        for slot, sid in zip(fleet.slots, fleet.session_ids(), strict=True):
            slot.id_at_stop = sid
        fleet.stop_roles()
        emit("result", **result_fields(fleet.slots, fleet.tally))
    finally:
        fleet.close()


if __name__ == "__main__":
    main(FleetParams.from_words(sys.argv[1:]))
