"""``python -m aiozklock demo --recipe R``: every recipe's race passes its history check."""

from __future__ import annotations

import io

import anyio
import pytest

from aiozklock._cli import build_parser
from aiozklock._cli._choices import RECIPES
from aiozklock._cli._demo_race import run_demo
from aiozklock._cli._demo_report import print_report as _print_report

pytestmark = [pytest.mark.anyio]


@pytest.mark.parametrize("recipe", [recipe for recipe in RECIPES if recipe != "semaphore"])
async def test_demo_of_each_recipe_passes(zk_hosts: str, zk_chroot: str, recipe: str) -> None:
    # A generous acquire timeout: a time-out would be a missing grant on a slow machine.
    args = build_parser().parse_args(
        ["demo", "--recipe", recipe, "--workers", "4", "--rounds", "3", "--hold", "0.002"]
    )
    args.timeout = 20.0
    args.hosts = zk_hosts + zk_chroot
    with anyio.fail_after(30):
        results, history, store = await run_demo(args)
    out = io.StringIO()
    assert _print_report(args, args.hosts, results, history.check(), store, out), out.getvalue()
    assert len(results.grants) == 12
    assert results.leftover_nodes == []
    assert store.value == 12  # the read-modify-write counter lost no update


async def test_demo_semaphore_holds_up_to_max_leases_at_once(zk_hosts: str, zk_chroot: str) -> None:
    """6 workers, 2 leases: the history sees 2 holders at once, never 3; nothing is left."""
    args = build_parser().parse_args(
        [
            "demo",
            "--recipe",
            "semaphore",
            "--max-leases",
            "2",
            "--workers",
            "6",
            "--rounds",
            "2",
            "--hold",
            "0.25",  # holds that overlap unless the machine stalls a quarter second per grant
        ]
    )
    args.timeout = 20.0  # generous: a time-out would be a missing grant on a slow machine
    args.hosts = zk_hosts + zk_chroot
    with anyio.fail_after(30):
        results, history, store = await run_demo(args)
    report = history.check()
    out = io.StringIO()
    assert _print_report(args, args.hosts, results, report, store, out), out.getvalue()
    assert "never more than 2 holders at once" in out.getvalue()
    assert len(results.grants) == 12
    assert report.peak_holders == 2  # 4 waiters queued behind 250 ms holds: leases overlap
    assert report.crowded == ()
    assert results.leftover_nodes == []
    history.record("intruder", 1, results.grants[0].entered, results.grants[0].entered + 0.05)
    assert not history.check().ok  # a third holder during the first two would be caught


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the drivers run on asyncio only
@pytest.mark.parametrize("store", ["postgres", "redis"])
async def test_demo_with_a_real_store(
    zk_hosts: str, zk_chroot: str, request: pytest.FixtureRequest, store: str
) -> None:
    """``--store``: each holder's fenced read and write go to the server, which holds the
    counter at the end; the report says where it was."""
    url = request.getfixturevalue("pg_dsn" if store == "postgres" else "redis_url")
    args = build_parser().parse_args(
        ["demo", "--workers", "4", "--rounds", "3", "--hold", "0.002", "--store", store]
    )
    args.timeout = 20.0
    args.hosts = zk_hosts + zk_chroot
    args.store_url = url
    with anyio.fail_after(60):
        results, history, store_record = await run_demo(args)
    out = io.StringIO()
    assert _print_report(args, args.hosts, results, history.check(), store_record, out), (
        out.getvalue()
    )
    assert results.store_held == store_record.value == 12
    assert f"fenced store: {store} at {url}" in out.getvalue()
    assert f"counter = 12 (expected 12; {store} holds 12)" in out.getvalue()
    assert [r.accepted for r in store_record.reads] == [True] * 12  # each grant read first


def test_demo_rejects_an_unknown_recipe() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["demo", "--recipe", "barrier"])
