"""The demo's race: workers, each with its own ZooKeeper session, race for the recipe, hold
it briefly while doing a fenced read-modify-write (or, for a semaphore, while sharing it),
and record every critical section in a ``History``. ``run_demo`` returns the ``Results``
the report prints (``_demo_report.py``) and the command judges (``_demo.py``). The test kit
(the history, the fenced store) is imported only when a race runs.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

import aiozklock
from aiozklock._recipes._core._handle import Handle
from aiozklock._recipes._traits import Setup, Sides, traits_of

if TYPE_CHECKING:
    from aiozklock.testing import FencedStore, History


@dataclass(frozen=True, slots=True)
class Grant:
    holder: str
    token: int
    waited: float  # seconds from the start of the acquire to the grant
    entered: float  # time.monotonic()


@dataclass
class Results:
    grants: list[Grant] = field(default_factory=list)
    timeouts: int = 0
    lost: list[str] = field(default_factory=list)  # LockLost messages
    errors: list[str] = field(default_factory=list)  # anything else that stopped a worker
    session_ids: set[int] = field(default_factory=set)
    leftover_nodes: list[str] = field(default_factory=list)
    elapsed: float = 0.0
    reads: int = 0  # rwlock: read sections
    torn_reads: list[str] = field(default_factory=list)  # rwlock: a write during a read
    store_where: str = ""  # a real store's URL
    store_held: int | None = None  # what a real store holds at the end


class _Race:
    """What the workers share: the start line, the protected resource, and the records."""

    def __init__(self, args: argparse.Namespace) -> None:
        from aiozklock.testing import FencedStore, History
        from aiozklock.testing._nemesis_store import StoreGate

        self.args = args
        self.traits = traits_of(args.recipe)
        # A semaphore's holders share the resource: up to max_leases of them at once.
        shared = self.traits.shares_resource
        self.history = History(max_holders=args.max_leases if shared else 1)
        self.results = Results()
        # The fenced counter: its record, and the real store that decides, if any.
        self.gate = StoreGate(() if shared else (args.path,), self.results.errors.append)
        self.store = self.gate.stores.get(args.path) or FencedStore()
        self.start = anyio.Event()
        self.all_arrived = anyio.Event()
        self._arrived = 0

    def arrived(self) -> None:
        """A worker is connected and at the start line (or failed to get there)."""
        self._arrived += 1
        if self._arrived == self.args.workers:
            self.all_arrived.set()

    async def worker(self, name: str) -> None:
        args, results = self.args, self.results
        arrived = False
        try:
            async with aiozklock.connect(args.hosts) as zk:  # one session per worker
                results.session_ids.add(zk.session_id)
                lock, reader = make_recipe(zk, args, name)
                self.arrived()
                arrived = True
                await self.start.wait()
                for _ in range(args.rounds):
                    try:
                        if reader is not None:  # each round also reads (see _read_section)
                            await self._read_section(name, reader)
                        asked = time.monotonic()
                        async with lock.acquire(timeout=args.timeout):
                            waited = time.monotonic() - asked
                            if self.traits.shares_resource:
                                await self._lease_section(name, lock, waited)
                            else:
                                await self._critical_section(name, lock, waited)
                    except aiozklock.LockTimeout:
                        results.timeouts += 1
                    except aiozklock.LockLost as exc:
                        results.lost.append(f"{name}: {exc}")
        except aiozklock.AiozklockError as exc:
            results.errors.append(f"{name}: {type(exc).__name__}: {exc}")
        finally:
            if not arrived:
                self.arrived()

    async def _critical_section(self, name: str, lock: Handle, waited: float) -> None:
        token = lock.fencing_token
        with self.history.section(name, token):
            self.results.grants.append(Grant(name, token, waited, time.monotonic()))
            # A read-modify-write of the protected resource: if two holders ever overlapped,
            # the counter would lose updates and the store would reject stale tokens.
            ok, before = await self.gate.read(name, self.args.path, token)
            if not ok:  # a newer token reached the store first: we no longer hold
                self.results.lost.append(f"{name}: the store refused token {token}")
                return
            await anyio.sleep(self.args.hold)
            await self.gate.write(name, self.args.path, token, before + 1)

    async def _lease_section(self, name: str, sem: Handle, waited: float) -> None:
        """semaphore: up to max_leases workers here at once; the history checks no more."""
        token = sem.fencing_token
        with self.history.section(name, token):
            self.results.grants.append(Grant(name, token, waited, time.monotonic()))
            await anyio.sleep(self.args.hold)

    async def _read_section(self, name: str, reader: Handle) -> None:
        """rwlock: a read shared with other readers; a write landing meanwhile is a bug."""
        async with reader.acquire(timeout=self.args.timeout):
            before = self.store.value
            await anyio.sleep(self.args.hold)
            self.results.reads += 1
            if self.store.value != before:
                self.results.torn_reads.append(f"{name}: {before} -> {self.store.value}")


async def run_demo(args: argparse.Namespace) -> tuple[Results, History, FencedStore]:
    """Run the race; raises ``ZooKeeperUnavailable`` if ZooKeeper cannot be reached, and
    a real store's errors (no local server, no connection) if ``--store`` cannot open."""
    from aiozklock.testing._nemesis_store import open_store

    race = _Race(args)
    async with open_store(args.store, args.store_url, race.gate.resources) as opened:
        if opened is not None:
            race.gate.real = opened.real
            race.results.store_where = opened.where
        await _race(race, args)
        if opened is not None:
            race.results.store_held = (await opened.real.values()).get(args.path)
    return race.results, race.history, race.store


async def _race(race: _Race, args: argparse.Namespace) -> None:
    """The workers' race, and the nodes they left."""
    width = len(str(args.workers))
    names = [f"worker-{i:0{width}d}" for i in range(1, args.workers + 1)]
    # An observer session first: it fails fast if ZooKeeper is unreachable, and checks at the
    # end that the workers' closed sessions left no lock node behind.
    async with aiozklock.connect(args.hosts, connect_timeout=5.0) as observer:
        async with anyio.create_task_group() as tg:
            for name in names:
                tg.start_soon(race.worker, name, name=name)
            await race.all_arrived.wait()  # everyone connected: the race starts at once
            started = time.monotonic()
            race.start.set()
        race.results.elapsed = time.monotonic() - started
        for path in recipe_paths(args):
            with contextlib.suppress(aiozklock.NoNodeError):  # a container reaped once empty
                race.results.leftover_nodes += await observer.get_children(path)


def recipe_paths(args: argparse.Namespace) -> list[str]:
    """The paths the demo's recipe queues under (two for a multi-path one)."""
    multi_path = traits_of(args.recipe).multi_path
    return [args.path, f"{args.path}-b"] if multi_path else [args.path]


def make_recipe(zk: aiozklock.ZooKeeperClient, args: argparse.Namespace, name: str) -> Sides:
    """The demo's recipe object for one worker: the side that races (an rwlock's writers),
    and the read side each round also takes, if the recipe has one."""
    setup = Setup(tuple(recipe_paths(args)), name, ttl=args.ttl, max_leases=args.max_leases)
    return traits_of(args.recipe).make(zk, setup)


__all__ = ("Grant", "Results", "make_recipe", "recipe_paths", "run_demo")
