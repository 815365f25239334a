"""Run one scenario of one Python client in this process (the runner starts it):

    python -m benchmarks.worker LIBRARY SCENARIO key=value...

LIBRARY is aiozklock, sync (aiozklock.sync), aiozk, kazoo, etcd or redis; SCENARIO is one
of the client module's SCENARIOS (uncontended, contended, multilock, election, rw_write,
rw_read, rwmix, semaphore_cycle, semaphore, many, floor, requests; aiozklock: request_floor,
scale, idle, busy; aiozk: no semaphore; sync, etcd and redis: uncontended, contended and
requests only).
The ready/go protocol and the parameters are described in ``benchmarks.common``.
"""

from __future__ import annotations

import cProfile
import importlib
import io
import pstats
import sys

from benchmarks.common import Gate, Params, Result, emit

CLIENT_MODULES = {
    "aiozklock": "benchmarks.clients.aiozklock_bench",
    "aiozk": "benchmarks.clients.aiozk_bench",
    "kazoo": "benchmarks.clients.kazoo_bench",
    "sync": "benchmarks.clients.sync_bench",
    "etcd": "benchmarks.clients.etcd_bench",
    "redis": "benchmarks.clients.redis_bench",
}
PROFILE_TOP = 15


def run_scenario(library: str, scenario: str, params: Params, gate: Gate) -> Result:
    """Run in this process; with ``params.profile`` the result has the profile's top
    functions by own time, measured from "go" to the end of the scenario."""
    module = importlib.import_module(CLIENT_MODULES[library])
    if not params.profile:
        result: Result = module.run(scenario, params, gate)
        return result
    profiler = cProfile.Profile()
    gate.on_go.append(profiler.enable)
    try:
        result = module.run(scenario, params, gate)
    finally:
        profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(PROFILE_TOP)
    return {**result, "profile": text.getvalue()}


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[0] not in CLIENT_MODULES:
        raise SystemExit(__doc__)
    library, scenario, *words = argv
    result = run_scenario(library, scenario, Params.from_words(words), Gate(sys.stdin, sys.stdout))
    emit(sys.stdout, {"event": "result", **result})


if __name__ == "__main__":
    main(sys.argv[1:])
