"""``aiozklock demo``: the classic race, run for real (the command: its options, the
throwaway servers, the exit status).

Many workers, each with its own ZooKeeper session, compete for one order's lock, hold it
briefly while doing a fenced read-modify-write, and record every critical section (the race:
:mod:`aiozklock._cli._demo_race`). At the end the history is checked
(:mod:`aiozklock._cli._demo_report`): no two sections overlap and fencing tokens strictly
increase in grant order. Without ``--hosts`` a throwaway standalone ZooKeeper is started
from the local install and stopped at the end. The test kit (the history checker, the fenced
store, the throwaway server) is imported only when the demo runs.
"""

from __future__ import annotations

import argparse
import sys

import anyio

import aiozklock
from aiozklock._cli._choices import RECIPES, STORE_HELP, STORE_URL_HELP, STORES, recipe_help
from aiozklock._cli._common import Parser, positive_int, seconds
from aiozklock._cli._demo_race import run_demo
from aiozklock._recipes._semaphore import validate_max_leases
from aiozklock._recipes._traits import RecipeTraits, traits_of
from aiozklock._wire._validation import validate_recipe_path

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
