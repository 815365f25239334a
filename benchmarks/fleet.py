"""The fleet benchmark (issue 38): many sessions, idle, queued and holding, on a 3-node
ensemble; what they make the ensemble commit, and how they come through faults.

    PYTHONPATH=. .venv/bin/python benchmarks/fleet.py                      # 1,000 sessions
    PYTHONPATH=. .venv/bin/python benchmarks/fleet.py --sessions 100 --window 20 \\
        --clients aiozklock --aiozklock-path /work/main --name fleet-dev

It starts a partitionable 3-node ensemble from the test kit (``--settings stock``: tickTime
2000, syncLimit 5; ``compose``: tickTime 200, syncLimit 10; no limit on connections per
client address), then, per round, a fleet per client and scenario: ``--sessions`` sessions
spread over ``--workers`` processes, each session idle, queued or holding
(``--mix``; roles in ``benchmarks/clients/fleet_common.py``). Scenarios:

* ``steady``: every holder holds its own path, the queued sessions wait behind them; the
  leader's zxid is sampled over ``--window`` seconds: transactions/s, per session per
  second, days to a zxid wrap (every client of ``--clients``);
* ``rolling``: holders cycle locks on ``--shared-paths`` paths (one anchor per worker keeps
  the queued sessions in line); each member is stopped and started again, followers
  first, the leader last, each serving again before the next;
* ``isolation``: the same fleet; the leader's server links are cut for ``--cut`` seconds
  (longer than syncLimit x tickTime), then healed;

for each: grants/s, the longest pause between grants, the sessions kept (same session id
at the end), the overlaps (``--fault-clients``). Outputs: ``OUTPUT/NAME.{json,md}`` (the
workers' raw results under ``OUTPUT/logs/NAME/``); ``fleet.py --report JSON...`` writes the
markdown again from a run's JSON file. See benchmarks/README.md, "Fleet".
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make ``benchmarks`` and ``aiozklock`` importable
    sys.path.insert(0, str(ROOT))

from aiozklock.testing import ZooKeeperCluster  # noqa: E402
from benchmarks import fleet_ensemble as fe  # noqa: E402
from benchmarks import fleet_report as fr  # noqa: E402
from benchmarks.clients.fleet_common import FleetParams  # noqa: E402
from benchmarks.ensemble_safety import SETTINGS  # noqa: E402
from benchmarks.run import (  # noqa: E402
    Worker,
    WorkerError,
    baseline_checkout,
    compile_curator,
    machine_info,
    versions,
    worker_env,
)

CLIENTS = {"aiozklock": "aiozklock", "kazoo": "kazoo", "curator": "Curator"}
SCENARIOS = ("steady", "rolling", "isolation")
READY_TIMEOUT_S = 900.0  # every session connected and in role (1,000 on 2 busy cores...)
RESULT_TIMEOUT_S = 120.0
#: The versions reported (aiozklock's is the measured checkout's, in "aiozklock_checkout").
VERSIONS = ("kazoo", "anyio", "curator", "zookeeper")
#: The container reaper checks once a day, not every minute: the recipes' parent nodes
#: (containers, for aiozklock and Curator) that a fleet leaves empty would be deleted
#: during a later fleet's window, one transaction each (100 in kazoo's, measured).
SERVER_PROPERTIES = {"znode.container.checkIntervalMs": str(24 * 3600 * 1000)}
QUIESCE_MARGIN_S = 30.0  # beyond 2 T, for the sessions of the last fleet to be gone
CURATOR_SOURCE = ROOT / "benchmarks" / "curator" / "CuratorFleet.java"


@dataclass(frozen=True)
class Client:
    """One column: how to start its workers."""

    column: str
    command: tuple[str, ...]  # takes key=value words
    env: dict[str, str]
    source: Path | None = None  # where its aiozklock must be imported from (checked)


@dataclass
class Context:
    args: argparse.Namespace
    cluster: ZooKeeperCluster
    log_dir: Path
    notes: list[str]

    def clock(self, mark: float) -> Callable[[], float]:
        return lambda: round(time.monotonic() - mark, 2)


# ---------------------------------------------------------------- the fleet's shape


def role_counts(sessions: int, mix: Sequence[float]) -> tuple[int, int, int]:
    """``(idle, queued, holding)`` of ``sessions`` for percentages ``mix``."""
    queued, holding = round(sessions * mix[1] / 100), round(sessions * mix[2] / 100)
    return sessions - queued - holding, queued, holding


def split(count: int, parts: int) -> list[int]:
    """``count`` over ``parts``, the first ones one more where it does not divide."""
    return [count // parts + (i < count % parts) for i in range(parts)]


def shares(
    base: FleetParams, counts: tuple[int, int, int], workers: int, anchors: int | None
) -> list[FleetParams]:
    """Each worker's share (``ValueError`` for one it cannot play): ``anchors`` holders per
    worker keep their line (None: all of them, the steady fleet), the others cycle."""
    idle, queued, holding = (split(c, workers) for c in counts)
    out: list[FleetParams] = []
    first_cycler = 0
    for w in range(workers):
        share = replace(
            base,
            worker=w,
            idle=idle[w],
            queued=queued[w],
            holders=holding[w],
            anchors=holding[w] if anchors is None else min(anchors, holding[w]),
            first_cycler=first_cycler,
        ).checked()
        out.append(share)
        first_cycler += share.holders - share.anchors
    if 0 < first_cycler < base.shared_paths:
        raise ValueError(
            f"{first_cycler} cycling holders cannot keep {base.shared_paths} shared paths busy"
        )
    return out


def fleet_params(
    args: argparse.Namespace, client: str, scenario: str, round_: int
) -> list[FleetParams]:
    sessions = args.curator_sessions if client == "Curator" else args.sessions
    base = FleetParams(
        hosts="",
        root=f"/fleet-{client.lower()}-{scenario}-r{round_}-{os.getpid()}",
        shared_paths=args.shared_paths,
        hold_ms=args.hold_ms,
        session_timeout=args.session_timeout,
        connect_batch=args.connect_batch,
    )
    anchors = None if scenario == "steady" else args.anchors
    workers = min(args.workers, sessions)
    return shares(base, role_counts(sessions, args.mix), workers, anchors)


def rolling(ctx: Context, timeline: fe.Timeline) -> None:
    fe.rolling_restart(ctx.cluster, timeline)


def isolation(ctx: Context, timeline: fe.Timeline) -> None:
    fe.isolate_leader(ctx.cluster, timeline, ctx.args.cut)


FAULTS = {"rolling": rolling, "isolation": isolation}


# ---------------------------------------------------------------- one fleet


def send(worker: Worker, word: str) -> None:
    assert worker.process.stdin is not None
    worker.process.stdin.write(word + "\n")
    worker.process.stdin.flush()


def run_fleet(ctx: Context, client: Client, scenario: str, round_: int) -> dict[str, Any]:
    """Start the fleet's workers, wait until every session is in role, mark, measure the
    scenario, stop: the workers' results and what the runner measured."""
    args = ctx.args
    params = fleet_params(args, client.column, scenario, round_)
    label = f"{client.column}-{scenario}-r{round_}"
    workers: list[Worker] = []
    started = time.monotonic()
    try:
        for p in params:
            words = replace(p, hosts=ctx.cluster.hosts).to_words()
            workers.append(
                Worker([*client.command, *words], f"{label}-w{p.worker}", ctx.log_dir, client.env)
            )
        readies = [w.expect("ready", READY_TIMEOUT_S) for w in workers]
        in_role_s = time.monotonic() - started
        check_source(client, readies)
        time.sleep(args.settle)
        mark, mark_ns = time.monotonic(), time.monotonic_ns()
        for w in workers:
            send(w, "mark")
        for w in workers:
            w.expect("marked", 60)
        measured: dict[str, Any] = {}
        if scenario == "steady":
            samples = fe.sample_commits(ctx.cluster, args.window, args.sample_every)
            measured["commits"] = fr.commit_rate(samples).as_dict()
        else:
            time.sleep(args.lead)
            timeline = fe.Timeline(ctx.clock(mark))
            FAULTS[scenario](ctx, timeline)
            measured.update(timeline=timeline.events, leaderless_s=timeline.leaderless_s)
            time.sleep(args.tail)
        stop_ns = time.monotonic_ns()
        for w in workers:
            send(w, "stop")
        results = [w.expect("result", RESULT_TIMEOUT_S) for w in workers]
        for w in workers:
            w.finish()
    finally:
        for w in workers:
            w.stop()
    left_open = fe.global_sessions(ctx.cluster)  # sessions its workers did not close
    return {
        **measured,
        "params": [p.to_words() for p in params],
        "in_role_s": in_role_s,
        "mark_ns": mark_ns,
        "stop_ns": stop_ns,
        "results": results,
        "left_open": left_open,
    }


