"""``aiozklock demo``: the classic race, run for real.

Many workers, each with its own ZooKeeper session, compete for one order's lock, hold it
briefly while doing a fenced read-modify-write, and record every critical section. At the end
the history is checked (:mod:`aiozklock._cli._demo_report`): no two sections overlap and
fencing tokens strictly increase in grant order. Without ``--hosts`` a throwaway standalone
ZooKeeper is started from the local install and stopped at the end. The test kit (the history
checker, the fenced store, the throwaway server) is imported only when the demo runs.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

import aiozklock
from aiozklock._cli._choices import RECIPES, STORE_HELP, STORE_URL_HELP, STORES, recipe_help
from aiozklock._cli._common import Parser, positive_int, seconds
from aiozklock._recipes._core._handle import Handle
from aiozklock._recipes._semaphore import validate_max_leases
from aiozklock._recipes._traits import RecipeTraits, Setup, Sides, traits_of
from aiozklock._wire._validation import validate_recipe_path

if TYPE_CHECKING:
    from aiozklock.testing import FencedStore, History

DEFAULT_PATH = "/locks/orders/157"

# Exit codes: 0 the history check passed, 1 it failed (or the run did), 2 cannot run here.
EXIT_OK, EXIT_FAILED, EXIT_UNAVAILABLE = 0, 1, 2

INSTALL_HINT = """\
aiozklock demo: no local ZooKeeper installation found.

Either install one (the demo then starts a throwaway server on a free port):
    sudo apt-get install zookeeper          # Debian/Ubuntu (brings a Java runtime)
or set ZOOKEEPER_HOME to an unpacked Apache ZooKeeper release, or point the demo at
running servers:
    python -m aiozklock demo --hosts 127.0.0.1:2181     # e.g. `docker compose up -d`
"""


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


def _demo_notes(traits: RecipeTraits) -> list[str]:
    """How the demo treats a recipe, from its description's flags (``--recipe``'s help)."""
    return [
        note
        for flag, note in (
            (traits.multi_path, "PATH and PATH-b together"),
            (traits.ttl_lease, "needs extendedTypesEnabled"),
            (traits.reads, "writers race on the write lock, each round also takes the read lock"),
            (traits.shares_resource, "--max-leases of them"),
        )
        if flag
    ]


def add_demo_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """The ``demo`` command's parser."""
    demo = commands.add_parser(
        "demo",
        help="many workers race for one lock; prints the grant order and checks the history",
        description=(
            "Workers, each with its own ZooKeeper session, race for one order's lock, hold it "
            "briefly doing a fenced write, and the recorded history is checked for overlaps "
            "and token order. Exit code 0 if the check passes, 1 if not, 2 if ZooKeeper is "
            "not available."
        ),
    )
    demo.add_argument(
        "--hosts",
        help="ZooKeeper connection string (host:port,...); default: start a throwaway "
        "standalone server from the local install",
    )
    demo.add_argument("--workers", type=positive_int, default=20, help="default: %(default)s")
    demo.add_argument(
        "--rounds", type=positive_int, default=5, help="acquisitions per worker (%(default)s)"
    )
    demo.add_argument(
        "--timeout", type=seconds, default=2.0, help="acquire timeout, s (%(default)s)"
    )
    demo.add_argument("--hold", type=seconds, default=0.01, help="hold time, s (%(default)s)")
    demo.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    demo.add_argument("--path", default=DEFAULT_PATH, help="lock path (%(default)s)")
    demo.add_argument("--all", action="store_true", help="list every grant, not just the ends")
    demo.add_argument(
        "--recipe",
        choices=RECIPES,
        default="lock",
        help=recipe_help("", _demo_notes),
    )
    demo.add_argument("--ttl", type=seconds, default=5.0, help="lease TTL, s (%(default)s)")
    demo.add_argument(
        "--max-leases",
        type=positive_int,
        default=3,
        help="the semaphore's max_leases (%(default)s)",
    )
    add_store_options(demo)
    demo.set_defaults(usage_error=demo.error)


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """``--store`` and ``--store-url`` (demo and nemesis)."""
    parser.add_argument("--store", choices=STORES, default="memory", help=STORE_HELP)
    parser.add_argument("--store-url", metavar="URL", help=STORE_URL_HELP)


