"""``aiozklock revoke PATH [--wait S]``: ask the holders of the lock at PATH to let go
(``zk.revoke``), and wait until they did."""

from __future__ import annotations

import argparse

import anyio

import aiozklock
from aiozklock._cli._common import (
    EX_TEMPFAIL,
    EX_UNAVAILABLE,
    EX_USAGE,
    Parser,
    UsageFailure,
    add_command,
    add_connection_options,
    make_client,
    say,
    seconds,
)
from aiozklock._wire._validation import validate_recipe_path

EX_NOHOLDER = 1  # nothing holds the lock: nothing to revoke
EX_NOPERM = 77  # a holder is not revocable (it did not opt in), or its node's ACL forbids it

#: The exit status of each ``NotRevoked.reason``.
STATUS = {"no holder": EX_NOHOLDER, "not revocable": EX_NOPERM, "timeout": EX_TEMPFAIL}

_EPILOG = (
    "The holder's node (ours, Curator's or kazoo's, as 'contenders' reads the path; on a "
    "read/write path every reader that holds) gets the data __REVOKE__, Curator's revoke "
    "request (Revoker.attemptRevoke). A holder that opted in (zk.lock(path, revocable=True), "
    "Curator's makeRevocable) lets go: its body is cancelled and its lock released; others "
    "ignore it. A holder whose node says it did not opt in is not written to. With several "
    "holders, each one that may let go is asked and waited for, and the command succeeds "
    "only if every one let go; otherwise it names those that still hold.",
    f"exit status: 0 every holder let go (with --wait 0: every holder was asked), "
    f"{EX_NOHOLDER} no holder, {EX_NOPERM} a holder is not revocable (or its node's ACL "
    f"forbids the write; other holders were asked), {EX_TEMPFAIL} every holder was asked "
    f"and one did not let go within --wait seconds (it may not be revocable), {EX_USAGE} "
    f"usage error, {EX_UNAVAILABLE} ZooKeeper unavailable.",
)


def add_revoke_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """The ``revoke`` subcommand's parser."""
    parser = add_command(
        commands,
        "revoke",
        help="ask the holders of a lock to let go",
        description="Ask the holders of the lock at PATH to let go, and wait until they did.",
        epilog=_EPILOG,
    )
    add_connection_options(parser)
    parser.add_argument(
        "--wait",
        type=seconds,
        default=10.0,
        metavar="S",
        help="seconds to wait for the holders to let go; 0: only ask (%(default)s)",
    )
    parser.add_argument("path", metavar="PATH")


def revoke_command(args: argparse.Namespace) -> int:
    """The ``revoke`` subcommand; returns the exit status. Raises ``UsageFailure`` for a
    bad path or hosts, before anything is contacted."""
    try:
        path = validate_recipe_path(args.path)
    except aiozklock.InvalidArgument as exc:
        raise UsageFailure(str(exc)) from None
    client = make_client(args)

    async def main() -> tuple[str, ...]:
        async with client as zk:
            return await zk.revoke(path, wait=args.wait)

    try:
        nodes = anyio.run(main)
    except aiozklock.NotRevoked as exc:
        say(args.command, str(exc))
        return STATUS[exc.reason]
    except aiozklock.NoAuthError as exc:
        say(args.command, f"not allowed to write the holder's node (its ACL): {exc}")
        return EX_NOPERM
    except aiozklock.ZooKeeperUnavailable as exc:
        say(args.command, f"ZooKeeper unavailable: {exc}")
        return EX_UNAVAILABLE
    done = "asked to let go" if args.wait == 0 else "let go"
    who = "the holder" if len(nodes) == 1 else f"the {len(nodes)} holders"
    print(f"{who} of {path} {done}: {', '.join(nodes)}")
    return 0


__all__ = ("STATUS", "add_revoke_parser", "revoke_command")
