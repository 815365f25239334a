"""``aiozklock run PATH -- COMMAND``: run a command while holding a lock, like ``flock(1)``
and ``etcdctl lock``.

The command runs as a child process in its own process group, with the fencing token and the
lock path in its environment. If the lock is lost, the library cancels the ``async with``
body that waits for the child: the child's process group then gets SIGTERM, and SIGKILL once
the child exits or the grace period ends, so that no work goes on after the loss.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field

import anyio
import anyio.abc

import aiozklock
from aiozklock._cli._common import (
    EX_LOST,
    EX_NOEXEC,
    EX_NOTFOUND,
    EX_TEMPFAIL,
    EX_UNAVAILABLE,
    EX_USAGE,
    Parser,
    UsageFailure,
    add_connection_options,
    make_client,
    say,
    seconds,
)
from aiozklock._doctor._delays import delay_words
from aiozklock._wire._validation import validate_identifier, validate_recipe_path

TOKEN_VARIABLE = "AIOZKLOCK_FENCING_TOKEN"
PATH_VARIABLE = "AIOZKLOCK_LOCK_PATH"

RUN_EPILOG = f"""\
The command gets {TOKEN_VARIABLE} (the lock's fencing token) and {PATH_VARIABLE} in its
environment. It runs in its own process group: SIGINT and SIGTERM received by aiozklock are
forwarded to that group (then aiozklock waits for the command and releases the lock). If the
lock is lost (the connection is lost, or the holding reaches its valid_until: no answer
proved the session alive for 0.9 of the session timeout), the group gets SIGTERM, then
SIGKILL once the command exits or --grace seconds pass (a twentieth of the session timeout
by default: keep it below a tenth, so that the command is gone before ZooKeeper can grant
the lock to another).

exit status:
  N       the command's exit status (128+N if a signal N killed it)
  {EX_USAGE}      usage error (bad path, hosts, option, no command): nothing was contacted
  {EX_UNAVAILABLE}      ZooKeeper unavailable: no server answered, or the session was lost
          before the lock was acquired
  {EX_LOST}      the lock was lost while the command ran; the command was terminated
  {EX_TEMPFAIL}      not acquired: the lock is held (--nonblock) or --timeout expired; the
          command did not run
  {EX_NOEXEC}     the command is not executable
  {EX_NOTFOUND}     the command was not found
  128+N   aiozklock got signal N (SIGINT, SIGTERM) before the command started

example:
  aiozklock run --hosts zk1,zk2,zk3 --timeout 30 /locks/backup -- ./backup.sh --full
"""


def add_run_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """The ``run`` subcommand's parser."""
    run = commands.add_parser(
        "run",
        help="run a command while holding a lock (like flock(1))",
        usage="aiozklock run [options] PATH -- COMMAND [ARGS...]",
        description="Acquire the lock PATH, run COMMAND while holding it, release it.",
        epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_connection_options(run)
    wait = run.add_mutually_exclusive_group()
    wait.add_argument(
        "--timeout",
        type=seconds,
        metavar="S",
        help=f"give up (status {EX_TEMPFAIL}) if not acquired within S seconds "
        "(default: wait as long as it takes)",
    )
    wait.add_argument(
        "-n",
        "--nonblock",
        action="store_true",
        help=f"do not wait: status {EX_TEMPFAIL} at once if the lock is held",
    )
    run.add_argument("--identifier", help="a name for this contender, shown by 'contenders'")
    run.add_argument(
        "--grace",
        type=seconds,
        default=None,
        metavar="S",
        help="after a loss, seconds between SIGTERM and SIGKILL (default: a twentieth of "
        "the session timeout; a WARNING above a tenth)",
    )
    run.add_argument(
        "--session-timeout",
        type=seconds,
        default=10.0,
        metavar="S",
        help="ZooKeeper session timeout, seconds (%(default)s)",
    )
    run.add_argument("path", metavar="PATH", help="the lock's path, e.g. /locks/backup")
    run.add_argument(
        "argv",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND [ARGS...]",
        help="the command to run under the lock",
    )


@dataclass
class _State:
    """What the signal watcher and the runner share."""

    scope: anyio.CancelScope  # cancelled by a signal that comes before the command starts
    spawned: anyio.Event = field(default_factory=anyio.Event)  # set once spawning is over
    spawning: bool = False
    process: anyio.abc.Process | None = None
    signum: int | None = None  # the signal that cancelled ``scope``


@dataclass(frozen=True)
class _Options:
    client: aiozklock.ZooKeeperClient
    path: str
    command: list[str]
    timeout: float | None
    identifier: str | None
    grace: float


def _options(args: argparse.Namespace) -> _Options:
    """The validated options; raises ``UsageFailure`` before anything is contacted."""
    command = list(args.argv)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise UsageFailure("no command given: aiozklock run PATH -- COMMAND [ARGS...]")
    try:
        path = validate_recipe_path(args.path)
        identifier = validate_identifier(args.identifier)
    except aiozklock.InvalidArgument as exc:
        raise UsageFailure(str(exc)) from None
    return _Options(
        client=make_client(args, session_timeout=args.session_timeout),
        path=path,
        command=command,
        timeout=0.0 if args.nonblock else args.timeout,
        identifier=identifier,
        grace=_grace(args.grace, args.session_timeout),
    )


def _grace(grace: float | None, session_timeout: float) -> float:
    """``--grace``, a twentieth of the session timeout by default. A loss can come as late
    as ``valid_until``, a tenth of the timeout before a server may expire the session and
    grant the lock to another: a longer grace lets the command outlive the lock."""
    if grace is None:
        return session_timeout / 20
    if grace > session_timeout / 10:
        print(
            f"aiozklock run: warning: --grace {grace:g}s exceeds a tenth of the session "
            f"timeout ({session_timeout / 10:g}s): after a loss the command may still run "
            "when the lock is granted to another",
            file=sys.stderr,
        )
    return grace


def _unrunnable(program: str) -> int | None:
    """127 if ``program`` is not found, 126 if it is not executable, None if it can run
    (checked before the lock is taken; exec failing later is mapped the same way)."""
    if os.sep in program:
        if not os.path.exists(program):
            return EX_NOTFOUND
        return None if os.access(program, os.X_OK) and not os.path.isdir(program) else EX_NOEXEC
    return None if shutil.which(program) is not None else EX_NOTFOUND


def run_command(args: argparse.Namespace) -> int:
    """The ``run`` subcommand; returns the exit status (see ``RUN_EPILOG``).

    Raises ``UsageFailure`` for bad input, before anything is contacted."""
    options = _options(args)
    unrunnable = _unrunnable(options.command[0])
    if unrunnable is not None:
        why = "not found" if unrunnable == EX_NOTFOUND else "not executable"
        say("run", f"{options.command[0]}: command {why}")
        return unrunnable
    return anyio.run(_main, options)


async def _main(options: _Options) -> int:
    state = _State(anyio.CancelScope())
    status: int | None = None
    async with anyio.create_task_group() as tg:
        await tg.start(_watch_signals, state)
        with state.scope:
            status = await _locked(options, state)
        tg.cancel_scope.cancel()
    if status is None:  # a signal came before the command started
        assert state.signum is not None
        return 128 + state.signum
    return status


async def _watch_signals(
    state: _State, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            if not state.spawning:  # still waiting for the lock: give up
                state.signum = signum
                state.scope.cancel()
                continue
            await state.spawned.wait()  # the command may already run: it gets the signal
            if state.process is not None:
                _signal_group(state.process, signum)


async def _locked(options: _Options, state: _State) -> int:
    """Connect, acquire, run the command; the exit status."""
    path = options.path
    try:
        async with options.client as zk:
            lock = zk.lock(path, identifier=options.identifier)
            try:
                async with lock.acquire(timeout=options.timeout):
                    return await _run_child(options, lock.fencing_token, state)
            except aiozklock.LockTimeout:
                say("run", f"{path}: not acquired{await _held_by(lock)}")
                return EX_TEMPFAIL
    except aiozklock.LockLost as exc:
        say("run", f"{path}: the lock was lost ({exc}); the command was terminated")
        return EX_LOST
    except aiozklock.ZooKeeperUnavailable as exc:
        say("run", f"ZooKeeper unavailable: {exc}")
        return EX_UNAVAILABLE


async def _held_by(lock: aiozklock.Lock) -> str:
    """``", held by ..."`` for the message of a failed acquire, if it can be told quickly."""
    with anyio.move_on_after(1.0), contextlib.suppress(aiozklock.AiozklockError):
        queue = await lock.contenders()
        if queue:
            holder = queue[0]
            if holder.lock_delay is not None:  # nobody holds: the head waits the delay out
                return f": {delay_words(lock.path, holder.lock_delay, time.time())}"
            who = holder.identifier or "a contender"
            return f", held by {who} (host {holder.host}, pid {holder.pid})"
    return ""


async def _run_child(options: _Options, token: int, state: _State) -> int:
    """Run the command to its end (or until cancelled by a loss); its exit status."""
    env = {**os.environ, TOKEN_VARIABLE: str(token), PATH_VARIABLE: options.path}
    state.spawning = True
    try:
        # Shielded: a started child is always tracked, so that a cancellation kills it.
        with anyio.CancelScope(shield=True):
            process = await anyio.open_process(
                options.command,
                stdin=None,
                stdout=None,
                stderr=None,
                env=env,
                start_new_session=True,
            )
    except FileNotFoundError:
        say("run", f"{options.command[0]}: command not found")
        return EX_NOTFOUND
    except OSError as exc:  # permission denied, exec format error, ...
        say("run", f"{options.command[0]}: {exc}")
        return EX_NOEXEC
    else:
        state.process = process
    finally:
        state.spawned.set()
    try:
        returncode = await process.wait()
    finally:
        if process.returncode is None:  # cancelled: the lock was lost (or we got a signal)
            with anyio.CancelScope(shield=True):
                await _terminate(process, options.grace)
    return returncode if returncode >= 0 else 128 - returncode


async def _terminate(process: anyio.abc.Process, grace: float) -> None:
    """SIGTERM to the command's process group; SIGKILL to it once the command exits or
    ``grace`` seconds pass, so that none of its processes keeps working."""
    say("run", f"terminating the command (process group {process.pid})")
    _signal_group(process, signal.SIGTERM)
    with anyio.move_on_after(grace):
        await process.wait()
    _signal_group(process, signal.SIGKILL)
    await process.wait()


def _signal_group(process: anyio.abc.Process, signum: int) -> None:
    # The child leads its own process group (start_new_session): its pid is the group's id.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)
