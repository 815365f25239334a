"""Benchmark aiozklock against aiozk, kazoo and Apache Curator, side by side, in one run.

    python benchmarks/run.py --quick                  # 3 short rounds, a few minutes
    python benchmarks/run.py                          # the full run: 5 rounds, ~18 min
    python benchmarks/run.py --only aiozklock,kazoo --scenarios uncontended,wire

It starts its own ZooKeeper (free port, fsync on) unless --hosts is given, runs every
scenario of every client in a fresh worker process (``benchmarks/worker.py``, or the Java
driver ``benchmarks/curator/CuratorBench.java`` compiled now into a temp dir), and writes
``benchmarks/results/latest.{json,md,png}``. What is measured: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import importlib.metadata
import json
import math
import os
import platform
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make ``benchmarks`` and ``aiozklock`` importable
    sys.path.insert(0, str(ROOT))

from benchmarks import ensemble, peers, probe_traffic, report, scale  # noqa: E402
from benchmarks.common import Params, zookeeper  # noqa: E402
from benchmarks.stats import (  # noqa: E402
    CpuShare,
    Grants,
    LeaseGrants,
    SharedGrants,
    Summary,
    cpu_times,
)

LIBRARIES = ("aiozklock", "sync", "aiozk", "kazoo", "curator", "etcd", "etcd3", "redis")
SCENARIOS = (
    "uncontended",
    "wire",
    "contended",
    "shared",
    "processes",
    "many",
    "floor",
    "multilock",
    "election",
    "rwlock",
    "rwmix",
    "semaphore",
    "requests",
    "regression",
    ensemble.SCENARIO,
    scale.SCENARIO,
)
#: The scenarios of the recipes a client library lacks (its column stays empty there).
MISSING_RECIPES = {"aiozk": ("semaphore",)}
NON_FAIR = report.NON_FAIR
SYNC = report.SYNC
#: What the sync column runs: kazoo's shapes (see ``benchmarks.clients.sync_bench``).
SYNC_SCENARIOS = ("uncontended", "contended", "shared", "requests")
#: The clients of the "shared" rows (one client, N threads or tasks on one path).
SHARED_LIBRARIES = ("aiozklock", "sync", "kazoo")
CURATOR_JARS = (
    "curator-recipes",
    "curator-framework",
    "curator-client",
    "guava",
    "zookeeper",
    "zookeeper-jute",
    "slf4j-api",
)
JAVA_DIR = Path("/usr/share/java")
READY_TIMEOUT = 300.0  # setup of a worker: start, connect, warm up (50 JVMs on 2 cores...)
RESULT_TIMEOUT = 600.0
EXIT_TIMEOUT = 30.0


@dataclass(frozen=True)
class Settings:
    iterations: int  # measured uncontended cycles
    warmup: int  # uncontended cycles (floor: pairs) before measuring
    duration: float  # seconds of contention per measurement
    sessions: tuple[int, ...]  # contenders in one process
    process_sessions: tuple[int, ...]  # contenders as separate processes
    contended_warmup: int  # cycles per session before contention starts
    wire_cycles: int  # uncontended cycles counted on the wire
    waiters: int  # sessions contending while notifications are counted
    locks: int  # distinct locks held at once by one session
    kazoo_threads: int  # threads acquiring those locks with kazoo
    pairs: int  # raw floor: create+delete pairs, sequential and then pipelined
    batch: int  # raw floor: pairs in flight at once when pipelined
    max_jvms: int  # Curator: at most this many JVMs in the process-per-session case
    members: int  # multilock: member paths of the multi-lock
    candidates: int  # election: candidates in one process, one session each
    readers: int  # rwmix: reader sessions in one process, beside one writer session
    semaphore_clients: int  # semaphore: sessions in one process contending for the leases
    leases: int  # semaphore: max_leases
    rounds: int  # every scenario of every client, once per round (the order rotates)
    concurrency: tuple[int, ...]  # requests: tasks of one session, each on its own lock
    hold_ms: float  # requests: how long each task holds its lock (0: one yield)
    server_warmup: float  # seconds of lock cycles to warm ZooKeeper's JIT before round 1
    scale_locks: tuple[int, ...] = (1_000, 10_000)  # scale: locks held by one session
    scale_big: int = 100_000  # scale: sizes of this many locks or more run in round 1 only
    traffic_window: float = 10.0  # ensemble, round 1: seconds of each session traffic count


QUICK = Settings(
    iterations=300,
    warmup=300,
    duration=0.3,
    sessions=(2, 10, 50),
    process_sessions=(2, 10),
    contended_warmup=2,
    wire_cycles=100,
    waiters=50,
    locks=1000,
    kazoo_threads=100,
    pairs=200,
    batch=100,
    max_jvms=10,
    members=3,
    candidates=10,
    readers=10,
    semaphore_clients=20,
    leases=5,
    rounds=3,
    concurrency=(10, 100),
    hold_ms=0.0,
    server_warmup=3.0,
    scale_big=10_000,  # --quick: 10,000 locks in round 1 only
)
# Full: 5 rounds, each about a fifth of the former single pass (the median of 5 short
# rounds says more than one long one), about 13 minutes on 2 cores (3 of them for the
# read/write lock and semaphore rows). 50 processes (about 100 s more) only with
# --process-sessions 2,10,50.
FULL = dataclasses.replace(
    QUICK,
    iterations=1000,
    warmup=2000,  # a fresh JVM each round: Curator's CPU per cycle settles after ~2,000 cycles
    duration=1.0,
    contended_warmup=3,
    wire_cycles=500,
    pairs=600,
    rounds=5,
    server_warmup=10.0,
    scale_locks=(1_000, 10_000, 100_000),
    scale_big=100_000,  # 100,000 locks: round 1 only (about 4 min on a loaded machine)
    traffic_window=20.0,
)


# ---------------------------------------------------------------- worker processes


class WorkerError(RuntimeError):
    """A worker failed, hung or answered something unexpected."""


def worker_env(first: Sequence[str] = ()) -> dict[str, str]:
    """The environment of a worker: ``first`` then this checkout ahead of PYTHONPATH."""
    path = os.environ.get("PYTHONPATH")
    entries = [*first, str(ROOT), *([path] if path else [])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(entries)}


class Worker:
    """One worker process (Python or Java) speaking the ready/go protocol of
    ``benchmarks.common``; :meth:`stop` ends it by its PID if it is still running."""

    def __init__(
        self, command: Sequence[str], label: str, log_dir: Path, env: dict[str, str]
    ) -> None:
        self.label = label
        self.log_path = log_dir / f"{label}.log"
        self._log: IO[str] = open(self.log_path, "w")  # noqa: SIM115 (closed by stop())
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def expect(self, event: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise WorkerError(f"{self.label}: no {event!r} within {timeout:.0f} s") from None
            if line is None:
                code = self.process.wait()
                raise WorkerError(
                    f"{self.label} exited with {code} before {event!r}; its log:\n{self.log_tail()}"
                )
            with contextlib.suppress(ValueError):
                message: dict[str, Any] = json.loads(line)
                if message.get("event") == event:
                    return message
            self._log.write(line)  # anything else it printed

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def finish(self) -> None:
        """Wait for the worker to exit by itself, after its result."""
        try:
            self.process.wait(EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise WorkerError(f"{self.label} did not exit after its result") from None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        self._log.close()

    def log_tail(self, lines: int = 30) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


class Tap:
    """The counting proxy (``benchmarks.wire_tap``) in its own process."""

    def __init__(self, upstream: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.wire_tap", upstream],
            cwd=ROOT,
            env=worker_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.address = self.process.stdout.readline().strip()
        if not self.address:
            self.stop()
            raise WorkerError("the wire tap did not start")

    def command(self, word: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(word + "\n")
        self.process.stdin.flush()
        answer: dict[str, Any] = json.loads(self.process.stdout.readline())
        return answer

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait()


# ---------------------------------------------------------------- clients


@dataclass(frozen=True)
class Driver:
    """One column of the table: how to start its worker, and what it takes part in."""

    column: str
    library: str
    command: tuple[str, ...]  # takes SCENARIO key=value...
    scenarios: frozenset[str] = frozenset(SCENARIOS)
    extra: tuple[tuple[str, Any], ...] = ()  # fixed Params fields (e.g. the anyio backend)
    pythonpath: tuple[str, ...] = ()  # ahead of the checkout (the baseline's aiozklock)
    source: str = str(ROOT)  # where its aiozklock must be imported from (checked)

    @property
    def is_jvm(self) -> bool:
        return self.library == "curator"

    @property
    def env(self) -> dict[str, str]:
        return worker_env(self.pythonpath)


def python_driver(
    library: str,
    column: str | None = None,
    scenarios: Sequence[str] = SCENARIOS,
    pythonpath: Sequence[str] = (),
    source: Path = ROOT,
    **extra: Any,
) -> Driver:
    # -P: no current directory on sys.path, so that PYTHONPATH decides which aiozklock
    # is imported (the baseline's shim comes before this checkout).
    command = (sys.executable, "-P", "-m", "benchmarks.worker", library)
    return Driver(
        column or library,
        library,
        command,
        frozenset(scenarios),
        tuple(extra.items()),
        tuple(pythonpath),
        str(source),
    )


def compile_curator(
    build_dir: Path,
    source: Path = ROOT / "benchmarks" / "curator" / "CuratorBench.java",
    name: str = "Curator",
) -> Driver | str:
    """A Curator program (the benchmark driver by default) compiled into ``build_dir``, or
    why it cannot be; its class is the source file's name."""
    java, javac = shutil.which("java"), shutil.which("javac")
    if java is None or javac is None:
        return "Curator skipped: no java/javac (a JDK) on PATH"
    jars = [JAVA_DIR / f"{name}.jar" for name in CURATOR_JARS]
    missing = [jar.name for jar in jars if not jar.is_file()]
    if missing:
        install = "apt-get install libcurator-recipes-java"
        return f"Curator skipped: missing {', '.join(missing)} ({install})"
    logging_jar = next(
        (
            jar
            for jar in (JAVA_DIR / "slf4j-nop.jar", JAVA_DIR / "slf4j-simple.jar")
            if jar.is_file()
        ),
        None,
    )
    classpath = os.pathsep.join(
        str(jar) for jar in [*jars, *([logging_jar] if logging_jar else [])]
    )
    compiled = subprocess.run(
        [javac, "-implicit:none", "-cp", classpath, "-d", str(build_dir), str(source)],
        capture_output=True,
        text=True,
    )
    if compiled.returncode != 0:
        return f"Curator skipped: javac failed:\n{compiled.stderr[-2000:]}"
    command = (java, "-cp", f"{build_dir}{os.pathsep}{classpath}", source.stem)
    # Curator has no "shared" worker (SHARED_LIBRARIES): its column is left out of those rows.
    return Driver(name, "curator", command, frozenset(SCENARIOS) - {"shared"})


