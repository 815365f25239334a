"""``aiozklock server`` killed by SIGKILL leaves nothing behind: its JVMs die with it (their
client ports refuse connections), and the next start removes its temp folder; an even
ensemble size is warned about, and starts all the same."""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import socket
import time
from pathlib import Path

import pytest

from tests.test_cli_server import HANG_BOUND, _children, _free_run, _run_server, _stop, server

pytestmark = pytest.mark.timeout(4 * HANG_BOUND)

#: How long a JVM may outlive its killed parent: the kernel kills it at once (a bound on a
#: loaded machine, not an expectation).
DEATH_BOUND = 30.0


def wait_gone(pids: list[int], within: float = DEATH_BOUND) -> list[int]:
    """Wait (pidfd: woken by each exit, bounded) until every process of ``pids`` has exited;
    returns those still running at the deadline."""
    deadline = time.monotonic() + within
    left = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                left.append(pid)
        finally:
            os.close(fd)
    return left


def refuses(port: int) -> bool:
    """Whether ``127.0.0.1:port`` refuses a connection (nothing listens there)."""
    with socket.socket() as sock:
        try:
            sock.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            return True
    return False


def kill_leftovers(pids: list[int]) -> None:
    """SIGKILL whichever of ``pids`` (JVMs this test's server started) still run: a failed
    test must not leave them behind."""
    for pid in wait_gone(pids, within=0.0):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _data_dir(printed: list[str]) -> Path:
    found = re.search(r"^data: (\S+)", "\n".join(printed), re.M)
    assert found is not None
    return Path(found[1])


@pytest.mark.parametrize("size", [1, 3])
def test_killed_by_sigkill_its_jvms_die_and_the_next_start_removes_its_folder(
    size: int, tmp_path: Path
) -> None:
    port = _free_run(size)
    args = ("--port", str(port), "--ensemble", str(size))
    env = {"TMPDIR": str(tmp_path)}  # its temp folder, apart from every other test's
    with server(*args, env=env) as running:
        _, pids = running.banner()
        assert len(pids) == size
        assert _children(running.proc.pid) == set(pids)
        folder = _data_dir(running.printed)
        assert folder.parent == tmp_path
        try:
            running.proc.kill()
            running.proc.wait(timeout=HANG_BOUND)
            left = wait_gone(pids)
            assert not left, f"JVMs left running after SIGKILL: {left}"
        finally:
            kill_leftovers(pids)
        closed = [p for p in range(port, port + size) if not refuses(p)]
        assert not closed, f"ports still accepting connections: {closed}"

    # The next start, on the same ports (they are free), sweeps the dead run's folder.
    with server(*args, env=env) as running:
        _, pids = running.banner()
        assert not folder.exists(), f"{folder} outlived its killed owner's next start"
        assert _data_dir(running.printed).exists()
        output = _stop(running, signal.SIGTERM, pids)
    assert "odd size" not in output
    assert list(tmp_path.iterdir()) == []  # and the exit removed its own


def test_an_even_ensemble_is_warned_about_and_starts_all_the_same() -> None:
    port = _free_run(2)
    with server("--port", str(port), "--ensemble", "2") as running:
        hosts, pids = running.banner()
        assert hosts == f"127.0.0.1:{port},127.0.0.1:{port + 1}"
        output = _stop(running, signal.SIGTERM, pids)
    warning = (
        "aiozklock server: an ensemble of 2 survives the loss of 0 members, the same as 1: "
        "use an odd size"
    )
    assert warning in output.partition("--- stderr:\n")[2]


def test_the_even_size_warning_comes_before_the_start() -> None:
    with socket.socket() as taken:  # nothing starts: the warning is said before trying
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = _run_server("--port", str(port), "--ensemble", "4", env={})
    assert run.returncode == 1
    assert (
        "an ensemble of 4 survives the loss of 1 member, the same as 3: use an odd size"
        in run.stderr
    )
    assert f"port {port} of 127.0.0.1 is in use" in run.stderr


def test_an_odd_ensemble_is_not_warned_about() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = _run_server("--port", str(port), "--ensemble", "3", env={})
    assert run.returncode == 1
    assert "odd size" not in run.stderr