def check_store_options(args: argparse.Namespace) -> str | None:
    """Exits with a usage error (``args.usage_error``) for a ``--store`` that cannot run
    with the other options; returns what is missing if its driver is not installed."""
    from aiozklock.testing._nemesis_store import check_store

    shared = traits_of(args.recipe).shares_resource
    try:
        check_store(args.store, args.store_url, args.backend, shares_resource=shared)
    except ValueError as exc:
        args.usage_error(str(exc))
    except ImportError as exc:
        return str(exc)
    return None


def store_notice(args: argparse.Namespace) -> None:
    """Say on stderr that a throwaway store server is about to start."""
    if args.store != "memory" and args.store_url is None:
        print(f"starting a throwaway {args.store} server ...", file=sys.stderr, flush=True)


def demo_command(args: argparse.Namespace) -> int:
    """Run the demo; its exit status (``EXIT_OK``, ``EXIT_FAILED``, ``EXIT_UNAVAILABLE``)."""
    from aiozklock._cli._demo_report import print_report
    from aiozklock.testing import (
        ZooKeeperCluster,
        ZooKeeperStartError,
        ZooKeeperUnavailableForTests,
        find_zookeeper_classpath,
    )
    from aiozklock.testing._nemesis_store import StoreUnavailable

    refused = _preflight(args)
    if refused is not None:
        print(f"aiozklock demo: {refused}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    cluster: ZooKeeperCluster | None = None
    if args.hosts:
        where = args.hosts
    else:
        if find_zookeeper_classpath() is None:
            print(INSTALL_HINT, file=sys.stderr, end="")
            return EXIT_UNAVAILABLE
        print("starting a throwaway ZooKeeper ...", file=sys.stderr, flush=True)
        try:
            cluster = ZooKeeperCluster(1).start()
        except ZooKeeperUnavailableForTests as exc:  # e.g. jars but no java
            print(f"aiozklock demo: {exc}", file=sys.stderr)
            return EXIT_UNAVAILABLE
        except ZooKeeperStartError as exc:
            print(f"aiozklock demo: ZooKeeper did not start: {exc}", file=sys.stderr)
            return EXIT_FAILED
        args.hosts = cluster.hosts
        where = f"embedded standalone at {cluster.hosts}"
    try:
        store_notice(args)
        try:
            results, history, store = anyio.run(run_demo, args, backend=args.backend)
        except aiozklock.ZooKeeperUnavailable as exc:
            print(f"aiozklock demo: ZooKeeper unavailable: {exc}", file=sys.stderr)
            return EXIT_FAILED
        except StoreUnavailable as exc:
            print(f"aiozklock demo: {exc}", file=sys.stderr)
            return EXIT_UNAVAILABLE
        passed = print_report(args, where, results, history.check(), store, sys.stdout)
        return EXIT_OK if passed else EXIT_FAILED
    finally:
        if cluster is not None:
            cluster.close()


def _preflight(args: argparse.Namespace) -> str | None:
    """Bad arguments fail here, before a server is started or contacted: a usage error
    exits, what cannot run here is returned."""
    if args.backend == "trio":
        try:
            import trio  # noqa: F401
        except ImportError:
            return "--backend trio needs trio: pip install 'aiozklock[trio]'"
    try:
        validate_recipe_path(args.path)
        if traits_of(args.recipe).shares_resource:
            validate_max_leases(args.max_leases)
        if args.hosts:
            aiozklock.connect(args.hosts)  # validates the connection string; connects on entry
    except aiozklock.InvalidArgument as exc:
        return str(exc)
    return check_store_options(args)