def jvm_variant(
    driver: Driver, column: str, properties: Mapping[str, str], jars: Sequence[str] = ()
) -> Driver:
    """``driver`` (from :func:`compile_curator`) as column ``column``, its JVM started with
    the system ``properties`` and with ``jars`` appended to its classpath."""
    java, flag, classpath, main_class = driver.command
    options = [f"-D{name}={value}" for name, value in properties.items()]
    command = (java, *options, flag, os.pathsep.join([classpath, *jars]), main_class)
    return dataclasses.replace(driver, column=column, command=command)


# ---------------------------------------------------------------- the run


class Bench:
    """Runs the scenarios round after round and gathers each round's metric values, raw
    summaries and machine state, and the notes."""

    def __init__(self, settings: Settings, hosts: str, log_dir: Path) -> None:
        self.settings = settings
        self.hosts = hosts
        self.log_dir = log_dir
        self.root = f"/aiozklock-bench-{os.getpid()}-{int(time.time())}"
        self.round_index = 0
        self.values: dict[str, dict[str, float]] = {}  # this round's: column -> metric -> value
        self.raw: dict[str, dict[str, Any]] = {}  # this round's raw summaries
        self.rounds: list[dict[str, dict[str, float]]] = []  # the finished rounds' values
        self.raw_rounds: list[dict[str, dict[str, Any]]] = []
        self.machine_rounds: list[dict[str, Any]] = []
        self.flags: dict[str, dict[str, str]] = {}  # column -> metric -> why it is suspect
        self.notes: list[str] = []
        self.wire_counts: dict[str, Any] = {}
        self.baseline: tuple[Driver, Driver] | None = None  # (this checkout, the baseline)
        self.ensemble: ensemble.Ensemble | None = None  # the 3-node ensemble's rounds
        self._labels = 0

    # -- rounds

    def run_round(self, scenarios: Sequence[str], drivers: Sequence[Driver]) -> None:
        """Every scenario for every client, in an order rotated by one each round, with
        the machine's load and CPU steal over the round."""
        shift = self.round_index % max(len(drivers), 1)
        order = [*drivers[shift:], *drivers[:shift]]
        probe = MachineProbe()
        for scenario in scenarios:
            run_scenario(self, scenario, order)
        state = probe.finish([d.column for d in order])
        if state["steal_pct"] > report.HEAVY_STEAL_PCT:
            self.notes.append(
                f"⚠ round {self.round_index + 1} ran under heavy CPU steal "
                f"({state['steal_pct']:.1f} % of the CPUs' time went to other guests of the "
                "hypervisor): its ratios are kept in the ranges, but read them with care"
            )
        self.machine_rounds.append(state)
        self.rounds.append(self.values)
        self.raw_rounds.append(self.raw)
        self.values, self.raw = {}, {}
        self.round_index += 1

    # -- plumbing

    def record(self, driver: Driver, **values: float) -> None:
        self.values.setdefault(driver.column, {}).update(values)

    def keep(self, driver: Driver, scenario: str, raw: Any) -> None:
        self.raw.setdefault(driver.column, {})[scenario] = raw

    def flag(self, driver: Driver, keys: Sequence[str], why: str) -> None:
        for key in keys:
            self.flags.setdefault(driver.column, {})[key] = why
        self.notes.append(f"⚠ {driver.column} (round {self.round_index + 1}): {why}")

    def path(self, driver: Driver, name: str) -> str:
        """A fresh persistent node for one scenario of one round (the lock path, or a parent)."""
        slug = re.sub(r"[^a-z0-9]+", "-", driver.column.lower()).strip("-")
        path = f"{self.root}/r{self.round_index + 1}/{slug}/{name}"
        create_paths(self.hosts, [path])
        return path

    def run_workers(
        self,
        driver: Driver,
        scenario: str,
        params: Params,
        count: int = 1,
        tap: Tap | None = None,
    ) -> list[dict[str, Any]]:
        """Start ``count`` workers, let them all go at once, and return their results.

        With a ``tap``, its counts are reset at "go" and read, into ``self.wire_counts``,
        once every worker has measured (before their teardown traffic)."""
        params = dataclasses.replace(params, **dict(driver.extra))
        command = [*driver.command, scenario, *params.to_words()]
        with ExitStack() as stack:
            workers = []
            for _ in range(count):
                self._labels += 1
                label = f"{self._labels:04d}-{driver.library}-{scenario}"
                worker = Worker(command, label, self.log_dir, driver.env)
                stack.callback(worker.stop)
                workers.append(worker)
            for worker in workers:
                worker.expect("ready", READY_TIMEOUT)
            if tap is not None:
                tap.command("reset")
            for worker in workers:
                worker.go()
            for worker in workers:
                worker.expect("measured", RESULT_TIMEOUT)
            if tap is not None:
                self.wire_counts = tap.command("counts")
            results = [worker.expect("result", EXIT_TIMEOUT) for worker in workers]
            for worker in workers:
                worker.finish()
        for result in results:
            check_source(driver, result.get("library_file"))
        return results

    def params(self, path: str, **fields: Any) -> Params:
        return Params(hosts=self.hosts, path=path, **fields)

    # -- scenarios

    def uncontended(self, driver: Driver) -> None:
        s = self.settings
        params = self.params(
            self.path(driver, "uncontended"), warmup=s.warmup, iterations=s.iterations
        )
        (result,) = self.run_workers(driver, "uncontended", params)
        latency = Summary.of_ns(result["latencies_ns"])
        # A peer's release always waits for the server: its confirmed cycle is its cycle.
        confirmed = Summary.of_ns(result.get("confirmed_latencies_ns") or result["latencies_ns"])
        self.record(
            driver,
            cycle_median_us=latency.median_us,
            cycle_p99_us=latency.p99_us,
            cycles_per_s=latency.n / (result["wall_ns"] / 1e9),
            confirmed_cycle_median_us=confirmed.median_us,
            cpu_per_cycle_us=result["cpu_ns"] / 1000 / latency.n,
        )
        self.keep(driver, "uncontended", {"latency": latency.as_dict(), **_without_samples(result)})
        if "requests" in result:  # a peer counts its own (sequential: 1 round trip each)
            per_cycle = sum(result["requests"].values()) / latency.n
            self.record(driver, requests_per_cycle=per_cycle, round_trips_per_cycle=per_cycle)

    def wire(self, driver: Driver, tap: Tap) -> None:
        """Requests and round trips per uncontended cycle, and watch notifications per
        release with ``waiters`` sessions, counted by the tap (never timed)."""
        s = self.settings
        on_wire = dataclasses.replace(self.params(""), hosts=tap.address)
        params = dataclasses.replace(
            on_wire, path=self.path(driver, "wire-uncontended"), warmup=10, iterations=s.wire_cycles
        )
        self.run_workers(driver, "uncontended", params, tap=tap)
        cycles = self.wire_counts
        self.record(
            driver,
            requests_per_cycle=cycles["requests"] / s.wire_cycles,
            round_trips_per_cycle=cycles["round_trips"] / s.wire_cycles,
        )
        params = dataclasses.replace(
            on_wire,
            path=self.path(driver, "wire-contended"),
            sessions=s.waiters,
            warmup=1,
            duration=s.duration,
        )
        (result,) = self.run_workers(driver, "contended", params, tap=tap)
        contention = self.wire_counts
        grants = self.check_grants(
            driver, result["intervals"], result["counter"], ["notifications_per_release"]
        )
        self.record(
            driver,
            notifications_per_release=contention["notifications"] / grants.count,
            requests_per_grant=contention["requests"] / grants.count,
        )
        self.keep(
            driver,
            "wire",
            {
                "uncontended_cycles": s.wire_cycles,
                "uncontended": cycles,
                "contended_grants": grants.count,
                "contended": contention,
            },
        )

    def contended(self, driver: Driver, sessions: int, *, processes: bool) -> None:
        s = self.settings
        name = f"{'processes' if processes else 'sessions'}-{sessions}"
        params = self.params(
            self.path(driver, name), warmup=s.contended_warmup, duration=s.duration
        )
        if processes:
            results = self.run_workers(driver, "contended", params, count=sessions)
            counter = None  # separate processes: only the time line can show an overlap
        else:
            params = dataclasses.replace(params, sessions=sessions)
            results = self.run_workers(driver, "contended", params)
            counter = results[0]["counter"]
        intervals = [interval for result in results for interval in result["intervals"]]
        prefix = "proc_" if processes else ""
        keys = [f"{prefix}contended_{sessions}_per_s", f"{prefix}handoff_{sessions}_median_us"]
        grants = self.check_grants(driver, intervals, counter, keys)
        self.record(
            driver, **dict(zip(keys, (grants.per_second, grants.handoff.median_us), strict=True))
        )
        self.keep(driver, f"contended-{name}", grants.as_dict())
        if "requests" in results[0] and not processes and sessions == s.waiters:
            per_grant = sum(results[0]["requests"].values()) / grants.count
            self.record(driver, requests_per_grant=per_grant)  # a peer's own count
            self.raw[driver.column][f"contended-{name}"]["requests"] = results[0]["requests"]
        if "per_session" in results[0]:  # a peer's grants per session: how fair it was
            self.raw[driver.column][f"contended-{name}"]["per_session"] = results[0]["per_session"]

    def shared(self, driver: Driver) -> None:
        """For each N of ``sessions``: one client (one session), N threads or tasks
        contending on one path for ``duration``: grants/s and hand-off, mutual exclusion
        and the shared counter checked."""
        s = self.settings
        for n in s.sessions:
            params = self.params(
                self.path(driver, f"shared-{n}"),
                sessions=n,
                warmup=s.contended_warmup,
                duration=s.duration,
            )
            (result,) = self.run_workers(driver, "contended_shared", params)
            keys = [f"shared_{n}_per_s", f"shared_handoff_{n}_median_us"]
            grants = self.check_grants(driver, result["intervals"], result["counter"], keys)
            values = (grants.per_second, grants.handoff.median_us)
            self.record(driver, **dict(zip(keys, values, strict=True)))
            self.keep(driver, f"shared-{n}", grants.as_dict())

    def check_grants(
        self, driver: Driver, intervals: list[list[int]], counter: int | None, keys: list[str]
    ) -> Grants:
        grants = Grants.of(intervals)
        if grants.overlaps:
            self.flag(
                driver,
                keys,
                f"mutual exclusion violated: {grants.overlaps} overlapping critical sections",
            )
        if counter is not None and counter != grants.count:
            self.flag(
                driver,
                keys,
                f"shared counter is {counter} after {grants.count} grants (lost updates)",
            )
        return grants

    def many(self, driver: Driver) -> None:
        s = self.settings
        params = self.params(self.path(driver, "many"), locks=s.locks, threads=s.kazoo_threads)
        (result,) = self.run_workers(driver, "many", params)
        keys = ["many_acquire_ms", "many_release_ms", "many_peak_rss_mib", "many_rss_growth_mib"]
        values = (
            result["acquire_ns"] / 1e6,
            result["release_ns"] / 1e6,
            result["peak_rss_kib"] / 1024,
            (result["peak_rss_kib"] - result["rss_before_kib"]) / 1024,
        )
        self.record(driver, **dict(zip(keys, values, strict=True)))
        if result["held"] != s.locks:
            self.flag(driver, keys, f"only {result['held']} of {s.locks} locks were held at once")
        self.keep(driver, "many", result)

    def floor(self, driver: Driver) -> None:
        s = self.settings
        params = self.params(
            self.path(driver, "floor"), warmup=min(s.warmup, 200), pairs=s.pairs, batch=s.batch
        )
        (result,) = self.run_workers(driver, "floor", params)
        pair = Summary.of_ns(result["pair_latencies_ns"])
        true = Summary.of_ns(result.get("true_latencies_ns") or result["pair_latencies_ns"])
        self.record(
            driver,
            floor_pair_median_us=pair.median_us,
            floor_true_median_us=true.median_us,
            floor_pipelined_per_s=result["pipelined_pairs"] / (result["pipelined_ns"] / 1e9),
        )
        if "true_cpu_ns" in result:  # the true floor is our own wire's: aiozklock only
            self.record(driver, floor_true_cpu_us=result["true_cpu_ns"] / 1000 / s.pairs)
        if result["errors"]:
            self.flag(
                driver, ["floor_pipelined_per_s"], f"{result['errors']} pipelined requests failed"
            )
        self.keep(driver, "floor", {"pair": pair.as_dict(), **_without_samples(result)})

    def multilock(self, driver: Driver, tap: Tap | None) -> None:
        """One multi-lock on ``members`` paths, uncontended: timed, then (with a ``tap``)
        counted on the wire."""
        self.recipe_cycles(driver, tap, "multilock", "multilock", members=self.settings.members)

    def recipe_cycles(
        self, driver: Driver, tap: Tap | None, scenario: str, prefix: str, **fields: Any
    ) -> None:
        """A newer recipe's uncontended cycle (the worker's ``scenario``): timed, then (with
        a ``tap``) counted on the wire; its metrics are ``{prefix}_cycle_median_us`` etc."""
        s = self.settings
        # Half the mutex's cycles and a shorter warm-up (a multi-lock cycle is up to 12
        # round trips): the table's note says that Curator's JIT is colder here.
        params = self.params(
            self.path(driver, scenario),
            warmup=min(s.warmup, 300),
            iterations=max(1, s.iterations // 2),
            **fields,
        )
        (result,) = self.run_workers(driver, scenario, params)
        latency = Summary.of_ns(result["latencies_ns"])
        self.record(
            driver,
            **{
                f"{prefix}_cycle_median_us": latency.median_us,
                f"{prefix}_cycle_p99_us": latency.p99_us,
                f"{prefix}_cycles_per_s": latency.n / (result["wall_ns"] / 1e9),
                f"{prefix}_cpu_per_cycle_us": result["cpu_ns"] / 1000 / latency.n,
            },
        )
        self.keep(driver, prefix, {"latency": latency.as_dict(), **_without_samples(result)})
        if tap is None:
            return
        on_wire = dataclasses.replace(
            params,
            hosts=tap.address,
            path=self.path(driver, f"wire-{scenario}"),
            warmup=10,
            iterations=s.wire_cycles,
        )
        self.run_workers(driver, scenario, on_wire, tap=tap)
        counts = self.wire_counts
        self.record(
            driver,
            **{
                f"{prefix}_requests_per_cycle": counts["requests"] / s.wire_cycles,
                f"{prefix}_round_trips_per_cycle": counts["round_trips"] / s.wire_cycles,
            },
        )
        self.raw[driver.column][prefix]["wire"] = counts

    def rwlock(self, driver: Driver, tap: Tap | None) -> None:
        """The uncontended cycle of the write lock, then of the read lock (one path each)."""
        self.recipe_cycles(driver, tap, "rw_write", "rw_write")
        self.recipe_cycles(driver, tap, "rw_read", "rw_read")

    def rwmix(self, driver: Driver) -> None:
        """``readers`` reader sessions and one writer session in one process loop on one
        read/write lock for ``duration``: read and write grants/s; a writer's section
        overlapping any other section is flagged, and so is a side never granted."""
        s = self.settings
        params = self.params(
            self.path(driver, "rwmix"),
            sessions=s.readers,
            writers=1,
            warmup=s.contended_warmup,
            duration=s.duration,
        )
        (result,) = self.run_workers(driver, "rwmix", params)
        grants = SharedGrants.of(result["reads"], result["writes"])
        keys = ["rwmix_reads_per_s", "rwmix_writes_per_s"]
        values = (grants.reads_per_second, grants.writes_per_second)
        self.record(driver, **dict(zip(keys, values, strict=True)))
        if grants.conflicts:
            self.flag(
                driver,
                keys,
                f"read/write exclusion violated: {grants.conflicts} sections entered while a "
                "writer held, or a writer's while another section was held",
            )
        if not grants.reads or not grants.writes:
            self.flag(driver, keys, f"{grants.reads} reads and {grants.writes} writes granted")
        self.keep(driver, "rwmix", grants.as_dict())

    def semaphore(self, driver: Driver, tap: Tap | None) -> None:
        """The uncontended cycle (take a lease, return it), then ``semaphore_clients``
        sessions in one process contending for ``leases`` leases for ``duration``: grants/s,
        and more than ``leases`` sections at once is flagged."""
        s = self.settings
        self.recipe_cycles(driver, tap, "semaphore_cycle", "semaphore", leases=s.leases)
        params = self.params(
            self.path(driver, "semaphore"),
            sessions=s.semaphore_clients,
            leases=s.leases,
            warmup=s.contended_warmup,
            duration=s.duration,
        )
        (result,) = self.run_workers(driver, "semaphore", params)
        grants = LeaseGrants.of(result["intervals"], s.leases)
        key = f"semaphore_{s.semaphore_clients}_per_s"
        self.record(driver, **{key: grants.per_second})
        if grants.over_limit:
            self.flag(
                driver,
                [key],
                f"{grants.most_held} leases held at once (max_leases {s.leases}): "
                f"{grants.over_limit} grants over the limit",
            )
        self.keep(driver, "semaphore-contended", grants.as_dict())

    def election(self, driver: Driver) -> None:
        """``candidates`` sessions in one process campaign, lead (one yield) and resign in a
        loop for ``duration``: hand-off = next leader's body start - previous leader's exit."""
        s = self.settings
        params = self.params(
            self.path(driver, "election"),
            sessions=s.candidates,
            warmup=s.contended_warmup,
            duration=s.duration,
        )
        (result,) = self.run_workers(driver, "election", params)
        keys = ["election_handoff_median_us", "election_handoff_p90_us", "election_terms_per_s"]
        terms = self.check_grants(driver, result["intervals"], result["counter"], keys)
        values = (terms.handoff.median_us, terms.handoff.p90_us, terms.per_second)
        self.record(driver, **dict(zip(keys, values, strict=True)))
        self.keep(driver, "election", terms.as_dict())

    def regression(self, current: Driver, baseline: Driver) -> None:
        """The uncontended and contended (one process) rows for this checkout and for the
        baseline commit, in an order that alternates each round: each round gives one
        paired ratio."""
        pair = (current, baseline) if self.round_index % 2 == 0 else (baseline, current)
        for driver in pair:
            say(f"regression: {driver.column}")
            self.uncontended(driver)
            for n in self.settings.sessions:
                self.contended(driver, n, processes=False)

    def requests(self, driver: Driver, concurrency: int, scenario: str = "requests") -> None:
        """One session, ``concurrency`` tasks each cycling on its own lock for ``duration``
        (with ``request_floor``: a bare create+delete instead of the lock, aiozklock only)."""
        s = self.settings
        params = self.params(
            self.path(driver, f"{scenario}-{concurrency}"),
            concurrency=concurrency,
            warmup=s.contended_warmup,
            duration=s.duration,
            hold=s.hold_ms / 1000,
        )
        (result,) = self.run_workers(driver, scenario, params)
        latency = Summary.of_ns(result["latencies_ns"])
        per_s = latency.n / (result["measured_ns"] / 1e9)
        if scenario in ("request_floor", "request_truefloor"):
            kind = "floor" if scenario == "request_floor" else "truefloor"
            keys = [f"requests_{concurrency}_{kind}_per_s"]
            self.record(driver, **{keys[0]: per_s})
            cycles = self.values.get(driver.column, {}).get(f"requests_{concurrency}_per_s")
            if cycles is not None:
                pct = {f"requests_{concurrency}_{kind}_pct": 100 * cycles / per_s}
                self.record(driver, **pct)
        else:
            keys = [f"requests_{concurrency}_{name}" for name in ("per_s", "p50_us", "p99_us")]
            values = (per_s, latency.median_us, latency.p99_us)
            self.record(driver, **dict(zip(keys, values, strict=True)))
        idle = sum(count == 0 for count in result["per_task"])
        if idle or len(result["per_task"]) != concurrency:
            self.flag(driver, keys, f"{idle} of {concurrency} tasks completed no cycle")
        if result.get("errors"):
            self.flag(driver, keys, f"{result['errors']} of {concurrency} tasks failed")
        raw = {"latency": latency.as_dict(), **_without_samples(result)}
        self.keep(driver, f"{scenario}-{concurrency}", raw)

    def profile(self, driver: Driver) -> str:
        """cProfile of the uncontended cycle (top functions by own time)."""
        s = self.settings
        params = self.params(
            self.path(driver, "profile"), warmup=s.warmup, iterations=s.iterations, profile=True
        )
        (result,) = self.run_workers(driver, "uncontended", params)
        text: str = result["profile"]
        return text


def check_source(driver: Driver, library_file: str | None) -> None:
    """A worker must have measured the aiozklock it was meant to (the baseline's or ours)."""
    if library_file is None:
        return
    expected = Path(driver.source).resolve()
    if not Path(library_file).resolve().is_relative_to(expected):
        raise WorkerError(f"{driver.column} imported {library_file}, not from {expected}")


def _without_samples(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if not k.endswith("latencies_ns") and k != "event"}


def create_paths(hosts: str, paths: Sequence[str]) -> None:
    """Create persistent nodes (and their parents) with aiozklock, ignoring existing ones."""
    import anyio

    import aiozklock

    async def create() -> None:
        async with aiozklock.connect(hosts) as zk:
            for path in paths:
                parts = path.strip("/").split("/")
                for depth in range(1, len(parts) + 1):
                    with contextlib.suppress(aiozklock.NodeExistsError):
                        await zk.create("/" + "/".join(parts[:depth]))

    anyio.run(create)


def warm_server(hosts: str, root: str, seconds: float) -> None:
    """Load ZooKeeper with lock cycles (20 tasks, each on its own path) for ``seconds``.

    The server is a JVM: its JIT compiles the hot paths during the first seconds of load,
    which would handicap whichever client happens to be measured first in round 1."""
    import anyio

    import aiozklock

    async def warm() -> None:
        deadline = time.monotonic() + seconds

        async def cycle_until(lock: aiozklock.Lock) -> None:
            while time.monotonic() < deadline:
                async with lock:
                    pass

        async with aiozklock.connect(hosts) as zk, anyio.create_task_group() as tasks:
            for i in range(20):
                tasks.start_soon(cycle_until, zk.lock(f"{root}/server-warm-up/{i}"))

    anyio.run(warm)


def run_scenario(bench: Bench, scenario: str, drivers: Sequence[Driver]) -> None:
    """One scenario for every client in turn (scenario-major, so that a change of the
    machine's load during the run hits the clients of one row alike)."""

    def attempt(driver: Driver, what: str, run: Callable[[], None]) -> None:
        if scenario not in driver.scenarios:
            return
        say(f"round {bench.round_index + 1}, {what}: {driver.column}")
        try:
            run()
        except WorkerError as exc:
            bench.notes.append(
                f"{driver.column}, {what} (round {bench.round_index + 1}): failed: {exc}"
            )
            say(f"  FAILED: {exc}")

    if scenario == "regression":
        run_regression(bench)
    elif scenario == ensemble.SCENARIO:
        if bench.ensemble is not None:
            ensemble.run_round(bench, bench.ensemble, run_scenario)
    elif scenario == scale.SCENARIO:
        scale.run(bench, drivers, attempt)
    elif scenario in COUNTED:
        run_counted(bench, scenario, drivers, attempt)
    elif scenario in ("contended", "processes"):
        for driver in drivers:
            run_contended(bench, scenario, driver, attempt)
    elif scenario == "requests":
        subject = [d for d in drivers if d.column == report.SUBJECT]
        for concurrency in bench.settings.concurrency:
            for driver in drivers:
                attempt(
                    driver,
                    f"requests C={concurrency}",
                    partial(bench.requests, driver, concurrency),
                )
            for driver in subject:  # the raw floors, right after the clients of this C
                for floor in ("request_floor", "request_truefloor"):
                    run = partial(bench.requests, driver, concurrency, floor)
                    attempt(driver, f"requests {floor[8:]} C={concurrency}", run)
    else:
        method = getattr(bench, scenario)
        for driver in drivers:
            attempt(driver, scenario, partial(method, driver))


Attempt = Callable[[Driver, str, Callable[[], None]], None]
#: The scenarios counted through the wire tap in the first round.
COUNTED = ("wire", "multilock", "rwlock", "semaphore")


def run_regression(bench: Bench) -> None:
    if bench.baseline is None:
        if bench.round_index == 0:
            bench.notes.append("Regression rows not run: no --baseline-commit")
        return
    try:
        bench.regression(*bench.baseline)
    except WorkerError as exc:
        bench.notes.append(f"regression (round {bench.round_index + 1}): failed: {exc}")
        say(f"  FAILED: {exc}")


def run_counted(bench: Bench, scenario: str, drivers: Sequence[Driver], attempt: Attempt) -> None:
    """The scenarios counted through the wire tap. Counts do not depend on the machine's
    load, so they are taken in the first round only (the others are timed in every round)."""
    if scenario == "wire" and bench.round_index > 0:
        return
    tap = Tap(bench.hosts) if bench.round_index == 0 else None
    try:
        for driver in drivers:
            if scenario == "wire":
                assert tap is not None
                attempt(driver, scenario, partial(bench.wire, driver, tap))
            else:
                attempt(driver, scenario, partial(getattr(bench, scenario), driver, tap))
    finally:
        if tap is not None:
            tap.stop()


def run_contended(bench: Bench, scenario: str, driver: Driver, attempt: Attempt) -> None:
    settings = bench.settings
    processes = scenario == "processes"
    for n in settings.process_sessions if processes else settings.sessions:
        if processes and driver.is_jvm and n > settings.max_jvms:
            if bench.round_index == 0:
                bench.notes.append(
                    f"Curator, {n} processes: not run (more than --max-jvms "
                    f"{settings.max_jvms} JVMs)"
                )
            continue
        attempt(
            driver, f"{scenario} N={n}", partial(bench.contended, driver, n, processes=processes)
        )


class MachineProbe:
    """The machine's load average and CPU times at its creation, and over the interval
    until :meth:`finish`."""

    def __init__(self) -> None:
        self._clock = time.monotonic()
        self._load = os.getloadavg()
        self._cpu = read_cpu_times()

    def finish(self, order: Sequence[str]) -> dict[str, Any]:
        after = read_cpu_times()
        share = (
            CpuShare.between(self._cpu, after)
            if self._cpu and after
            else CpuShare(math.nan, math.nan)
        )
        return {
            "order": list(order),
            "duration_s": time.monotonic() - self._clock,
            "load_start": self._load,
            "load_end": os.getloadavg(),
            "steal_pct": share.steal_pct,
            "busy_pct": share.busy_pct,
        }


def read_cpu_times() -> dict[str, int] | None:
    """The machine's CPU times from /proc/stat (None where there is none)."""
    try:
        return cpu_times(Path("/proc/stat").read_text())
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------- machine and versions


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "load_average_at_start": os.getloadavg(),
    }
    with contextlib.suppress(OSError):
        cpuinfo = Path("/proc/cpuinfo").read_text()
        info["cpu"] = next(
            (
                line.split(":", 1)[1].strip()
                for line in cpuinfo.splitlines()
                if line.startswith("model name")
            ),
            None,
        )
        meminfo = Path("/proc/meminfo").read_text().splitlines()[0]
        info["memory_kib"] = int(meminfo.split()[1])
    java = shutil.which("java")
    if java:
        answer = subprocess.run([java, "-version"], capture_output=True, text=True)
        info["java"] = answer.stderr.splitlines()[0] if answer.stderr else None
    return info


