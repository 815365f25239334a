"""Command line: ``python -m aiozklock COMMAND`` (also installed as the ``aiozklock`` script).

The operator commands ``run`` (a command under a lock, like ``flock(1)``), ``contenders``,
``holders`` and ``leader`` are in ``aiozklock._cli``; ``demo`` and ``nemesis`` are here.

The demo is the classic race: many workers, each with its own ZooKeeper session, compete for
one order's lock, hold it briefly while doing a fenced read-modify-write, and record every
critical section. At the end the history is checked: no two sections overlap and fencing
tokens strictly increase in grant order. Without ``--hosts`` a throwaway standalone
ZooKeeper is started from the local install and stopped at the end.

The nemesis (:func:`aiozklock.testing.run_nemesis`) runs contending clients under seeded random
faults and checks the history; without ``--hosts`` it starts a throwaway 3-node ensemble, so
that servers and the leader can be paused, killed and restarted too.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

import anyio

import aiozklock
from aiozklock import _cli
from aiozklock._cli._choices import FAULT_KINDS, RECIPES
from aiozklock._recipes._semaphore import validate_max_leases
from aiozklock._wire._validation import validate_recipe_path

if TYPE_CHECKING:  # the test kit is imported only by the commands that run it
    from aiozklock.testing import FencedStore, History, HistoryReport

DEFAULT_PATH = "/locks/orders/157"
Recipe = (aiozklock.Lock | aiozklock.MultiLock | aiozklock.Election | aiozklock.NonFairLock) | (
    aiozklock.LeaseLock | aiozklock.WriteLock | aiozklock.Semaphore
)
_HEAD_ROWS = 12
_TAIL_ROWS = 6

# Exit codes: 0 the history check passed, 1 it failed (or the run did), 2 cannot run here.
EXIT_OK, EXIT_FAILED, EXIT_UNAVAILABLE = 0, 1, 2

_INSTALL_HINT = """\
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


# ---------------------------------------------------------------------------- the demo


class _Race:
    """What the workers share: the start line, the protected resource, and the records."""

    def __init__(self, args: argparse.Namespace) -> None:
        from aiozklock.testing import FencedStore, History

        self.args = args
        # A semaphore's holders share the resource: up to max_leases of them at once.
        self.history = History(max_holders=args.max_leases if args.recipe == "semaphore" else 1)
        self.store = FencedStore()
        self.results = Results()
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
                lock = make_recipe(zk, args, name)
                self.arrived()
                arrived = True
                await self.start.wait()
                for _ in range(args.rounds):
                    try:
                        if args.recipe == "rwlock":
                            await self._read_section(name, zk.rw_lock(args.path, identifier=name))
                        asked = time.monotonic()
                        async with lock.acquire(timeout=args.timeout):
                            waited = time.monotonic() - asked
                            if isinstance(lock, aiozklock.Semaphore):
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

    async def _critical_section(self, name: str, lock: Recipe, waited: float) -> None:
        token = lock.fencing_token
        with self.history.section(name, token):
            self.results.grants.append(Grant(name, token, waited, time.monotonic()))
            # A read-modify-write of the protected resource: if two holders ever overlapped,
            # the counter would lose updates and the store would reject stale tokens.
            value = self.store.value
            before = value if isinstance(value, int) else 0
            await anyio.sleep(self.args.hold)
            self.store.write(name, token, before + 1)

    async def _lease_section(self, name: str, sem: aiozklock.Semaphore, waited: float) -> None:
        """semaphore: up to max_leases workers here at once; the history checks no more."""
        token = sem.fencing_token
        with self.history.section(name, token):
            self.results.grants.append(Grant(name, token, waited, time.monotonic()))
            await anyio.sleep(self.args.hold)

    async def _read_section(self, name: str, rw: aiozklock.ReadWriteLock) -> None:
        """rwlock: a read shared with other readers; a write landing meanwhile is a bug."""
        async with rw.read_lock.acquire(timeout=self.args.timeout):
            before = self.store.value
            await anyio.sleep(self.args.hold)
            self.results.reads += 1
            if self.store.value != before:
                self.results.torn_reads.append(f"{name}: {before} -> {self.store.value}")


