"""``zk.revoke(path)``: ask the holders of the lock at a path to let go, by Curator's
protocol (their nodes' data set to ``__REVOKE__``: ``_recipes/_core/_revocation.py``), and
wait until they did (their nodes' deletion, watched).

The holders are found by the readers the read-only commands use (the recipes' description
entries, ``_recipes/_traits.py``): a queue's first node (ours, Curator's, kazoo's), or on a
read/write path every reader ahead of the first exclusive node (``holds_now``), the
non-fair lock's fixed node, a lease. Only a queue's holder can be revocable; whether it is
comes from its node's data (``revocable_of``): ours say so, Curator's revocable locks
write empty data, kazoo has no revocation. A holder known not to be revocable is not
written to (its data, which tells operators who it is, is left as it is).

Success means every holder found was asked and is gone: with several holders (readers),
every one that may be revocable is asked and waited for, and if any still holds (it is
not revocable, or did not let go in time) ``NotRevoked`` names it, whatever the others did.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from aiozklock._exceptions import InvalidArgument, NoNodeError, NotRevoked, short_repr
from aiozklock._recipes._core._contenders import Contender
from aiozklock._recipes._core._retry import RETRY
from aiozklock._recipes._core._revocation import REVOKE
from aiozklock._recipes._core._waiting import Wakeup
from aiozklock._recipes._traits import TRAITS
from aiozklock._wire._now import uptime
from aiozklock._wire._protocol import Op, Stat, exists_op, set_data_op
from aiozklock._wire._validation import join, validate_recipe_path

if TYPE_CHECKING:
    from aiozklock._recipes._traits import RecipeClient
    from aiozklock._wire._session import Session

#: The recipe whose holder may be revocable: a queue of contender nodes.
_QUEUE = TRAITS["lock"]
_OPT_IN = "zk.lock(path, revocable=True), Curator's makeRevocable"


def validate_wait(wait: object) -> float | None:
    """``wait=``: seconds >= 0, or None (no bound); ``InvalidArgument`` otherwise."""
    if wait is None:
        return None
    if isinstance(wait, bool) or not isinstance(wait, int | float):
        raise InvalidArgument(f"wait must be a number of seconds or None, not {short_repr(wait)}")
    if math.isnan(wait) or wait < 0:
        raise InvalidArgument(f"wait must be >= 0, not {short_repr(wait)}")
    return None if math.isinf(wait) else float(wait)


def arguments(path: object, wait: object) -> tuple[str, float | None]:
    """``revoke``'s ``path`` and ``wait``, validated (``InvalidArgument``), before the
    client's session is asked for (so a bad argument is told before ``ClientClosed``)."""
    return validate_recipe_path(path), validate_wait(wait)


async def revoke(
    zk: RecipeClient, session: Session, path: str, wait: float | None
) -> tuple[str, ...]:
    """``ZooKeeperClient.revoke`` (see there), given the client (its readers' reads) and its
    live session, with ``arguments``' values: every holder asked, and gone; returns their
    nodes, as paths. Otherwise ``NotRevoked``, naming the holders that still hold."""
    deadline = None if wait is None else uptime() + wait
    holders = await _holders(zk, path)
    if not holders:
        raise NotRevoked(path, "no holder", f"nothing holds a lock at {path}: nothing to revoke")
    nodes = tuple(join(path, c.node) for c in holders)
    refused = tuple(join(path, c.node) for c in holders if c.revocable is False)
    asked = tuple(node for node in nodes if node not in refused)
    # Every holder that may let go is asked, and waited for, even beside one that will not:
    # the result says which let go and which still hold.
    left = await _gone(session, asked, deadline) if asked else ()
    if not refused and (not left or wait == 0):
        return asked  # all gone (with wait=0: all asked, not waited for)
    held = tuple(node for node in nodes if node in refused or node in left)
    reason = "not revocable" if refused else "timeout"
    message = _refusal(path, holders, held, refused, asked, wait)
    raise NotRevoked(path, reason, message, nodes, asked, held)


def _refusal(
    path: str,
    holders: list[Contender],
    held: tuple[str, ...],
    refused: tuple[str, ...],
    asked: tuple[str, ...],
    wait: float | None,
) -> str:
    """Why ``revoke`` did not end every holding: which holders still hold, and why."""
    who = {join(path, c.node): _who(c) for c in holders}
    if len(holders) == 1:
        if refused:
            return (
                f"the holder of {path} ({who[refused[0]]}) is not revocable: it did not opt "
                f"in ({_OPT_IN}); nothing was written"
            )
        return f"the holder of {path} did not let go within {wait} s (it may not be revocable)"
    late = [node for node in held if node not in refused]
    parts = []
    if refused:
        named = "; ".join(f"{node} ({who[node]})" for node in refused)
        parts.append(f"not revocable (it did not opt in: {_OPT_IN}), not written to: {named}")
    if late:
        late_nodes = ", ".join(late)
        if wait == 0:
            parts.append(f"asked, not waited for (wait=0): {late_nodes}")
        else:
            parts.append(f"did not let go within {wait} s (may not be revocable): {late_nodes}")
    return (
        f"{len(held)} of {len(holders)} holders of {path} still hold "
        f"({len(asked)} asked, {len(asked) - len(late)} let go); " + "; ".join(parts)
    )


async def _holders(zk: RecipeClient, path: str) -> list[Contender]:
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
    session: Session, nodes: tuple[str, ...], deadline: float | None
) -> tuple[str, ...]:
    """Write a revoke request to each of ``nodes`` with an existence watch on it, in one
    round trip, then wait until every node is gone or ``deadline`` passes (at once if it
    has); returns the nodes still there then (all of them if the server could not be asked
    again before it). A request that finds its node gone is a holder that let go."""
    server_paths = {session.server_path(node): node for node in nodes}
    remaining = list(server_paths)
    writes: list[Op[Any]] = [set_data_op(p, REVOKE) for p in remaining]
    try:
        while remaining:
            with Wakeup(session) as wakeup:
                ops = [*writes, *[exists_op(p, wakeup.watch(p)) for p in remaining]]
                results = await RETRY.pipeline(session, ops, wait_until=deadline)
                for result in results[: len(writes)]:
                    if isinstance(result, BaseException) and not isinstance(result, NoNodeError):
                        raise result
                stats = results[len(writes) :]
                remaining = [
                    p for p, s in zip(remaining, stats, strict=True) if isinstance(s, Stat)
                ]
                writes = []
                if remaining:
                    await wakeup.wait(deadline, "not gone in time")
    except TimeoutError:  # LockTimeout, or not connected again in time
        pass  # the deadline: what is left still holds, as far as we know
    return tuple(server_paths[p] for p in remaining)


__all__ = ("arguments", "revoke", "validate_wait")
