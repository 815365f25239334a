"""The doctor's findings (pure), but for unsafe mixes (``_mixes.py``): deadlocks, long
holders, long queues, expired leases, leftover parents, unreadable nodes. Ages are taken
against ``now``, the server's clock (see ``_scan.server_clock``) when it could be read."""

from __future__ import annotations

import bisect
import json
import math
import shlex
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from aiozklock._doctor._model import (
    Finding,
    FindingKind,
    Party,
    QueueState,
    Severity,
    Wait,
    session_bound,
)
from aiozklock._doctor._queues import PartyKey, View
from aiozklock._doctor._scan import Znode
from aiozklock._doctor._waitfor import Deadlock
from aiozklock._recipes._core._contenders import Contender
from aiozklock._recipes._lease import LEASE_NODE
from aiozklock._wire._validation import join


@dataclass(frozen=True, slots=True)
class Thresholds:
    """When a holder is long (seconds), a queue long (waiters), a parent left (seconds)."""

    hold_warning: float
    queue_warning: int
    leftover_age: float


def duration(seconds: float) -> str:
    """``0.6 s``, ``42 s``, ``3 min 2 s``, ``2 h 5 min``, ``3 d 4 h``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    for unit, size, smaller, smaller_size in (
        ("d", 86400, "h", 3600),
        ("h", 3600, "min", 60),
        ("min", 60, "s", 1),
    ):
        if whole >= size:
            rest = (whole % size) // smaller_size
            return f"{whole // size} {unit}" + (f" {rest} {smaller}" if rest else "")
    return f"{whole} s"


def parties_of(views: Iterable[View]) -> dict[PartyKey, Party]:
    """Each party as its first entry describes it."""
    found: dict[PartyKey, Party] = {}
    for view in views:
        for entry in view.entries:
            if entry.party not in found:
                c = entry.contender
                found[entry.party] = Party(
                    entry.party[0], entry.party[1], entry.library, c.host, c.pid, c.identifier
                )
    return found


# ---------------------------------------------------------------------------- deadlocks


def _label(party: Party, tasks: bool) -> str:
    task = f" (task {party.task!r})" if tasks and party.task is not None else ""
    return f"0x{party.session_id:x}{task}"


def deadlock_finding(deadlock: Deadlock, parties: Mapping[PartyKey, Party]) -> Finding:
    """The finding of one deadlock: its cycle as ``party → path → party → ...`` (a party
    named by its session, and by its task too when a session has several in the cycle)."""
    waits = tuple(Wait(parties[e.party], e.path, e.node) for e in deadlock.cycle)
    sessions = sorted({w.party.session_id for w in waits})
    tasks = len(sessions) < len(waits)
    chain = " → ".join(f"{_label(w.party, tasks)} → {w.path}" for w in waits)
    chain += f" → {_label(waits[0].party, tasks)}"
    if len(sessions) == 1:
        who = f"{len(waits)} tasks of session 0x{sessions[0]:x}"
    else:
        who = f"{len(waits)} {'sessions' if not tasks else 'parties'}"
    message = f"{who} wait for each other: {chain}"
    if deadlock.stuck:
        message += f"; {len(deadlock.stuck)} more stuck with them"
    revoke = f"aiozklock revoke {shlex.quote(waits[0].path)}"
    action = (
        f"end one of them to break the cycle now: `{revoke}` asks "
        "its holder to let go (if it is revocable: zk.lock(path, revocable=True), Curator's "
        "makeRevocable), or stop it (its nodes go with its session); "
        "for good, take these locks in one order everywhere, or together with "
        "zk.multi_lock(), and bound waits with timeouts"
    )
    if any(w.party.task is None for w in waits):
        action += (
            " (threads of a Curator or kazoo session are not told apart: if another thread of "
            "one holds, it ends when that thread lets go)"
        )
    return Finding(
        FindingKind.DEADLOCK,
        Severity.CRITICAL,
        message,
        action,
        paths=tuple(sorted({w.path for w in waits})),
        sessions=tuple(sessions),
        cycle=waits,
    )


# ---------------------------------------------------------------------------- queues


def _who(contender: Contender, kind: str) -> str:
    parts = [
        f"{name} {value!r}" if name == "task" else f"{name} {value}"
        for name, value in (
            ("identifier", contender.identifier),
            ("host", contender.host),
            ("pid", contender.pid),
            ("task", contender.task),
        )
        if value is not None
    ]
    session = f"session 0x{contender.session_id:x}" if session_bound(kind) else "a lease"
    return session + (f" ({', '.join(parts)})" if parts else "")


def queue_findings(
    queues: Sequence[QueueState], now: float, limits: Thresholds, expired: Collection[str]
) -> Iterator[Finding]:
    """Long holders (but a lease in ``expired``, the paths of expired leases) and long
    queues."""
    for queue in queues:
        for holder in queue.holders:
            age = now - holder.enqueued_at if holder.enqueued_at is not None else 0.0
            if age > limits.hold_warning and queue.path not in expired:
                yield Finding(
                    FindingKind.LONG_HOLDER,
                    Severity.WARNING,
                    f"{queue.path} held for {duration(age)} by {_who(holder, queue.kind)}",
                    _long_holder_action(queue.path, holder.revocable),
                    paths=(queue.path,),
                    sessions=(holder.session_id,) if holder.session_id else (),
                    seconds=age,
                )
        if queue.size >= limits.queue_warning:
            yield _long_queue(queue, now)


def _long_holder_action(path: str, revocable: bool | None) -> str:
    """What to do about a long holder: ask it to let go if it is revocable, or stop it."""
    revoke = f"`aiozklock revoke {shlex.quote(path)}`"
    if revocable:
        ask = f"{revoke} asks it to let go (it is revocable), or stop it"
    elif revocable is None:
        ask = f"{revoke} asks it to let go if it is revocable (its node does not say), or stop it"
    else:
        ask = "stop it (it cannot be revoked: it was not made revocable)"
    return (
        f"if that holder is stuck, {ask}; a session's nodes go with it; if it holds this "
        "long by design, raise the hold warning"
    )


def _long_queue(queue: QueueState, now: float) -> Finding:
    times = [w.enqueued_at for w in queue.waiters if w.enqueued_at is not None]
    oldest = max(0.0, now - min(times)) if times else 0.0
    local, nodes = queue.local_waiters, len(queue.waiters)
    message = f"{nodes + local} waiting on {queue.path}"
    if local:
        message += f" ({nodes} node{'' if nodes == 1 else 's'} + {local} queued in their processes)"
    if times:  # a local waiter's age is not published
        message += f"; the oldest for {duration(oldest)}"
    # Whose tasks wait: the waiting nodes' sessions, and those with local waiters.
    waiting = [*queue.waiters, *(c for c in queue.holders if c.local_waiters)]
    return Finding(
        FindingKind.LONG_QUEUE,
        Severity.WARNING,
        message,
        "a holder is slow or stuck (see the long holders), or more contend than the lock "
        "serves: shorten what is done under it, or split it (one path per entity)",
        paths=(queue.path,),
        sessions=tuple(sorted({w.session_id for w in waiting if w.session_id})),
        seconds=oldest,
        count=nodes + local,
    )


# ---------------------------------------------------------------------------- leases


def _lease_ttl(data: bytes) -> float | None:
    try:
        ttl = json.loads(data).get("ttl")
    except (ValueError, AttributeError):
        return None
    return float(ttl) if isinstance(ttl, int | float) and math.isfinite(ttl) else None


def lease_findings(views: Iterable[View], tree: Mapping[str, Znode], now: float) -> list[Finding]:
    """Leases past their TTL (the ``ttl`` in their data, from their last write) that the
    server has not deleted yet."""
    found = []
    for view in views:
        if view.kind != "lease":
            continue
        (entry,) = view.entries
        node = tree[join(view.path, entry.node)]
        ttl = _lease_ttl(node.data)
        written = now - node.stat.mtime / 1000
        if ttl is not None and written > ttl:
            found.append(_expired_lease(entry.path, ttl, written - ttl, written))
    return found


def _expired_lease(path: str, ttl: float, expired: float, written: float) -> Finding:
    node = join(path, LEASE_NODE)
    return Finding(
        FindingKind.EXPIRED_LEASE,
        Severity.WARNING,
        f"the lease {node} expired {duration(expired)} ago (ttl {ttl:g} s, last written "
        f"{duration(written)} ago) and is not deleted yet: {path} stays taken until it is",
        "the server deletes expired TTL nodes every znode.container.checkIntervalMs (60 s by "
        "default); if it stays, check the servers' extendedTypesEnabled and that property, or "
        f"delete it: zkCli.sh delete {node}",
        paths=(path,),
        seconds=expired,
    )


# ---------------------------------------------------------------------------- parents


class WriteTimes:
    """When transactions happened, bounded by the writes seen: a transaction was applied no
    later than any write with a higher zxid (one leader clock stamps them all)."""

    def __init__(self, samples: Iterable[tuple[int, float]]) -> None:
        pairs = sorted(samples)
        self._zxids = [zxid for zxid, _ in pairs]
        earliest, self._times = math.inf, [0.0] * len(pairs)
        for i in range(len(pairs) - 1, -1, -1):  # the earliest time at or after each zxid
            earliest = min(earliest, pairs[i][1])
            self._times[i] = earliest

    def not_after(self, zxid: int) -> float | None:
        """A time no earlier than transaction ``zxid``'s; None if no later write was seen."""
        i = bisect.bisect_left(self._zxids, zxid)
        return self._times[i] if i < len(self._times) else None


