"""The operator commands run as real processes (``python -m aiozklock ...``) against the real
ZooKeeper of the test session: ``run`` (a command under a lock, exit codes, loss, signals)
and the read-only ``contenders``, ``holders`` and ``leader`` (JSON shapes, nothing created).

Process tests run on asyncio only: the command under test is its own process, so the
backend of the test changes nothing in it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

import aiozklock
from aiozklock.testing import FaultProxy
from tests.conftest import ClientFactory, wait_for_children, wait_for_queue
from tests.test_connect_errors import http_server as http_server

# Every command is a Python process: its start took 0.3 s on a quiet machine and up to 4 s on
# the loaded 2-core one (a test runs up to 5). The bounds are hang bounds, not expectations.
HANG_BOUND = 120
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(2 * HANG_BOUND)]

REPO = Path(__file__).resolve().parent.parent  # run this checkout's code
PATH = "/locks/orders/157"
EX_USAGE, EX_UNAVAILABLE, EX_LOST, EX_TEMPFAIL = 64, 69, 70, 75
CONTENDER_KEYS = {
    "position",
    "is_holder",
    "identifier",
    "host",
    "pid",
    "task",
    "session_id",
    "fencing_token",
    "node",
    "sequence",
    "enqueued_at",
    "queued_for",
    "local_waiters",
    "revocable",
    "waits_for_lock_delay",
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "aiozklock", *args]


def _env() -> dict[str, str]:
    # Hermetic: the hosts come from --hosts only.
    return {k: v for k, v in os.environ.items() if k != "AIOZKLOCK_HOSTS"}


async def _cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    """Run ``aiozklock ARGS`` to its end."""
    return await anyio.run_process(_argv(*args), cwd=REPO, env=_env(), check=False)


Lines = BufferedByteReceiveStream


@asynccontextmanager
async def _started(
    *args: str,
) -> AsyncIterator[tuple[anyio.abc.Process, BufferedByteReceiveStream]]:
    """``aiozklock ARGS`` running: the process and its stdout (shared with the command's).
    If the test fails, the process gets SIGTERM (forwarded to its command), then SIGKILL."""
    async with await anyio.open_process(_argv(*args), cwd=REPO, env=_env()) as process:
        assert process.stdout is not None
        try:
            yield process, BufferedByteReceiveStream(process.stdout)
        finally:
            if process.returncode is None:
                with anyio.CancelScope(shield=True):
                    process.terminate()
                    with anyio.move_on_after(5):
                        await process.wait()
                    if process.returncode is None:
                        process.kill()


async def _line(stdout: BufferedByteReceiveStream) -> str:
    """The next line of the command's output, without its newline."""
    return (await stdout.receive_until(b"\n", 65536)).decode()


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a process that is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


# ---------------------------------------------------------------------------- run


async def test_run_holds_the_lock_while_the_command_runs(
    zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    script = 'echo "$AIOZKLOCK_FENCING_TOKEN $AIOZKLOCK_LOCK_PATH"; read line; exit 3'
    with anyio.fail_after(HANG_BOUND):
        async with _started(
            "run", "--hosts", hosts, "--identifier", "cli", PATH, "--", "sh", "-c", script
        ) as (process, stdout):
            token, path = (await _line(stdout)).split()
            assert path == PATH
            [holder] = await zk.lock(PATH).contenders()
            assert holder.fencing_token == int(token)
            assert (holder.identifier, holder.pid) == ("cli", process.pid)
            assert process.stdin is not None
            await process.stdin.send(b"done\n")  # the command ends with status 3
            assert await process.wait() == 3
        assert await zk.lock(PATH).contenders() == []


@pytest.mark.parametrize(
    "wait", [["--nonblock"], ["--timeout", "0.3"]], ids=["nonblock", "timeout"]
)
async def test_not_acquired_exits_75_without_running_the_command(
    zk: aiozklock.ZooKeeperClient, hosts: str, tmp_path: Path, wait: list[str]
) -> None:
    marker = tmp_path / "ran"
    with anyio.fail_after(HANG_BOUND):
        async with zk.lock(PATH, identifier="the-holder"):
            started = time.monotonic()
            done = await _cli("run", "--hosts", hosts, *wait, PATH, "--", "touch", str(marker))
            elapsed = time.monotonic() - started
    assert done.returncode == EX_TEMPFAIL, done.stderr
    assert not marker.exists()
    assert b"not acquired, held by the-holder" in done.stderr
    if "--timeout" in wait:
        assert elapsed >= 0.3


@pytest.mark.parametrize("ignores_term", [False, True], ids=["term", "kill-after-grace"])
async def test_loss_kills_the_command_and_exits_70(
    proxy: FaultProxy, chroot: str, ignores_term: bool
) -> None:
    trap = 'trap "" TERM; ' if ignores_term else ""
    script = f"{trap}sleep 60 & echo $$ $!; wait"  # the shell and its own child
    with anyio.fail_after(HANG_BOUND):
        async with _started(
            "run",
            "--hosts",
            proxy.address + chroot,
            "--session-timeout",
            "2",
            "--grace",
            "0.2",
            PATH,
            "--",
            "sh",
            "-c",
            script,
        ) as (process, stdout):
            pids = [int(pid) for pid in (await _line(stdout)).split()]
            assert all(_alive(pid) for pid in pids)
            proxy.blackhole(True)  # silence: the lock is lost at half the session timeout
            assert await process.wait() == EX_LOST
            assert process.stderr is not None
            stderr = b"".join([chunk async for chunk in process.stderr])
    # Killed, even the shell that ignores SIGTERM (by SIGKILL after the grace period).
    assert not any(_alive(pid) for pid in pids)
    assert b"the lock was lost" in stderr


@pytest.mark.parametrize("traps", [True, False], ids=["exits-7", "killed-143"])
async def test_sigterm_is_forwarded_to_the_command(
    zk: aiozklock.ZooKeeperClient, hosts: str, traps: bool
) -> None:
    trap = 'trap "echo got-term; exit 7" TERM; ' if traps else ""
    script = f"{trap}echo ready; sleep 60 & wait"
    with anyio.fail_after(HANG_BOUND):
        async with _started("run", "--hosts", hosts, PATH, "--", "sh", "-c", script) as (
            process,
            stdout,
        ):
            assert await _line(stdout) == "ready"
            process.send_signal(signal.SIGTERM)
            status = await process.wait()
            if traps:
                assert await _line(stdout) == "got-term"
        assert status == (7 if traps else 128 + signal.SIGTERM)
        assert await zk.lock(PATH).contenders() == []  # released


async def test_signal_while_waiting_gives_up_with_128_plus_n(
    zk: aiozklock.ZooKeeperClient, hosts: str, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    with anyio.fail_after(HANG_BOUND):
        async with zk.lock(PATH, identifier="the-holder"):
            run = ("run", "--hosts", hosts, PATH, "--", "touch", str(marker))
            async with _started(*run) as (process, _):
                await wait_for_queue(zk, PATH, 2)  # it waits behind us
                process.send_signal(signal.SIGINT)
                assert await process.wait() == 128 + signal.SIGINT
            # Its place in the queue is gone with it.
            await wait_for_children(zk, PATH, lambda children: len(children) == 1)
    assert not marker.exists()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize(
    "args",
    [
        ["run", PATH.lstrip("/"), "--", "true"],
        ["run", "/", "--", "true"],
        ["run", "/zookeeper/x", "--", "true"],
        ["run", PATH],
        ["run", PATH, "--"],
        ["run", "--timeout", "-1", PATH, "--", "true"],
        ["run", "--nonblock", "--timeout", "1", PATH, "--", "true"],
        ["run", "--session-timeout", "0", PATH, "--", "true"],
        ["contenders", "relative"],
        ["holders", "/a/"],
        ["leader", PATH, "extra"],
    ],
)
async def test_bad_usage_exits_64_before_any_connection(args: list[str]) -> None:
    # A server here would answer: 64 rather than 69 shows nothing was contacted.
    hosts = f"127.0.0.1:{_closed_port()}"
    with anyio.fail_after(HANG_BOUND):
        done = await _cli(args[0], "--hosts", hosts, *args[1:])
    assert done.returncode == EX_USAGE, done.stderr
    assert done.stderr.strip(), "a clear message"


async def test_missing_hosts_exit_64() -> None:
    with anyio.fail_after(HANG_BOUND):
        done = await _cli("run", PATH, "--", "true")
    assert done.returncode == EX_USAGE
    assert b"AIOZKLOCK_HOSTS" in done.stderr


async def test_unrunnable_commands_exit_127_and_126(hosts: str, tmp_path: Path) -> None:
    not_executable = tmp_path / "script.sh"
    not_executable.write_text("#!/bin/sh\n")
    with anyio.fail_after(HANG_BOUND):
        missing = await _cli("run", "--hosts", hosts, PATH, "--", "no-such-command-here")
        denied = await _cli("run", "--hosts", hosts, PATH, "--", str(not_executable))
    assert missing.returncode == 127
    assert b"command not found" in missing.stderr
    assert denied.returncode == 126
    assert b"not executable" in denied.stderr


async def test_unavailable_zookeeper_exits_69() -> None:
    hosts = f"127.0.0.1:{_closed_port()}"
    with anyio.fail_after(HANG_BOUND):
        done = await _cli("run", "--hosts", hosts, "--connect-timeout", "0.5", PATH, "--", "true")
        listing = await _cli("holders", "--hosts", hosts, "--connect-timeout", "0.5", "/")
    assert done.returncode == EX_UNAVAILABLE
    assert b"ZooKeeper unavailable" in done.stderr
    assert listing.returncode == EX_UNAVAILABLE


async def test_unavailable_zookeeper_names_each_host_and_why(http_server: str) -> None:
    refused = f"127.0.0.1:{_closed_port()}"
    hosts = f"{refused},{http_server}"
    with anyio.fail_after(HANG_BOUND):
        done = await _cli("holders", "--hosts", hosts, "--connect-timeout", "1", "/")
    assert done.returncode == EX_UNAVAILABLE
    stderr = done.stderr.decode()
    assert f"{refused}: connection refused" in stderr, stderr
    assert f"{http_server}: does not speak ZooKeeper's protocol" in stderr, stderr
    assert "(an HTTP server?)" in stderr, stderr


async def test_help_of_every_command() -> None:
    with anyio.fail_after(HANG_BOUND):
        for command in ("run", "contenders", "holders", "leader"):
            done = await _cli(command, "--help")
            assert done.returncode == 0
            assert b"exit status" in done.stdout
        run_help = (await _cli("run", "--help")).stdout.decode()
    for code in ("64", "69", "70", "75", "126", "127", "128+N"):
        assert f"\n  {code} " in run_help


# ---------------------------------------------------------------------------- read-only


async def _json(*args: str) -> Any:
    done = await _cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_contenders_lists_the_queue_holder_first(
    zk: aiozklock.ZooKeeperClient, hosts: str, open_client: ClientFactory
) -> None:
    other = await open_client()
    with anyio.fail_after(HANG_BOUND):
        async with zk.lock(PATH, identifier="holder-a") as lock, anyio.create_task_group() as tg:

            async def wait() -> None:
                async with other.lock(PATH, identifier="waiter-b", revocable=True):
                    pass

            tg.start_soon(wait)
            await wait_for_queue(zk, PATH, 2)
            report = await _json("contenders", "--hosts", hosts, PATH)
            table = (await _cli("contenders", "--hosts", hosts, PATH)).stdout.decode()
            token = lock.fencing_token
            tg.cancel_scope.cancel()
    assert report["path"] == PATH
    assert report["kind"] == "lock"
    holder, waiter = report["contenders"]
    assert set(holder) == set(waiter) == CONTENDER_KEYS
    assert (holder["position"], holder["is_holder"], holder["identifier"]) == (0, True, "holder-a")
    assert holder["session_id"] == f"0x{zk.session_id:x}"
    assert holder["fencing_token"] == token
    assert holder["pid"] == os.getpid()
    assert holder["queued_for"] >= 0
    assert (waiter["position"], waiter["is_holder"], waiter["identifier"]) == (1, False, "waiter-b")
    assert waiter["session_id"] == f"0x{other.session_id:x}"
    assert (holder["revocable"], waiter["revocable"]) == (False, True)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["STATE", "IDENTIFIER", "HOST"]
    assert lines[1].split()[:2] == ["holder", "holder-a"]
    assert lines[2].split()[:2] == ["waiting", "waiter-b"]


async def test_holders_walks_the_prefix(zk: aiozklock.ZooKeeperClient, hosts: str) -> None:
    with anyio.fail_after(HANG_BOUND):
        async with (
            zk.lock("/locks/a", identifier="a") as a,
            zk.lock("/locks/deep/er/b", identifier="b"),
            zk.lock("/locks/n", identifier="n", fair=False) as n,
            zk.lease_lock("/locks/t", 30, identifier="t") as t,
            zk.lock("/elsewhere/c", identifier="c"),
        ):
            report = await _json("holders", "--hosts", hosts, "/locks")
            tokens = [a.fencing_token, n.fencing_token, t.fencing_token]
    assert report["prefix"] == "/locks"
    locks = report["locks"]
    assert [(x["path"], x["kind"], x["waiting"]) for x in locks] == [
        ("/locks/a", "lock", 0),
        ("/locks/deep/er/b", "lock", 0),
        ("/locks/n", "nonfair", 0),
        ("/locks/t", "lease", 0),
    ]
    assert set(locks[0]) == {"path", "kind", "waiting", "holder", "lock_delay"}
    assert all(set(x["holder"]) == CONTENDER_KEYS for x in locks)
    assert [x["holder"]["identifier"] for x in locks] == ["a", "b", "n", "t"]
    assert [locks[i]["holder"]["fencing_token"] for i in (0, 2, 3)] == tokens
    assert locks[3]["holder"]["session_id"] is None  # a lease is not bound to a session


async def test_leader_reports_the_election(
    zk: aiozklock.ZooKeeperClient, hosts: str, open_client: ClientFactory
) -> None:
    other = await open_client()
    with anyio.fail_after(HANG_BOUND):
        async with zk.election(PATH, identifier="cand-1"), anyio.create_task_group() as tg:

            async def campaign() -> None:
                async with other.election(PATH, identifier="cand-2"):
                    pass

            tg.start_soon(campaign)
            await wait_for_queue(zk, PATH, 2)
            report = await _json("leader", "--hosts", hosts, PATH)
            tg.cancel_scope.cancel()
    assert report["path"] == PATH
    assert report["leader"] == "cand-1"
    assert [c["identifier"] for c in report["contenders"]] == ["cand-1", "cand-2"]
    assert all(set(c) == CONTENDER_KEYS for c in report["contenders"])


async def test_read_only_commands_on_missing_paths_create_nothing(
    zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    with anyio.fail_after(HANG_BOUND):
        await zk.ensure_path("/present")  # the chroot exists; only the paths are missing
        contenders = await _json("contenders", "--hosts", hosts, "/missing/lock")
        holders = await _json("holders", "--hosts", hosts, "/missing")
        leader = await _json("leader", "--hosts", hosts, "/missing/election")
        table = await _cli("contenders", "--hosts", hosts, "/missing/lock")
        assert await zk.exists("/missing") is None
    assert contenders == {
        "path": "/missing/lock",
        "kind": None,
        "lock_delay": None,
        "contenders": [],
    }
    assert holders == {"prefix": "/missing", "locks": []}
    assert leader == {
        "path": "/missing/election",
        "leader": None,
        "lock_delay": None,
        "contenders": [],
    }
    assert table.returncode == 0
    assert table.stdout.decode().strip() == "no contender on /missing/lock"


def test_every_command_the_docs_name_exists() -> None:
    """A command named in the README or on the docs site (`aiozklock X`, `python -m
    aiozklock X`) is one the parser knows: the README once named an ``inspect`` that never
    existed."""
    import re

    from aiozklock.__main__ import build_parser

    parser = build_parser()
    commands = next(
        action.choices for action in parser._actions if isinstance(action.choices, dict)
    )
    named: set[str] = set()
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        named.update(re.findall(r"`(?:python -m )?aiozklock ([a-z][a-z-]*)", page.read_text()))
    assert named, "the docs name no command at all: the pattern is wrong"
    assert named <= set(commands), f"unknown commands in the docs: {named - set(commands)}"


def test_the_operator_commands_import_neither_the_test_kit_nor_aiozk_client() -> None:
    """Parsing a command line (and ``--help``) loads only what the operator commands need:
    not the test kit (``demo`` and ``nemesis`` import it when they run), not a database
    driver (their ``--store`` opens one when they run), and not aiozk's own client (only
    its protocol records are used)."""
    probe = (
        "import sys; from aiozklock.__main__ import build_parser; "
        "import aiozklock._cli._run, aiozklock._cli._inspect, aiozklock._cli._doctor, "
        "aiozklock._cli._top; "
        "build_parser().parse_args(['contenders', '--hosts', 'h:1', '/p']); "
        "build_parser().parse_args(['doctor', '--hosts', 'h:1', '--json', '/p']); "
        "build_parser().parse_args(['top', '--hosts', 'h:1', '--once', '/p']); "
        "print(sorted(m for m in sys.modules if m.startswith(('aiozklock.testing', "
        "'aiozklock.fencing', 'asyncpg', 'psycopg', 'sqlalchemy', 'redis', "
        "'aiozk.client', 'aiozk.session', 'aiozk.recipes'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_the_command_line_choices_are_the_test_kits() -> None:
    from aiozklock._cli._choices import STORES
    from aiozklock._nemesis_kinds import FAULT_KINDS
    from aiozklock.testing._nemesis_plan import FAULT_WEIGHTS
    from aiozklock.testing._nemesis_store import STORES as KIT_STORES

    assert tuple(FAULT_WEIGHTS) == FAULT_KINDS
    assert STORES == KIT_STORES


def test_aiozk_used_beside_us_is_whole() -> None:
    """aiozklock loads aiozk's protocol records without aiozk's package ``__init__``; an
    application importing aiozk afterwards still gets the whole package."""
    probe = (
        "import sys, aiozklock; assert 'aiozk.client' not in sys.modules; "
        "import aiozk, aiozk.protocol; from aiozk import Deadline; "
        "assert aiozk.ZKClient.__name__ == 'ZKClient' and aiozk.protocol.GetDataRequest; "
        "assert aiozk.__version__ and aiozk.client and Deadline; "
        "from aiozklock._wire import _protocol; assert _protocol._jute is aiozk.protocol; "
        "print('ok')"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "ok"


def test_the_grace_defaults_to_a_twentieth_of_the_session_timeout_and_warns_above_a_tenth(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A loss can come at ``valid_until``, a tenth of the session timeout before a re-grant:
    a grace beyond that is said, before anything runs."""
    from aiozklock._cli._run import _grace

    assert _grace(None, 10.0) == 0.5
    assert _grace(1.0, 10.0) == 1.0
    assert capsys.readouterr().err == ""
    assert _grace(2.0, 10.0) == 2.0
    err = capsys.readouterr().err
    assert "--grace 2s exceeds a tenth of the session timeout (1s)" in err
