"""The cost of TLS on the uncontended lock cycle, on connecting and on reconnecting, for
aiozklock and for Apache Curator's ``InterProcessMutex`` in the same run.

One ZooKeeper (Netty connection factory) serves a plain port and a TLS port. Four columns:
aiozklock over each port (two clients in this process, sessions kept across rounds) and
Curator over each port (``benchmarks/curator/CuratorBench.java``'s ``uncontended``
scenario, a fresh JVM per measurement, as in ``run.py``; over TLS with the ZooKeeper
client's Netty socket and ``zookeeper.ssl.*`` system properties, the CA's PEM as trust
store, ZooKeeper's default host name verification on: the certificate is checked against
the server's address). Each round measures every column once, ``cycles`` acquire+release
cycles (each timed, and the loop's wall and CPU time), the order rotated by one each
round; ratios are computed within each round and reported as median [min-max] over the
rounds. Then the time to establish a new session (aiozklock and Curator) and, for
aiozklock, from a dropped connection (a FaultProxy drops it) to CONNECTED again in the
same session, plain and TLS tries alternating. Writes ``tls.md`` and ``tls.json`` into
``--output``.

    PYTHONPATH=. .venv/bin/python benchmarks/tls_cost.py [--cycles 1000] [--rounds 9]
        [--connects 20] [--warmup 500] [--curator-warmup 2000] [--backend asyncio|trio]
        [--no-curator] [--output benchmarks/results]
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import ssl
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import anyio

import aiozklock
from aiozklock import SessionState, StateChange
from aiozklock.testing import FaultProxy, TLSFiles, ZooKeeperCluster, find_zookeeper_classpath
from benchmarks import report, run
from benchmarks.common import Params
from benchmarks.stats import RatioRange, median

#: The columns: aiozklock's are measured in this process, Curator's in JVMs.
AIOZKLOCK, AIOZKLOCK_TLS, CURATOR, CURATOR_TLS = (
    "aiozklock",
    "aiozklock TLS",
    "Curator",
    "Curator TLS",
)
#: Round 1's order, rotated by one each round. Each compared pair (see RATIOS) is
#: neighbours in this cycle, so it is measured back to back in 3 rounds of 4.
ORDER = (AIOZKLOCK, AIOZKLOCK_TLS, CURATOR_TLS, CURATOR)
#: (name, numerator column, denominator column, what a ratio > 1 means): per-round ratios.
RATIOS = (
    ("aiozklock TLS vs Curator TLS", CURATOR_TLS, AIOZKLOCK_TLS, "aiozklock is faster"),
    ("aiozklock vs Curator (plain)", CURATOR, AIOZKLOCK, "aiozklock is faster"),
    ("aiozklock: TLS / plain", AIOZKLOCK_TLS, AIOZKLOCK, "TLS costs more"),
    ("Curator: TLS / plain", CURATOR_TLS, CURATOR, "TLS costs more"),
)
#: Untimed new sessions of a Curator JVM before the timed ones (class loading, JIT).
CURATOR_CONNECT_WARMUP = 5


class Sample(NamedTuple):
    """One column's measurement in one round, in seconds per cycle."""

    median: float  # the median cycle's latency
    wall: float  # the timed loop's wall time / cycles
    cpu: float  # the process's CPU time during the loop / cycles


#: How the tables name Sample's fields.
METRICS = {"median": "Median cycle", "wall": "Wall / cycles", "cpu": "CPU / cycle"}

Round = dict[str, Sample]


@dataclass(frozen=True)
class Settings:
    """The sizes of one run."""

    cycles: int  # timed cycles per column and round
    rounds: int
    connects: int  # timed new sessions (and aiozklock reconnects) per column
    warmup: int  # aiozklock: untimed cycles per client before round 1
    curator_warmup: int  # Curator: untimed cycles in each fresh JVM
    backend: str


@dataclass(frozen=True)
class Endpoint:
    """Where one column connects: hosts, and for aiozklock over TLS its context."""

    hosts: str
    context: ssl.SSLContext | None = None


def curator_tls_properties(files: TLSFiles) -> dict[str, str]:
    """The JVM system properties that make ZooKeeper's Java client (under Curator) speak
    TLS: Netty's socket (the NIO one has no TLS), the CA as a PEM trust store."""
    return {
        "zookeeper.client.secure": "true",
        "zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNetty",
        "zookeeper.ssl.trustStore.location": str(files.ca),
        "zookeeper.ssl.trustStore.type": "PEM",
    }