def quiesce(ctx: Context) -> None:
    """Before a fleet: the ensemble serves, and the last fleet's sessions are gone (those
    its workers did not close expire within T), so that none of their transactions (an
    expiry is one) falls into this fleet's window."""
    ctx.cluster.wait_serving(fe.SERVING_TIMEOUT_S)
    left = fe.wait_no_sessions(ctx.cluster, 2 * ctx.args.session_timeout + QUIESCE_MARGIN_S)
    if left != 0:
        ctx.notes.append(f"the ensemble still tracked {left} session(s) before a fleet")


def check_source(client: Client, readies: Sequence[dict[str, Any]]) -> None:
    """Each worker measured the aiozklock it was meant to (``--aiozklock-path``)."""
    if client.source is None:
        return
    for ready in readies:
        found = Path(ready.get("library_file", "")).resolve()
        if not found.is_relative_to(client.source):
            raise WorkerError(f"{client.column} imported {found}, not from {client.source}")


# ---------------------------------------------------------------- clients


def make_clients(
    args: argparse.Namespace, build_dir: Path, shim_dir: Path, notes: list[str]
) -> dict[str, Client]:
    """The columns that can run, keyed by column; notes on those that cannot."""
    clients: dict[str, Client] = {}
    faults = any(scenario != "steady" for scenario in args.scenarios)
    for name in dict.fromkeys([*args.clients, *(args.fault_clients if faults else [])]):
        if name == "aiozklock":
            clients["aiozklock"] = aiozklock_client(args.aiozklock_path, shim_dir)
        elif name == "kazoo":
            command = (sys.executable, "-P", "-m", "benchmarks.clients.kazoo_fleet")
            clients["kazoo"] = Client("kazoo", command, worker_env())
        else:
            driver = compile_curator(build_dir, CURATOR_SOURCE, "Curator")
            if isinstance(driver, str):
                notes.append(driver)
                continue
            clients["Curator"] = Client("Curator", driver.command, worker_env())
    return clients


