"""The nemesis with a real fenced store (``store="postgres"`` / ``"redis"``): the server
decides every fenced read and write, the ``FencedStore`` records its verdicts, and the
history is judged as with the in-process store.

The end-to-end runs make stale writes happen on purpose: only ``pause-before-write`` faults,
with seed 18's schedule (``plan_faults(18, 14, 2.0, ["pause-before-write"])``: two groups,
each pausing a holder process right after its pre-write check for 3.1 and 3.2 s, well past
its 2 s session; the second ends 3.4 s before the run stops starting groups, a session
timeout after its duration). Meanwhile another client takes the lock and reads the counter
(registering its newer token); the resumed holder's write then reaches the store with the
old token, and the server must refuse it.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from aiozklock.testing import NemesisReport, ZooKeeperCluster, run_nemesis
from aiozklock.testing._nemesis_checks import _real_values
from aiozklock.testing._nemesis_store import STORES, StoreGate, open_store

ROOT = Path(__file__).resolve().parent.parent
SEED, DURATION, SESSION_TIMEOUT = 18, 14.0, 2.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # asyncpg and redis-py run on asyncio only


def _url(request: pytest.FixtureRequest, store: str) -> str:
    return str(request.getfixturevalue("pg_dsn" if store == "postgres" else "redis_url"))


# --- the nemesis, end to end -------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("store", ["postgres", "redis"])
async def test_nemesis_stale_writes_are_refused_by_the_real_store(
    zk_hosts: str, request: pytest.FixtureRequest, store: str
) -> None:
    url = _url(request, store)
    with anyio.fail_after(150):
        report = await run_nemesis(
            zk_hosts,
            seed=SEED,
            duration=DURATION,
            session_timeout=SESSION_TIMEOUT,
            clients=3,  # w1 in this process, p1 and p2 in child processes
            processes=2,
            kinds=["pause-before-write"],
            store=store,
            store_url=url,
            command=f"pytest tests/test_nemesis_store.py -k {store}",
        )
    text = str(report)
    print(f"\nNEMESIS --store {store}\n{text}")
    assert report.ok, text
    assert report.store == store
    assert f"fenced store: {store} at {url}" in text
    stopped = [f for f in report.faults if "stopped itself" in f.note]
    assert stopped, "no holder stopped itself before a write"
    history = report.history
    refused = [s for s in history.stale_writes if not s.write.accepted]
    assert refused, "no stale write reached the store"
    assert all(s.paused for s in refused)  # the stopped holders', nobody else's
    assert history.fencing_violations == ()
    assert f"stale writes refused by {store}: {len(refused)}, accepted: 0" in text
    assert report.store_rejected >= len(refused)
    assert report.store_value == report.store_accepted  # what the server holds, checked too
    assert report.integrity_errors == []


# --- the verdict is the server's ---------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.timeout(60)
@pytest.mark.parametrize("store", ["postgres", "redis"])
async def test_the_real_store_decides_and_the_record_follows(
    request: pytest.FixtureRequest, store: str
) -> None:
    """A token newer than any the run has seen reached the server behind the record's back:
    the server refuses the run's read and write, which the in-process store alone would
    have accepted, and the record says refused. The end check compares the server's value
    with the record's."""
    url = _url(request, store)
    resource = f"/aiozklock-test/{uuid.uuid4().hex}"
    errors: list[str] = []
    async with open_store(store, url, [resource]) as opened:
        assert opened is not None
        gate = StoreGate([resource], errors.append, opened.real)
        assert gate.name == store
        assert await gate.read("w1", resource, 10) == (True, 0)
        assert await gate.write("w1", resource, 10, 1)
        await _newer_token_behind_our_back(opened.real, resource, 99)
        assert await gate.read("w2", resource, 20) == (False, 0)
        assert not await gate.write("w1", resource, 10, 2)
        record = gate.stores[resource]
        assert [(w.client, w.token, w.accepted) for w in record.accepted] == [("w1", 10, True)]
        assert [(w.client, w.token, w.accepted) for w in record.rejected] == [("w1", 10, False)]
        assert [(r.client, r.accepted) for r in record.reads] == [("w1", True), ("w2", False)]
        assert record.value == 1
        held = await opened.real.values()
        assert _real_values(store, gate.stores, held) == []
        assert _real_values(store, gate.stores, {resource: 7}) == [
            f"{store} holds 7 for {resource}, its accepted writes 1"
        ]
    assert errors == []
    memory = StoreGate([resource], errors.append)  # the same accesses, decided in-process
    assert await memory.write("w1", resource, 10, 1)
    assert await memory.write("w1", resource, 10, 2)