async def run_demo(args: argparse.Namespace) -> tuple[Results, History, FencedStore]:
    """Run the race; raises ``ZooKeeperUnavailable`` if ZooKeeper cannot be reached."""
    race = _Race(args)
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
    return race.results, race.history, race.store


def recipe_paths(args: argparse.Namespace) -> list[str]:
    """The paths the demo's recipe queues under (two for the multi-lock)."""
    return [args.path, f"{args.path}-b"] if args.recipe == "multilock" else [args.path]


def make_recipe(zk: aiozklock.ZooKeeperClient, args: argparse.Namespace, name: str) -> Recipe:
    """The demo's recipe object for one worker."""
    if args.recipe == "multilock":
        return zk.multi_lock(recipe_paths(args), identifier=name)
    if args.recipe == "election":
        return zk.election(args.path, identifier=name)
    if args.recipe == "nonfair":
        return zk.lock(args.path, identifier=name, fair=False)
    if args.recipe == "lease":
        return zk.lease_lock(args.path, args.ttl, identifier=name)
    if args.recipe == "rwlock":  # writers race; each round also reads (see _read_section)
        return zk.rw_lock(args.path, identifier=name).write_lock
    if args.recipe == "semaphore":
        return zk.semaphore(args.path, args.max_leases, identifier=name)
    return zk.lock(args.path, identifier=name)


# ---------------------------------------------------------------------------- the report


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def _print_report(
    args: argparse.Namespace,
    where: str,
    results: Results,
    report: HistoryReport,
    store: FencedStore,
    out: TextIO,
) -> bool:
    def p(line: str = "") -> None:
        print(line, file=out)

    grants = sorted(results.grants, key=lambda g: g.entered)
    p(
        f"aiozklock demo: {args.workers} workers x {args.rounds} rounds of {args.recipe} "
        f"on {', '.join(recipe_paths(args))} "
        f"(each its own session; timeout {args.timeout:g} s, hold {_ms(args.hold)} ms)"
    )
    p(f"ZooKeeper: {where}; backend: {args.backend}")
    p()
    p("  grant  holder        fencing token  waited ms")
    p("  -----  ------------  -------------  ---------")
    shown: list[tuple[int, Grant] | None] = list(enumerate(grants, 1))
    if len(grants) > _HEAD_ROWS + _TAIL_ROWS + 1 and not args.all:
        shown = [*shown[:_HEAD_ROWS], None, *shown[-_TAIL_ROWS:]]
    for row in shown:
        if row is None:
            hidden = len(grants) - _HEAD_ROWS - _TAIL_ROWS
            p(f"  {'...':>5}  ({hidden} more grants; --all shows every one)")
            continue
        index, grant = row
        p(f"  {index:>5}  {grant.holder:<12}  {grant.token:>13}  {_ms(grant.waited):>9}")
    p()
    attempts = args.workers * args.rounds
    p(
        f"acquisitions {len(grants)}/{attempts}   timeouts {results.timeouts}   "
        f"lost {len(results.lost)}   errors {len(results.errors)}   in {results.elapsed:.2f} s"
    )
    waits = [g.waited for g in grants]
    if waits:
        p(
            f"wait ms      min {_ms(min(waits))}   median {_ms(statistics.median(waits))}   "
            f"max {_ms(max(waits))}"
        )
    for problem in [*results.lost, *results.errors][:5]:
        p(f"  ! {problem}")
    p()
    counter_ok = store.value == len(store.accepted) == len(grants)
    semaphore = args.recipe == "semaphore"
    checks = [
        (report.ok, f"history check: {report}"),
        (
            not store.rejected and counter_ok,
            f"fenced store:  {len(store.accepted)} writes accepted, {len(store.rejected)} "
            f"stale writes rejected, counter = {store.value} (expected {len(grants)})",
        )
        if not semaphore
        else (
            0 < report.peak_holders <= args.max_leases,
            f"leases:        at most {report.peak_holders} holder(s) at once (max_leases "
            f"{args.max_leases}; they share the resource, so no fenced store)",
        ),
        (
            not results.leftover_nodes,
            f"cleanup:       {len(results.leftover_nodes)} lock node(s) of closed sessions left",
        ),
        (bool(grants), f"progress:      {len(grants)} critical section(s) recorded"),
    ]
    if args.recipe == "rwlock":
        checks.append(
            (
                not results.torn_reads,
                f"readers:       {results.reads} read sections, {len(results.torn_reads)} "
                "saw a write land while they read",
            )
        )
    for ok, line in checks:
        p(f"  [{'PASS' if ok else 'FAIL'}] {line}")
    passed = all(ok for ok, _ in checks)
    p()
    if not passed:
        p("FAILED")
    elif semaphore:
        p(f"PASSED: never more than {args.max_leases} holders at once")
    else:
        p("PASSED: no two holders overlapped, fencing tokens strictly increased")
    return passed


