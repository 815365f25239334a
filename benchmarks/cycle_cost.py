"""What one lock cycle costs the client, in counts that do not depend on the machine's load:
Python calls (function and C calls, ``sys.setprofile``), system calls (``strace -c``) and
machine instructions (``valgrind --tool=callgrind``'s Ir) per cycle, for this checkout and,
with ``--baseline-commit``, another commit (a temporary git worktree), on one ZooKeeper.

Each count is a difference of two runs in fresh processes, ``--cycles`` and twice that many
cycles after the same warm-up, divided by ``--cycles``: start-up, connect and warm-up cancel
out. Scenarios: ``uncontended`` (one task, one path: ``async with zk.lock(path)``) and
``requests`` (``--concurrency`` tasks, each on its own path, on one session). Beside the
checkouts, the **true floor** on this checkout's wire (the benchmarks' ``true_cycles``): each
lock replaced by a create awaited and its delete written unawaited when the task leaves, what
a correct cycle cannot do without; the rest of a lock cycle's count is the recipe's.

    PYTHONPATH=. .venv/bin/python benchmarks/cycle_cost.py [--baseline-commit abfa31f]
        [--cycles 500] [--concurrency 10] [--no-callgrind] [--hosts HOST:PORT]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import zookeeper

ROOT = Path(__file__).resolve().parent.parent

# The child: warm up, then run ``cycles`` cycles, counting Python calls if asked. Written for
# every aiozklock since the first: ``connect``, ``zk.lock(path)``, ``async with``.
CHILD = r"""
import sys, anyio, aiozklock
hosts, scenario, concurrency, warmup, cycles, count_calls, floor = sys.argv[1:8]
concurrency, warmup, cycles = int(concurrency), int(warmup), int(cycles)
calls = [0]

class Floor:  # a lock's stand-in: the true floor's create awaited, its delete unawaited

    def __init__(self, zk, parent, name):
        from aiozklock._wire._protocol import CreateMode
        from aiozklock.testing import session_of
        from benchmarks.clients.aiozklock_bench import wire_ops, write_unawaited

        self.session, self.name, self.write_unawaited = session_of(zk), name, write_unawaited
        self.create, self.delete = wire_ops(zk, parent, CreateMode.EPHEMERAL)

    async def __aenter__(self):
        await self.session.call(self.create(self.name))

    async def __aexit__(self, *exc):
        self.write_unawaited(self.session, self.delete(self.name))

def profile(frame, event, arg):
    if event in ("call", "c_call"):
        calls[0] += 1

async def loop(lock, n):
    for _ in range(n):
        async with lock:
            pass

async def run(locks, n):
    async with anyio.create_task_group() as tg:
        for lock in locks:
            tg.start_soon(loop, lock, n)

