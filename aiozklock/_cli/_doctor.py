"""``aiozklock doctor PREFIX``: what is wrong under a prefix (``ZooKeeperClient.diagnose``):
deadlocks, unsafe mixes of layouts, long holders and queues, expired leases, leftover
parents. Exit 0 when healthy, 1 when it found a problem (a finding of severity warning or
worse), 64 for bad usage (nothing contacted), 69 when ZooKeeper is unavailable."""

from __future__ import annotations

import argparse
import json

import anyio

import aiozklock
from aiozklock._cli._common import (
    EX_UNAVAILABLE,
    EX_USAGE,
    Parser,
    UsageFailure,
    add_command,
    add_connection_options,
    make_client,
    say,
)
from aiozklock._doctor._defaults import HOLD_WARNING, LEFTOVER_AGE, QUEUE_WARNING
from aiozklock._doctor._diagnose import Options, options
from aiozklock._doctor._model import Diagnosis
from aiozklock._doctor._render import to_json, to_text

EX_PROBLEMS = 1  # the doctor found a problem

_EPILOG = [
    "Read-only: the tree is read in pipelined batches; to read the server's clock (every "
    "age is by it) one multi creates, sets and deletes an ephemeral probe node under PREFIX, "
    "which leaves nothing behind (if refused, ages are by this machine's clock).",
    "Findings (severity): deadlock (critical): sessions, or tasks of one process, waiting "
    "for each other in a cycle, printed as session → path → session → ...; unsafe mix "
    "(critical, or warning when kazoo may have been told of our nodes): contenders on one "
    "path whose layouts do not see each other, with the compat= that fixes it; long holder, "
    "long queue, expired lease, leftover parent (warning); unreadable (info). Each says "
    "what to do.",
    '--json prints {"prefix", "healthy", "clock", "server_time", "elapsed", '
    '"nodes_scanned", "queues", "thresholds", "counts": {KIND: N}, "longest_hold", '
    '"longest_wait", "findings": [{"kind", "severity", "message", "action", "paths", '
    '"sessions", "cycle": [{"session_id", "task", "library", "host", "pid", "identifier", '
    '"path", "node"}], "seconds", "count"}]}.',
    f"exit status: 0 healthy, {EX_PROBLEMS} problems found, {EX_USAGE} usage error "
    f"(nothing contacted), {EX_UNAVAILABLE} ZooKeeper unavailable.",
]


def add_doctor_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """The ``doctor`` subcommand's parser."""
    doctor = add_command(
        commands,
        "doctor",
        help="what is wrong under a prefix: deadlocks, unsafe mixes, long holders, leftovers",
        description="Diagnose the locks under PREFIX.",
        epilog=_EPILOG,
    )
    add_connection_options(doctor)
    doctor.add_argument("--json", action="store_true", help="print one JSON object (see below)")
    add_threshold_options(doctor)
    doctor.add_argument("prefix", metavar="PREFIX")


def add_threshold_options(parser: Parser) -> None:
    """The doctor's thresholds, for ``doctor`` and ``top``."""
    parser.add_argument(
        "--hold-warning",
        type=float,
        default=HOLD_WARNING,
        metavar="S",
        help="report holders older than S seconds (%(default)s)",
    )
    parser.add_argument(
        "--queue-warning",
        type=int,
        default=QUEUE_WARNING,
        metavar="N",
        help="report paths with N waiters or more, their local waiters included (%(default)s)",
    )
    parser.add_argument(
        "--leftover-age",
        type=float,
        default=LEFTOVER_AGE,
        metavar="S",
        help="report persistent parents empty for S seconds (%(default)s): a container "
        "the server reaps is gone long before",
    )


def given_options(args: argparse.Namespace) -> Options:
    """The doctor's options from ``args``; ``UsageFailure`` for a bad prefix or threshold."""
    try:
        return options(args.prefix, args.hold_warning, args.queue_warning, args.leftover_age)
    except aiozklock.InvalidArgument as exc:
        raise UsageFailure(str(exc)) from None


def doctor_command(args: argparse.Namespace) -> int:
    """The ``doctor`` subcommand; returns the exit status. Raises ``UsageFailure`` for a bad
    prefix, threshold or hosts, before anything is contacted."""
    given = given_options(args)
    client = make_client(args)

    async def main() -> Diagnosis:
        async with client as zk:
            return await zk.diagnose(
                given.prefix,
                hold_warning=given.limits.hold_warning,
                queue_warning=given.limits.queue_warning,
                leftover_age=given.limits.leftover_age,
            )

    try:
        diagnosis = anyio.run(main)
    except aiozklock.ZooKeeperUnavailable as exc:
        say(args.command, f"ZooKeeper unavailable: {exc}")
        return EX_UNAVAILABLE
    print(json.dumps(to_json(diagnosis), indent=2) if args.json else to_text(diagnosis))
    return 0 if diagnosis.healthy else EX_PROBLEMS