async def _newer_token_behind_our_back(real: object, resource: str, token: int) -> None:
    """Another writer's token reaches the server directly (not through the gate)."""
    from aiozklock.testing._nemesis_store_drivers import PostgresCounter, RedisCounter

    if isinstance(real, PostgresCounter):
        conn = await real._connection("intruder")
        async with conn.transaction():
            await real._fence.advance(conn, resource, token)
    else:
        assert isinstance(real, RedisCounter)
        assert await real.read("intruder", resource, token) == (True, 1)


# --- what cannot run is refused first ----------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("command", ["nemesis", "demo"])
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--store", "postgres", "--backend", "trio"], "needs the asyncio backend"),
        (["--store", "redis", "--backend", "trio"], "needs the asyncio backend"),
        (["--store", "postgres", "--recipe", "semaphore"], "share the resource"),
        (["--store-url", "redis://127.0.0.1:1/0"], "needs a real store"),
        (["--store", "postgres", "--store-url", "redis://127.0.0.1:1/0"], "postgresql://"),
        (["--store", "redis", "--store-url", "postgresql://x@127.0.0.1:1/x"], "redis://"),
    ],
)
def test_bad_store_options_are_usage_errors_before_anything_starts(
    command: str, args: list[str], message: str
) -> None:
    # In a subprocess: argparse exits; nothing may be started (no server, no "starting").
    out = subprocess.run(
        [sys.executable, "-m", "aiozklock", command, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=25,
        check=False,
    )
    assert out.returncode == 2, out
    assert message in out.stderr, out.stderr
    assert "usage:" in out.stderr, out.stderr
    assert "starting" not in out.stderr, out.stderr
    assert out.stdout == ""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", ["nemesis", "demo"])
@pytest.mark.parametrize(
    ("store", "url"),
    [
        ("postgres", "postgresql://postgres@127.0.0.1:1/postgres"),
        ("redis", "redis://127.0.0.1:1/0"),
    ],
)
def test_an_unreachable_store_is_reported_not_run(
    command: str, store: str, url: str, tmp_path: Path
) -> None:
    # Port 1: nothing listens. ZooKeeper is not contacted before the store is open.
    args = [command, "--store", store, "--store-url", url, "--hosts", "127.0.0.1:1"]
    if command == "nemesis":
        args += ["--seed", "1", "--duration", "1", "--log-dir", str(tmp_path)]
    out = subprocess.run(
        [sys.executable, "-m", "aiozklock", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert out.returncode == 2, out
    assert f"aiozklock {command}: {store}: " in out.stderr, out.stderr
    assert "Traceback" not in out.stderr, out.stderr


@pytest.mark.timeout(30)
def test_run_nemesis_refuses_a_real_store_on_trio_before_anything() -> None:
    cluster = ZooKeeperCluster(3)  # not started: the arguments are refused before anything
    with pytest.raises(ValueError, match="needs the asyncio backend"):
        anyio.run(lambda: run_nemesis(cluster, seed=1, store="postgres"), backend="trio")
    with pytest.raises(ValueError, match="unknown store"):
        anyio.run(lambda: run_nemesis(cluster, seed=1, store="s3"))
    assert STORES == ("memory", "postgres", "redis")


def test_a_memory_report_says_nothing_of_a_server() -> None:
    from aiozklock.testing import History

    report = NemesisReport(
        seed=1,
        backend="asyncio",
        duration=1.0,
        session_timeout=4.0,
        clients=1,
        processes=0,
        servers="x",
        plan=[],
        faults=[],
        history=History().check(),
    )
    text = str(report)
    assert "fenced store (memory)" in text
    assert "refused by" not in text
    assert "the server decides" not in text