def curator_drivers(build_dir: Path, files: TLSFiles) -> dict[str, run.Driver] | str:
    """Curator's plain and TLS drivers (compiled into ``build_dir``), or why there are none."""
    plain = run.compile_curator(build_dir)
    if isinstance(plain, str):
        return plain
    classpath = find_zookeeper_classpath() or ""
    netty = [jar for jar in classpath.split(os.pathsep) if Path(jar).name.startswith("netty-")]
    if not netty:
        return "Curator skipped: no Netty jars beside ZooKeeper's (its TLS client needs them)"
    tls = run.jvm_variant(plain, CURATOR_TLS, curator_tls_properties(files), netty)
    return {CURATOR: plain, CURATOR_TLS: tls}


def curator_cycles(bench: run.Bench, driver: run.Driver, hosts: str, s: Settings) -> Sample:
    """One measurement in a fresh JVM: ``curator_warmup`` cycles, then ``cycles`` timed;
    its CPU is the JVM's process CPU time (all its threads, JIT and GC included)."""
    path = f"/bench/tls/{driver.column.lower().replace(' ', '-')}"
    params = Params(hosts=hosts, path=path, warmup=s.curator_warmup, iterations=s.cycles)
    (result,) = bench.run_workers(driver, "uncontended", params)
    return Sample(
        median(result["latencies_ns"]) / 1e9,
        result["wall_ns"] / 1e9 / s.cycles,
        result["cpu_ns"] / 1e9 / s.cycles,
    )


async def timed_cycles(lock: aiozklock.Lock, count: int) -> Sample:
    """``count`` acquire+release cycles, each timed, and the process's CPU time."""
    latencies = []
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        start = time.perf_counter()
        async with lock:
            pass
        latencies.append(time.perf_counter() - start)
    return Sample(
        median(latencies),
        (time.perf_counter() - wall) / count,
        (time.process_time() - cpu) / count,
    )


async def measure_cycles(
    endpoints: dict[str, Endpoint],
    curator: dict[str, run.Driver],
    bench: run.Bench,
    s: Settings,
) -> tuple[list[Round], list[dict[str, Any]]]:
    """Per round, every column's (wall, CPU) per cycle, and the machine's state."""
    rounds: list[Round] = []
    machine: list[dict[str, Any]] = []
    async with AsyncExitStack() as stack:
        locks = {}
        for column in (AIOZKLOCK, AIOZKLOCK_TLS):
            endpoint = endpoints[column]
            zk = await stack.enter_async_context(
                aiozklock.connect(endpoint.hosts, ssl=endpoint.context)
            )
            locks[column] = zk.lock(f"/bench/tls/{column.replace(' ', '-')}")
            await timed_cycles(locks[column], s.warmup)  # also warms the server's TLS path
        columns = [column for column in ORDER if column in locks or column in curator]
        for index in range(s.rounds):
            shift = index % len(columns)
            order = [*columns[shift:], *columns[:shift]]
            probe = run.MachineProbe()
            values: Round = {}
            for column in order:
                if column in locks:
                    values[column] = await timed_cycles(locks[column], s.cycles)
                else:  # in a thread: aiozklock's sessions keep answering pings meanwhile
                    hosts = endpoints[column].hosts
                    values[column] = await anyio.to_thread.run_sync(
                        curator_cycles, bench, curator[column], hosts, s
                    )
            machine.append(probe.finish(order))
            rounds.append(values)
            run.say(f"round {index + 1}/{s.rounds} done")
    return rounds, machine


async def connect_time(endpoint: Endpoint) -> float:
    """Seconds for ``async with connect()`` to establish a new session."""
    started = time.perf_counter()
    async with aiozklock.connect(endpoint.hosts, ssl=endpoint.context):
        return time.perf_counter() - started


async def reconnect_time(proxy: FaultProxy, zk: aiozklock.ZooKeeperClient) -> float:
    """Seconds from dropping the connection to CONNECTED again (the same session)."""
    back = anyio.Event()

    def on_change(change: StateChange) -> None:
        if change.state is SessionState.CONNECTED:
            back.set()

    remove = zk.add_listener(on_change)
    try:
        started = time.perf_counter()
        await proxy.drop_all()
        with anyio.fail_after(10):
            await back.wait()
        return time.perf_counter() - started
    finally:
        remove()


