"""What the operator commands share: exit codes, the parser class, connection options."""

from __future__ import annotations

import argparse
import math
import os
import sys
import textwrap
from collections.abc import Sequence
from typing import NoReturn

import aiozklock

# Exit codes, in the spirit of sysexits(3) and flock(1) -E (documented in ``run --help``).
EX_USAGE = 64  # bad usage: nothing was contacted
EX_UNAVAILABLE = 69  # no ZooKeeper server answered (or the session was lost while waiting)
EX_LOST = 70  # the lock was lost while the command ran; the command was terminated
EX_TEMPFAIL = 75  # not acquired: held by another (--nonblock) or the --timeout expired
EX_NOEXEC = 126  # the command is not executable
EX_NOTFOUND = 127  # the command was not found

HOSTS_VARIABLE = "AIOZKLOCK_HOSTS"


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors exit with ``usage_status`` (argparse's 2 by
    default; the operator commands set ``EX_USAGE``)."""

    usage_status = 2

    def error(self, message: str) -> NoReturn:
        """Print the usage and the message to stderr; exit with ``usage_status``."""
        self.print_usage(sys.stderr)
        self.exit(self.usage_status, f"{self.prog}: error: {message}\n")


class UsageFailure(Exception):
    """Bad input found after parsing (a path, hosts, a command): exit ``EX_USAGE``."""


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {value}")
    return value


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, not {text}")
    return value


def add_command(
    commands: argparse._SubParsersAction[Parser],
    name: str,
    *,
    help: str,
    description: str,
    epilog: Sequence[str],
) -> Parser:
    """A subcommand's parser whose epilog is ``epilog``'s paragraphs, each wrapped at 79
    columns (argparse would join them into one)."""
    return commands.add_parser(
        name,
        help=help,
        description=description,
        epilog="\n\n".join(textwrap.fill(paragraph, 79) for paragraph in epilog),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """``--hosts`` and ``--connect-timeout``, common to every operator command."""
    parser.add_argument(
        "--hosts",
        help=f"ZooKeeper connection string 'host:port,...[/chroot]' (default: ${HOSTS_VARIABLE})",
    )
    parser.add_argument(
        "--connect-timeout",
        type=seconds,
        default=10.0,
        metavar="S",
        help="seconds to reach a server before giving up with status 69 (%(default)s)",
    )


def make_client(
    args: argparse.Namespace, *, session_timeout: float = 10.0
) -> aiozklock.ZooKeeperClient:
    """The client of ``--hosts`` (or ``$AIOZKLOCK_HOSTS``), validated and not yet connected.

    Raises ``UsageFailure`` if no hosts are given or the options are invalid.
    """
    hosts = args.hosts or os.environ.get(HOSTS_VARIABLE)
    if not hosts:
        raise UsageFailure(f"no ZooKeeper hosts: give --hosts or set ${HOSTS_VARIABLE}")
    try:
        return aiozklock.connect(
            hosts, session_timeout=session_timeout, connect_timeout=args.connect_timeout
        )
    except aiozklock.InvalidArgument as exc:
        raise UsageFailure(str(exc)) from None


def say(command: str, message: str) -> None:
    """One diagnostic line on stderr, prefixed with the command's name."""
    print(f"aiozklock {command}: {message}", file=sys.stderr, flush=True)
