"""One measured cut on a partitionable ensemble: is a holder whose server is cut off from
the others stopped before another session is granted its lock?

A **holder** connects to one member only (the member the fault cuts off: it cannot fail over,
so its session really expires at the leader), takes the lock and waits in its body; a
**waiter** connected to the other members queues for the same lock. Then the fault starts
(``cut``), and two instants are recorded after it: ``stopped``, when the holder's body saw
its cancellation, and ``granted``, when the waiter holds. Both run in this process, on one
clock. ``protect=False`` is the negative control: the holder's session is told its server
is standalone, the rule of aiozklock 0.2 and of the other clients (an answered request
proves the session alive), so the holder runs on while its server still answers.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass
from typing import Literal

import anyio

from aiozklock._client import ZooKeeperClient, connect
from aiozklock._exceptions import LockLost
from aiozklock._recipes._core._holding import LossPolicy

from ._children import wait_for_children
from ._internals import session_of
from ._server import ZooKeeperCluster
from ._server_member import ZooKeeperMember

__all__ = ["CUT_FAULTS", "OBSERVER_FAULTS", "CutMargin", "measure_cut"]

CutFault = Literal[
    "isolate-follower",
    "isolate-leader",
    "split-follower",
    "split-leader",
    "isolate-observer",
    "isolate-observer-master",
]
#: ``isolate-*``: every link of the holder's server held; ``split-*``: a 1|n-1 partition
#: with the holder's server alone on its side (``how`` says silent or reset).
CUT_FAULTS: tuple[CutFault, ...] = (
    "isolate-follower",
    "isolate-leader",
    "split-follower",
    "split-leader",
)
#: On a cluster with observers, the holder on the first observer: ``isolate-observer``
#: cuts that observer off; ``isolate-observer-master`` cuts off the voter whose
#: ObserverMaster serves it (``ZooKeeperCluster(observer_master=True)``: voter 1).
OBSERVER_FAULTS: tuple[CutFault, ...] = ("isolate-observer", "isolate-observer-master")


@dataclass(frozen=True, slots=True)
class CutMargin:
    """One cut's outcome: seconds after the cut at which the holder stopped and the other
    session was granted the lock; ``margin`` is their difference (negative: an overlap)."""

    fault: str
    session_timeout: float
    loss_policy: str
    stopped: float
    granted: float

    @property
    def margin(self) -> float:
        """How long before the other session's grant the holder stopped."""
        return self.granted - self.stopped

    @property
    def overlap(self) -> bool:
        """The holder still ran when the other session was granted the lock."""
        return self.stopped > self.granted


def _target(cluster: ZooKeeperCluster, fault: CutFault) -> ZooKeeperMember:
    """The member the holder connects to."""
    if fault in OBSERVER_FAULTS:
        return cluster.observer_members()[0]
    leader = cluster.leader()
    if fault.endswith("leader"):
        return leader
    return next(m for m in cluster.members if m is not leader and m.running)


def _cut_off(
    cluster: ZooKeeperCluster, fault: CutFault, target: ZooKeeperMember
) -> ZooKeeperMember:
    """The member the fault cuts off: the holder's, or its ObserverMaster's."""
    if fault != "isolate-observer-master":
        return target
    if not cluster.observer_master:
        raise ValueError(f"{fault} needs ZooKeeperCluster(observer_master=True)")
    return cluster.members[0]


class _Race:
    """The holder's and the waiter's instants, and the events that say they are taken."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}
        self.held, self.granted, self.stopped = anyio.Event(), anyio.Event(), anyio.Event()

    async def hold(self, holder: ZooKeeperClient, path: str) -> None:
        with contextlib.suppress(LockLost):
            async with holder.lock(path):
                self.held.set()
                try:
                    await anyio.sleep_forever()
                finally:
                    self.times["stopped"] = time.monotonic()
                    self.stopped.set()

    async def wait(self, waiter: ZooKeeperClient, path: str) -> None:
        async with waiter.lock(path):
            self.times["granted"] = time.monotonic()
            self.granted.set()


How = Literal["silent", "reset"]


def _cut(cluster: ZooKeeperCluster, fault: CutFault, target: ZooKeeperMember, how: How) -> None:
    target = _cut_off(cluster, fault, target)
    if fault.startswith("split"):
        cluster.partition([target], [m for m in cluster.members if m is not target], how=how)
    else:
        cluster.isolate(target, how=how)


async def measure_cut(
    cluster: ZooKeeperCluster,
    fault: CutFault,
    *,
    session_timeout: float,
    loss_policy: LossPolicy = "suspended",
    how: How = "silent",
    phase: float = 0.0,
    protect: bool = True,
) -> CutMargin:
    """Cut the holder's server off (``fault``, ``phase`` seconds after the waiter queued;
    ``OBSERVER_FAULTS`` on a cluster with observers), and measure. The links are healed
    and the ensemble serves again when this returns. Raises ``TimeoutError`` if the holder
    does not stop or the waiter is not granted within ``2 x session_timeout + 60`` seconds,
    ``ValueError`` for an unknown fault."""
    if fault not in CUT_FAULTS + OBSERVER_FAULTS:
        raise ValueError(f"fault must be one of {CUT_FAULTS + OBSERVER_FAULTS}, not {fault!r}")
    target = _target(cluster, fault)
    away = {target, _cut_off(cluster, fault, target)}  # the waiter is on the majority
    others = ",".join(m.address for m in cluster.members if m not in away)
    path = f"/cut-margin/{uuid.uuid4().hex}"
    race = _Race()
    async with contextlib.AsyncExitStack() as stack:
        # Closed last to first: the links heal first, the ensemble serves again last.
        stack.push_async_callback(cluster.await_serving, 120.0)
        stack.callback(cluster.heal)
        holder = await stack.enter_async_context(
            connect(target.address, session_timeout=session_timeout, loss_policy=loss_policy)
        )
        if not protect:
            session_of(holder).leader.direct = True
        waiter = await stack.enter_async_context(connect(others, session_timeout=session_timeout))
        with anyio.fail_after(2 * session_timeout + 60.0):
            async with anyio.create_task_group() as tg:
                tg.start_soon(race.hold, holder, path)
                await race.held.wait()
                tg.start_soon(race.wait, waiter, path)
                await wait_for_children(
                    waiter, path, lambda children: len(children) >= 2, await_creation=True
                )
                await anyio.sleep(phase)
                race.times["cut"] = time.monotonic()
                _cut(cluster, fault, target, how)
                await race.granted.wait()
                await race.stopped.wait()  # after the grant if the holder overlapped it
                cluster.heal()
                tg.cancel_scope.cancel()
    times = race.times
    cut = times["cut"]
    return CutMargin(
        fault, session_timeout, loss_policy, times["stopped"] - cut, times["granted"] - cut
    )
