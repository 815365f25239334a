"""The nemesis's cuts of the ensemble's own links (``PARTITION_KINDS``), on a cluster created
with ``partitionable=True`` (per-pair proxies on the quorum and election links; clients'
ports are untouched, so clients still reach a member cut off from the others):

* ``isolate-follower``: a follower (the holder's server when it is one) cut from the rest;
* ``isolate-leader``: the leader cut from the rest, which elect another;
* ``split``: a minority holding the holder's server (1|2 on 3 nodes, 2|3 on 5) from the rest;
* ``flap``: the holder's server's links cut and healed by turns (``FaultSpec.steps``).

Each heals every link at its end and waits until every member serves again; the run's safety
net (:func:`heal_links`) heals them too.
"""

from __future__ import annotations

import math
import time

import anyio
import anyio.to_thread

from ._nemesis import _Nemesis
from ._nemesis_plan import FaultSpec
from ._nemesis_tally import FaultRecord
from ._nemesis_targets import cuttable, member_target, pick
from ._server import ZooKeeperCluster
from ._server_member import ZooKeeperMember

__all__ = ["heal_links", "lingering_config", "partition_fault"]

_SERVER_TIMEOUT = 60.0  # every member serving again after the heal


def lingering_config(session_timeout: float, tick_time: int = 200) -> dict[str, str]:
    """``zoo.cfg`` keys under which a follower cut off from the leader goes on serving its
    clients for twice ``session_timeout`` (``syncLimit x tickTime``, in ms for ``tick_time``),
    as ZooKeeper's sample settings do (10 s): the cuts then open the gap between what a
    client's own server says and what the leader decided."""
    return {"syncLimit": str(max(5, math.ceil(2000 * session_timeout / tick_time)))}


async def partition_fault(n: _Nemesis, spec: FaultSpec, record: FaultRecord) -> None:
    """Cut, wait, heal, and wait until the ensemble serves again. Raises
    ``ValueError`` if the run's cluster is not partitionable (the run refuses that first)."""
    cluster = n.cluster
    cuts = cuttable(cluster)
    if cluster is None or cuts is None:
        raise ValueError(f"{spec.kind} needs a ZooKeeperCluster(..., partitionable=True)")
    if cuts.cut_links or any(not m.running or m.paused for m in cluster.members):
        record.note = "a member is still down or cut off: skipped"
        return
    member = await member_target(n, spec)
    record.start = n.now()
    mode = await anyio.to_thread.run_sync(member.mode)
    try:
        if spec.kind == "split":
            minority = _minority(cluster, member, spec)
            whose = _holders_server(n, cluster, member)
            record.target = _groups(minority, cluster) + (
                f" (zk{member.id}{whose})" if whose else ""
            )
            cuts.partition(
                minority, [m for m in cluster.members if m not in minority], how=spec.option
            )
            await anyio.sleep(spec.duration)
        else:
            record.target = f"zk{member.id} ({mode}{_holders_server(n, cluster, member)})"
            await _isolate(cuts, member, spec)
    finally:
        cuts.heal()  # synchronous: nothing to shield
    started = time.monotonic()
    await cluster.await_serving(timeout=_SERVER_TIMEOUT)
    record.note = f"serving again {time.monotonic() - started:.2f} s after the heal"


async def _isolate(cuts: ZooKeeperCluster, member: ZooKeeperMember, spec: FaultSpec) -> None:
    """``member`` cut from the rest for ``spec.duration``, or (a flap) by turns."""
    steps = spec.steps or (spec.duration,)
    for index, step in enumerate(steps):
        if index % 2 == 0:
            cuts.isolate(member, how=spec.option)
        else:
            cuts.heal()
        await anyio.sleep(step)


def _holders_server(n: _Nemesis, cluster: ZooKeeperCluster, member: ZooKeeperMember) -> str:
    """``, holder w1's server`` if the holder is connected to ``member``, else nothing."""
    holder = n.holder
    if holder is None or holder.active_member() != cluster.members.index(member):
        return ""
    return f", holder {holder.name}'s server"


def _minority(
    cluster: ZooKeeperCluster, member: ZooKeeperMember, spec: FaultSpec
) -> list[ZooKeeperMember]:
    """``member`` (the holder's server, if it has one) and enough others to make the largest
    minority: 1 of 3, 2 of 5."""
    size = (len(cluster.members) - 1) // 2
    others = [m for m in cluster.members if m is not member]
    chosen = [member]
    while len(chosen) < size:
        other = pick(others, spec.pick)
        others.remove(other)
        chosen.append(other)
    return chosen


def _groups(minority: list[ZooKeeperMember], cluster: ZooKeeperCluster) -> str:
    def ids(members: list[ZooKeeperMember]) -> str:
        return ",".join(f"zk{m.id}" for m in members)

    return f"{ids(minority)} | {ids([m for m in cluster.members if m not in minority])}"


def heal_links(cluster: ZooKeeperCluster) -> None:
    """Heal every cut link of ``cluster`` (nothing if it is not partitionable)."""
    cuts = cuttable(cluster)
    if cuts is not None and cuts.cut_links:
        cuts.heal()
