"""What a queue contender does next: the pure part of the queue engine (no I/O).

A recipe's decision function answers for one queue (``Decision``); ``plan`` combines the
answers of every member queue into the engine's next ``Step``. Both are tested exhaustively.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from aiozklock._wire._frozen import fast_init


@fast_init  # one per member at every decision of a contended acquire
@dataclass(frozen=True, slots=True)
class Decision:
    """What a contender should do next in one queue (a decision function's answer).

    ``held``: we are first (for this recipe's meaning of first). ``predecessor``: the one node
    to wait for; ``None`` when held or when our node is missing. ``ahead``: how many nodes are
    queued ahead of ours (0 when held or missing), counting any that may still appear there
    (the read/write lock's downgrade node), so it only shrinks; 1 lets the engine hold on
    the predecessor's deletion alone. ``missing``: our node is not among the children (deleted, or
    the session that owned it is gone) and must be created again. ``stale``: other nodes
    carrying our GUID, left behind by an earlier attempt; they must be deleted, and they still
    count in the queue until they are (others wait on them).

    Two more for recipes where holders release in any order (the semaphore): ``children``, a
    waiter that waits for any change among the children (no single predecessor decides its
    grant) instead of a predecessor; ``mark``, held: mark our node (a data change) because a
    successor may wait for our grant; waiting on a predecessor: a marked predecessor was
    granted, which is a change to wake up for, as its deletion is.
    """

    held: bool
    predecessor: str | None
    missing: bool
    stale: tuple[str, ...]
    ahead: int = field(default=0, compare=False)
    children: bool = False
    mark: bool = False
    newest: str | None = field(default=None, compare=False)
    behind: int | None = field(default=None, compare=False)  # None: not counted


Decide = Callable[[Iterable[str], str, str], Decision]


@fast_init  # one per decision
@dataclass(frozen=True, slots=True)
class Step:
    """What to do next across all member queues (see ``plan``), in this order of priority:
    delete ``stale`` nodes of ours; ``requeue`` everywhere (a node of ours is missing); we
    are ``held`` (first on every member); or wait on the predecessors in ``waits``."""

    stale: tuple[tuple[str, str], ...]
    requeue: bool
    held: bool
    waits: dict[str, Decision]
    mark: bool = False  # held: mark our nodes (see ``Decision.mark``)
    newest: str | None = None  # held in one queue: see ``Decision.newest``
    behind: int | None = None


def plan(listings: dict[str, list[str]], nodes: dict[str, str], guid: str, decide: Decide) -> Step:
    """Combine one decision per member queue: held only when first on every member."""
    if len(listings) == 1:  # the mutex and election: one decision, no combining (hot path)
        ((member, children),) = listings.items()
        only = decide(children, nodes[member], guid)
        stale = tuple((member, name) for name in only.stale) if only.stale else ()
        waits = {} if only.held else {member: only}
        mark = only.held and only.mark
        return Step(
            stale=stale,
            requeue=only.missing,
            held=only.held,
            waits=waits,
            mark=mark,
            newest=only.newest,
            behind=only.behind,
        )
    decisions = {member: decide(listings[member], nodes[member], guid) for member in listings}
    return Step(
        stale=tuple((m, name) for m, d in decisions.items() for name in d.stale),
        requeue=any(d.missing for d in decisions.values()),
        held=all(d.held for d in decisions.values()),
        waits={m: d for m, d in decisions.items() if not d.held},
        mark=any(d.held and d.mark for d in decisions.values()),
    )


__all__ = ("Decide", "Decision", "Step", "plan")
