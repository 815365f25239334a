"""``aiozklock nemesis``: contending clients under seeded random faults, then the history
checked (:func:`aiozklock.testing.run_nemesis`). Without ``--hosts`` it starts a throwaway
ensemble (``--servers`` 3 or 5), so that servers and the leader can be paused, killed and
restarted too, and (``--kinds ensemble``) cut off from each other. ``--unprotected`` is the
negative control. The test kit is imported only when the command runs."""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

import aiozklock
from aiozklock._cli._choices import RECIPES, recipe_help
from aiozklock._cli._common import Parser, positive_int, seconds
from aiozklock._cli._demo import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    INSTALL_HINT,
    add_store_options,
    check_store_options,
    store_notice,
)
from aiozklock._nemesis_kinds import FAULT_KINDS, KIND_GROUPS, PARTITION_KINDS
from aiozklock._recipes._traits import RecipeTraits, traits_of

if TYPE_CHECKING:
    from aiozklock.testing import NemesisReport, ZooKeeperCluster


class _Refused(Exception):
    """The run cannot start: the message is printed, the status returned."""

    def __init__(self, message: str, status: int = EXIT_UNAVAILABLE) -> None:
        super().__init__(message)
        self.status = status


def _nemesis_notes(traits: RecipeTraits) -> list[str]:
    """How the nemesis treats a recipe, from its description's flags (``--recipe``'s help)."""
    return [
        note
        for flag, note in (
            (traits.multi_path, "2-3 of 4 shared paths"),
            (
                traits.ttl_lease,
                "TTL = the session timeout; the local ensemble then reaps TTL nodes every "
                "100 ms; with --hosts, the servers must reap promptly too",
            ),
            (traits.reads, "read or write lock at random; readers may overlap, never a writer"),
            (traits.shares_resource, "--max-leases of them; never more holders at once"),
        )
        if flag
    ]


def add_nemesis_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """The ``nemesis`` command's parser."""
    nemesis = commands.add_parser(
        "nemesis",
        help="randomized faults against contending clients; checks the lock's history",
        description=(
            "Clients (each its own session behind its own fault proxies, some in child "
            "processes) loop acquire -> fenced writes -> release while a seeded nemesis "
            "injects faults: connection drops, black-holes, one-way cuts, lost replies, "
            "session expiries, "
            "SIGSTOP of holder processes, and (on a local ensemble) SIGSTOP/SIGKILL/restart of "
            "servers and of the leader. The history is then checked: no overlapping holders, "
            "tokens increasing, stale writes fenced, attempts bounded, no orphan node or "
            "leaked watch. The same seed replays the same fault schedule. Exit code 0 if "
            "every check passes, 1 if not, 2 if ZooKeeper is not available. "
            "--kinds ensemble cuts the local ensemble's own links (isolate a follower, the "
            "leader, a minority, a flapping link) and kills -9 and restarts members; "
            "--unprotected is the negative control, which must fail."
        ),
    )
    nemesis.add_argument("--seed", type=int, help="default: a random seed (printed)")
    nemesis.add_argument(
        "--recipe",
        choices=RECIPES,
        default="lock",
        help=recipe_help("what the clients loop on: ", _nemesis_notes),
    )
    nemesis.add_argument(
        "--max-leases",
        type=positive_int,
        default=2,
        help="the semaphore's max_leases (%(default)s)",
    )
    nemesis.add_argument(
        "--duration", type=seconds, default=60.0, help="seconds of faults (%(default)s)"
    )
    nemesis.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    nemesis.add_argument(
        "--unprotected",
        action="store_true",
        help="the negative control: workers ignore the loss of their lock (they keep acting "
        "and writing with their old token) and the store's fence is off, and the schedule "
        "starts with a fault that expires the holder's session while it holds; the report "
        "must show overlaps and accepted stale writes, and the run always fails (exit 1); "
        "memory store only",
    )
    add_store_options(nemesis)
    _add_target_options(nemesis)
    nemesis.set_defaults(usage_error=nemesis.error)


