"""The command line, ``python -m aiozklock COMMAND`` (the ``aiozklock`` script).

The operator commands ``run`` (a command under a lock, like ``flock(1)``), ``contenders``,
``holders``, ``leader``, ``doctor`` (what is wrong under a prefix), ``top`` (a live view
of a prefix) and ``revoke`` (ask a lock's holder to let go) import only the client.
``demo`` (many workers race for one lock, the history checked), ``nemesis`` (the same
under seeded faults) and ``server`` (a ZooKeeper for development, in the foreground) import
the test kit when they run.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

import aiozklock
from aiozklock._cli._common import EX_USAGE, Parser, UsageFailure, say
from aiozklock._cli._demo import add_demo_parser, demo_command
from aiozklock._cli._doctor import add_doctor_parser, doctor_command
from aiozklock._cli._inspect import add_inspect_parsers, inspect_command
from aiozklock._cli._nemesis import add_nemesis_parser, nemesis_command
from aiozklock._cli._revoke import add_revoke_parser, revoke_command
from aiozklock._cli._run import add_run_parser, run_command
from aiozklock._cli._server import add_server_parser, server_command
from aiozklock._cli._top import add_top_parser, top_command

Command = Callable[[argparse.Namespace], int]

#: The operator commands: usage errors exit with ``EX_USAGE`` (64).
COMMANDS: dict[str, Command] = {
    "run": run_command,
    "contenders": inspect_command,
    "holders": inspect_command,
    "leader": inspect_command,
    "doctor": doctor_command,
    "top": top_command,
    "revoke": revoke_command,
}
#: The commands that run the test kit: exit 0 (passed), 1 (failed) or 2 (cannot run here).
#: ``server`` too: 0 (stopped by SIGINT or SIGTERM), 1 (failed), 2 (no Java or jars here).
KIT_COMMANDS: dict[str, Command] = {
    "demo": demo_command,
    "nemesis": nemesis_command,
    "server": server_command,
}


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command."""
    parser = Parser(prog="aiozklock", description="aiozklock: async distributed locks on ZooKeeper")
    parser.add_argument("--version", action="version", version=aiozklock.__version__)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_demo_parser(commands)
    add_nemesis_parser(commands)
    add_server_parser(commands)
    add_run_parser(commands)
    add_inspect_parsers(commands)
    add_doctor_parser(commands)
    add_top_parser(commands)
    add_revoke_parser(commands)
    for name in COMMANDS:
        command = commands.choices[name]
        command.usage_status = EX_USAGE
        # Extra arguments are found by the main parser: report them with this one's status.
        command.set_defaults(usage_error=command.error)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m aiozklock`` and of the ``aiozklock`` console script."""
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        usage_error = getattr(args, "usage_error", parser.error)
        usage_error(f"unrecognized arguments: {' '.join(extras)}")
    if args.command in KIT_COMMANDS:
        try:
            return KIT_COMMANDS[args.command](args)
        except KeyboardInterrupt:
            return 130
    try:
        return COMMANDS[args.command](args)
    except UsageFailure as exc:
        say(args.command, str(exc))
        return EX_USAGE


__all__ = ("COMMANDS", "KIT_COMMANDS", "build_parser", "main")
