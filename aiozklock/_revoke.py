"""``zk.revoke(path)``: ask the holder of the lock at a path to let go, by Curator's protocol
(its nodes' data set to ``__REVOKE__``: ``_recipes/_core/_revocation.py``), and wait until it
did (its node's deletion, watched).

The holder is found by the readers the read-only commands use (the recipes' description
entries, ``_recipes/_traits.py``): a queue's first node (ours, Curator's, kazoo's), the
non-fair lock's fixed node, a lease. Only a queue's holder can be revocable; whether it is
comes from its node's data (``revocable_of``): ours say so, Curator's revocable mutex
writes empty data, kazoo has no revocation. A holder known not to be revocable is not
written to (its data, which tells operators who it is, is left as it is).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from aiozklock._exceptions import InvalidArgument, LockTimeout, NoNodeError, NotRevoked, short_repr
from aiozklock._recipes._core._contenders import Contender
from aiozklock._recipes._core._retry import RETRY
from aiozklock._recipes._core._revocation import REVOKE
from aiozklock._recipes._core._waiting import Wakeup
from aiozklock._recipes._traits import TRAITS
from aiozklock._wire._now import uptime
from aiozklock._wire._protocol import Op, Stat, exists_op, set_data_op
from aiozklock._wire._session import Session
from aiozklock._wire._validation import join, validate_recipe_path

if TYPE_CHECKING:
    from aiozklock._client import ZooKeeperClient

#: The recipe whose holder may be revocable: a queue of contender nodes.
_QUEUE = TRAITS["lock"]


def validate_wait(wait: object) -> float | None:
    """``wait=``: seconds >= 0, or None (no bound); ``InvalidArgument`` otherwise."""
    if wait is None:
        return None
    if isinstance(wait, bool) or not isinstance(wait, int | float):
        raise InvalidArgument(f"wait must be a number of seconds or None, not {short_repr(wait)}")
    if math.isnan(wait) or wait < 0:
        raise InvalidArgument(f"wait must be >= 0, not {short_repr(wait)}")
    return None if math.isinf(wait) else float(wait)


async def revoke(zk: ZooKeeperClient, path: str, wait: float | None) -> tuple[str, ...]:
    """``ZooKeeperClient.revoke`` (see there): the holder's node(s) asked, as paths."""
    path = validate_recipe_path(path)
    wait = validate_wait(wait)
    session = zk._live_session()
    deadline = None if wait is None else uptime() + wait
    holders = await _holders(zk, path)
    nodes = tuple(join(path, c.node) for c in holders)
    if not holders:
        raise NotRevoked(path, "no holder", f"nothing holds a lock at {path}: nothing to revoke")
    if all(c.revocable is False for c in holders):
        who = ", ".join(_who(c) for c in holders)
        raise NotRevoked(
            path,
            "not revocable",
            f"the holder of {path} ({who}) is not revocable: it did not opt in "
            "(zk.lock(path, revocable=True), Curator's makeRevocable); nothing was written",
            nodes,
        )
    asked = tuple(join(path, c.node) for c in holders if c.revocable is not False)
    sets = [set_data_op(session.server_path(node), REVOKE) for node in asked]
    try:
        await _gone(session, asked, sets, deadline)
    except LockTimeout:
        if wait == 0:
            return asked  # asked; not waited for
        raise NotRevoked(
            path,
            "timeout",
            f"the holder of {path} did not let go within {wait} s (it may not be revocable)",
            asked,
        ) from None
    return asked


async def _holders(zk: ZooKeeperClient, path: str) -> list[Contender]:
    """The holders at ``path``, read as ``aiozklock contenders`` reads them (the first
    description entry whose reader finds its nodes there); a holder of a recipe that is
    not a queue is returned as not revocable."""
    children = await zk.get_children(path, missing_ok=True)
    for traits in TRAITS.values():
        if traits.inspect is None:
            continue
        queue = await traits.inspect(zk, path, children)
        if queue is not None:
            holders = [c for c in queue if c.is_holder]
            if traits is not _QUEUE:  # a fixed node, a lease: no revocation
                holders = [_not_revocable(c) for c in holders]
            return holders
    return []


def _not_revocable(contender: Contender) -> Contender:
    return dataclasses.replace(contender, revocable=False)


def _who(contender: Contender) -> str:
    """The holder, for a message: its session, host and pid, as far as known."""
    parts = [f"session 0x{contender.session_id:x}"] if contender.session_id else []
    known = (("host", contender.host), ("pid", contender.pid))
    parts += [f"{name} {value}" for name, value in known if value]
    return ", ".join(parts) or contender.node


async def _gone(
    session: Session, nodes: tuple[str, ...], sets: list[Op[Any]], deadline: float | None
) -> None:
    """Write ``sets`` (the requests) with an existence watch on each of ``nodes``, in one
    round trip, then wait until every node is gone; ``LockTimeout`` at ``deadline`` (at
    once if it has passed). A request that finds its node gone is a holder that let go."""
    remaining = [session.server_path(node) for node in nodes]
    writes: list[Op[Any]] = sets
    while remaining:
        with Wakeup(session) as wakeup:
            ops = [*writes, *[exists_op(p, wakeup.watch(p)) for p in remaining]]
            results = await RETRY.pipeline(session, ops, wait_until=deadline)
            for result in results[: len(writes)]:
                if isinstance(result, BaseException) and not isinstance(result, NoNodeError):
                    raise result
            stats = results[len(writes) :]
            remaining = [p for p, s in zip(remaining, stats, strict=True) if isinstance(s, Stat)]
            writes = []
            if remaining:
                await wakeup.wait(deadline, "not gone in time")


__all__ = ("revoke", "validate_wait")
