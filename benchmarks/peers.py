"""The servers of the non-ZooKeeper peers (etcd, Redis), started by the runner on free
ports and stopped by PID, and their columns (drivers).

    with etcd_cluster(3) as endpoints:   # "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
        driver = etcd_driver(endpoints, ETCD3)

Each driver's worker gets the server's address as its ``hosts`` parameter (a fixed
``Params`` field of the driver), so the runner's scenarios need nothing else; the lock
path (a fresh name per scenario and round) is the etcd lock name or the Redis key.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

#: The columns, and the names ``--only`` knows them by.
ETCD, ETCD3, REDIS, REDIS_FAST = "etcd", "etcd (3 members)", "Redis", "Redis (sleep 1 ms)"
NAMES = {"etcd": ETCD, "etcd3": ETCD3, "redis": REDIS, "redis-1ms": REDIS_FAST}
#: Not run unless named: the default Redis column polls as redis-py does by default.
OPTIONAL = ("redis-1ms",)
#: What the peers run (their rows in the main and per-request tables).
SCENARIOS = ("uncontended", "contended", "requests")
#: redis-py's ``Lock(sleep=...)``: its default (0.1 s), and the optional column's.
REDIS_SLEEP = {REDIS: 0.1, REDIS_FAST: 0.001}
START_TIMEOUT = 60.0


def free_ports(count: int) -> list[int]:
    """Ports the kernel hands out now (all bound at once, so distinct), then released."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def _healthy(client_port: int) -> bool:
    try:
        url = f"http://127.0.0.1:{client_port}/health"
        with urllib.request.urlopen(url, timeout=1) as answer:
            return b'"true"' in answer.read()
    except OSError:
        return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to this PID, SIGKILL after 10 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def etcd_cluster(members: int = 1, executable: str | None = None) -> Iterator[str]:
    """``members`` etcd servers on free ports of 127.0.0.1 (one cluster, fsync on: etcd's
    default), each with its own data dir in one temp dir; yields the client endpoints
    ``HOST:PORT,...``; stops each by its PID and removes the temp dir. Raises
    ``FileNotFoundError`` without an ``etcd`` on PATH, ``RuntimeError`` (with the log's
    tail) if the cluster is not healthy within a minute."""
    binary = executable or shutil.which("etcd")
    if binary is None:
        raise FileNotFoundError("no etcd on PATH (apt-get install etcd-server)")
    ports = free_ports(2 * members)
    clients, peers = ports[:members], ports[members:]
    names = [f"m{i}" for i in range(members)]
    cluster = ",".join(f"{n}=http://127.0.0.1:{p}" for n, p in zip(names, peers, strict=True))
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="aiozklock-etcd-")))
        for name, client, peer in zip(names, clients, peers, strict=True):
            log = stack.enter_context(open(work / f"{name}.log", "wb"))
            command = [
                binary,
                *("--name", name, "--data-dir", str(work / name)),
                *("--listen-client-urls", f"http://127.0.0.1:{client}"),
                *("--advertise-client-urls", f"http://127.0.0.1:{client}"),
                *("--listen-peer-urls", f"http://127.0.0.1:{peer}"),
                *("--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}"),
                *("--initial-cluster", cluster, "--initial-cluster-state", "new"),
                *("--initial-cluster-token", work.name, "--logger", "zap"),
            ]
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
            stack.callback(_stop, process)
        deadline = time.monotonic() + START_TIMEOUT
        while not all(_healthy(port) for port in clients):
            if time.monotonic() > deadline:
                tail = (work / "m0.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"etcd ({members} members) not healthy in time:\n{tail}")
            time.sleep(0.1)  # polling readiness: there is nothing to await
        yield ",".join(f"127.0.0.1:{port}" for port in clients)


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """A throwaway ``redis-server`` (the test kit's: free port, no persistence); yields
    its ``redis://`` URL."""
    from aiozklock.testing import RedisServer

    with RedisServer() as server:
        yield server.url


def etcd_driver(endpoints: str, column: str = ETCD3) -> Any:
    """The column ``column`` (etcd's lock service) on the cluster at ``endpoints`` (from
    :func:`etcd_cluster`): a ``run.Driver`` of the peers' scenarios."""
    from benchmarks.run import python_driver

    return python_driver("etcd", column, SCENARIOS, hosts=endpoints)


def redis_driver(url: str, column: str = REDIS) -> Any:
    """The column ``column`` (redis-py's asyncio ``Lock``) on the server at ``url``."""
    from benchmarks.run import python_driver

    return python_driver("redis", column, SCENARIOS, hosts=url, poll=REDIS_SLEEP[column])


def start_drivers(stack: ExitStack, names: Sequence[str]) -> tuple[list[Any], list[str]]:
    """The servers of the peers named (``--only`` names), started into ``stack``, and
    their columns; a server that cannot start is a note, not a failure of the run."""
    drivers: list[Any] = []
    notes: list[str] = []
    runnable = []
    for name in names:
        module = "redis" if name.startswith("redis") else "aetcd"
        if name in NAMES and importlib.util.find_spec(module) is None:
            notes.append(f"{NAMES[name]} skipped: no {module} (the bench dependency group)")
        else:
            runnable.append(name)
    names = runnable
    if "etcd" in names or "etcd3" in names:
        for name, members in (("etcd", 1), ("etcd3", 3)):
            if name not in names:
                continue
            try:
                drivers.append(etcd_driver(stack.enter_context(etcd_cluster(members)), NAMES[name]))
            except (OSError, RuntimeError) as exc:
                notes.append(f"{NAMES[name]} skipped: {exc}")
    redis_names = [name for name in ("redis", "redis-1ms") if name in names]
    if redis_names:
        try:
            url = stack.enter_context(redis_server())
        except (OSError, RuntimeError) as exc:
            return drivers, [*notes, f"Redis skipped: {exc}"]
        drivers += [redis_driver(url, NAMES[name]) for name in redis_names]
    return drivers, notes


def versions() -> dict[str, str]:
    """The peers' servers and client libraries."""
    found: dict[str, str] = {}
    for name, command in (("etcd", ["etcd", "--version"]), ("redis", ["redis-server", "-v"])):
        if shutil.which(command[0]) is None:
            continue
        output = subprocess.run(command, capture_output=True, text=True).stdout
        words = output.replace("v=", "Version: ").split()
        with contextlib.suppress(ValueError, IndexError):
            found[f"{name}-server"] = words[words.index("Version:") + 1]
    for package in ("aetcd", "grpcio", "redis"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[package] = importlib.metadata.version(package)
    return found
