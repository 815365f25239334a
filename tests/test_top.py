"""``aiozklock top``: the screen model (pure: any size, foreign text, the session's state),
``--once`` on real ZooKeeper (a held lock and a waiter, a two-session deadlock, the exit
codes), and the watches, which come back after a lost session. The live view in a real
terminal is tests/test_top_tmux.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

import aiozklock
from aiozklock import Diagnosis, Finding, FindingKind, Severity
from aiozklock._doctor._model import Party, QueueState, Wait
from aiozklock._recipes._core._contenders import Contender
from aiozklock._top._screen import Snapshot, frame, plain
from aiozklock._top._text import cells
from aiozklock._top._watch import TreeWatch
from aiozklock.testing import FaultProxy, expire_session, session_of
from tests.conftest import ClientFactory, wait_for_queue
from tests.test_cli import REPO, _closed_port, _env

HANG = 60.0  # a hang bound, not a duration: a command's start takes up to 4 s when loaded
EX_PROBLEMS, EX_USAGE, EX_UNAVAILABLE = 1, 64, 69
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(4 * HANG)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the commands run in their own processes


async def top(*args: str, stdin: int | None = subprocess.DEVNULL) -> tuple[int, str, str]:
    """``aiozklock top ARGS`` to its end: the status, stdout and stderr."""
    argv = [sys.executable, "-m", "aiozklock", "top", *args]
    with anyio.fail_after(HANG):
        done = await anyio.run_process(argv, cwd=REPO, env=_env(), check=False, stdin=stdin)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def row_of(text: str, path: str) -> list[str]:
    """The cells of ``path``'s row in the queue table (its marks dropped)."""
    for line in text.splitlines():
        cells_ = line[3:].split()
        if cells_ and cells_[0] == path:
            return cells_
    raise AssertionError(f"no row for {path} in:\n{text}")


AGE = re.compile(r"^\d+s$|^\d+m\d\ds$")


# ---------------------------------------------------------------------------- --once


async def test_once_shows_the_holder_a_waiter_and_their_ages(
    zk: aiozklock.ZooKeeperClient, hosts: str, open_client: ClientFactory
) -> None:
    other = await open_client()
    async with zk.lock("/shop/orders/157", identifier="holder-a"), anyio.create_task_group() as tg:
        tg.start_soon(_take, other, "/shop/orders/157")
        await wait_for_queue(zk, "/shop/orders/157", 2)
        status, out, err = await top("--once", "--hosts", hosts, "/shop")
        tg.cancel_scope.cancel()
    assert status == 0, err
    assert "\x1b" not in out, "plain text: no terminal control codes"
    title, summary = out.splitlines()[:2]
    assert title.startswith("aiozklock top /shop  CONNECTED  at ")
    assert "1 queue  1 holding  1 waiting" in summary
    assert summary.endswith("healthy")
    path, kind, queue, local, held, waited, *holder = row_of(out, "/shop/orders/157")
    assert (path, kind, queue, local) == ("/shop/orders/157", "lock", "2", "0")
    assert AGE.match(held), held
    assert AGE.match(waited), waited
    assert holder[:2] == ["holder-a", f"0x{zk.session_id:x}"]
    assert "the doctor finds nothing wrong" in out


async def _take(client: aiozklock.ZooKeeperClient, path: str) -> None:
    async with client.lock(path, identifier="waiter-b"):
        await anyio.sleep_forever()


@asynccontextmanager
async def deadlocked(
    zk: aiozklock.ZooKeeperClient, parties: Sequence[tuple[Any, Any]], paths: Sequence[str]
) -> AsyncIterator[None]:
    """Each party (first, second) takes ``first``; once all have, each waits for
    ``second``; the body runs once every path in ``paths`` has a holder and a waiter."""
    taken = [anyio.Event() for _ in parties]

    async def party(index: int, first: Any, second: Any) -> None:
        async with first:
            taken[index].set()
            for event in taken:
                await event.wait()
            async with second:
                raise AssertionError(f"party {index} got its second lock: no deadlock")

    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            for index, (first, second) in enumerate(parties):
                tg.start_soon(party, index, first, second)
            for event in taken:
                await event.wait()
            for path in paths:
                await wait_for_queue(zk, path, 2)
            yield
            tg.cancel_scope.cancel()


async def test_once_shows_a_deadlock_and_exits_1(
    zk: aiozklock.ZooKeeperClient, hosts: str, open_client: ClientFactory
) -> None:
    one, two = await open_client(), await open_client()
    parties = [(one.lock("/dl/a"), one.lock("/dl/b")), (two.lock("/dl/b"), two.lock("/dl/a"))]
    async with deadlocked(zk, parties, ["/dl/a", "/dl/b"]):
        status, out, err = await top("--once", "--hosts", hosts, "/dl")
    assert status == EX_PROBLEMS, err
    assert "problems: 1 critical" in out.splitlines()[1]
    marked = [line[3:].split()[0] for line in out.splitlines() if line.startswith("!! ")]
    assert sorted(marked) == ["/dl/a", "/dl/b"]  # the one waited on longest first
    assert "FINDINGS (1)" in out
    (finding,) = [line for line in out.splitlines() if line.startswith("CRITICAL deadlock:")]
    for session in (one.session_id, two.session_id):
        assert f"0x{session:x}" in finding
    assert "→ /dl/a →" in finding
    assert "→ /dl/b →" in finding
    assert f"0x{one.session_id:x} (task " in out
    assert "waits at /dl/b" in out
    assert "what to do: end one of them" in out