async def measure_connects(
    endpoints: dict[str, Endpoint], count: int
) -> dict[str, dict[str, list[float]]]:
    """aiozklock's new-session and reconnect times (seconds), ``count`` of each per column,
    plain and TLS alternating (the first of each pair alternates too)."""
    columns = [AIOZKLOCK, AIOZKLOCK_TLS]
    times: dict[str, dict[str, list[float]]] = {
        c: {"connect": [], "reconnect": []} for c in columns
    }
    for index in range(count):
        for column in columns if index % 2 == 0 else columns[::-1]:
            times[column]["connect"].append(await connect_time(endpoints[column]))
    async with AsyncExitStack() as stack:
        clients = {}
        for column in columns:
            endpoint = endpoints[column]
            proxy = await stack.enter_async_context(FaultProxy(endpoint.hosts))
            zk = await stack.enter_async_context(
                aiozklock.connect(proxy.address, ssl=endpoint.context)
            )
            clients[column] = proxy, zk
        for index in range(count):
            for column in columns if index % 2 == 0 else columns[::-1]:
                times[column]["reconnect"].append(await reconnect_time(*clients[column]))
        for _, zk in clients.values():
            assert zk.state is SessionState.CONNECTED  # reconnected: the same session
    return times


def curator_connects(
    bench: run.Bench, curator: dict[str, run.Driver], endpoints: dict[str, Endpoint], count: int
) -> dict[str, dict[str, list[float]]]:
    """Curator's new-session times (seconds), ``count`` per column, each column in one JVM
    (the JVMs one after the other) after a few untimed sessions."""
    times = {}
    for column, driver in curator.items():
        params = Params(
            hosts=endpoints[column].hosts,
            path="/",
            warmup=CURATOR_CONNECT_WARMUP,
            iterations=count,
        )
        (result,) = bench.run_workers(driver, "connect", params)
        times[column] = {"connect": [ns / 1e9 for ns in result["connect_ns"]]}
    return times


def ratios(rounds: Sequence[Round]) -> dict[str, dict[str, RatioRange | None]]:
    """Each RATIOS row's per-round ratios, of the wall and of the CPU time per cycle."""
    result: dict[str, dict[str, RatioRange | None]] = {}
    for name, numerator, denominator, _ in RATIOS:
        pairs = [
            (values[numerator], values[denominator])
            for values in rounds
            if numerator in values and denominator in values
        ]
        result[name] = {
            field: RatioRange.of([n[i] / d[i] if d[i] > 0 else None for n, d in pairs])
            for i, field in enumerate(Sample._fields)
        }
    return result


def spread_ms(samples: Sequence[float], unit: float = 1e3, digits: int = 1) -> str:
    """``median [min-max]`` of seconds, in ms (or ``unit``), or a dash if there is none."""
    if not samples:
        return "—"
    return (
        f"{median(samples) * unit:.{digits}f} "
        f"[{min(samples) * unit:.{digits}f}-{max(samples) * unit:.{digits}f}]"
    )


def cycles_markdown(rounds: Sequence[Round]) -> str:
    """Per column: each metric per cycle, median [min-max] over the rounds; then the ratios."""
    columns = [c for c in (AIOZKLOCK, AIOZKLOCK_TLS, CURATOR, CURATOR_TLS) if c in rounds[0]]
    heads = " | ".join(f"{title} (µs)" for title in METRICS.values())
    lines = [f"| Column | {heads} |", "|---|" + "---:|" * len(METRICS)]
    for column in columns:
        cells = [
            spread_ms([getattr(values[column], field) for values in rounds], 1e6, 0)
            for field in METRICS
        ]
        lines.append(f"| {column} | {' | '.join(cells)} |")
    lines += [
        "",
        f"| Ratio (per round) | > 1.00x means | {' | '.join(METRICS.values())} |",
        "|---|---|" + "---:|" * len(METRICS),
    ]
    found = ratios(rounds)
    for name, _, _, meaning in RATIOS:
        if any(found[name].values()):
            cells = [report.format_ratio(found[name][field]) for field in METRICS]
            lines.append(f"| {name} | {meaning} | {' | '.join(cells)} |")
    return "\n".join(lines)


