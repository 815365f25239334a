"""``aiozklock top`` in a real terminal, used the way a person would: in tmux (its own
server, on its own socket), keys sent with ``send-keys``, the screen read with
``capture-pane``. The screen is polled (bounded): it is an external terminal, nothing to
await; every verdict is what the screen shows, never how long it took."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import pytest

import aiozklock
from aiozklock.testing import FaultProxy, Opcode
from tests.conftest import ClientFactory, wait_for_queue
from tests.test_cli import REPO

HANG = 60.0  # a hang bound, not a duration: a command's start takes up to 4 s when loaded
PATH = "/shop/orders/157"
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(6 * HANG),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux"),
]

Screen = list[str]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Tmux:
    """One tmux server of our own (``-L``), with one window running ``aiozklock top``
    followed by a shell line that reports its exit status and the terminal's modes."""

    def __init__(self) -> None:
        self.socket = f"aiozklock-top-{uuid.uuid4().hex[:12]}"

    async def tmux(self, *args: str) -> str:
        done = await anyio.run_process(["tmux", "-L", self.socket, *args], check=True)
        return done.stdout.decode()

    async def start(self, *args: str, width: int = 100, height: int = 30) -> None:
        top = shlex.join([sys.executable, "-m", "aiozklock", "top", *args])
        # After top: its status, then whether the terminal is back in its usual modes.
        script = (
            f"env -u AIOZKLOCK_HOSTS PYTHONPATH={shlex.quote(str(REPO))} {top}; "
            'echo "top-exit=$?"; stty -a | tr " " "\\n" | grep -x -e icanon -e echo; '
            "exec sleep 600"
        )
        size = ["-x", str(width), "-y", str(height)]
        await self.tmux("new-session", "-d", *size, "-c", str(REPO), script)

    async def screen(self) -> Screen:
        return (await self.tmux("capture-pane", "-p")).splitlines()

    async def until(self, done: Callable[[Screen], bool], what: str) -> Screen:
        """The screen once ``done(screen)``; fails (showing the screen) after ``HANG``."""
        screen: Screen = []
        with anyio.move_on_after(HANG):
            # An external terminal: nothing to await but its screen, read every 0.1 s.
            while not done(screen := await self.screen()):  # noqa: ASYNC110
                await anyio.sleep(0.1)
            return screen
        raise AssertionError(f"never saw {what}; the screen:\n" + "\n".join(screen))

    async def pane(self, fmt: str) -> str:
        return (await self.tmux("display-message", "-p", fmt)).strip()

    async def kill(self) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.run_process(["tmux", "-L", self.socket, "kill-server"], check=False)


@asynccontextmanager
async def tmux() -> AsyncIterator[Tmux]:
    session = Tmux()
    try:
        yield session
    finally:
        await session.kill()


def row(screen: Screen, path: str) -> list[str]:
    """The cells of ``path``'s row (its marks dropped); [] if not shown."""
    for line in screen:
        cells = line[3:].split()
        if cells and cells[0] == path:
            return cells
    return []


def queue_of(path: str, length: str) -> Callable[[Screen], bool]:
    return lambda screen: row(screen, path)[2:3] == [length]