def aiozklock_client(path: Path, shim_dir: Path) -> Client:
    """aiozklock imported from ``path`` (a checkout): a directory holding only an
    ``aiozklock`` symlink goes first on the workers' PYTHONPATH, so ``benchmarks`` stays
    this checkout's."""
    package = (path / "aiozklock").resolve()
    (shim_dir / "aiozklock").symlink_to(package, target_is_directory=True)
    command = (sys.executable, "-P", "-m", "benchmarks.clients.aiozklock_fleet")
    return Client("aiozklock", command, worker_env([str(shim_dir)]), package)


def checkout_info(path: Path) -> dict[str, Any]:
    git = subprocess.run(
        ["git", "-C", str(path), "describe", "--always", "--dirty"], capture_output=True, text=True
    )
    return {"path": str(path), "git": git.stdout.strip() or None}


# ---------------------------------------------------------------- command line


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--sessions", type=int, default=1000, help="sessions per fleet (1000)")
    add("--curator-sessions", type=int, help="Curator's fleet, if smaller (default: --sessions)")
    add("--workers", type=int, default=4, help="worker processes per fleet (4)")
    add("--mix", default="80,10,10", help="idle,queued,holding percentages (80,10,10)")
    add("--session-timeout", type=float, default=10.0, help="T, seconds (10)")
    add("--settings", choices=sorted(SETTINGS), default="stock", help="the ensemble's (stock)")
    add("--clients", default="aiozklock,kazoo,curator", help="steady scenario's clients")
    add("--fault-clients", default="aiozklock", help="fault scenarios' clients (aiozklock)")
    add("--scenarios", default=",".join(SCENARIOS), help=f"of {', '.join(SCENARIOS)}")
    add("--aiozklock-path", type=Path, help="the aiozklock checkout measured (this one)")
    add("--aiozklock-ref", help="or a commit, measured from a temporary git worktree of it")
    add("--rounds", type=int, default=1, help="every fleet again, client order rotated (1)")
    add("--window", type=float, default=30.0, help="steady: seconds of zxid samples (30)")
    add("--sample-every", type=float, default=1.0, help="steady: seconds between samples (1)")
    add("--settle", type=float, default=3.0, help="seconds between in role and mark (3)")
    add("--shared-paths", type=int, default=4, help="faults: the cyclers' lock paths (4)")
    add("--hold-ms", type=float, default=10.0, help="faults: a cycler's hold (10 ms)")
    add("--anchors", type=int, default=1, help="faults: line holders per worker (1)")
    add("--lead", type=float, default=5.0, help="faults: seconds of grants before (5)")
    add("--tail", type=float, default=10.0, help="faults: seconds after serving again (10)")
    add("--cut", type=float, help="isolation: seconds (2 x syncLimit x tickTime)")
    add("--connect-batch", type=int, default=20, help="sessions connecting at once per worker")
    add("--output", type=Path, default=ROOT / "benchmarks" / "results")
    add("--name", default="fleet", help="outputs: OUTPUT/NAME.{json,md} (fleet)")
    args = parser.parse_args(argv)
    return checked(args, parser)


