"""The fleet benchmark's ensemble side (``benchmarks/fleet.py``): the leader's zxid over a
window, and the faults (a rolling restart, a leader isolation) with the leaders seen meanwhile
(each member's ``srvr``), as a timeline of ``[seconds after mark, what]``."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiozklock.testing import ZooKeeperCluster, four_letter_word
from benchmarks import fleet_report as fr

SERVING_TIMEOUT_S = 120.0
LEADER_POLL_S = 0.25  # how often a fault's timeline asks each member whether it leads


def read_leader(cluster: ZooKeeperCluster) -> fr.Sample | None:
    """The leader's id and zxid now (None while there is no leader)."""
    for member in cluster.members:
        if not member.running:
            continue
        try:
            mode, zxid = fr.parse_srvr(four_letter_word(member.address, "srvr", 2.0))
        except OSError:
            continue
        if mode == "leader" and zxid is not None:
            return fr.Sample(time.monotonic(), member.id, zxid)
    return None


def sample_commits(cluster: ZooKeeperCluster, window: float, every: float) -> list[fr.Sample]:
    """The leader's zxid every ``every`` seconds over ``window`` seconds."""
    samples: list[fr.Sample] = []
    deadline = time.monotonic() + window
    while True:
        sample = read_leader(cluster)
        if sample is not None:
            samples.append(sample)
        left = deadline - time.monotonic()
        if left <= 0:
            return samples
        time.sleep(min(every, left))


def leaders(cluster: ZooKeeperCluster) -> tuple[int, ...]:
    """The members that say ``Mode: leader`` now (two for a while after a leader is cut
    off: the old one until it steps down, the new one)."""
    return tuple(m.id for m in cluster.members if m.mode() == "leader")


def watch_leaders(
    cluster: ZooKeeperCluster, clock: Callable[[], float], done: Callable[[], bool]
) -> list[list[Any]]:
    """Until ``done()``: an event each time the set of leaders changes."""
    events: list[list[Any]] = []
    seen: tuple[int, ...] | None = None
    while not done():
        now = leaders(cluster)
        if now != seen:
            events.append([clock(), f"leader {', '.join(map(str, now)) or 'none'}"])
            seen = now
        time.sleep(LEADER_POLL_S)
    return events


def rolling_restart(cluster: ZooKeeperCluster, clock: Callable[[], float]) -> list[list[Any]]:
    """Each member stopped and started again at once, followers first, the leader last,
    each serving (and the ensemble with a leader) before the next; the leaders seen
    meanwhile."""
    order = [*cluster.followers(), cluster.leader()]
    events: list[list[Any]] = []
    for member in order:
        member.stop()
        events.append([clock(), f"member {member.id} stopped"])
        with ThreadPoolExecutor(1) as pool:
            started = pool.submit(member.start, wait=True, timeout=SERVING_TIMEOUT_S)
            events += watch_leaders(cluster, clock, started.done)
            started.result()
        cluster.wait_serving(SERVING_TIMEOUT_S)
        events.append([clock(), f"member {member.id} serving"])
    return events


def isolate_leader(
    cluster: ZooKeeperCluster, clock: Callable[[], float], cut: float
) -> list[list[Any]]:
    """The leader's server links held silently for ``cut`` seconds, then healed; the
    leaders seen meanwhile."""
    leader = cluster.leader()
    cluster.isolate(leader)
    events: list[list[Any]] = [[clock(), f"member {leader.id} (leader) isolated"]]
    healed_at = time.monotonic() + cut
    events += watch_leaders(cluster, clock, lambda: time.monotonic() >= healed_at)
    cluster.heal()
    events.append([clock(), "healed"])
    cluster.wait_serving(SERVING_TIMEOUT_S)
    events.append([clock(), f"all serving, leader {', '.join(map(str, leaders(cluster)))}"])
    return events