def versions(hosts: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name in ("aiozk", "kazoo", "anyio", "trio"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[name] = importlib.metadata.version(name)
    import aiozklock  # the checkout's own (an editable install keeps its first version)

    found = {"aiozklock": aiozklock.__version__, **found}
    git = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True
    )
    found["aiozklock_git"] = git.stdout.strip() or None
    with contextlib.suppress(OSError, KeyError, zipfile.BadZipFile):
        with zipfile.ZipFile(JAVA_DIR / "curator-recipes.jar") as jar:
            pom = jar.read("META-INF/maven/org.apache.curator/curator-recipes/pom.properties")
        found["curator"] = next(
            line.split("=", 1)[1]
            for line in pom.decode().splitlines()
            if line.startswith("version=")
        )
    with contextlib.suppress(OSError):
        from aiozklock.testing import four_letter_word

        srvr = four_letter_word(hosts.split(",")[0], "srvr")
        found["zookeeper"] = srvr.splitlines()[0].split(":", 1)[1].strip().split("-")[0]
    return found


# ---------------------------------------------------------------- command line


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, Settings]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="3 short rounds instead of 5 (a few minutes)"
    )
    parser.add_argument(
        "--only",
        help=f"comma-separated clients, of: {','.join([*LIBRARIES, *peers.OPTIONAL])} "
        "(default: all but the optional redis-1ms)",
    )
    parser.add_argument("--scenarios", help=f"comma-separated, of: {','.join(SCENARIOS)}")
    parser.add_argument("--no-trio", action="store_true", help="skip aiozklock on trio")
    parser.add_argument("--hosts", help="use these ZooKeeper servers instead of starting one")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument(
        "--name", default="latest", help="the outputs' name: OUTPUT/NAME.{json,md,png}"
    )
    parser.add_argument(
        "--baseline-commit",
        help="also measure aiozklock at this commit (a temporary git worktree) for the "
        "regression rows: uncontended and contended, interleaved with this checkout",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also cProfile aiozklock's uncontended cycle (not timed)",
    )

    def ints(text: str) -> tuple[int, ...]:
        return tuple(int(n) for n in text.split(","))

    options: list[tuple[str, Callable[[str], Any], str]] = [
        ("iterations", int, "uncontended cycles measured"),
        ("warmup", int, "uncontended cycles before measuring"),
        ("duration", float, "seconds of contention per measurement"),
        ("sessions", ints, "contending sessions in one process, e.g. 2,10,50"),
        ("process-sessions", ints, "contending processes, e.g. 2,10,50"),
        ("waiters", int, "sessions while counting notifications"),
        ("locks", int, "distinct locks held at once"),
        ("pairs", int, "raw floor: create+delete pairs"),
        ("batch", int, "raw floor: pairs in flight when pipelined"),
        ("max-jvms", int, "Curator: cap on JVMs for one-session-per-process"),
        ("members", int, "multilock: paths of the multi-lock"),
        ("candidates", int, "election: candidates (sessions) in one process"),
        ("readers", int, "rwmix: reader sessions in one process, beside one writer"),
        ("semaphore-clients", int, "semaphore: sessions in one process contending"),
        ("leases", int, "semaphore: max_leases"),
        ("rounds", int, "rounds: every scenario of every client once per round"),
        ("concurrency", ints, "requests: tasks of one session, each on its own lock, e.g. 10,100"),
        ("hold-ms", float, "requests: ms each task holds its lock (0: one yield)"),
        ("server-warmup", float, "seconds of lock cycles to warm ZooKeeper up before round 1"),
        ("scale-locks", ints, "scale: locks held at once by one session, e.g. 1000,100000"),
        ("scale-big", int, "scale: sizes of this many locks or more run in round 1 only"),
        ("traffic-window", float, "ensemble: seconds of each count of a session's own traffic"),
    ]
    for name, kind, help_text in options:
        parser.add_argument(f"--{name}", type=kind, help=help_text)
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    overrides = {
        field.name: getattr(args, field.name)
        for field in dataclasses.fields(Settings)
        if getattr(args, field.name, None) is not None
    }
    return args, dataclasses.replace(settings, **overrides)


