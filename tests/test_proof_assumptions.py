"""The leader proof on an ensemble whose ``minSessionTimeout`` was lowered below two ticks
(ZooKeeper's default), where the leader's pings (every ``tickTime/2``) come more than a
quarter of the session timeout apart.

The ensemble ticks every second (its sessions may be 1 s long, one tick), so that a session
under two ticks is still long enough to be proven on a loaded machine: a 1.5 s session is
proven with a touch gap of the leader's ping interval (0.5 s; a quarter of the timeout,
0.375 s, was used before, and cannot be relied on); a timeout no proof can keep up with is
refused at connect; a holder whose server is cut off from the leader stops before another
session is granted its lock. The pure proof against every phase of the pings is in
``tests/test_leader_proof_model.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

import aiozklock
from aiozklock.testing import ZooKeeperCluster, measure_cut, session_of

pytestmark = pytest.mark.anyio

TICK = 1.0
SHORT = 1.5  # 1.5 ticks
CONFIG = {"minSessionTimeout": "500", "maxSessionTimeout": "30000", "syncLimit": "5"}


@pytest.fixture(scope="module")
def ensemble() -> Iterator[ZooKeeperCluster]:
    # A cut-off follower answers its clients for syncLimit x tickTime = 5 s: > 3 x SHORT.
    with ZooKeeperCluster(
        3, tick_time=int(TICK * 1000), partitionable=True, extra_config=CONFIG
    ) as cluster:
        yield cluster


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_under_two_ticks_the_proof_waits_out_the_leaders_ping_interval(
    ensemble: ZooKeeperCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="aiozklock._wire._session")
    async with aiozklock.connect(ensemble.hosts, session_timeout=SHORT) as zk:
        assert zk.negotiated_timeout == SHORT
        leader = session_of(zk).leader
        assert leader.tick == TICK
        assert leader.touch_gap(SHORT) >= TICK / 2
    # 0.7 ticks: the proof would need more than 16 probes a timeout. Refused, not run.
    with pytest.raises(aiozklock.InvalidArgument, match=r"session_timeout >= 2 s"):
        async with aiozklock.connect(ensemble.hosts, session_timeout=0.7):
            pass
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


async def test_under_two_ticks_a_holder_cut_off_stops_before_the_next_grant(
    ensemble: ZooKeeperCluster,
) -> None:
    # (isolate-leader takes an election of tens of seconds at this tick: not here.)
    result = await measure_cut(
        ensemble,
        "isolate-follower",
        session_timeout=SHORT,
        loss_policy="expired",  # runs until the proof runs out
        phase=SHORT / 2,
    )
    print(f"UNDER TWO TICKS: {result}")
    assert not result.overlap, result
