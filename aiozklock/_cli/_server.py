"""``aiozklock server``: a ZooKeeper for development, in the foreground, from local jars.

It runs :class:`aiozklock.testing.ZooKeeperCluster` (the test kit's servers, with the
settings the docs assume: every four-letter word allowed, no admin server, TTL nodes on,
session timeouts from 0.4 s to 30 s) on fixed client ports of 127.0.0.1, prints the
connect string, and stays until SIGINT (Ctrl-C) or SIGTERM, which stop every JVM it
started. Killed by a signal it cannot handle (SIGKILL), it leaves nothing behind either: the
kit binds every JVM to its life on Linux, and the next start removes the temp folder (see
:mod:`aiozklock.testing._process` and :mod:`aiozklock.testing._server_workdir`). It warns
about an even ensemble size. The test kit is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import textwrap
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from aiozklock._cli._common import Parser, add_command, positive_int, say

if TYPE_CHECKING:
    from aiozklock.testing import ZooKeeperCluster

# Exit codes, as the other commands that run the test kit: 0 stopped by SIGINT or SIGTERM,
# 1 the server failed (a port in use, a member that did not start or died), 2 no Java or no
# ZooKeeper jars here.
EXIT_STOPPED, EXIT_FAILED, EXIT_CANNOT_RUN = 0, 1, 2

INSTALL_HINT = """\
Install ZooKeeper's jars and a Java runtime (Debian/Ubuntu; no service is started):
    sudo apt-get install zookeeper default-jre-headless
or unpack an Apache ZooKeeper release and set ZOOKEEPER_HOME to its directory.
With Docker instead, the repository's compose.yaml runs a 3-node ensemble:
    docker compose up -d --wait    # then use 127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183"""

_POLL = 0.5  # seconds between checks that every member still runs

_EPILOG = [
    "The settings are the test kit's, which the docs assume: tickTime 200 ms (session "
    "timeouts from 0.4 s to 30 s are granted as asked), every four-letter word allowed "
    "(srvr, conf, mntr: `aiozklock doctor`, the client's tickTime check), the admin "
    "server off, TTL nodes on (extendedTypesEnabled: lease_lock), clients on 127.0.0.1 "
    "only. An ensemble of N members takes the client ports PORT to PORT+N-1 "
    "(2181,2182,2183 as in compose.yaml) and free ports for its quorum links.",
    "Jars: $ZOOKEEPER_HOME (an unpacked Apache release) if set, else Debian's zookeeper "
    "package (/usr/share/java); java from $JAVA_HOME/bin or PATH.",
    "Killed by a signal it cannot handle (SIGKILL), it takes its JVMs along on Linux (the "
    "kernel kills them; elsewhere the next start does), and the next start removes the "
    "temp folder it left. An even N is warned about: N members survive the loss of "
    "(N-1)//2, as N-1 do.",
    f"exit status: {EXIT_STOPPED} stopped by Ctrl-C (SIGINT) or SIGTERM, {EXIT_FAILED} the "
    f"server failed (a port in use, a member that did not start or exited), "
    f"{EXIT_CANNOT_RUN} no Java or no ZooKeeper jars.",
]


def add_server_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """The ``server`` command's parser."""
    server = add_command(
        commands,
        "server",
        help="a ZooKeeper for development, in the foreground until Ctrl-C",
        description=textwrap.fill(
            "Run a ZooKeeper server (or an ensemble) for development from the local jars, "
            "print the connect string, and stop it and every process it started on Ctrl-C "
            "or SIGTERM.",
            79,
        ),
        epilog=_EPILOG,
    )
    server.add_argument(
        "--port",
        type=_port,
        default=2181,
        help="client port of 127.0.0.1 (of the first member) (%(default)s)",
    )
    server.add_argument(
        "--ensemble",
        type=positive_int,
        default=1,
        metavar="N",
        help="run an ensemble of N members (3 or 5 to survive the loss of 1 or 2; "
        "an even N is warned about; default: one standalone server)",
    )
    server.add_argument(
        "--data",
        type=Path,
        metavar="DIR",
        help="keep the data (and the servers' logs) in DIR between runs, one DIR per "
        "ensemble size (default: a temp dir removed at exit)",
    )


def _port(text: str) -> int:
    """An argparse type: a TCP port, 1..65535."""
    value = int(text)
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"not a port (1..65535): {value}")
    return value


class _CannotRun(Exception):
    """No Java or no ZooKeeper jars: the message says which, and where it looked."""