def choose(text: str | None, known: Sequence[str], what: str) -> list[str]:
    if text is None:
        return list(known)
    chosen = [item.strip() for item in text.split(",") if item.strip()]
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (known: {', '.join(known)})")
    return chosen


@dataclass(frozen=True)
class Baseline:
    commit: str  # short hash
    tree: Path  # the worktree (its aiozklock/ is measured)
    shim: Path  # holds only an ``aiozklock`` symlink into the tree: goes first on PYTHONPATH


@contextlib.contextmanager
def baseline_checkout(commit: str) -> Iterator[Baseline]:
    """A temporary ``git worktree`` of ``commit``, removed (and pruned) at the end."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"git {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout.strip()

    short = git("rev-parse", "--short", f"{commit}^{{commit}}")
    parent = Path(tempfile.mkdtemp(prefix=f"aiozklock-baseline-{short}-"))
    tree, shim = parent / "tree", parent / "shim"
    try:
        git("worktree", "add", "--detach", str(tree), short)
        try:
            shim.mkdir()
            (shim / "aiozklock").symlink_to(tree / "aiozklock", target_is_directory=True)
            yield Baseline(short, tree, shim)
        finally:
            git("worktree", "remove", "--force", str(tree))
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def make_drivers(
    libraries: Sequence[str], build_dir: Path, trio: bool
) -> tuple[list[Driver], list[str]]:
    """The columns of the run (Curator compiled into ``build_dir``), and notes on those
    that cannot run."""
    notes: list[str] = []
    drivers: list[Driver] = []
    for library in libraries:
        if library in peers.NAMES:  # started with their servers: peers.start_drivers
            continue
        if library == "curator":
            curator = compile_curator(build_dir)
            if isinstance(curator, str):
                notes.append(curator)
            else:
                drivers.append(curator)
            continue
        if library == "sync":
            drivers.append(python_driver("sync", SYNC, SYNC_SCENARIOS))
            continue
        missing = (
            *MISSING_RECIPES.get(library, ()),
            *(() if library in SHARED_LIBRARIES else ("shared",)),
        )
        drivers.append(python_driver(library, scenarios=[s for s in SCENARIOS if s not in missing]))
        if library != "aiozklock":
            continue
        if trio:
            drivers.append(
                python_driver("aiozklock", "aiozklock (trio)", ["uncontended"], backend="trio")
            )
        non_fair = ["uncontended", "wire", "contended"]
        drivers.append(python_driver("aiozklock", NON_FAIR, non_fair, fair=False))
    return drivers, notes


def baseline_drivers(baseline: Baseline) -> tuple[Driver, Driver]:
    """This checkout and the baseline commit's aiozklock, for the regression rows."""
    return (
        python_driver("aiozklock", "aiozklock (this checkout)", ["regression"]),
        python_driver(
            "aiozklock",
            f"aiozklock @{baseline.commit}",
            ["regression"],
            pythonpath=[str(baseline.shim)],
            source=baseline.tree / "aiozklock",
        ),
    )