async def test_once_on_nothing_is_healthy(zk: aiozklock.ZooKeeperClient, hosts: str) -> None:
    await zk.ensure_path("/")
    status, out, err = await top("--once", "--hosts", hosts, "/nothing")
    assert status == 0, err
    assert "no contender under /nothing" in out
    assert await zk.exists("/nothing") is None  # read-only: nothing created


@pytest.mark.parametrize(
    "args",
    [
        ["--once", "relative"],
        ["--once", "/trailing/"],
        ["--once", "--hold-warning", "-1", "/p"],
        ["--once", "--queue-warning", "0", "/p"],
        ["--once", "/p", "extra"],
        ["/p"],  # the live view, without a terminal
    ],
)
async def test_bad_usage_exits_64_before_any_traffic(args: list[str]) -> None:
    # A closed port: a command that tried to connect would exit 69, not 64.
    status, out, err = await top("--hosts", f"127.0.0.1:{_closed_port()}", *args)
    assert status == EX_USAGE, err
    assert err.strip()
    assert not out


async def test_help_says_what_the_view_shows_and_the_exit_codes() -> None:
    status, out, _ = await top("--help")
    assert status == 0
    for words in ("QUEUE counts holders and waiters", "q quits", "--once", "exit status"):
        assert words in " ".join(out.split()), words


async def test_the_live_view_without_a_terminal_says_to_use_once() -> None:
    status, _, err = await top("--hosts", "127.0.0.1:1", "/p")
    assert status == EX_USAGE
    assert "needs a terminal: use --once" in err


@pytest.mark.parametrize("once", [True, False])
async def test_zookeeper_unavailable_exits_69(once: bool) -> None:
    hosts = f"127.0.0.1:{_closed_port()}"
    args = ["--hosts", hosts, "--connect-timeout", "0.5", *(["--once"] if once else []), "/p"]
    if once:
        status, _, err = await top(*args)
    else:  # the live view needs a terminal: give it a pseudo-terminal
        status, err = await _in_a_pty(args)
    assert status == EX_UNAVAILABLE
    assert "ZooKeeper unavailable" in err


async def _in_a_pty(args: list[str]) -> tuple[int, str]:
    """``aiozklock top ARGS`` with a pseudo-terminal for stdin and stdout: the status and
    stderr (what it wrote on the terminal is read and dropped)."""
    primary, secondary = os.openpty()
    try:
        argv = [sys.executable, "-m", "aiozklock", "top", *args]
        process = await anyio.open_process(
            argv, cwd=REPO, env=_env(), stdin=secondary, stdout=secondary
        )
        os.close(secondary)
        secondary = -1
        async with process, anyio.create_task_group() as tg:
            tg.start_soon(_drain, primary)
            assert process.stderr is not None
            with anyio.fail_after(HANG):
                err = b"".join([chunk async for chunk in process.stderr]).decode()
                status = await process.wait()
            tg.cancel_scope.cancel()
    finally:
        os.close(primary)
        if secondary >= 0:
            os.close(secondary)
    return status, err


async def _drain(fd: int) -> None:
    while True:
        await anyio.wait_readable(fd)
        try:
            if not os.read(fd, 4096):
                return
        except OSError:  # EIO: the terminal's last user is gone
            return


# ---------------------------------------------------------------------------- the watches


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_the_watches_come_back_after_a_lost_session(
    zk_hosts: str, proxy: FaultProxy, open_client: ClientFactory, zk: aiozklock.ZooKeeperClient
) -> None:
    """A lost session forgets its watches: the tree is listed again, with watches, in the
    new session, and a change after that is still heard."""
    watcher = await open_client(proxy)
    changes = 0
    changed = anyio.Event()

    def on_change() -> None:
        nonlocal changes
        changes += 1
        changed.set()

    async def until(done: Callable[[], bool]) -> None:
        nonlocal changed
        while not done():
            await changed.wait()
            changed = anyio.Event()

    tree = TreeWatch(session_of(watcher), "/w", on_change)
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(tree.run)
            await until(lambda: changes >= 1)  # the first listing: /w does not exist yet
            assert tree.watched == 0
            async with zk.lock("/w/x/a"):
                # /w created: its exists watch fired; then each level's children watch.
                await until(lambda: tree.watched == 4)  # /w, /w/x, /w/x/a, the holder's node
                before, lost = changes, watcher.session_id
                proxy.blackhole(True)  # cut off, so that it cannot take its session back
                await proxy.drop_all()
                await expire_session(zk_hosts, lost, watcher.session_password)
                proxy.blackhole(False)
                await until(lambda: changes > before)  # all listed again, in the new session
                assert watcher.session_id not in (0, lost)
                assert tree.watched == 4
                before = changes
            await until(lambda: changes > before)  # the release, heard in the new session
            tg.cancel_scope.cancel()


