"""The test kit's servers do not outlive a process killed by SIGKILL (a pytest worker, a
script): its JVMs die with it, even those started from a thread that ended long before, and
the next cluster started in the same base directory removes the dead process's temp
folder (and stops what still runs from it, where servers outlive their owner)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from aiozklock.testing import ZooKeeperCluster, four_letter_word
from aiozklock.testing._server_workdir import (
    PREFIX,
    make_work_dir,
    sweep_dead_owners,
    work_dir_property,
)
from tests.test_cli_server import HANG_BOUND, REPO
from tests.test_cli_server_leftovers import kill_leftovers, refuses, wait_gone

pytestmark = pytest.mark.timeout(3 * HANG_BOUND)

# Starts a server from a thread that ends, waits until the kernel has seen that thread exit
# (a JVM bound to its starting thread would die then), prints what the test needs, and
# stays until it is killed.
_OWNER = """
import sys, threading, time
from pathlib import Path
from aiozklock.testing import ZooKeeperCluster

cluster = ZooKeeperCluster(1, base_dir=Path(sys.argv[1]))
starter = threading.Thread(target=cluster.start)
starter.start()
starter.join()
task = Path(f"/proc/self/task/{starter.native_id}")
deadline = time.monotonic() + 30.0
while task.exists() and time.monotonic() < deadline:  # no event for a thread's exit
    time.sleep(0.01)
member = cluster.members[0]
print(member.pid, member.client_port, cluster.work_dir, task.exists(), flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's guarantee")
def test_a_killed_owner_takes_its_servers_along_and_its_folder_goes_at_the_next_start(
    tmp_path: Path,
) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None
        pid_text, port_text, folder_text, thread_left = owner.stdout.readline().split()
        pid, port, folder = int(pid_text), int(port_text), Path(folder_text)
        assert thread_left == "False"
        try:
            # The thread that started it has ended: the server still serves.
            assert four_letter_word(f"127.0.0.1:{port}", "srvr", 10.0).startswith("Zookeeper")
            assert folder.parent == tmp_path
            owner.kill()
            owner.wait(timeout=HANG_BOUND)
            assert not wait_gone([pid]), "the JVM outlived its owner's SIGKILL"
        finally:
            kill_leftovers([pid])
        assert refuses(port)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()

    with ZooKeeperCluster(1, base_dir=tmp_path) as cluster:
        assert not folder.exists(), f"{folder} outlived its killed owner's next start"
        assert cluster.work_dir is not None
        assert cluster.work_dir.exists()
    assert list(tmp_path.iterdir()) == []


_MAKE_AND_DIE = """
import sys
from pathlib import Path
from aiozklock.testing._server_workdir import make_work_dir
print(make_work_dir(Path(sys.argv[1])))
"""


def test_a_sweep_stops_a_dead_owners_servers_and_keeps_what_is_not_proven_dead(
    tmp_path: Path,
) -> None:
    """Where servers outlive their owner (macOS), the next start stops them: they hold the
    ports. Folders of a living owner, or without an owner's record, are kept."""
    mine = make_work_dir(tmp_path)
    made = subprocess.run(
        [sys.executable, "-c", _MAKE_AND_DIE, str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
        timeout=HANG_BOUND,
    )
    dead = Path(made.stdout.strip())  # its owner has exited
    unrecorded = tmp_path / f"{PREFIX}unrecorded"  # being made, or another version's
    unrecorded.mkdir()
    reused = tmp_path / f"{PREFIX}reused"  # its owner's PID is another process's now
    reused.mkdir()
    (reused / "owner").write_text(f"{os.getpid()} 1 {socket.gethostname()}\n")
    [(name, value)] = work_dir_property(dead).items()
    # Stands for a JVM that outlived its owner: it has the property on its command line.
    orphan = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()", f"-D{name}={value}"],
        stdin=subprocess.PIPE,
    )
    try:
        sweep_dead_owners(tmp_path)
        assert orphan.wait(timeout=HANG_BOUND) == -signal.SIGKILL
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()
    assert sorted(tmp_path.iterdir()) == sorted([mine, unrecorded])
