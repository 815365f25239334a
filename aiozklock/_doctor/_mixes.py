"""Unsafe mixes (pure): contenders on one path whose recipes do not see each other, so that
two of them can hold at once. The rules are the interoperability table's
(``docs/mixed-fleets.md``, ``docs/recipes/*``): each peer's recipe orders only the names it knows.

* Curator keys a node by the text after its own marker (``lock-`` for InterProcessMutex and
  LeaderSelector, ``latch-`` for LeaderLatch, ``__READ__``/``__WRIT__`` for the read/write
  lock) and any other node by its whole name, which misplaces it;
* kazoo's Lock, ReadLock, WriteLock and Election see ``__lock__`` and ``__rlock__`` only
  (more with ``extra_lock_patterns``, which we cannot see: such a mix is a warning);
* aiozklock reads every library's markers, so our nodes never need flagging among
  themselves; but a non-fair lock's fixed node, a lease and a queue do not see each other,
  and neither do the semaphores' three layouts (ours, kazoo's, Curator's).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from aiozklock._doctor._layout import KAZOO_MARKERS, READ_MARKERS, Member, PathLayout
from aiozklock._doctor._model import Finding, FindingKind, Library, Severity
from aiozklock._recipes._core._names import queue_order
from aiozklock._recipes._core._peers import NEVER_SHARE, RECIPES, SAME_RECIPE, SEES
from aiozklock._recipes._rwdecision import rw_order

View = tuple[Library, str]  # the library of a peer's node and its marker: the peer's recipe

_TO_KAZOO = (
    'pass compat="kazoo" to aiozklock\'s lock(), multi_lock(), election() or rw_lock() on '
    "this path (kazoo's Lock, ReadLock, WriteLock and Election all see those nodes)"
)
_TO_CURATOR = 'use compat="curator" (the default) on aiozklock\'s recipes on this path'
_OWN_PATH = "give each recipe a path of its own"


def mix_findings(layout: PathLayout) -> list[Finding]:
    """The unsafe mixes at one path: one finding per fix, most severe first."""
    found: dict[str, Finding] = {}
    for finding in sorted(
        [*_queue_mixes(layout), *_fixed_mixes(layout), *_semaphore_mixes(layout)],
        key=lambda f: -f.severity,
    ):
        found.setdefault(finding.action, finding)
    return list(found.values())


def _finding(
    path: str, severity: Severity, message: str, action: str, members: list[Member]
) -> Finding:
    """``members``: the nodes involved, whose sessions are named (a lease's has none)."""
    sessions = tuple(sorted({m.stat.ephemeral_owner for m in members if m.stat.ephemeral_owner}))
    return Finding(FindingKind.UNSAFE_MIX, severity, message, action, (path,), sessions)


def _queue_mixes(layout: PathLayout) -> Iterator[Finding]:
    views = sorted({view for m in layout.queue if (view := (m.library, m.marker or "")) in SEES})
    queue_holders = holders(layout.queue)
    for view in views:
        peers = [m for m in layout.queue if (m.library, m.marker) == view]
        unseen = [m for m in layout.queue if m.marker not in SEES[view]]
        # Who holds by the peer's own order, which skips the nodes it does not see.
        theirs_held = holders([m for m in layout.queue if m.marker in SEES[view]])
        for library in sorted({m.library for m in unseen}):
            theirs = [m for m in unseen if m.library == library]
            double = _double_hold([m for m in theirs_held if m in peers], queue_holders, theirs)
            yield _verdict(layout.path, view, library, theirs, peers, double)


def holders(members: Sequence[Member]) -> list[Member]:
    """The nodes among ``members`` that hold by the queue's order (the recipes' rules: a
    mutex's first node; a read/write lock's writer when first, readers while no writer is
    ahead, a downgrade node at its writer's place). Only the head is read."""
    by_name = {m.name: m for m in members}
    if not any(m.marker in READ_MARKERS for m in members):
        order = queue_order(by_name)
        return [by_name[order[0]]] if order else []
    found: list[Member] = []
    sequences: set[int] = set()  # of the nodes ahead
    writers: set[int] = set()  # of the write nodes ahead
    for name, is_write, sequence in rw_order(by_name):
        if (sequences if is_write else writers) - {sequence}:
            break  # blocked, and so is every node behind it
        found.append(by_name[name])
        sequences.add(sequence)
        if is_write:
            writers.add(sequence)
    return found


def _double_hold(
    peer_held: list[Member], queue_held: list[Member], unseen: list[Member]
) -> tuple[Member, Member] | None:
    """A peer's node that holds by the peer's order and one it does not see that holds by
    the queue's, excluding each other (one of them writes): both hold now."""
    for held in peer_held:
        for other in queue_held:
            if other in unseen and not (
                held.marker in READ_MARKERS and other.marker in READ_MARKERS
            ):
                return held, other
    return None


def _verdict(
    path: str,
    view: View,
    library: Library,
    theirs: list[Member],
    peers: list[Member],
    double: tuple[Member, Member] | None = None,
) -> Finding:
    """What ``view`` (a peer's recipe) not seeing ``theirs`` (``library``'s nodes) means;
    ``double``: the peer's node and one of ``theirs`` that both hold now."""
    recipe = RECIPES[view]
    markers = ", ".join(sorted({f"'{m.marker}'" for m in theirs}))
    involved = [*peers, *theirs]
    if {view[0], library} == {"curator", "kazoo"}:
        message = f"Curator's and kazoo's contenders share {path}: both can hold at once"
        return _finding(path, Severity.CRITICAL, message, NEVER_SHARE, involved)
    action = _TO_KAZOO if library == "aiozklock" else _OWN_PATH
    if view[0] == "kazoo" and double is not None:  # fail closed: a double hold, live
        held, other = double
        message = (
            f"{recipe} does not see {library}'s {markers} nodes on {path}: both hold now "
            f"({held.name!r} first by kazoo's order, {other.name!r} ahead of it by the "
            "queue's; only a kazoo peer built with extra_lock_patterns would wait)"
        )
        return _finding(path, Severity.CRITICAL, message, action, involved)
    if view[0] == "kazoo":  # unless the kazoo peers were built with extra_lock_patterns
        message = (
            f"{recipe} does not see {library}'s {markers} nodes on {path} (unless built with "
            "extra_lock_patterns): both can hold at once"
        )
        return _finding(path, Severity.WARNING, message, action, involved)
    message = (
        f"{recipe} orders {library}'s {markers} nodes on {path} by their whole name: "
        "both can hold at once"
    )
    if library != "aiozklock":
        return _finding(path, Severity.CRITICAL, message, _OWN_PATH, involved)
    kazoo_style = all(m.marker in KAZOO_MARKERS for m in theirs)
    action = _TO_CURATOR if kazoo_style else SAME_RECIPE
    return _finding(path, Severity.CRITICAL, message, action, involved)


def _fixed_mixes(layout: PathLayout) -> Iterator[Finding]:
    path, queue = layout.path, list(layout.queue)
    if layout.fixed is not None and (queue or layout.lease is not None):
        others = "queued contenders" if queue else "a lease lock's node"
        message = (
            f"a non-fair lock's node and {others} share {path}: they do not see each other, "
            "so both can hold at once"
        )
        action = "use one kind of lock on a path: fair=False everywhere or nowhere"
        rest = [*queue, *([layout.lease] if layout.lease else [])]
        yield _finding(path, Severity.CRITICAL, message, action, [layout.fixed, *rest])
    if layout.lease is not None and queue:
        message = (
            f"a lease lock's node and queued contenders share {path}: they do not see each "
            "other, so both can hold at once"
        )
        action = "use zk.lease_lock() or zk.lock() on a path, not both"
        yield _finding(path, Severity.CRITICAL, message, action, [layout.lease, *queue])


def _semaphore_mixes(layout: PathLayout) -> Iterator[Finding]:
    path = layout.path
    ours = layout.max_leases is not None and bool(layout.queue)  # the default layout
    kazoo = bool(layout.kazoo_leases) or layout.kazoo_lock is not None
    curator = layout.curator_semaphore
    involved = [*layout.queue, *layout.kazoo_leases]
    if ours and kazoo:
        message = (
            f"a default-layout semaphore and kazoo's Semaphore share {path}: ours does not "
            "count kazoo's leases, so more than max_leases can hold at once"
        )
        action = 'pass compat="kazoo" to zk.semaphore() on this path'
        yield _finding(path, Severity.CRITICAL, message, action, involved)
    if ours and curator:
        message = (
            f"a default-layout semaphore and Curator's InterProcessSemaphoreV2 share {path}: "
            "neither counts the other's leases, so the limit does not hold"
        )
        action = 'pass compat="curator" to zk.semaphore() on this path'
        yield _finding(path, Severity.CRITICAL, message, action, involved)
    if kazoo and curator:
        message = (
            f"kazoo's and Curator's semaphores share {path}: kazoo counts Curator's "
            "'leases' and 'locks' as leases and Curator ignores kazoo's"
        )
        yield _finding(path, Severity.CRITICAL, message, NEVER_SHARE, involved)


__all__ = ("holders", "mix_findings")