def checked(args: argparse.Namespace, parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Every option checked before anything starts (``parser.error`` exits with usage)."""

    def names(text: str, known: Sequence[str], what: str) -> list[str]:
        chosen = [n.strip() for n in text.split(",") if n.strip()]
        unknown = sorted(set(chosen) - set(known))
        if unknown or not chosen:
            parser.error(f"--{what}: {', '.join(unknown) or 'none'} (known: {', '.join(known)})")
        return chosen

    args.clients = names(args.clients, list(CLIENTS), "clients")
    args.fault_clients = names(args.fault_clients, list(CLIENTS), "fault-clients")
    args.scenarios = names(args.scenarios, SCENARIOS, "scenarios")
    try:
        args.mix = tuple(float(p) for p in args.mix.split(","))
    except ValueError:
        parser.error(f"--mix {args.mix!r}: three percentages, e.g. 80,10,10")
    if len(args.mix) != 3 or min(args.mix) < 0 or abs(sum(args.mix) - 100) > 1e-6:
        parser.error(f"--mix {args.mix}: three percentages >= 0 adding up to 100")
    args.curator_sessions = args.curator_sessions or args.sessions
    tick, config = SETTINGS[args.settings]
    low, high = int(config["minSessionTimeout"]) / 1000, int(config["maxSessionTimeout"]) / 1000
    if not low <= args.session_timeout <= high:
        parser.error(f"--session-timeout must be in [{low:g}, {high:g}] s with {args.settings}")
    if args.cut is None:
        args.cut = 2 * int(config["syncLimit"]) * tick / 1000
    positive = ("sessions", "curator_sessions", "workers", "rounds", "window", "sample_every")
    for name in positive:
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0")
    if args.aiozklock_ref is not None and args.aiozklock_path is not None:
        parser.error("--aiozklock-path or --aiozklock-ref, not both")
    args.aiozklock_path = args.aiozklock_path or ROOT
    if not (args.aiozklock_path / "aiozklock" / "__init__.py").is_file():
        parser.error(f"--aiozklock-path {args.aiozklock_path}: no aiozklock/ package there")
    try:  # every fleet's shares, as the workers will check them
        for client in {CLIENTS[c] for c in args.clients + args.fault_clients}:
            for scenario in args.scenarios:
                fleet_params(args, client, scenario, 0)
    except ValueError as exc:
        parser.error(f"the fleet cannot be split so: {exc}")
    return args


def plan_rounds(args: argparse.Namespace, columns: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Per round, the (scenario, column) fleets in order: steady for every client (order
    rotated by the round), then each fault for the fault clients."""
    fault_columns = [CLIENTS[c] for c in args.fault_clients if CLIENTS[c] in columns]
    steady = [CLIENTS[c] for c in args.clients if CLIENTS[c] in columns]
    rounds = []
    for r in range(args.rounds):
        shift = r % max(len(steady), 1)
        fleets = []
        if "steady" in args.scenarios:
            fleets += [("steady", c) for c in [*steady[shift:], *steady[:shift]]]
        for scenario in ("rolling", "isolation"):
            if scenario in args.scenarios:
                fleets += [(scenario, c) for c in fault_columns]
        rounds.append(fleets)
    return rounds


def main(argv: Sequence[str]) -> int:
    if argv[:1] == ["--report"]:  # the markdown again, from a run's JSON file
        for name in argv[1:]:
            document = fr.from_json(json.loads(Path(name).read_text()))
            markdown = fr.document_markdown(document, list(CLIENTS.values()))
            Path(name).with_suffix(".md").write_text(markdown)
        return 0
    args = parse_args(argv)
    began = time.monotonic()
    notes: list[str] = []
    log_dir = args.output / "logs" / args.name
    log_dir.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    tick, config = SETTINGS[args.settings]
    with ExitStack() as stack:
        if args.aiozklock_ref is not None:  # a snapshot nobody edits while it is measured
            args.aiozklock_path = stack.enter_context(baseline_checkout(args.aiozklock_ref)).tree
        checkout = checkout_info(args.aiozklock_path)
        build_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fleet-build-")))
        shim_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fleet-shim-")))
        clients = make_clients(args, build_dir, shim_dir, notes)
        cluster = ZooKeeperCluster(
            3,
            partitionable=True,
            tick_time=tick,
            extra_config=config,
            jvm_properties=SERVER_PROPERTIES,
        )
        stack.enter_context(cluster)
        say(f"ensemble at {cluster.hosts} ({args.settings}: tickTime {tick} ms)")
        found = {k: v for k, v in versions(cluster.hosts).items() if k in VERSIONS}
        rounds, raw = run_rounds(Context(args, cluster, log_dir, notes), clients)
        if checkout_info(args.aiozklock_path) != checkout or "dirty" in str(checkout["git"]):
            notes.append(f"aiozklock's checkout, {checkout['git']} at first, changed or is dirty")
    machine["load_average_at_end"] = os.getloadavg()
    document = {
        "command": command_line(argv),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "ensemble": {"members": 3, "tickTime": tick, **config, **SERVER_PROPERTIES},
        "aiozklock_checkout": checkout,
        "machine": machine,
        "versions": found,
        "elapsed_s": round(time.monotonic() - began, 1),
        "rounds": rounds,
        "raw": raw,
        "notes": notes,
    }
    stem = args.output / args.name
    Path(f"{stem}.json").write_text(json.dumps(fr.jsonable(document), indent=1) + "\n")
    Path(f"{stem}.md").write_text(fr.document_markdown(document, list(CLIENTS.values())))
    say(f"wrote {stem}.json and {stem}.md")
    return 0


def run_rounds(
    ctx: Context, clients: dict[str, Client]
) -> tuple[list[fr.Round], list[dict[str, Any]]]:
    """Every fleet of every round: the values for the tables and the raw summaries (a
    fleet that fails is noted and left out)."""
    rounds: list[fr.Round] = []
    raw: list[dict[str, Any]] = []
    for index, fleets in enumerate(plan_rounds(ctx.args, list(clients))):
        values: fr.Round = {}
        summaries: dict[str, Any] = {}
        for scenario, column in fleets:
            say(f"round {index + 1}: {scenario}, {column}")
            quiesce(ctx)
            try:
                run = run_fleet(ctx, clients[column], scenario, index)
            except (WorkerError, ValueError, OSError) as exc:
                ctx.notes.append(f"round {index + 1}, {scenario}, {column}: failed: {exc}")
                say(ctx.notes[-1])
                continue
            (ctx.log_dir / f"{column}-{scenario}-r{index}.json").write_text(json.dumps(run))
            row, summary = fr.summarize(scenario, run, ctx.args.shared_paths)
            values.setdefault(scenario, {})[column] = row
            summaries[f"{scenario}/{column}"] = summary
            say(f"  {json.dumps({k: round(v, 3) for k, v in row.items()})}")
        rounds.append(values)
        raw.append(summaries)
    return rounds, raw


def command_line(argv: Sequence[str]) -> str:
    return "PYTHONPATH=. .venv/bin/python benchmarks/fleet.py " + shlex.join(argv)


_STARTED = time.monotonic()


def say(message: str) -> None:
    print(f"[fleet {time.monotonic() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
