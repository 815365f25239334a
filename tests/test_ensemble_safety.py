"""The holder's promise on a real 3-node ensemble whose servers are cut off from each other:
a holder connected to a server that cannot reach the leader is stopped **before** another
session is granted its lock (``aiozklock.testing.measure_cut``: holder and waiter in this
process, on one clock, the instants taken after the cut).

The ensemble keeps a cut-off follower serving its clients for ``syncLimit x tickTime`` =
4 s, twice the session timeout: the leader expires the holder's session while its server
still answers it. The negative control runs the same cut with the holder on the rule every
other client follows (an answered request proves the session alive) and must overlap: the
scenario does open the gap the protection closes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

import aiozklock
from aiozklock.testing import ZooKeeperCluster, measure_cut

pytestmark = pytest.mark.anyio

T = 2.0  # session timeout; tick 200 ms: the leader pings every 0.1 s


@pytest.fixture(scope="module")
def ensemble() -> Iterator[ZooKeeperCluster]:
    config = {"syncLimit": "20", "minSessionTimeout": "100", "maxSessionTimeout": "30000"}
    with ZooKeeperCluster(3, partitionable=True, extra_config=config) as cluster:
        yield cluster


# One backend per fault (both are covered; the suite's time is shared): the mechanism is
# the session's, below the event loop's differences.
@pytest.mark.parametrize(
    ("anyio_backend", "fault", "how"),
    [
        ("asyncio", "isolate-follower", "silent"),
        ("trio", "isolate-leader", "silent"),
        ("trio", "split-follower", "reset"),
    ],
)
async def test_a_holder_cut_off_from_the_leader_stops_before_the_next_grant(
    ensemble: ZooKeeperCluster, fault: str, how: str
) -> None:
    result = await measure_cut(ensemble, fault, session_timeout=T, how=how)  # type: ignore[arg-type]
    assert not result.overlap, result
    # Stopped within the proof's bounds: a probe late by T/6 after at most T/8 of waiting.
    assert result.stopped < T, result


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("fault", ["isolate-follower", "isolate-leader"])
async def test_with_loss_policy_expired_the_holding_is_lost_before_the_next_grant(
    ensemble: ZooKeeperCluster, fault: str
) -> None:
    result = await measure_cut(
        ensemble,
        fault,  # type: ignore[arg-type]
        session_timeout=T,
        loss_policy="expired",
        phase=T / 2,  # a session in its steady state: its proof is a probe, not the handshake
    )
    assert not result.overlap, result


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_negative_control_without_the_leader_proof_the_holder_overlaps(
    ensemble: ZooKeeperCluster,
) -> None:
    result = await measure_cut(ensemble, "isolate-follower", session_timeout=T, protect=False)
    # Its server answers its pings until syncLimit x tickTime = 4 s after the cut; the leader
    # expired the session about T after it, and the waiter was granted then.
    assert result.overlap, result
    assert result.stopped > 3.0, result


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_timeout_under_two_ticks_is_warned_once_with_the_numbers(
    ensemble: ZooKeeperCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="aiozklock._wire._session")
    async with aiozklock.connect(ensemble.hosts, session_timeout=0.3):
        pass
    async with aiozklock.connect(ensemble.hosts, session_timeout=T):
        pass
    warnings = [r.getMessage() for r in caplog.records if "tickTime is 200 ms" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "session_timeout >= 0.4 s" in warnings[0]