# ---------------------------------------------------------------------------- command line


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, not {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _cli.Parser(
        prog="aiozklock", description="aiozklock: async distributed locks on ZooKeeper"
    )
    parser.add_argument("--version", action="version", version=aiozklock.__version__)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
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
    demo.add_argument("--workers", type=_positive_int, default=20, help="default: %(default)s")
    demo.add_argument(
        "--rounds", type=_positive_int, default=5, help="acquisitions per worker (%(default)s)"
    )
    demo.add_argument(
        "--timeout", type=_seconds, default=2.0, help="acquire timeout, s (%(default)s)"
    )
    demo.add_argument("--hold", type=_seconds, default=0.01, help="hold time, s (%(default)s)")
    demo.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    demo.add_argument("--path", default=DEFAULT_PATH, help="lock path (%(default)s)")
    demo.add_argument("--all", action="store_true", help="list every grant, not just the ends")
    demo.add_argument(
        "--recipe",
        choices=RECIPES,
        default="lock",
        help="lock (fair), multilock (PATH and PATH-b together), election, nonfair, lease "
        "(a TTL lease; needs extendedTypesEnabled), rwlock (writers race on the write lock; each "
        "round also takes the read lock), semaphore (up to --max-leases holders at once) "
        "(%(default)s)",
    )
    demo.add_argument("--ttl", type=_seconds, default=5.0, help="lease TTL, s (%(default)s)")
    demo.add_argument(
        "--max-leases",
        type=_positive_int,
        default=3,
        help="the semaphore's max_leases (%(default)s)",
    )
    _add_nemesis_parser(commands)
    _cli.add_commands(commands)
    return parser


def _add_nemesis_parser(commands: argparse._SubParsersAction[_cli.Parser]) -> None:
    nemesis = commands.add_parser(
        "nemesis",
        help="randomized faults against contending clients; checks the lock's history",
        description=(
            "Clients (each its own session behind its own fault proxies, some in child "
            "processes) loop acquire -> fenced writes -> release while a seeded nemesis "
            "injects faults: connection drops, black-holes, lost replies, session expiries, "
            "SIGSTOP of holder processes, and (on a local ensemble) SIGSTOP/SIGKILL/restart of "
            "servers and of the leader. The history is then checked: no overlapping holders, "
            "tokens increasing, stale writes fenced, attempts bounded, no orphan node or "
            "leaked watch. The same seed replays the same fault schedule. Exit code 0 if "
            "every check passes, 1 if not, 2 if ZooKeeper is not available."
        ),
    )
    nemesis.add_argument("--seed", type=int, help="default: a random seed (printed)")
    nemesis.add_argument(
        "--recipe",
        choices=RECIPES,
        default="lock",
        help="what the clients loop on: lock (fair), multilock (2-3 of 4 shared paths), "
        "election (the section runs as leader), nonfair (zk.lock(fair=False)), lease "
        "(zk.lease_lock, TTL = the session timeout; the local ensemble then reaps TTL nodes "
        "every 100 ms; with --hosts, the servers must reap promptly too), rwlock (read or write "
        "lock at random; readers may overlap each other, never a writer), semaphore "
        "(zk.semaphore with --max-leases; never more holders at once) (%(default)s)",
    )
    nemesis.add_argument(
        "--max-leases",
        type=_positive_int,
        default=2,
        help="the semaphore's max_leases (%(default)s)",
    )
    nemesis.add_argument(
        "--duration", type=_seconds, default=60.0, help="seconds of faults (%(default)s)"
    )
    nemesis.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    nemesis.add_argument(
        "--hosts",
        help="ZooKeeper connection string of running servers (no server faults then); "
        "default: start a throwaway 3-node ensemble from the local install",
    )
    nemesis.add_argument("--clients", type=_positive_int, default=4, help="(%(default)s)")
    nemesis.add_argument(
        "--processes",
        type=int,
        default=2,
        help="how many of the clients run in child processes (%(default)s)",
    )
    nemesis.add_argument("--session-timeout", type=_seconds, default=6.0, help="s (%(default)s)")
    nemesis.add_argument(
        "--kinds",
        help=f"comma-separated fault kinds (default: all the target allows): "
        f"{', '.join(FAULT_KINDS)}",
    )
    nemesis.add_argument(
        "--loss-policy",
        choices=("suspended", "expired"),
        default="suspended",
        help="of every client (%(default)s)",
    )
    nemesis.add_argument(
        "--log-dir", help="keep the logs and history.json here (default: kept only on failure)"
    )
    nemesis.add_argument("--verbose", action="store_true", help="log to stderr too (INFO)")


def _demo(args: argparse.Namespace) -> int:
    from aiozklock.testing import (
        ZooKeeperCluster,
        ZooKeeperStartError,
        ZooKeeperUnavailableForTests,
        find_zookeeper_classpath,
    )

    if args.backend == "trio":
        try:
            import trio  # noqa: F401
        except ImportError:
            print("--backend trio needs trio: pip install 'aiozklock[trio]'", file=sys.stderr)
            return EXIT_UNAVAILABLE
    try:  # bad arguments fail here, before a server is started or contacted
        validate_recipe_path(args.path)
        if args.recipe == "semaphore":
            validate_max_leases(args.max_leases)
        if args.hosts:
            aiozklock.connect(args.hosts)  # validates the connection string; connects on entry
    except aiozklock.InvalidArgument as exc:
        print(f"aiozklock demo: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE

    cluster: ZooKeeperCluster | None = None
    if args.hosts:
        where = args.hosts
    else:
        if find_zookeeper_classpath() is None:
            print(_INSTALL_HINT, file=sys.stderr, end="")
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
        try:
            results, history, store = anyio.run(run_demo, args, backend=args.backend)
        except aiozklock.ZooKeeperUnavailable as exc:
            print(f"aiozklock demo: ZooKeeper unavailable: {exc}", file=sys.stderr)
            return EXIT_FAILED
        passed = _print_report(args, where, results, history.check(), store, sys.stdout)
        return EXIT_OK if passed else EXIT_FAILED
    finally:
        if cluster is not None:
            cluster.close()


def _nemesis_command(args: argparse.Namespace) -> str:
    parts = [
        "python -m aiozklock nemesis",
        f"--seed {args.seed}",
        f"--recipe {args.recipe}",
        f"--duration {args.duration:g}",
        f"--backend {args.backend}",
        f"--clients {args.clients}",
        f"--processes {args.processes}",
        f"--session-timeout {args.session_timeout:g}",
    ]
    if args.recipe == "semaphore":
        parts.append(f"--max-leases {args.max_leases}")
    if args.kinds:
        parts.append(f"--kinds {args.kinds}")
    if args.loss_policy != "suspended":
        parts.append(f"--loss-policy {args.loss_policy}")
    if args.hosts:
        parts.append(f"--hosts {args.hosts}")
    return " ".join(parts)


def _nemesis(args: argparse.Namespace) -> int:
    import logging
    import random
    import shutil
    import tempfile
    from pathlib import Path

    from aiozklock.testing import (
        NemesisReport,
        ZooKeeperCluster,
        ZooKeeperStartError,
        ZooKeeperUnavailableForTests,
        find_zookeeper_classpath,
        run_nemesis,
    )
    from aiozklock.testing._nemesis import LEASE_JVM_PROPERTIES
    from aiozklock.testing._nemesis_worker import stall_watchdog

    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 2**31)
    kinds = None
    if args.kinds:
        kinds = [kind.strip() for kind in args.kinds.split(",") if kind.strip()]
        unknown = sorted(set(kinds) - set(FAULT_KINDS))
        if unknown:
            print(f"aiozklock nemesis: unknown fault kind(s) {unknown}", file=sys.stderr)
            return EXIT_UNAVAILABLE
    if not 0 <= args.processes <= args.clients:
        print("aiozklock nemesis: need 0 <= --processes <= --clients", file=sys.stderr)
        return EXIT_UNAVAILABLE
    if args.backend == "trio":
        try:
            import trio  # noqa: F401
        except ImportError:
            print("--backend trio needs trio: pip install 'aiozklock[trio]'", file=sys.stderr)
            return EXIT_UNAVAILABLE
    command = _nemesis_command(args)
    print(f"aiozklock nemesis: seed {args.seed}\nreproduce: {command}", flush=True)
    keep_logs = args.log_dir is not None
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix=f"aiozklock-nemesis-{args.seed}-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f"logs: {log_dir} (kept if the run fails)", flush=True)
    handlers: list[logging.Handler] = [logging.FileHandler(log_dir / "nemesis.log")]
    if args.verbose:
        handlers.append(logging.StreamHandler(sys.stderr))
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        handlers=handlers,
        force=True,
    )
    cluster: ZooKeeperCluster | None = None
    if not args.hosts:
        if find_zookeeper_classpath() is None:
            print(_INSTALL_HINT.replace("demo", "nemesis"), file=sys.stderr, end="")
            return EXIT_UNAVAILABLE
        print("starting a throwaway 3-node ZooKeeper ensemble ...", file=sys.stderr, flush=True)
        try:
            # A lease needs expired TTL nodes reaped promptly (the default is every minute).
            jvm = LEASE_JVM_PROPERTIES if args.recipe == "lease" else None
            cluster = ZooKeeperCluster(3, jvm_properties=jvm).start()
        except ZooKeeperUnavailableForTests as exc:
            print(f"aiozklock nemesis: {exc}", file=sys.stderr)
            return EXIT_UNAVAILABLE
        except ZooKeeperStartError as exc:
            print(f"aiozklock nemesis: ZooKeeper did not start: {exc}", file=sys.stderr)
            return EXIT_FAILED
    try:
        target: ZooKeeperCluster | str = cluster if cluster is not None else args.hosts

        async def run() -> NemesisReport:
            # A stalled event loop (a livelock) leaves its stacks in the log directory.
            with (log_dir / "stall.txt").open("w") as stall_file:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(stall_watchdog, stall_file)
                    report = await run_nemesis(
                        target,
                        seed=args.seed,
                        duration=args.duration,
                        clients=args.clients,
                        processes=args.processes,
                        session_timeout=args.session_timeout,
                        kinds=kinds,
                        loss_policy=args.loss_policy,
                        log_dir=log_dir,
                        command=command,
                        recipe=args.recipe,
                        max_leases=args.max_leases,
                    )
                    tg.cancel_scope.cancel()
            return report

        try:
            report = anyio.run(run, backend=args.backend)
        except aiozklock.ZooKeeperUnavailable as exc:
            print(f"aiozklock nemesis: ZooKeeper unavailable: {exc}", file=sys.stderr)
            return EXIT_FAILED
    finally:
        if cluster is not None:
            cluster.close()
        for handler in handlers:
            logging.getLogger().removeHandler(handler)
            handler.close()
    if report.ok and not keep_logs:
        shutil.rmtree(log_dir, ignore_errors=True)
        report.log_dir = None
    print(report, flush=True)
    return EXIT_OK if report.ok else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m aiozklock`` and of the ``aiozklock`` console script."""
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        usage_error = getattr(args, "usage_error", parser.error)
        usage_error(f"unrecognized arguments: {' '.join(extras)}")
    if args.command in _cli.COMMANDS:
        return _cli.run(args)
    commands = {"demo": _demo, "nemesis": _nemesis}
    if args.command in commands:
        try:
            return commands[args.command](args)
        except KeyboardInterrupt:
            return 130
    raise AssertionError(f"unknown command {args.command!r}")  # argparse rejects it first


if __name__ == "__main__":
    sys.exit(main())