async def hold(
    client: aiozklock.ZooKeeperClient,
    identifier: str,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Hold (or wait for, then hold) the lock at ``PATH``; started once it holds."""
    async with client.lock(PATH, identifier=identifier):
        task_status.started()
        await anyio.sleep_forever()


async def assert_quit_cleanly(term: Tmux, status: int) -> None:
    """top exited with ``status`` and gave the terminal back: off the alternate screen,
    cursor shown, keys echoed and edited by lines again."""
    screen = await term.until(lambda s: any(x.startswith("top-exit=") for x in s), "its exit")
    await term.until(lambda s: "echo" in s, "the terminal's modes")
    assert f"top-exit={status}" in screen
    assert await term.pane("#{alternate_on} #{cursor_flag}") == "0 1"
    screen = await term.screen()
    assert "icanon" in screen
    assert not any(line.startswith("aiozklock top") for line in screen), "the view is gone"


async def test_the_view_follows_the_queue_without_a_key_and_quits_on_q(
    zk: aiozklock.ZooKeeperClient, hosts: str, open_client: ClientFactory
) -> None:
    other = await open_client()
    async with tmux() as term, anyio.create_task_group() as tg:
        await tg.start(hold, zk, "holder-a")
        await term.start("--hosts", hosts, "/shop")
        first = await term.until(queue_of(PATH, "1"), "the holder")
        assert first[0].startswith("aiozklock top /shop  CONNECTED")
        assert first[0].endswith("q quit  r refresh")
        assert row(first, PATH)[3] == "0"  # LOCAL: no task of its process waits behind it
        assert row(first, PATH)[6:8] == ["holder-a", f"0x{zk.session_id:x}"]
        assert await term.pane("#{alternate_on} #{cursor_flag}") == "1 0"

        tg.start_soon(hold, other, "waiter-b")  # no key pressed: the watches tell top
        screen = await term.until(queue_of(PATH, "2"), "queue length 2")
        assert "1 holding  1 waiting" in screen[1]

        await term.tmux("resize-window", "-x", "80", "-y", "12")
        narrow = await term.until(lambda s: len(s[0].rstrip()) == 80, "an 80-column title")
        assert narrow[0].endswith("q quit  r refresh"), "laid out again for 80 columns"
        assert row(narrow, PATH)[:3] == [PATH, "lock", "2"]
        await term.tmux("resize-window", "-x", "14", "-y", "3")
        tiny = await term.until(lambda s: s[:1] == ["aiozklock top…"], "the title cut")
        assert all(len(line) <= 14 for line in tiny)
        await term.tmux("resize-window", "-x", "100", "-y", "30")
        await term.until(queue_of(PATH, "2"), "the table again")

        await term.tmux("send-keys", "q")
        await assert_quit_cleanly(term, 0)
        tg.cancel_scope.cancel()


async def test_ctrl_c_quits_and_restores_the_terminal(
    zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    async with tmux() as term:
        await zk.ensure_path("/quiet")
        await term.start("--hosts", hosts, "/quiet")
        await term.until(lambda s: "no contender under /quiet" in s, "the first frame")
        await term.tmux("send-keys", "C-c")
        await assert_quit_cleanly(term, 130)


def process_state(pid: int) -> str:
    """``R``, ``S``, ``T`` (stopped), ... of ``pid``."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def only_child(pid: int) -> int:
    (child,) = map(int, Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
    return child


async def test_ctrl_z_gives_the_terminal_back_until_continued(
    zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    async with tmux() as term:
        await zk.ensure_path("/quiet")
        await term.start("--hosts", hosts, "/quiet")
        await term.until(lambda s: "no contender under /quiet" in s, "the first frame")
        top = only_child(int(await term.pane("#{pane_pid}")))  # the pane's shell runs top
        await term.tmux("send-keys", "C-z")
        await term.until(lambda s: not any("/quiet" in line for line in s), "the view gone")
        assert await term.pane("#{alternate_on} #{cursor_flag}") == "0 1"
        assert process_state(top) == "T"  # stopped, as Ctrl-Z asks
        os.kill(top, signal.SIGCONT)  # what the shell's fg does
        await term.until(lambda s: "no contender under /quiet" in s, "the view back")
        assert await term.pane("#{alternate_on} #{cursor_flag}") == "1 0"
        await term.tmux("send-keys", "q")
        await assert_quit_cleanly(term, 0)


async def test_an_outage_is_shown_and_the_view_resumes_with_what_it_missed(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, chroot: str, open_client: ClientFactory
) -> None:
    other = await open_client()
    async with tmux() as term, anyio.create_task_group() as tg:
        await tg.start(hold, zk, "holder-a")
        await term.start("--hosts", proxy.address + chroot, "/shop")
        await term.until(queue_of(PATH, "1"), "the holder")

        proxy.blackhole(True, new="refuse")
        await proxy.drop_all()
        down = await term.until(lambda s: "SUSPENDED for" in s[0], "SUSPENDED")
        assert row(down, PATH)[2] == "1", "the last view stays"
        tg.start_soon(hold, other, "waiter-b")  # while top cannot see
        await wait_for_queue(zk, PATH, 2)

        proxy.blackhole(False)  # its session lives: the watches are re-armed, and fire
        up = await term.until(queue_of(PATH, "2"), "the waiter added during the outage")
        assert "CONNECTED" in up[0]
        await term.tmux("send-keys", "q")
        await assert_quit_cleanly(term, 0)
        tg.cancel_scope.cancel()


@pytest.mark.slow
async def test_a_lost_session_is_shown_and_the_view_goes_on_in_a_new_one(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, chroot: str, open_client: ClientFactory
) -> None:
    """A partition longer than top's session timeout (10 s), a reading in flight: the view
    says SUSPENDED (no clock of a client knows that its session expired); once the partition
    heals the server says it did, the view says LOST and goes on in a new session."""
    other = await open_client()
    async with tmux() as term, anyio.create_task_group() as tg:
        await tg.start(hold, zk, "holder-a")
        await term.start("--hosts", proxy.address + chroot, "/shop")
        await term.until(queue_of(PATH, "1"), "the holder")

        proxy.blackhole(True)  # silent: requests go out and hang, nothing comes back
        proxy.reset_counters()
        await term.tmux("send-keys", "r")  # a reading, stuck in the partition
        with anyio.fail_after(HANG):
            await proxy.wait_for_request(Opcode.GET_DATA)
        # The scenario, not a synchronization: the partition outlasts the session timeout
        # (10 s, plus the server's tick), counted by the view itself.
        await term.until(lambda s: suspended_for(s) >= 12, "SUSPENDED for 12 s")
        tg.start_soon(hold, other, "waiter-b")
        await wait_for_queue(zk, PATH, 2)

        proxy.blackhole(False)
        await term.until(lambda s: "LOST" in s[0] or "CONNECTED" in s[0], "LOST, then on")
        up = await term.until(queue_of(PATH, "2"), "the view in the new session")
        assert "CONNECTED" in up[0]
        await term.tmux("send-keys", "q")
        await assert_quit_cleanly(term, 0)
        tg.cancel_scope.cancel()


def suspended_for(screen: Screen) -> int:
    """The seconds in the title's ``SUSPENDED for Ns`` (-1 if it does not say)."""
    words = screen[0].split() if screen else []
    if "SUSPENDED" not in words or words.index("SUSPENDED") + 2 >= len(words):
        return -1
    text = words[words.index("SUSPENDED") + 2]
    return int(text[:-1]) if text.endswith("s") and text[:-1].isdigit() else -1


def updated(screen: Screen) -> int:
    """The seconds in the title's ``updated Ns ago`` (-1 if it does not say)."""
    words = screen[0].split() if screen else []
    text = words[words.index("updated") + 1] if "updated" in words[:-1] else ""
    return int(text[:-1]) if text.endswith("s") and text[:-1].isdigit() else -1


async def test_nothing_is_read_while_nothing_changes(
    zk: aiozklock.ZooKeeperClient, proxy: FaultProxy, chroot: str
) -> None:
    """No polling: while the tree stays as it is, top sends nothing but pings (its
    readings' clock probes fire its own watch, which must not cause another reading)."""
    async with tmux() as term, anyio.create_task_group() as tg:
        await tg.start(hold, zk, "holder-a")
        await term.start("--hosts", proxy.address + chroot, "/shop")
        await term.until(queue_of(PATH, "1"), "the holder")
        await term.until(lambda s: updated(s) >= 1, "the view a second old")
        proxy.reset_counters()
        seen = updated(await term.screen())
        # Three ticks of the local clock later, and no reading in between:
        quiet = await term.until(lambda s: updated(s) >= seen + 3, "three more ticks")
        assert row(quiet, PATH)[2] == "1"
        opcodes = {request.opcode for request in proxy.requests}
        assert opcodes <= {Opcode.PING}, f"requests while nothing changed: opcodes {opcodes}"
        await term.tmux("send-keys", "r")  # a reading on demand does go out
        with anyio.fail_after(HANG):
            await proxy.wait_for_request(Opcode.GET_DATA)  # the doctor reads every node
        tg.cancel_scope.cancel()
