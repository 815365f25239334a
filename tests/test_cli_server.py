"""``aiozklock server`` run as a user runs it: a process of its own, on free ports, used by a
real client, stopped by SIGINT or SIGTERM; and the refusals that start nothing."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

import aiozklock
from aiozklock.testing import PortTaken
from aiozklock.testing._server_layout import check_port_free, free_ports

REPO = Path(__file__).resolve().parent.parent  # run this checkout's code
HANG_BOUND = 120.0  # JVM starts on a loaded 2-core machine: a hang bound, not an expectation
pytestmark = pytest.mark.timeout(3 * HANG_BOUND)


def _free_run(count: int) -> int:
    """A port P of 127.0.0.1 such that P..P+count-1 are free."""
    for _ in range(50):
        [first] = free_ports(1)
        try:
            for port in range(first, first + count):
                check_port_free(port)
        except PortTaken:
            continue
        if first + count <= 65536:
            return first
    raise AssertionError("no run of free ports")


class Server:
    """A running ``aiozklock server`` process and what it printed."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.printed: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def banner(self) -> tuple[str, list[int]]:
        """The connect string and the member PIDs it printed, once it serves."""
        while True:
            line = self.lines.get(timeout=HANG_BOUND)
            assert line is not None, f"exited before serving:\n{self.stop_output()}"
            self.printed.append(line)
            if line.startswith("connect string: "):
                pids = [int(p) for p in re.findall(r"\bpid (\d+)", "\n".join(self.printed))]
                return line.removeprefix("connect string: "), pids

    def stop_output(self) -> str:
        self.proc.wait(timeout=HANG_BOUND)
        assert self.proc.stderr is not None
        return "\n".join(self.printed) + "\n--- stderr:\n" + self.proc.stderr.read()


@contextmanager
def server(*args: str, env: dict[str, str] | None = None) -> Iterator[Server]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiozklock", "server", *args],
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield Server(proc)
    finally:
        if proc.poll() is None:  # a failed test: stop it as a user would
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=HANG_BOUND)


def _children(pid: int) -> set[int]:
    """The PIDs of ``pid``'s children, from /proc."""
    found: set[int] = set()
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        found.update(int(child) for child in children.read_text().split())
    return found


def _stop(running: Server, sig: signal.Signals, pids: list[int]) -> str:
    """Send ``sig``; assert the server exits 0 and every JVM it started is gone."""
    running.proc.send_signal(sig)
    output = running.stop_output()
    assert running.proc.returncode == 0, output
    assert "Traceback" not in output
    left = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    assert not left, f"JVMs left running: {left}\n{output}"
    return output


async def _lock_and_mark(hosts: str, mark: str | None = None) -> bool:
    """Take a lock through ``hosts``; whether ``/kept`` existed; then create ``mark``."""
    async with aiozklock.connect(hosts, session_timeout=4.0) as zk:
        lock = zk.lock("/locks/orders/157")
        async with lock.acquire(timeout=30.0):
            assert lock.fencing_token > 0
        kept = await zk.exists("/kept") is not None
        if mark is not None:
            await zk.ensure_path(mark)
        return kept


def test_standalone_serves_stops_on_sigint_and_keeps_its_data(tmp_path: Path) -> None:
    port = _free_run(1)
    data = tmp_path / "zk-data"
    with server("--port", str(port), "--data", str(data)) as running:
        hosts, pids = running.banner()
        assert hosts == f"127.0.0.1:{port}"
        assert len(pids) == 1
        assert _children(running.proc.pid) == set(pids)  # the PIDs it printed are its JVMs
        assert not anyio.run(_lock_and_mark, hosts, "/kept")
        output = _stop(running, signal.SIGINT, pids)
    assert "SIGINT: stopping" in output
    assert (data / "zk1" / "data").is_dir()  # --data outlives the run

    with server("--port", str(port), "--data", str(data)) as running:  # the same data again
        hosts, pids = running.banner()
        assert anyio.run(_lock_and_mark, hosts)  # /kept survived the restart
        _stop(running, signal.SIGTERM, pids)


def test_an_ensemble_serves_on_consecutive_ports_and_stops_every_member() -> None:
    port = _free_run(3)
    with server("--port", str(port), "--ensemble", "3") as running:
        hosts, pids = running.banner()
        assert hosts == ",".join(f"127.0.0.1:{port + i}" for i in range(3))
        assert len(pids) == 3
        assert _children(running.proc.pid) == set(pids)
        banner = "\n".join(running.printed)
        assert banner.count("mode leader") == 1
        assert banner.count("mode follower") == 2
        anyio.run(_lock_and_mark, hosts)
        data = re.search(r"^data: (\S+)", banner, re.M)
        assert data is not None
        _stop(running, signal.SIGINT, pids)
    assert not Path(data[1]).exists()  # the temp data is removed at exit


def _run_server(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aiozklock", "server", *args],
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=HANG_BOUND,
    )


def test_without_jars_it_says_how_to_install_them(tmp_path: Path) -> None:
    run = _run_server("--port", "1", env={"ZOOKEEPER_HOME": str(tmp_path)})
    assert run.returncode == 2
    assert f"ZOOKEEPER_HOME={tmp_path} holds no zookeeper*.jar" in run.stderr
    assert "apt-get install zookeeper default-jre-headless" in run.stderr
    assert "compose.yaml" in run.stderr
    assert "Traceback" not in run.stderr
    assert run.stdout == ""


def test_without_java_it_says_how_to_install_it(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "JAVA_HOME": str(tmp_path), "ZOOKEEPER_HOME": ""}
    run = _run_server(env=env)
    assert run.returncode == 2
    assert "no Java runtime" in run.stderr
    assert "apt-get install zookeeper default-jre-headless" in run.stderr
    assert "Traceback" not in run.stderr


def test_a_port_in_use_is_a_clear_error_and_starts_nothing() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = _run_server("--port", str(port), env={})
    assert run.returncode == 1
    assert f"port {port} of 127.0.0.1 is in use" in run.stderr
    assert "--port" in run.stderr
    assert "Traceback" not in run.stderr