def connects_markdown(times: dict[str, dict[str, list[float]]]) -> str:
    """Per column: new session and reconnect times, median [min-max]; aiozklock's TLS/plain."""
    lines = [
        "| Column | New session (ms) | Reconnect, same session (ms) |",
        "|---|---:|---:|",
    ]
    for column, samples in times.items():
        connect, reconnect = samples["connect"], samples.get("reconnect", [])
        lines.append(f"| {column} | {spread_ms(connect)} | {spread_ms(reconnect)} |")
    for kind in ("connect", "reconnect"):
        tls, plain = times[AIOZKLOCK_TLS][kind], times[AIOZKLOCK][kind]
        spread = RatioRange.of([t / p for t, p in zip(tls, plain, strict=True)])
        what = "new session" if kind == "connect" else "reconnect"
        lines.append(f"\naiozklock {what}, TLS / plain (per try): {report.format_ratio(spread)}")
    return "\n".join(lines)


@dataclass
class Results:
    """What one run measured, and why anything was left out."""

    rounds: list[Round]
    machine: list[dict[str, Any]]
    connects: dict[str, dict[str, list[float]]]
    notes: list[str]
    versions: dict[str, Any]


def measure(s: Settings, use_curator: bool, work_dir: Path) -> Results:
    """Start a TLS server (and compile Curator's driver), measure everything."""
    files = TLSFiles.generate(work_dir / "certs")
    curator = curator_drivers(work_dir, files) if use_curator else "Curator skipped: --no-curator"
    notes = [curator] if isinstance(curator, str) else []
    drivers = curator if isinstance(curator, dict) else {}
    (work_dir / "logs").mkdir()
    with ZooKeeperCluster(1, tls=files) as cluster:
        plain, secure = cluster.hosts, cluster.secure_hosts
        endpoints = {
            AIOZKLOCK: Endpoint(plain),
            AIOZKLOCK_TLS: Endpoint(secure, files.client_context()),
            CURATOR: Endpoint(plain),
            CURATOR_TLS: Endpoint(secure),
        }
        bench = run.Bench(run.QUICK, plain, work_dir / "logs")  # its workers' plumbing only
        rounds, machine = anyio.run(measure_cycles, endpoints, drivers, bench, s, backend=s.backend)
        run.say("new sessions and reconnects")
        connects = anyio.run(measure_connects, endpoints, s.connects, backend=s.backend)
        connects.update(curator_connects(bench, drivers, endpoints, s.connects))
        versions = run.versions(plain)
    return Results(rounds, machine, connects, notes, versions)


def document(
    s: Settings, results: Results, started: datetime.datetime, machine: dict[str, Any]
) -> dict[str, Any]:
    """tls.json: the settings, machine, every round's values, the ratios and the times."""
    return {
        "date": started.isoformat(timespec="seconds"),
        "elapsed_s": round((datetime.datetime.now(datetime.UTC) - started).total_seconds(), 1),
        "settings": asdict(s),
        "machine": {**machine, "load_average_at_end": os.getloadavg()},
        "versions": results.versions,
        "notes": results.notes,
        "rounds": [
            {
                "machine": state,
                "per_cycle_us": {
                    column: {field: value * 1e6 for field, value in sample._asdict().items()}
                    for column, sample in values.items()
                },
            }
            for state, values in zip(results.machine, results.rounds, strict=True)
        ],
        "ratios": {
            name: {which: spread.as_dict() if spread else None for which, spread in row.items()}
            for name, row in ratios(results.rounds).items()
        },
        "connect_ms": {
            column: {kind: [t * 1e3 for t in times] for kind, times in samples.items()}
            for column, samples in results.connects.items()
        },
    }


