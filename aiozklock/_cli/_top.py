"""``aiozklock top PREFIX``: a live view of the locks under a prefix (holders, queue
lengths, wait ages, the doctor's findings), refreshed by ZooKeeper watches, in a plain
terminal; ``--once`` prints one frame as plain text. The view itself is ``aiozklock._top``."""

from __future__ import annotations

import argparse
import os

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
from aiozklock._cli._doctor import EX_PROBLEMS, add_threshold_options, given_options
from aiozklock._doctor._diagnose import Options
from aiozklock._top._live import REFRESH, TICK, Live
from aiozklock._top._screen import Snapshot, frame, plain
from aiozklock._top._terminal import Terminal

EX_INTERRUPTED = 130  # 128 + SIGINT: Ctrl-C before the view was up

_EPILOG = [
    "The view: a title (the session's state: CONNECTED, SUSPENDED, LOST; how old the view "
    "is), a summary (queues, holders, waiters, the longest hold and wait, the doctor's "
    "verdict), a table of the queues under PREFIX (those with waiters first, the longest "
    "waiting first; QUEUE counts holders and waiters (their nodes), LOCAL the tasks queued "
    "inside their processes behind those nodes (as the nodes' data says; - if none says), "
    "HELD is the oldest holder's age, "
    "WAITED the oldest waiter's, by the server's clock; HOLDER who holds, or how long a "
    "running lock-delay still holds the path back; !! and ! mark paths with a critical "
    "or warning finding), then the doctor's findings (see 'aiozklock doctor --help').",
    "Refreshed by watches: a children watch on every node under PREFIX (an exists watch on "
    "a contender's node, which hears its published local waiters change, and on a "
    "lock-delay record); when one fires, the "
    f"doctor reads PREFIX again (at most every {REFRESH:g} s, or as often as a reading "
    "takes), and when a holder crosses --hold-warning or a lock-delay ends. Nothing is "
    "read while nothing "
    f"changes: the ages move on by this machine's clock, redrawn every {TICK:g} s. Each "
    "reading writes and deletes one probe node, as 'aiozklock doctor' does. Leftover "
    "parents and expired leases, which time alone makes, show at the next change, or "
    "press r.",
    "Keys: q quits, r reads again now, Ctrl-L redraws, Ctrl-Z stops (the terminal given "
    "back until fg). If ZooKeeper is lost the last view stays, marked SUSPENDED or LOST, "
    "until the client reconnects.",
    "--once prints one frame (every queue and finding, not cut to the terminal, no control "
    "codes) and exits like 'aiozklock doctor'.",
    f"exit status: 0 (q, or --once: healthy), {EX_PROBLEMS} (--once: problems found), "
    f"{EX_USAGE} usage error (nothing contacted; the live view also needs a terminal), "
    f"{EX_UNAVAILABLE} ZooKeeper unavailable, 128+N quit by signal N.",
]


def add_top_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """The ``top`` subcommand's parser."""
    top = add_command(
        commands,
        "top",
        help="a live view of the locks under a prefix: holders, queues, wait ages, findings",
        description="Watch the locks under PREFIX.",
        epilog=_EPILOG,
    )
    add_connection_options(top)
    top.add_argument("--once", action="store_true", help="print one frame and exit")
    add_threshold_options(top)
    top.add_argument("prefix", metavar="PREFIX")


def top_command(args: argparse.Namespace) -> int:
    """The ``top`` subcommand; returns the exit status. Raises ``UsageFailure`` for a bad
    prefix, threshold or hosts, or no terminal for the live view, before anything is
    contacted."""
    given = given_options(args)
    if not args.once and not (os.isatty(0) and os.isatty(1)):
        raise UsageFailure("the live view needs a terminal: use --once to print one frame")
    client = make_client(args)
    try:
        return _once(client, given) if args.once else _live(client, given)
    except (aiozklock.ZooKeeperUnavailable, aiozklock.ClientClosed) as exc:
        say(args.command, f"ZooKeeper unavailable: {exc}")
        return EX_UNAVAILABLE


def _once(client: aiozklock.ZooKeeperClient, given: Options) -> int:
    async def main() -> Snapshot:
        async with client as zk:
            diagnosis = await zk.diagnose(
                given.prefix,
                hold_warning=given.limits.hold_warning,
                queue_warning=given.limits.queue_warning,
                leftover_age=given.limits.leftover_age,
            )
            return Snapshot(given.prefix, zk.state.value, diagnosis, live=False)

    snapshot = anyio.run(main)
    print(plain(frame(snapshot)))
    assert snapshot.diagnosis is not None
    return 0 if snapshot.diagnosis.healthy else EX_PROBLEMS


def _live(client: aiozklock.ZooKeeperClient, given: Options) -> int:
    try:
        with Terminal() as terminal:  # restored however this ends
            ended_by = anyio.run(Live(client, given, terminal).run)
    except KeyboardInterrupt:  # Ctrl-C while connecting, before the view handles it
        return EX_INTERRUPTED
    return 0 if ended_by is None else 128 + ended_by