# ---------------------------------------------------------------------------- the screen


def contender(session: int, at: float, *, holder: bool, **identity: Any) -> Contender:
    return Contender(
        node=f"n-{session}",
        sequence=0,
        is_holder=holder,
        fencing_token=1,
        session_id=session,
        identifier=identity.get("identifier"),
        host=identity.get("host"),
        pid=identity.get("pid"),
        task=identity.get("task"),
        enqueued_at=at,
    )


NOW = 1_800_000_000.0


def diagnosis(*queues: QueueState, findings: Sequence[Finding] = ()) -> Diagnosis:
    return Diagnosis(
        prefix="/locks",
        findings=tuple(findings),
        queues=queues,
        nodes_scanned=10,
        elapsed=0.01,
        server_time=NOW,
        clock="server",
        hold_warning=60.0,
        queue_warning=10,
        leftover_age=600.0,
    )


def crowded() -> Diagnosis:
    """Twelve queues with long paths and a deadlock with a long message."""
    queues = [
        QueueState(
            f"/locks/tenants/{i:04d}/orders/世界/{'x' * i}",
            "lock",
            (contender(100 + i, NOW - 65 * i, holder=True, identifier=f"worker-{i}", pid=i),),
            tuple(contender(200 + i, NOW - 7, holder=False) for _ in range(i % 3)),
        )
        for i in range(12)
    ]
    party = Party(0x100, "main", "aiozklock", "host-a", 7, "billing")
    cycle = (Wait(party, queues[1].path, "n-1"), Wait(party, queues[2].path, "n-2"))
    deadlock = Finding(
        FindingKind.DEADLOCK,
        Severity.CRITICAL,
        "2 sessions wait for each other: " + " → ".join(q.path for q in queues[:3]),
        "end one of them " * 12,
        paths=(queues[1].path, queues[2].path),
        cycle=cycle,
    )
    return diagnosis(*queues, findings=[deadlock])


def test_any_size_fits_and_never_fails() -> None:
    snapshot = Snapshot("/locks", "CONNECTED", crowded(), since=3.0)
    for width in (*range(0, 30), 40, 57, 80, 100, 133, 200):
        for height in (*range(0, 12), 24, 30, 50):
            lines = frame(snapshot, width, height)
            assert len(lines) <= height
            for line in lines:
                assert cells(line.text) <= width, (width, height, line.text)
    tall = frame(snapshot, 100, 200)
    assert len(tall) < 200, "everything fits: nothing cut"
    assert not any(" more " in line.text for line in tall)
    short = [line.text for line in frame(snapshot, 100, 20)]
    assert any(re.search(r"\.\.\. \d+ more queues", text) for text in short)
    assert any("FINDINGS (1)" in text for text in short), "the findings keep their share"


def test_text_from_other_clients_cannot_drive_the_terminal() -> None:
    evil = "\x1b[2J\x1b]0;pwned\x07\r\n\t\u200b"
    queue = QueueState(
        "/locks/a", "lock", (contender(1, NOW, holder=True, identifier=evil, task=evil),), ()
    )
    for width in (None, 80):
        text = plain(frame(Snapshot("/locks", "CONNECTED", diagnosis(queue)), width, 30))
        assert not any(ch in text for ch in "\x1b\x07\r\t\u200b"), repr(text)
        assert "[2J" in text  # shown, harmless


def test_ages_move_on_between_readings() -> None:
    queue = QueueState(
        "/locks/a",
        "lock",
        (contender(1, NOW - 50, holder=True),),
        (contender(2, NOW - 5, holder=False),),
    )
    later = plain(frame(Snapshot("/locks", "CONNECTED", diagnosis(queue), since=20.0), 100, 30))
    assert row_of(later, "/locks/a")[2:6] == ["2", "-", "1m10s", "25s"]
    assert "updated 20s ago" in later.splitlines()[0]


@pytest.mark.parametrize("state", ["SUSPENDED", "LOST"])
def test_a_lost_connection_keeps_the_last_view_marked(state: str) -> None:
    queue = QueueState("/locks/a", "lock", (contender(1, NOW, holder=True),), ())
    snapshot = Snapshot(
        "/locks", state, diagnosis(queue), since=9.0, state_for=4.0, note="connection refused"
    )
    lines = frame(snapshot, 100, 30)
    assert lines[0].style == "critical"
    assert f"{state} for 4s  updated 9s ago" in lines[0].text
    assert lines[2].text == "connection refused"
    assert "/locks/a" in plain(lines)