def write_samples(tree: Mapping[str, Znode]) -> Iterator[tuple[int, float]]:
    """Every (zxid, time) pair the nodes' stats tell: their creation and last write."""
    for node in tree.values():
        if node.stat.czxid:
            yield node.stat.czxid, node.stat.ctime / 1000
            yield node.stat.mzxid, node.stat.mtime / 1000


def leftover_findings(
    tree: Mapping[str, Znode], prefix: str, times: WriteTimes, now: float, limits: Thresholds
) -> list[Finding]:
    """Persistent parents left empty: no children now, some once (``cversion``), no owner
    (not ephemeral), empty for ``leftover_age`` at least. A container the server reaps would
    be gone by then (its reaper runs every ``znode.container.checkIntervalMs``, 60 s by
    default); a client cannot tell a container from a persistent node otherwise. The time it
    became empty (its ``pzxid``) is bounded by the writes seen after it."""
    found = []
    for path, node in sorted(tree.items()):
        stat = node.stat
        if path == prefix or stat.num_children or not stat.cversion or stat.ephemeral_owner:
            continue
        emptied = times.not_after(stat.pzxid)
        if emptied is not None and now - emptied >= limits.leftover_age:
            found.append(_leftover(path, now - emptied))
    return found


def _leftover(path: str, age: float) -> Finding:
    return Finding(
        FindingKind.LEFTOVER_PARENT,
        Severity.WARNING,
        f"{path} has been empty for {duration(age)} at least: a persistent parent left behind "
        "(kazoo creates them), not a container the server reaps",
        f"once no client uses it (a kazoo lock object caches that it exists), remove it: "
        f"zkCli.sh delete {path} (it fails if a child appeared)",
        paths=(path,),
        seconds=age,
    )


def unreadable_finding(paths: Sequence[str]) -> Finding:
    """Nodes whose ACL refused this session: what is under them was not checked."""
    return Finding(
        FindingKind.UNREADABLE,
        Severity.INFO,
        f"{len(paths)} node(s) could not be read (their ACL refuses this session), e.g. "
        f"{paths[0]}: nothing under them was checked",
        "run the doctor with credentials that may read them",
        paths=tuple(sorted(paths)),
    )