def markdown(s: Settings, results: Results, doc: dict[str, Any]) -> str:
    """tls.md: the tables with how to read them, the rounds, the notes and the settings."""
    machine = doc["machine"]
    load = machine["load_average_at_start"][0], machine["load_average_at_end"][0]
    versions = ", ".join(f"{k} {v}" for k, v in doc["versions"].items())
    lines = [
        f"# The cost of TLS: aiozklock and Curator ({doc['date']})",
        "",
        f"Machine: {machine.get('cpu')}, {machine['cpus']} CPUs, Python {machine['python']}, "
        f"{machine.get('java')}; load average {load[0]:.2f} at start, {load[1]:.2f} at end. "
        f"Versions: {versions}. ZooKeeper: one server, plain and TLS "
        f"ports (Netty). aiozklock on {s.backend}. Wall time: {doc['elapsed_s'] / 60:.1f} min.",
        "",
        f"### Uncontended acquire→release: {s.rounds} rounds x {s.cycles} cycles per column",
        "",
        "Each round measures every column once, the order rotated by one each round "
        f"(aiozklock: one session per port, kept across rounds, {s.warmup} untimed cycles "
        f"before round 1; Curator: a fresh JVM per measurement, {s.curator_warmup} untimed "
        "cycles first). Per column and round: the median cycle's latency, the timed loop's "
        "wall time / cycles, and the client process's CPU time / cycles (aiozklock: "
        "`time.process_time()`; Curator: the JVM's process CPU time, JIT and GC threads "
        "included). Values: median [min-max] over the rounds. Ratios: computed within each "
        "round, median [min-max]; a trailing `~` marks a range that straddles 1.00x (not "
        "significant). Curator over TLS uses ZooKeeper's Netty client socket (the NIO one "
        "has no TLS), over plain its default NIO socket.",
        "",
        cycles_markdown(results.rounds),
        "",
        f"### New session and reconnect: {s.connects} tries per column",
        "",
        "New session: `async with connect()` until it is entered (aiozklock), a new "
        "`CuratorFramework` from `start()` to `blockUntilConnected()` (Curator, one JVM per "
        f"column, after {CURATOR_CONNECT_WARMUP} untimed sessions); TCP, the TLS handshake "
        "and ZooKeeper's ConnectRequest. Reconnect (aiozklock): through a fault proxy that "
        "drops the connection, from the drop to CONNECTED again in the same session. aiozklock's "
        "plain and TLS tries alternate. Median [min-max] over the tries.",
        "",
        connects_markdown(results.connects),
        "",
        "### Rounds",
        "",
        report.rounds_markdown(results.machine),
    ]
    if results.notes:
        lines += ["", "Notes:", "", report.notes_markdown(results.notes)]
    lines += ["", f"Settings: `{json.dumps(asdict(s))}`", ""]
    return "\n".join(lines)


def parse_args(argv: Sequence[str]) -> tuple[Settings, bool, Path]:
    """The settings, whether to run Curator, and the output directory."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cycles", type=int, default=1000, help="cycles per column and round")
    parser.add_argument("--rounds", type=int, default=9, help="rounds (the order rotates)")
    parser.add_argument("--connects", type=int, default=20, help="new sessions, reconnects")
    parser.add_argument("--warmup", type=int, default=500, help="aiozklock warm-up cycles")
    parser.add_argument(
        "--curator-warmup", type=int, default=2000, help="warm-up cycles in each Curator JVM"
    )
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--no-curator", action="store_true", help="aiozklock's columns only")
    parser.add_argument(
        "--output", type=Path, default=run.ROOT / "benchmarks" / "results", help="directory"
    )
    args = parser.parse_args(argv)
    for name in ("cycles", "rounds", "connects", "warmup", "curator_warmup"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    settings = Settings(
        args.cycles, args.rounds, args.connects, args.warmup, args.curator_warmup, args.backend
    )
    return settings, not args.no_curator, args.output


def main(argv: Sequence[str]) -> int:
    """Measure, write tls.md and tls.json, print the markdown; returns the exit status."""
    settings, use_curator, output = parse_args(argv)
    # TLS through the fault proxy is not ZooKeeper framing: it passes it through, and
    # warns once per connection (every reconnect), which is expected here.
    logging.getLogger("aiozklock.testing._proxy_pump").setLevel(logging.ERROR)
    started = datetime.datetime.now(datetime.UTC)
    machine = run.machine_info()
    with tempfile.TemporaryDirectory(prefix="aiozklock-tls-bench-") as directory:
        results = measure(settings, use_curator, Path(directory))
    doc = document(settings, results, started, machine)
    text = markdown(settings, results, doc)
    output.mkdir(parents=True, exist_ok=True)
    (output / "tls.json").write_text(json.dumps(report.jsonable(doc), indent=1) + "\n")
    (output / "tls.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
