"""The fleet benchmark's ensemble side (``benchmarks/fleet.py``): the leader's zxid over a
window, and the faults (a rolling restart, a leader isolation) with the leaders seen meanwhile
(each member's ``srvr``), as a timeline of ``[seconds after mark, what]``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from aiozklock.testing import ZooKeeperCluster, ZooKeeperMember, four_letter_word
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


def leaders(cluster: ZooKeeperCluster, cut_off: int | None = None) -> tuple[int, ...]:
    """The members that say ``Mode: leader`` now, but ``cut_off`` (an isolated leader says
    so until it steps down, though it can commit nothing)."""
    return tuple(m.id for m in cluster.members if m.id != cut_off and m.mode() == "leader")


def global_sessions(cluster: ZooKeeperCluster) -> int | None:
    """The sessions the leader tracks (``mntr``'s ``zk_global_sessions``: open ones, and
    those of gone clients until they expire); None without a leader."""
    for member in cluster.members:
        if member.mode() != "leader":
            continue
        with contextlib.suppress(OSError):
            for line in four_letter_word(member.address, "mntr", 2.0).splitlines():
                name, _, value = line.partition("\t")
                if name == "zk_global_sessions":
                    return int(value)
    return None


def wait_no_sessions(cluster: ZooKeeperCluster, timeout: float) -> int | None:
    """Wait (polling the leader) until it tracks no session, at most ``timeout`` seconds:
    the sessions left then (0, or None without a leader)."""
    deadline = time.monotonic() + timeout
    while True:
        left = global_sessions(cluster)
        if left == 0 or time.monotonic() >= deadline:
            return left
        time.sleep(LEADER_POLL_S)


@dataclass
class Timeline:
    """What a fault did, ``[seconds after mark, what]``, and how long no member (but a cut
    off one) said it leads."""

    clock: Callable[[], float]
    events: list[list[Any]] = field(default_factory=list)
    leaderless_s: float = 0.0

    def note(self, what: str) -> None:
        self.events.append([self.clock(), what])

    def watch_leaders(
        self, cluster: ZooKeeperCluster, done: Callable[[], bool], cut_off: int | None = None
    ) -> None:
        """Until ``done()`` (and once after): an event each time the set of leaders
        changes."""
        seen: tuple[int, ...] | None = None
        last = time.monotonic()
        while True:
            finished = done()
            now = leaders(cluster, cut_off)
            polled = time.monotonic()
            if not now:  # the time since the previous poll counts as without a leader
                self.leaderless_s += polled - last
            last = polled
            if now != seen:
                self.note(f"leader {', '.join(map(str, now)) or 'none'}")
                seen = now
            if finished:
                return
            time.sleep(LEADER_POLL_S)


def rolling_restart(cluster: ZooKeeperCluster, timeline: Timeline) -> None:
    """Each member stopped and started again at once, followers first, the leader last,
    each serving (and the ensemble with a leader) before the next; the leaders seen
    meanwhile."""
    for member in [*cluster.followers(), cluster.leader()]:
        member.stop()
        timeline.note(f"member {member.id} stopped")

        def restart(member: ZooKeeperMember = member) -> None:
            member.start(wait=True, timeout=SERVING_TIMEOUT_S)
            cluster.wait_serving(SERVING_TIMEOUT_S)

        _watching(cluster, timeline, restart)
        timeline.note(f"member {member.id} serving")


def isolate_leader(cluster: ZooKeeperCluster, timeline: Timeline, cut: float) -> None:
    """The leader's server links held silently for ``cut`` seconds, then healed; the
    leaders seen meanwhile (the isolated one not counted while it is cut off)."""
    leader = cluster.leader()
    cluster.isolate(leader)
    timeline.note(f"member {leader.id} (leader) isolated")
    _watching(cluster, timeline, lambda: time.sleep(cut), cut_off=leader.id)
    cluster.heal()
    timeline.note("healed")
    _watching(cluster, timeline, lambda: cluster.wait_serving(SERVING_TIMEOUT_S))
    timeline.note("all serving")


def _watching(
    cluster: ZooKeeperCluster,
    timeline: Timeline,
    action: Callable[[], None],
    cut_off: int | None = None,
) -> None:
    """``action()`` in a thread, the leaders watched until it returns (its error raised)."""
    with ThreadPoolExecutor(1) as pool:
        done = pool.submit(action)
        timeline.watch_leaders(cluster, done.done, cut_off)
        done.result()