def measure(
    args: argparse.Namespace, settings: Settings, libraries: list[str], scenarios: list[str]
) -> tuple[Bench, list[Driver], str | None, dict[str, Any]]:
    """Start ZooKeeper (unless ``--hosts``), warm it up, run the rounds (and the profile):
    the bench, its columns, the profile and the versions."""
    log_dir = args.output / "logs"  # one log per worker (ignored by git: results/.gitignore)
    shutil.rmtree(log_dir, ignore_errors=True)
    log_dir.mkdir(parents=True)
    with ExitStack() as stack:
        build_dir = Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="aiozklock-bench-"))
        )
        drivers, notes = make_drivers(libraries, build_dir, trio=not args.no_trio)
        hosts = stack.enter_context(zookeeper(args.hosts))
        peer_drivers, peer_notes = peers.start_drivers(stack, libraries)
        drivers += peer_drivers
        bench = Bench(settings, hosts, log_dir)
        bench.notes += notes + peer_notes
        if args.baseline_commit and "regression" in scenarios and "aiozklock" in libraries:
            baseline = stack.enter_context(baseline_checkout(args.baseline_commit))
            bench.baseline = baseline_drivers(baseline)
        say(f"ZooKeeper at {hosts}; clients: {', '.join(d.column for d in drivers)}")
        say(f"warming the server up ({settings.server_warmup:g} s of lock cycles)")
        warm_server(hosts, bench.root, settings.server_warmup)
        if ensemble.SCENARIO in scenarios:
            runner = ensemble_runner()
            found = ensemble.start(stack, runner, settings, drivers, log_dir, libraries)
            bench.ensemble, more = found
            bench.notes += more
        for index in range(settings.rounds):
            say(f"round {index + 1} of {settings.rounds}")
            bench.run_round(scenarios, drivers)
        profile = None
        if args.profile and "aiozklock" in libraries:
            say("profile: aiozklock (cProfile of the uncontended cycle, not timed)")
            try:
                profile = bench.profile(python_driver("aiozklock"))
            except WorkerError as exc:
                bench.notes.append(f"profile failed: {exc}")
        return bench, drivers, profile, {**versions(hosts), **peers.versions()}