def _add_target_options(nemesis: argparse.ArgumentParser) -> None:
    """Where the run goes, who contends, which faults, and where its logs stay."""
    nemesis.add_argument(
        "--hosts",
        help="ZooKeeper connection string of running servers (no server faults then); "
        "default: start a throwaway 3-node ensemble from the local install",
    )
    nemesis.add_argument("--clients", type=positive_int, default=4, help="(%(default)s)")
    nemesis.add_argument(
        "--processes",
        type=int,
        default=2,
        help="how many of the clients run in child processes (%(default)s)",
    )
    nemesis.add_argument("--session-timeout", type=seconds, default=6.0, help="s (%(default)s)")
    nemesis.add_argument(
        "--kinds",
        help=f"comma-separated fault kinds (default: all the target allows, but the cuts of "
        f"the ensemble's links): {', '.join(FAULT_KINDS)}; or a group: "
        + "; ".join(f"{name} = {','.join(kinds)}" for name, kinds in KIND_GROUPS.items())
        + f". {', '.join(PARTITION_KINDS)} need the local ensemble (not --hosts): it is then "
        "started with a proxy on each link between members",
    )
    nemesis.add_argument(
        "--servers",
        type=int,
        choices=(3, 5),
        default=3,
        help="members of the local ensemble (%(default)s)",
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


def reproduce_command(args: argparse.Namespace) -> str:
    """The command line that replays this run (its seed and options)."""
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
    if traits_of(args.recipe).shares_resource:
        parts.append(f"--max-leases {args.max_leases}")
    if args.kinds:
        parts.append(f"--kinds {args.kinds}")
    if args.loss_policy != "suspended":
        parts.append(f"--loss-policy {args.loss_policy}")
    if args.hosts:
        parts.append(f"--hosts {args.hosts}")
    elif args.servers != 3:
        parts.append(f"--servers {args.servers}")
    if args.unprotected:
        parts.append("--unprotected")
    if args.store != "memory":
        parts.append(f"--store {args.store}")
    if args.store_url:
        parts.append(f"--store-url {args.store_url}")
    return " ".join(parts)


def nemesis_command(args: argparse.Namespace) -> int:
    """Run the nemesis; its exit status (``EXIT_OK``, ``EXIT_FAILED``, ``EXIT_UNAVAILABLE``)."""
    from aiozklock.testing._nemesis_store import StoreUnavailable

    try:
        kinds = _checked(args)
    except _Refused as exc:
        print(f"aiozklock nemesis: {exc}", file=sys.stderr)
        return exc.status
    command = reproduce_command(args)
    print(f"aiozklock nemesis: seed {args.seed}\nreproduce: {command}", flush=True)
    keep_logs = args.log_dir is not None
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix=f"aiozklock-nemesis-{args.seed}-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f"logs: {log_dir} (kept if the run fails)", flush=True)
    with _logging_to(log_dir, verbose=args.verbose):
        try:
            with _target(args) as target:
                store_notice(args)
                report = anyio.run(
                    _run, args, target, kinds, log_dir, command, backend=args.backend
                )
        except _Refused as exc:
            print(f"aiozklock nemesis: {exc}", file=sys.stderr)
            return exc.status
        except aiozklock.ZooKeeperUnavailable as exc:
            print(f"aiozklock nemesis: ZooKeeper unavailable: {exc}", file=sys.stderr)
            return EXIT_FAILED
        except StoreUnavailable as exc:  # no local server, or unreachable
            print(f"aiozklock nemesis: {exc}", file=sys.stderr)
            return EXIT_UNAVAILABLE
    if report.ok and not keep_logs:
        shutil.rmtree(log_dir, ignore_errors=True)
        report.log_dir = None
    print(report, flush=True)
    return EXIT_OK if report.ok else EXIT_FAILED


def _checked(args: argparse.Namespace) -> list[str] | None:
    """The fault kinds asked for (None: all); draws the seed if none was given. Raises
    ``_Refused`` for options that cannot run."""
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 2**31)
    kinds = None
    if args.kinds:
        named = [kind.strip() for kind in args.kinds.split(",") if kind.strip()]
        kinds = list(dict.fromkeys(k for name in named for k in KIND_GROUPS.get(name, (name,))))
        unknown = sorted(set(kinds) - set(FAULT_KINDS))
        if unknown:
            raise _Refused(f"unknown fault kind(s) {unknown}")
        if args.hosts and set(kinds) & set(PARTITION_KINDS):
            raise _Refused(f"{', '.join(PARTITION_KINDS)} need the local ensemble, not --hosts")
    if args.unprotected and args.store != "memory":
        raise _Refused("--unprotected needs --store memory (a real store's fence stays on)")
    if not 0 <= args.processes <= args.clients:
        raise _Refused("need 0 <= --processes <= --clients")
    if args.backend == "trio":
        try:
            import trio  # noqa: F401
        except ImportError:
            raise _Refused("--backend trio needs trio: pip install 'aiozklock[trio]'") from None
    missing = check_store_options(args)  # a usage error exits
    if missing is not None:
        raise _Refused(missing)
    args.kinds_list = kinds
    return kinds


