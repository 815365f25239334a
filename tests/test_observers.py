"""Observers, on real ensembles of 3 voters and an observer (the test kit's ``observers=``):
a holder connected only to an observer that is cut off from the leader is stopped **before**
a session on the majority is granted its lock, whether the observer talks to the leader
itself or through a follower's ObserverMaster (ZooKeeper 3.6+: ``observer_master=True``),
where its session's touches reach the leader in two hops.

The ObserverMaster ensemble also runs with ZooKeeper's **default four-letter-word
whitelist** (``srvr`` alone): the client cannot read ``tickTime`` there, says so once per
client in a WARNING, and proves over two hops from the assumption it states (the timeout
is at least two ticks). Both ensembles keep a cut-off server answering its clients for
``syncLimit x tickTime`` = 4 s, twice the session timeout, so the leader expires the
holder's session while its server still answers it: the negative control, a holder that
trusts its server's answers, overlaps.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator

import anyio
import pytest

import aiozklock
from aiozklock.testing import ZooKeeperCluster, measure_cut, session_of

pytestmark = pytest.mark.anyio

T = 2.0  # session timeout; tick 200 ms
BOUND = 10.0  # a hang guard only
CONFIG = {"syncLimit": "20", "minSessionTimeout": "100", "maxSessionTimeout": "30000"}
UNKNOWN_TICK = "could not read the ensemble's tickTime"


@pytest.fixture(scope="module", params=["observer", "observer-master"])
def ensemble(request: pytest.FixtureRequest) -> Iterator[ZooKeeperCluster]:
    master = request.param == "observer-master"
    with ZooKeeperCluster(
        3,
        observers=1,
        observer_master=master,
        four_letter_words=None if master else "*",
        partitionable=True,
        extra_config=CONFIG,
    ) as cluster:
        yield cluster


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the mechanism is the session's, below the event loop


async def test_the_kit_starts_an_observer_listed_in_the_config(ensemble: ZooKeeperCluster) -> None:
    (observer,) = ensemble.observer_members()
    assert observer.id == 4
    assert observer.mode() == "observer"
    assert ensemble.hosts.endswith(observer.address)
    async with aiozklock.connect(observer.address, session_timeout=T) as zk:
        config, _ = await zk.get_data("/zookeeper/config")
        assert b":observer" in config
        assert session_of(zk).leader.hops == 2  # an observer listed: two hops assumed


async def test_an_observer_master_carries_the_observer_without_the_leader_link(
    ensemble: ZooKeeperCluster,
) -> None:
    """Through an ObserverMaster, the observer's writes need voter 1, not its own link to
    the leader: with that link cut a write through the observer is committed; with voter 1
    cut off it is not (until healed)."""
    if not ensemble.observer_master:
        pytest.skip("the observer talks to the leader itself")
    (observer,) = ensemble.observer_members()
    master, leader = ensemble.members[0], ensemble.leader()
    assert master is not leader
    path = f"/om-{uuid.uuid4().hex}"
    async with aiozklock.connect(observer.address, session_timeout=T) as zk:
        try:
            ensemble.cut(observer, leader)
            with anyio.fail_after(BOUND):
                await zk.create(path)
            ensemble.heal()
            ensemble.isolate(master)
            written = False
            with anyio.move_on_after(1.0), contextlib.suppress(aiozklock.ConnectionLoss):
                await zk.set_data(path, b"x")
                written = True
            # The write waits for voter 1's link to the leader: the session gives up on the
            # connection (no probe answered) or the second passes, whichever comes first.
            assert not written
        finally:
            ensemble.heal()
    await ensemble.await_serving(120.0)


async def test_the_tick_unknown_is_warned_once_per_client_with_what_is_assumed(
    ensemble: ZooKeeperCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """ZooKeeper's default whitelist refuses ``conf``: one WARNING per client (not per
    probe) names the whitelist to allow and the assumption; the proof uses a quarter of the
    timeout as the touch gap, over two hops. Where ``conf`` is allowed the tick is used
    and nothing is warned."""
    caplog.set_level(logging.INFO, logger="aiozklock._wire._session")
    (observer,) = ensemble.observer_members()
    for _ in range(2):
        async with (
            aiozklock.connect(ensemble.hosts, session_timeout=T) as zk,
            zk.lock(f"/tick-unknown/{uuid.uuid4().hex}"),  # a holding: the session probes
        ):
            leader = session_of(zk).leader
            with anyio.fail_after(BOUND):
                # Several probes answered: the proof's state, polled (no event tells it).
                while len(leader.answers) < 4:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and UNKNOWN_TICK in r.getMessage()
    ]
    if not ensemble.observer_master:  # every four-letter word allowed
        assert leader.tick == 0.2
        assert warnings == []
        return
    assert len(warnings) == 2, warnings  # one per client, none per probe
    assert "4lw.commands.whitelist=srvr,conf" in warnings[0]
    assert "at least 2 x tickTime" in warnings[0]
    assert "every 0.5 s" in warnings[0]  # T/4
    assert leader.tick is None
    assert leader.touch_gap(T) == T / 4
    assert leader.probe_gap(T) == pytest.approx(T / 12)  # two links of three probes
    assert observer.mode() == "observer"


# ``expired``: the holder runs until the proof runs out (``valid_until``), the case the
# proof's bound decides; ``suspended`` stops it at the first late probe.
@pytest.mark.parametrize(
    ("fault", "loss_policy"),
    [
        ("isolate-observer", "expired"),
        ("isolate-observer-master", "expired"),
        ("isolate-observer-master", "suspended"),
    ],
)
async def test_a_holder_on_a_cut_off_observer_stops_before_the_next_grant(
    ensemble: ZooKeeperCluster, fault: str, loss_policy: str
) -> None:
    """``isolate-observer``: the observer's every server link held (its link to the
    ObserverMaster too). ``isolate-observer-master``: the follower whose ObserverMaster
    serves the observer cut off from the others; the observer, still linked to it, answers
    its clients; its touches stop one hop short of the leader."""
    if fault == "isolate-observer-master" and not ensemble.observer_master:
        pytest.skip("no ObserverMaster")
    result = await measure_cut(
        ensemble,
        fault,  # type: ignore[arg-type]
        session_timeout=T,
        loss_policy=loss_policy,  # type: ignore[arg-type]
        phase=T / 2,  # a session in its steady state: its proof is a probe chain
    )
    print(f"OBSERVER {fault} {loss_policy}: {result}")
    assert not result.overlap, result
    assert result.stopped < T, result


async def test_negative_control_a_holder_trusting_its_observer_overlaps(
    ensemble: ZooKeeperCluster,
) -> None:
    fault = "isolate-observer-master" if ensemble.observer_master else "isolate-observer"
    result = await measure_cut(ensemble, fault, session_timeout=T, protect=False)  # type: ignore[arg-type]
    print(f"OBSERVER negative control {fault}: {result}")
    # The observer answers its pings until syncLimit x tickTime = 4 s after the cut; the
    # leader expired the session about T after it, and the waiter was granted then.
    assert result.overlap, result
    assert result.stopped > 3.0, result


def test_the_kit_refuses_an_observer_master_without_observers_or_voters() -> None:
    with pytest.raises(ValueError, match="observer_master=True needs"):
        ZooKeeperCluster(3, observer_master=True)
    with pytest.raises(ValueError, match="observer_master=True needs"):
        ZooKeeperCluster(1, observers=1, observer_master=True)  # voter 1 would lead
    with pytest.raises(ValueError, match="observers >= 0"):
        ZooKeeperCluster(3, observers=-1)