def ensemble_runner() -> ensemble.Runner:
    """This module's functions for ``ensemble.start`` (run.py is ``__main__`` when run as
    a script: ``benchmarks.ensemble`` must not import it a second time)."""
    runner: Any = SimpleNamespace(make_bench=Bench, warm_server=warm_server, say=say, make_tap=Tap)
    return runner  # type: ignore[no-any-return]


def main(argv: Sequence[str]) -> int:
    args, settings = parse_args(argv)
    known = [*LIBRARIES, *peers.OPTIONAL]
    libraries = choose(args.only, known, "clients") if args.only else list(LIBRARIES)
    scenarios = choose(args.scenarios, SCENARIOS, "scenarios")
    started = datetime.datetime.now(datetime.UTC)
    clock = time.monotonic()
    machine = machine_info()
    bench, drivers, profile, found_versions = measure(args, settings, libraries, scenarios)
    machine["load_average_at_end"] = os.getloadavg()
    columns = [d.column for d in drivers]
    table, summary = render(bench, columns)
    document: dict[str, Any] = {
        "date": started.isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "elapsed_s": round(time.monotonic() - clock, 1),
        "zookeeper": args.hosts or "started by the runner: 1 server, fsync on",
        "ensemble": ensemble.timing(bench.ensemble) if bench.ensemble else None,
        "machine": machine,
        "versions": found_versions,
        "settings": dataclasses.asdict(settings),
        "columns": columns,
        "metrics": medians(bench.rounds),
        "flags": bench.flags,
        "notes": bench.notes,
        "profile": profile,
        **summary,
        "rounds": [
            {"machine": state, "metrics": values, "raw": raw}
            for state, values, raw in zip(
                bench.machine_rounds, bench.rounds, bench.raw_rounds, strict=True
            )
        ],
    }
    write_outputs(args.output / args.name, document, table, bench.rounds)
    print(table)
    if bench.notes:
        print("\n" + report.notes_markdown(bench.notes))
    if profile:
        print(f"\n{profile}")
    return 0


