"""Whom a planned fault hits, resolved when it starts: a client (the holder, preferably one
that will still act for a while), a server (the holder's, the leader, a follower), the
ensemble's links (:func:`cuttable`: a partitionable cluster's cuts), and the direct
connection string of the members that are up and not cut off."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import TypeVar

import anyio
import anyio.to_thread

from ._nemesis import _Nemesis
from ._nemesis_clients import _Client
from ._nemesis_plan import FaultSpec
from ._server import ZooKeeperCluster
from ._server_member import ZooKeeperMember

__all__ = [
    "client_target",
    "cuttable",
    "described",
    "direct_hosts",
    "holder_member",
    "member_target",
    "pick",
    "sync_time",
]

T = TypeVar("T")


def cuttable(cluster: ZooKeeperCluster | None) -> ZooKeeperCluster | None:
    """``cluster`` if it was created with ``partitionable=True`` (its links can be cut)."""
    return cluster if cluster is not None and cluster.partitionable else None


def sync_time(cluster: ZooKeeperCluster | None) -> float:
    """syncLimit x tickTime in seconds: how long a follower waits for its leader before it
    gives up (and the leader for a follower's acknowledgement)."""
    if cluster is None:
        return 1.0
    sync_limit = int(cluster.extra_config.get("syncLimit", "5"))
    return sync_limit * cluster.tick_time / 1000


def pick(candidates: Sequence[T], where: float) -> T:
    """One of ``candidates``, chosen by ``where`` in [0, 1)."""
    return candidates[min(int(where * len(candidates)), len(candidates) - 1)]


async def long_holder(n: _Nemesis, pool: Sequence[_Client]) -> _Client | None:
    """The holder, once one of ``pool`` holds for long enough that a fault lands while
    it still acts (at most a session timeout's wait); else whoever holds now."""
    with anyio.move_on_after(n.session_timeout):
        while True:
            holder = n.holder
            if (
                holder in pool
                and holder is not None
                and holder.hold_until - time.monotonic() > n.session_timeout / 2
            ):
                return holder
            await n.holder_changed.wait()
    return n.holder if n.holder in pool else None


async def client_target(
    n: _Nemesis, spec: FaultSpec, pool: Sequence[_Client] | None = None
) -> _Client:
    """The client ``spec`` aims at, among ``pool`` (default: every client)."""
    candidates = list(pool if pool is not None else n.clients)
    if spec.target == "holder":
        holder = await long_holder(n, candidates)
        if holder is not None:
            return holder
    return pick(candidates, spec.pick)


async def holder_member(n: _Nemesis) -> ZooKeeperMember | None:
    """The running member a (long) holder is connected to, if any."""
    assert n.cluster is not None
    holder = await long_holder(n, n.clients)
    index = holder.active_member() if holder is not None else None
    if index is None:
        return None
    member = n.cluster.members[index]
    return member if member.running and not member.paused else None


async def member_target(n: _Nemesis, spec: FaultSpec) -> ZooKeeperMember:
    """The member ``spec`` aims at: ``leader``, ``holder-server``, ``holder-follower`` (the
    holder's server if it follows, else a follower) or ``follower``; else a healthy one."""
    assert n.cluster is not None
    cluster = n.cluster
    healthy = [m for m in cluster.members if m.running and not m.paused]
    if spec.target == "leader":
        with contextlib.suppress(LookupError):
            return await anyio.to_thread.run_sync(cluster.leader)
    elif spec.target in ("holder-server", "holder-follower"):
        member = await holder_member(n)
        if member is not None and (
            spec.target == "holder-server"
            or await anyio.to_thread.run_sync(member.mode) == "follower"
        ):
            return member
    if spec.target in ("follower", "holder-follower"):
        followers = await anyio.to_thread.run_sync(cluster.followers)
        if followers:
            return pick(followers, spec.pick)
    return pick(healthy, spec.pick)


def direct_hosts(n: _Nemesis) -> str:
    """The members that are up and not cut off, straight (no proxy of a client)."""
    if n.cluster is None:
        return ",".join(n.hosts)
    cuts = cuttable(n.cluster)
    cut = {i for link in cuts.cut_links for i in link} if cuts is not None else set()
    members = [m for m in n.cluster.members if m.running and not m.paused and m.id not in cut]
    return ",".join(m.address for m in members) or n.cluster.hosts


def described(n: _Nemesis, client: _Client) -> str:
    """``client``'s name, and whether (and how much longer) it holds."""
    if client is not n.holder:
        return client.name
    left = client.hold_until - time.monotonic()
    return f"{client.name} (holder, {left:.1f} s left)" if left > 0.5 else f"{client.name} (holder)"
