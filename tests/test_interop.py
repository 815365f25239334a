"""Mixed fleets: our recipes and other libraries' on one path, each in its own process,
against real ZooKeeper, with a history check of every critical section.

Apache Curator's peer is compiled at test time (Debian's ``libcurator-recipes-java`` and a
JDK, which ``.ci/run`` installs); without them its tests skip and say why.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

import aiozklock
from tests.conftest import ClientFactory
from tests.interop.peers import Interval, curator_peer, hand_offs, overlaps, start_peer

pytestmark = [pytest.mark.anyio]

SECONDS = 3.0
HOLD_MICROS = 300


@pytest.fixture(scope="session")
def curator(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ...]:
    command = curator_peer(Path(tmp_path_factory.mktemp("curator-peer")))
    if isinstance(command, str):
        pytest.skip(command)
    return command


async def _ours(lock: aiozklock.Lock, until: float, who: str, out: list[Interval]) -> None:
    """Our side of the loop: acquire → hold (a busy wait, as the peers do) → release."""
    while time.monotonic() < until:
        async with lock:
            start = time.monotonic_ns()
            while time.monotonic_ns() - start < HOLD_MICROS * 1000:
                pass
            out.append((start, time.monotonic_ns(), who))
        await anyio.lowlevel.checkpoint()


async def test_our_lock_and_curators_mutex_share_a_path(
    curator: tuple[str, ...], hosts: str, open_client: ClientFactory
) -> None:
    path = "/interop/mutex"
    clients = [await open_client() for _ in range(2)]
    await clients[0].ensure_path(path)  # the chroot too: Curator creates below it only
    ours: list[Interval] = []
    with anyio.fail_after(SECONDS + 30):
        peer = await start_peer(
            "curator", [*curator, hosts, path, "mutex", "2", str(SECONDS), str(HOLD_MICROS)]
        )
        await peer.go()
        until = time.monotonic() + SECONDS
        async with anyio.create_task_group() as tg:
            for i, client in enumerate(clients):
                tg.start_soon(_ours, client.lock(path), until, f"aiozklock-{i}", ours)
        theirs = await peer.intervals()
    history = ours + theirs
    assert overlaps(history) == []
    assert len(ours) > 10
    assert len(theirs) > 10  # neither side starved
    directions = {(a.split("-")[0], b.split("-")[0]) for a, b in hand_offs(history)}
    assert {("aiozklock", "curator"), ("curator", "aiozklock")} <= directions
