"""The leader proof (``_wire._leader``) against a model of ZooKeeper's pings
(``tests._proof_model``): for every phase of the servers' ping timers (tickTime 200 ms),
the proof must never claim a send time after the leader's last touch of the session, and
must keep up (an answer always arrives before ``valid_until``). Only ``LeaderProof`` and
``server_kind`` are used, as they were before observers and lowered timeouts were covered,
so the same tests run against that code (and failed there).
"""

from __future__ import annotations

import itertools

import pytest

from aiozklock._wire._leader import LeaderProof
from aiozklock._wire._probe import server_kind
from tests import _proof_model as model

ENSEMBLE = b"server.1=127.0.0.1:2888:3888:participant;127.0.0.1:2181\nversion=100000000\n"
OBSERVED = ENSEMBLE + b"server.4=127.0.0.1:2889:3889:observer;127.0.0.1:2184\n"
FAST = {"client_latency": 0.0001, "link_latency": 0.00005, "commit": 0.0003}


@pytest.mark.parametrize("timeout", [0.16, 0.2, 0.3, 0.4, 0.6, 2.0, 20.0])
def test_a_known_tick_covers_the_ping_interval_whatever_the_timeout(timeout: float) -> None:
    """The leader pings every tickTime/2 whatever the session timeout: the touch gap is never
    shorter (it was a quarter of a timeout under two ticks), and at most 1.5 x it."""
    leader = LeaderProof(0.0)
    leader.tick = 0.2
    assert 0.1 <= leader.touch_gap(timeout) <= 0.15 + 1e-12
    leader.tick = 20.0  # a tick longer than the timeout: its pings, not the quarter, bound it
    assert leader.touch_gap(timeout) >= 10.0


@pytest.mark.parametrize("timeout", [0.16, 0.2, 0.25, 0.4, 2.0])
def test_a_follower_under_two_ticks_is_never_over_claimed(timeout: float) -> None:
    worst = model.worst(
        tick_known=0.2, config=ENSEMBLE, timeout=timeout, tick=0.2, hops=1, steps=16, **FAST
    )
    print(f"follower, T={timeout}: {worst}")
    assert worst.overclaim <= 0, worst
    assert worst.headroom > 0, worst


@pytest.mark.parametrize(
    ("timeout", "tick_known"), [(0.38, 0.2), (0.4, 0.2), (0.4, None), (2.0, 0.2), (2.0, None)]
)
def test_an_observer_behind_an_observer_master_is_never_over_claimed(
    timeout: float, tick_known: float | None
) -> None:
    """Two hops (observer, its ObserverMaster's follower, the leader): the config lists an
    observer, so the proof takes two links (tick unknown: at two ticks a timeout or more)."""
    worst = model.worst(
        tick_known=tick_known, config=OBSERVED, timeout=timeout, tick=0.2, hops=2, **FAST
    )
    print(f"observer master, T={timeout}, tick {tick_known}: {worst}")
    assert worst.overclaim <= 0, worst
    assert worst.headroom > 0, worst


@pytest.mark.parametrize(
    ("config", "hops", "tick_known", "timeout"),
    [
        (ENSEMBLE, 1, 0.1, 0.2),  # told half the real tick
        (ENSEMBLE, 2, 0.2, 0.3),  # two hops, the config without observers
    ],
    ids=["wrong-tick", "hidden-observer"],
)
def test_negative_control_a_proof_told_too_little_is_caught_over_claiming(
    config: bytes, hops: int, tick_known: float, timeout: float
) -> None:
    """The model catches an unsound proof: the same proof, told a tick half the real one or
    shown a config that hides the observer, claims more than the leader heard."""
    worst = model.worst(
        tick_known=tick_known, config=config, timeout=timeout, tick=0.2, hops=hops, **FAST
    )
    print(f"negative control: {worst}")
    assert worst.overclaim > 0.001, worst


@pytest.mark.parametrize("hops", [1, 2])
def test_an_idle_session_that_pings_is_proven_soundly_after_its_grant(hops: int) -> None:
    """Proofs only while held: the session pings (touches, no commit) and writes nothing
    until a grant at 2 timeouts; its pings are candidates for ``A``. Never over-claimed,
    and fresh soon after the grant: one probe's round trip past the create for one hop,
    about two touch gaps more for two."""
    timeout, tick = 2.0, 0.2
    config = ENSEMBLE if hops == 1 else OBSERVED
    ping = tick / 2
    grid = [ping * (i + 0.37) / 6 for i in range(6)]
    for phases in itertools.product(grid, repeat=hops):
        proof = LeaderProof(0.0)
        server_kind(proof, config)
        proof.tick = tick
        out = model.run(
            proof,
            timeout=timeout,
            tick=tick,
            hops=hops,
            phases=phases,
            pings=timeout / 6,
            idle_until=2 * timeout,
            duration=4 * timeout,
        )
        assert out.overclaim <= 0, (phases, out)
        assert out.fresh_at is not None, (phases, out)
        assert out.fresh_at - 2 * timeout < (0.02 if hops == 1 else 0.5 * timeout), out