class _Stop(BaseException):
    """SIGINT or SIGTERM arrived: stop everything, exit 0."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    # Only the first signal stops: later ones must not interrupt the stopping itself (it is
    # bounded: a JVM that ignores SIGTERM is killed after a grace period).
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    raise _Stop(signal.Signals(signum).name)


def find_install() -> str:
    """Where the jars come from, for the banner. Raises ``_CannotRun`` without jars or Java.

    A ``ZOOKEEPER_HOME`` without jars is an error here (the test kit falls back to Debian's
    jars): whoever set it meant that release."""
    from aiozklock.testing._server_install import debian_classpath, find_java, home_classpath

    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        if home_classpath(Path(home)) is None:
            raise _CannotRun(
                f"ZOOKEEPER_HOME={home} holds no zookeeper*.jar (looked in it and in its lib/)"
            )
        source = f"ZOOKEEPER_HOME={home}"
    elif debian_classpath() is None:
        raise _CannotRun(
            "no ZooKeeper jars: ZOOKEEPER_HOME is not set and /usr/share/java has no "
            "zookeeper.jar (Debian's zookeeper package)"
        )
    else:
        source = "/usr/share/java"
    if find_java() is None:
        raise _CannotRun("no Java runtime: no java on PATH, nor in $JAVA_HOME/bin")
    return source


def server_command(args: argparse.Namespace) -> int:
    """The ``server`` command: runs until SIGINT or SIGTERM; returns the exit status."""
    try:
        source = find_install()
    except _CannotRun as exc:
        say(args.command, f"{exc}.\n{INSTALL_HINT}")
        return EXIT_CANNOT_RUN
    from aiozklock.testing import ZooKeeperCluster

    if args.data is not None:
        args.data = args.data.expanduser().resolve()
        try:
            args.data.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            say(args.command, f"--data {args.data}: {exc.strerror or exc}")
            return EXIT_FAILED
    if args.ensemble % 2 == 0:  # said before starting: the start may fail, the advice holds
        say(args.command, _even_size_warning(args.ensemble))
    cluster = ZooKeeperCluster(args.ensemble, client_port=args.port, data_dir=args.data)
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _serve(cluster, args, source)
    except _Stop as stop:
        print(f"{stop}: stopping", file=sys.stderr, flush=True)
        return EXIT_STOPPED
    finally:
        for sig in previous:  # nothing may interrupt the stopping
            signal.signal(sig, signal.SIG_IGN)
        cluster.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _even_size_warning(size: int) -> str:
    """Why an even ensemble is no better than the odd one below it: a quorum is a strict
    majority, so ``size`` members survive the loss of ``(size - 1) // 2``."""
    survives = (size - 1) // 2
    members = "member" if survives == 1 else "members"
    return (
        f"an ensemble of {size} survives the loss of {survives} {members}, the same as "
        f"{size - 1}: use an odd size"
    )


def _serve(cluster: ZooKeeperCluster, args: argparse.Namespace, source: str) -> int:
    """Start the cluster, print how to use it, and watch its members until one exits."""
    from aiozklock.testing import PortTaken, ZooKeeperStartError
    from aiozklock.testing._process import log_tail

    try:
        cluster.start(timeout=60.0)
    except PortTaken as exc:
        say(
            args.command,
            f"{exc}: another ZooKeeper? Stop it, or choose other ports with --port "
            f"(this one uses {_ports(args)}).",
        )
        return EXIT_FAILED
    except ZooKeeperStartError as exc:
        say(args.command, f"ZooKeeper did not start: {exc}")
        return EXIT_FAILED
    _print_banner(cluster, args, source)
    while True:
        for member in cluster.members:
            if not member.running:
                say(
                    args.command,
                    f"ZooKeeper {member.id} ({member.address}) exited; the end of "
                    f"{member.log_path}:\n{log_tail(member.log_path, 20)}",
                )
                return EXIT_FAILED
        time.sleep(_POLL)  # a signal interrupts it (_Stop)


def _ports(args: argparse.Namespace) -> str:
    first, last = args.port, args.port + args.ensemble - 1
    return str(first) if first == last else f"{first} to {last}"


def _print_banner(cluster: ZooKeeperCluster, args: argparse.Namespace, source: str) -> None:
    from aiozklock.testing import four_letter_word

    first = cluster.members[0]
    try:
        srvr = four_letter_word(first.address, "srvr").splitlines()[0]
        version = srvr.partition(":")[2].split("-")[0].split(",")[0].strip()
    except (OSError, IndexError):
        version = "?"
    kind = "standalone" if args.ensemble == 1 else f"an ensemble of {args.ensemble}"
    root = args.data if args.data is not None else cluster.work_dir
    kept = "kept" if args.data is not None else "removed at exit; --data DIR keeps it"
    lines = [
        f"ZooKeeper {version}, {kind}, jars from {source}",
        *(f"  member {m.id}: {m.address}  pid {m.pid}  mode {m.mode()}" for m in cluster.members),
        f"data: {root} ({kept})",
        "",
        f"connect string: {cluster.hosts}",
        f"  export AIOZKLOCK_HOSTS={cluster.hosts}",
        "Ctrl-C stops it.",
    ]
    print("\n".join(lines), flush=True)
