"""Operator commands of ``python -m aiozklock`` (the ``aiozklock`` script): ``run``,
``contenders``, ``holders`` and ``leader``. ``demo`` and ``nemesis`` live in ``__main__``."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from aiozklock._cli._common import EX_USAGE, Parser, UsageFailure, say
from aiozklock._cli._inspect import add_inspect_parsers, inspect_command
from aiozklock._cli._run import add_run_parser, run_command

Command = Callable[[argparse.Namespace], int]

COMMANDS: dict[str, Command] = {
    "run": run_command,
    "contenders": inspect_command,
    "holders": inspect_command,
    "leader": inspect_command,
}


def add_commands(commands: argparse._SubParsersAction[Parser]) -> None:
    """Add the operator commands' parsers; their usage errors exit with ``EX_USAGE``."""
    add_run_parser(commands)
    add_inspect_parsers(commands)
    for name in COMMANDS:
        parser = commands.choices[name]
        parser.usage_status = EX_USAGE
        # Extra arguments are found by the main parser: report them with this one's status.
        parser.set_defaults(usage_error=parser.error)


def run(args: argparse.Namespace) -> int:
    """Run the operator command ``args.command``; its exit status (``EX_USAGE`` for input
    that the parser could not reject)."""
    try:
        return COMMANDS[args.command](args)
    except UsageFailure as exc:
        say(args.command, str(exc))
        return EX_USAGE


__all__ = ("COMMANDS", "Parser", "add_commands", "run")
