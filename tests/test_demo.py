"""``python -m aiozklock demo --recipe R``: every recipe's race passes its history check."""

from __future__ import annotations

import io

import anyio
import pytest

from aiozklock.__main__ import RECIPES, _print_report, build_parser, run_demo

pytestmark = [pytest.mark.anyio]


@pytest.mark.parametrize("recipe", RECIPES)
async def test_demo_of_each_recipe_passes(zk_hosts: str, zk_chroot: str, recipe: str) -> None:
    args = build_parser().parse_args(
        ["demo", "--recipe", recipe, "--workers", "4", "--rounds", "3", "--hold", "0.002"]
    )
    args.hosts = zk_hosts + zk_chroot
    with anyio.fail_after(30):
        results, history, store = await run_demo(args)
    out = io.StringIO()
    assert _print_report(args, args.hosts, results, history.check(), store, out), out.getvalue()
    assert len(results.grants) == 12
    assert results.leftover_nodes == []
    assert store.value == 12  # the read-modify-write counter lost no update


def test_demo_rejects_an_unknown_recipe() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["demo", "--recipe", "semaphore"])
