"""The doctor at scale: ``aiozklock doctor --json`` (a process of its own) and the API's
``diagnose()`` on a healthy tree of N locks (default 10,000: 20,101 nodes, each lock held by
one ephemeral node, 100 locks per parent), timed. The figure in docs/troubleshooting.md
("10,000 locks read and diagnosed in 1.7 to 2.5 s") is this script's; the test suite reads
a smaller tree (tests/test_doctor_cli.py, through :func:`build_tree`).

    PYTHONPATH=. .venv/bin/python benchmarks/doctor_scale.py [--locks 10000] [--hosts H]

Without ``--hosts`` it starts a throwaway ZooKeeper on a free port.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

import anyio

import aiozklock
from aiozklock._wire._protocol import CreateMode, create_op, delete_op
from aiozklock.testing import ZooKeeperCluster, session_of

BATCH = 2000  # create requests per pipelined batch
PER_PARENT = 100  # locks under one parent
IDENTITY = json.dumps({"identifier": None, "host": "h", "pid": 1, "task": "t"}).encode()


async def create_nodes(
    zk: aiozklock.ZooKeeperClient, paths: list[str], holder: bool = False, data: bytes = b""
) -> None:
    """Create the nodes in pipelined batches (persistent, or ephemeral sequential holders)."""
    session = session_of(zk)
    mode = CreateMode.EPHEMERAL | CreateMode.SEQUENTIAL if holder else CreateMode(0)
    for start in range(0, len(paths), BATCH):
        ops = [
            create_op(session.server_path(p), data, mode, session.client_path)
            for p in paths[start : start + BATCH]
        ]
        for result in await session.pipeline(ops):
            assert not isinstance(result, BaseException), result


async def delete_nodes(zk: aiozklock.ZooKeeperClient, paths: list[str]) -> None:
    """Delete the nodes (childless ones) in pipelined batches."""
    session = session_of(zk)
    for start in range(0, len(paths), BATCH):
        ops = [delete_op(session.server_path(p)) for p in paths[start : start + BATCH]]
        for result in await session.pipeline(ops):
            assert not isinstance(result, BaseException), result


def lock_paths(prefix: str, locks: int) -> list[str]:
    return [f"{prefix}/{i // PER_PARENT}/lock-{i}" for i in range(locks)]


def nodes_in(locks: int) -> int:
    """The nodes a diagnosis of :func:`build_tree`'s tree reads: the prefix, the parents,
    and each lock's node and its holder."""
    return 1 + -(-locks // PER_PARENT) + 2 * locks


async def build_tree(zk: aiozklock.ZooKeeperClient, prefix: str, locks: int) -> float:
    """``locks`` locks under ``prefix`` (``PER_PARENT`` per parent), each held by one
    ephemeral node of ``zk``'s session; returns the seconds the holders took to create."""
    parents = lock_paths(prefix, locks)
    await zk.ensure_path(prefix)
    await create_nodes(zk, sorted({p.rsplit("/", 1)[0] for p in parents}))
    await create_nodes(zk, parents)
    holders = [f"{p}/{i:032x}-lock-" for i, p in enumerate(parents)]
    started = time.monotonic()
    await create_nodes(zk, holders, holder=True, data=IDENTITY)
    return time.monotonic() - started


async def measure(hosts: str, locks: int) -> dict[str, Any]:
    """Build the tree, run the command on it, then the API; both must find it healthy."""
    prefix = "/doctor-scale"
    async with aiozklock.connect(hosts) as zk:
        created = await build_tree(zk, prefix, locks)
        command = [sys.executable, "-m", "aiozklock", "doctor", "--hosts", hosts, "--json", prefix]
        started = time.monotonic()
        done = await anyio.run_process(command, check=False)
        command_s = time.monotonic() - started
        report = json.loads(done.stdout)
        diagnosis = await zk.diagnose(prefix)
    async with aiozklock.connect(hosts) as zk:  # the holders went with their session
        parents = lock_paths(prefix, locks)
        await delete_nodes(zk, parents)
        await delete_nodes(zk, sorted({p.rsplit("/", 1)[0] for p in parents}))
        await zk.delete(prefix)
    if done.returncode != 0 or not report["healthy"] or not diagnosis.healthy:
        raise SystemExit(f"not healthy: exit {done.returncode}, {report['findings'][:3]}")
    assert report["nodes_scanned"] == diagnosis.nodes_scanned == nodes_in(locks)
    return {
        "locks": locks,
        "nodes": diagnosis.nodes_scanned,
        "created_s": created,
        "command_elapsed_s": report["elapsed"],
        "command_process_s": command_s,
        "api_elapsed_s": diagnosis.elapsed,
    }


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--locks", type=int, default=10_000, help="locks in the tree")
    parser.add_argument("--hosts", help="a ZooKeeper to use (default: start one)")
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        hosts = args.hosts or stack.enter_context(ZooKeeperCluster(1)).hosts
        result = anyio.run(measure, hosts, args.locks)
    print(
        f"{result['locks']:,} locks ({result['nodes']:,} nodes, created in "
        f"{result['created_s']:.2f} s): the command read and diagnosed them in "
        f"{result['command_elapsed_s']:.3f} s ({result['command_process_s']:.2f} s with the "
        f"process), the API in {result['api_elapsed_s']:.3f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