@contextmanager
def _logging_to(log_dir: Path, *, verbose: bool) -> Iterator[None]:
    handlers: list[logging.Handler] = [logging.FileHandler(log_dir / "nemesis.log")]
    if verbose:
        handlers.append(logging.StreamHandler(sys.stderr))
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        handlers=handlers,
        force=True,
    )
    try:
        yield
    finally:
        for handler in handlers:
            logging.getLogger().removeHandler(handler)
            handler.close()


@contextmanager
def _target(args: argparse.Namespace) -> Iterator[ZooKeeperCluster | str]:
    """``--hosts``, or a throwaway 3-node ensemble closed at the end."""
    from aiozklock.testing import (
        ZooKeeperCluster,
        ZooKeeperStartError,
        ZooKeeperUnavailableForTests,
        find_zookeeper_classpath,
    )
    from aiozklock.testing._nemesis import LEASE_JVM_PROPERTIES
    from aiozklock.testing._nemesis_partition import lingering_config

    if args.hosts:
        yield args.hosts
        return
    if find_zookeeper_classpath() is None:
        raise _Refused(INSTALL_HINT.replace("aiozklock demo: ", "").replace("demo", "nemesis"))
    # The cuts of the ensemble's links need a proxy on each of them.
    cuts = bool(set(args.kinds_list or ()) & set(PARTITION_KINDS))
    print(
        f"starting a throwaway {args.servers}-node ZooKeeper ensemble"
        f"{' with its links behind proxies' if cuts else ''} ...",
        file=sys.stderr,
        flush=True,
    )
    try:
        # A lease needs expired TTL nodes reaped promptly (the default is every minute).
        jvm = LEASE_JVM_PROPERTIES if traits_of(args.recipe).ttl_lease else None
        # Cut off, a follower answers its clients for 2 x the session timeout, as in production.
        config = lingering_config(args.session_timeout) if cuts else None
        cluster = ZooKeeperCluster(
            args.servers, jvm_properties=jvm, partitionable=cuts, extra_config=config
        ).start()
    except ZooKeeperUnavailableForTests as exc:
        raise _Refused(str(exc)) from None
    except ZooKeeperStartError as exc:
        raise _Refused(f"ZooKeeper did not start: {exc}", EXIT_FAILED) from None
    try:
        yield cluster
    finally:
        cluster.close()


async def _run(
    args: argparse.Namespace,
    target: ZooKeeperCluster | str,
    kinds: list[str] | None,
    log_dir: Path,
    command: str,
) -> NemesisReport:
    from aiozklock.testing._nemesis_worker_child import stall_watchdog

    # A stalled event loop (a livelock) leaves its stacks in the log directory.
    failure: Exception | None = None
    with (log_dir / "stall.txt").open("w") as stall_file:
        async with anyio.create_task_group() as tg:
            tg.start_soon(stall_watchdog, stall_file)
            try:
                report = await _run_nemesis(args, target, kinds, log_dir, command)
            except Exception as exc:  # raised as itself below, not in an ExceptionGroup
                failure = exc
            tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return report


async def _run_nemesis(
    args: argparse.Namespace,
    target: ZooKeeperCluster | str,
    kinds: list[str] | None,
    log_dir: Path,
    command: str,
) -> NemesisReport:
    from aiozklock.testing import run_nemesis

    return await run_nemesis(
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
        store=args.store,
        store_url=args.store_url,
        unprotected=args.unprotected,
    )


__all__ = ("add_nemesis_parser", "nemesis_command", "reproduce_command")