def medians(rounds: report.Rounds) -> dict[str, dict[str, float]]:
    """Each column's value of each metric: the median over the rounds."""
    keys = {(column, key) for values in rounds for column in values for key in values[column]}
    result: dict[str, dict[str, float]] = {}
    for column, key in sorted(keys):
        result.setdefault(column, {})[key] = report.value_of(rounds, column, key)
    return result


def render(bench: Bench, columns: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """The markdown tables (main, per-request, recipes, regression, rounds), and the
    ratio summaries for latest.json."""
    s, rounds, flags = bench.settings, bench.rounds, bench.flags
    main_columns = [c for c in columns if c not in (NON_FAIR, SYNC)]  # tables of their own
    rows = report.metrics(s.sessions, s.process_sessions, s.waiters)
    requests = report.requests_table(s.concurrency, s.hold_ms)
    sections = [report.markdown(rows, main_columns, rounds, flags)]
    tables = [
        requests,
        *report.recipe_tables(s.members, s.candidates, s.sessions, s.waiters),
        *report.shared_tables(s.readers, s.semaphore_clients, s.leases),
    ]
    sync = report.sync_table(s.sessions, s.concurrency)
    sections += [table.render(columns, rounds, flags) for table in [*tables, sync]]
    summary: dict[str, Any] = {
        "ratios": report.ratio_summary([*rows, *(m for t in tables for m in t.rows)], rounds),
        "sync_ratios": report.ratio_summary(sync.rows, rounds, SYNC, (report.SUBJECT, "kazoo")),
        "regression": None,
    }
    skip: list[str] = []  # the regression's columns: tables of their own
    if bench.baseline is not None:
        skip = [d.column for d in bench.baseline]
        text, summary["regression"] = render_regression(bench, *skip)
        sections.append(text)
    text, summary["ensemble_ratios"] = ensemble.render(columns, rounds, flags, s.concurrency, skip)
    sections.append(text)
    sections.append(probe_traffic.render(rounds, skip or [report.SUBJECT], ensemble.PREFIX))
    text, summary["scale"] = scale.render(columns, rounds, flags, s.scale_locks, s.locks)
    sections.append(text)
    sections.append("### Rounds\n\n" + report.rounds_markdown(bench.machine_rounds))
    return "\n\n".join(section for section in sections if section.count("\n") >= 2), summary


def render_regression(
    bench: Bench, this_column: str, baseline_column: str
) -> tuple[str, dict[str, Any]]:
    """The regression tables (the standalone server's, the ensemble's) and their summary."""
    rounds, flags = bench.rounds, bench.flags
    text, regression = report.regression(
        report.regression_rows(bench.settings.sessions), rounds, this_column, baseline_column, flags
    )
    ens_text, ens_regression = report.regression(
        ensemble.regression_rows(), rounds, this_column, baseline_column, flags
    )
    how = (
        "Measured in every round (their order alternates), each in fresh worker processes; "
        "columns: medians over the rounds; ratio: of each round's pair, **> 1.00x means "
        "this checkout is better**, median [min-max] over the rounds. The baseline's "
        "aiozklock is imported from a temporary `git worktree` of that commit (checked in "
        "each worker)."
    )
    sections = [f"### Regression check: this checkout vs {baseline_column}\n\n{how}\n\n{text}"]
    if ens_text.count("\n") >= 2:
        sections.append(
            f"### Regression check on the {ensemble.MEMBERS}-node ensemble, fsync on\n\n"
            f"{how} Scenario by scenario, on the ensemble of the table below (all three "
            "members in the connect string).\n\n" + ens_text
        )
    summary = {
        "columns": [this_column, baseline_column],
        "summary": regression,
        "ensemble": ens_regression,
    }
    return "\n\n".join(sections), summary


def write_outputs(stem: Path, document: dict[str, Any], table: str, rounds: report.Rounds) -> None:
    """``stem``.json (everything), .md (the table and its context), .png (the chart)."""
    output = stem.parent
    text = json.dumps(report.jsonable(document), indent=1) + "\n"
    output.joinpath(stem.name + ".json").write_text(text)
    machine, versions, settings = document["machine"], document["versions"], document["settings"]
    load = machine["load_average_at_start"][0], machine["load_average_at_end"][0]
    lines = [
        f"# aiozklock benchmarks ({document['mode']} run, {document['date']})",
        "",
        f"Machine: {machine.get('cpu')}, {machine['cpus']} CPUs, Python {machine['python']}, "
        f"{machine.get('java')}; load average {load[0]:.2f} at start, {load[1]:.2f} at end. "
        f"ZooKeeper: {document['zookeeper']}. "
        f"Versions: {', '.join(f'{k} {v}' for k, v in versions.items())}. "
        f"Wall time of the run: {document['elapsed_s'] / 60:.1f} min.",
        "",
        report.HOW_TO_READ.format(rounds=len(rounds), steal=report.HEAVY_STEAL_PCT),
        "",
        table,
    ]
    if document["notes"]:
        lines += ["", "Notes:", "", report.notes_markdown(document["notes"])]
    lines += ["", f"Settings: `{json.dumps(settings)}`", ""]
    output.joinpath(stem.name + ".md").write_text("\n".join(lines))
    columns = [c for c in document["columns"] if c != NON_FAIR]
    ratio_rows = [
        *report.metrics(settings["sessions"], settings["process_sessions"], settings["waiters"]),
        *report.requests_rows(settings["concurrency"]),
        *ensemble.headline_rows(settings["concurrency"]),
    ]
    try:
        report.chart(
            output.joinpath(stem.name + ".png"),
            columns,
            rounds,
            report.chart_rows(ratio_rows),
            settings["sessions"],
            settings["concurrency"],
        )
    except ImportError as exc:  # matplotlib is in the bench group only
        say(f"no chart ({exc}): the json and md are written")
    if document["profile"]:
        (output / "profile-aiozklock.txt").write_text(document["profile"])


_STARTED = time.monotonic()


def say(message: str) -> None:
    print(f"[bench {time.monotonic() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