async def main():
    async with aiozklock.connect(hosts, session_timeout=10.0) as zk:
        tasks = 1 if scenario == "uncontended" else concurrency
        parent = f"/bench/cost/{scenario}"
        if floor == "1":
            async with zk.lock(f"{parent}/made"):  # the parent, made by a lock
                pass
            locks = [Floor(zk, parent, f"floor-{i}") for i in range(tasks)]
        else:
            locks = [zk.lock(f"{parent}/{i}") for i in range(tasks)]
        await run(locks, warmup)
        if count_calls == "1":
            sys.setprofile(profile)
        await run(locks, cycles // tasks)
        sys.setprofile(None)
    if count_calls == "1":
        print(f"CALLS {calls[0]}")
    print(f"FROM {aiozklock.__file__}")

anyio.run(main)
"""


@contextlib.contextmanager
def checkout(commit: str | None) -> Iterator[Path]:
    """This checkout, or ``commit`` in a temporary worktree (removed after)."""
    if commit is None:
        yield ROOT
        return
    where = Path(tempfile.mkdtemp(prefix="aiozklock-cost-"))
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(where), commit],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    try:
        yield where
    finally:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(where)],
            cwd=ROOT,
            check=False,
            capture_output=True,
        )


@dataclass(frozen=True)
class Subject:
    """What a child measures: a checkout's lock (or the true floor) in one scenario."""

    tree: Path
    hosts: str
    scenario: str
    concurrency: int
    warmup: int
    floor: bool = False


def child(subject: Subject, cycles: int, calls: bool, wrapper: list[str]) -> str:
    """Run the child under ``wrapper``; its stdout and stderr."""
    tree = subject.tree
    env = {**os.environ, "PYTHONPATH": str(tree)}
    args = [
        *wrapper,
        sys.executable,
        "-c",
        CHILD,
        subject.hosts,
        subject.scenario,
        str(subject.concurrency),
        str(subject.warmup),
        str(cycles),
        "1" if calls else "0",
        "1" if subject.floor else "0",
    ]
    # Run from the tree: ``python -c`` puts the working directory first on sys.path, ahead of
    # PYTHONPATH, so a baseline run from this checkout would import this checkout's package.
    done = subprocess.run(args, env=env, cwd=tree, capture_output=True, text=True, check=True)
    imported = re.search(r"^FROM (.*)$", done.stdout, re.M)
    if imported is None or not Path(imported.group(1)).is_relative_to(tree):
        raise SystemExit(f"the child imported aiozklock from elsewhere than {tree}: {imported}")
    return done.stdout + done.stderr


def python_calls(subject: Subject, cycles: int) -> int:
    out = child(subject, cycles, True, [])
    return int(re.search(r"CALLS (\d+)", out).group(1))  # type: ignore[union-attr]


def syscalls(subject: Subject, cycles: int) -> int:
    """The total of ``strace -c``'s summary."""
    out = child(subject, cycles, False, ["strace", "-f", "-c", "-qq"])
    match = re.search(r"^[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?total$", out, re.M)
    assert match is not None, out[-2000:]
    return int(match.group(1))


def instructions(subject: Subject, cycles: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        child(
            subject, cycles, False, ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        )
        text = out.read_text()
    match = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
    assert match is not None
    return int(match.group(1))


def per_cycle(measure: Callable[[Subject, int], int], subject: Subject, cycles: int) -> float:
    """(count at 2n cycles - count at n cycles) / n."""
    low = measure(subject, cycles)
    return (measure(subject, 2 * cycles) - low) / cycles


def costs(
    tree: Path, hosts: str, args: argparse.Namespace, scenario: str, floor: bool = False
) -> dict[str, float]:
    subject = Subject(tree, hosts, scenario, args.concurrency, args.warmup, floor)
    found = {
        "python calls": per_cycle(python_calls, subject, args.cycles),
        "system calls": per_cycle(syscalls, subject, args.cycles),
    }
    if not args.no_callgrind and shutil.which("valgrind"):
        found["instructions"] = per_cycle(instructions, subject, args.cycles)
    return found


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-commit")
    parser.add_argument("--cycles", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--scenarios", default="uncontended,requests")
    parser.add_argument("--no-callgrind", action="store_true")
    parser.add_argument("--hosts")
    args = parser.parse_args(argv)
    trees = [("this checkout", None)]
    if args.baseline_commit:
        trees.append((args.baseline_commit, args.baseline_commit))
    rows: dict[tuple[str, str], dict[str, float]] = {}
    scenarios = args.scenarios.split(",")
    with zookeeper(args.hosts) as hosts:
        for scenario in scenarios:
            name = "true floor (this checkout's wire)"
            rows[(name, scenario)] = costs(ROOT, hosts, args, scenario, floor=True)
            print(name, scenario, rows[(name, scenario)], file=sys.stderr, flush=True)
        for name, commit in trees:
            with checkout(commit) as tree:
                for scenario in scenarios:
                    rows[(name, scenario)] = costs(tree, hosts, args, scenario)
                    print(name, scenario, rows[(name, scenario)], file=sys.stderr, flush=True)
    print("| checkout | scenario | " + " | ".join(next(iter(rows.values()))) + " |")
    print("|---|---|" + "---:|" * len(next(iter(rows.values()))))
    for (name, scenario), found in rows.items():
        cells = " | ".join(f"{value:,.0f}" for value in found.values())
        print(f"| {name} | {scenario} | {cells} |")


if __name__ == "__main__":
    main(sys.argv[1:])
