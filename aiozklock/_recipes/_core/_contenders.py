"""Who is queued: our nodes' data (identity JSON) and the queue as read back from ZooKeeper."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiozklock._exceptions import NoNodeError
from aiozklock._recipes._core._delay_record import RECORD, RunningLockDelay, running_delay
from aiozklock._recipes._core._names import parts_of, queue_order, sequence_of
from aiozklock._recipes._core._queue import Queue
from aiozklock._recipes._core._revocation import REVOKE
from aiozklock._wire._protocol import Stat, get_data_op
from aiozklock._wire._session import Session
from aiozklock._wire._validation import join, validate_data

_HOST = socket.gethostname()
_KAZOO_MARKERS = ("__lock__", "__rlock__")  # kazoo's nodes: kazoo has no revocation
# Readers' nodes (Curator's read/write lock and ours, kazoo's ReadLock): they share the lock.
_READ_MARKERS = frozenset({"__READ__", "__rlock__"})
# One encoder for every node's data: json.dumps(..., ensure_ascii=False) builds a new one
# per call, a measurable share of an uncontended acquire.
_ENCODE = json.JSONEncoder(ensure_ascii=False).encode


@dataclass(frozen=True, slots=True)
class Contender:
    """One node in a lock's queue, as read from ZooKeeper by ``Lock.contenders()``.

    ``is_holder`` is False for a contender that would hold but waits out a running
    lock-delay (a holder ahead of it vanished without a release): ``lock_delay`` then says
    until when, and after whose vanish."""

    node: str
    sequence: int
    is_holder: bool
    fencing_token: int
    session_id: int
    identifier: str | None
    host: str | None
    pid: int | None
    task: str | None
    enqueued_at: float | None  # Unix time its node was created, by the server's clock
    # Whether a revoke request ends its holding: True or False as its node's data says (ours
    # tell), None when it cannot be known (Curator's revocable mutex writes empty data; a
    # node whose data is a revoke request already).
    revocable: bool | None = None
    # Tasks of its process queued behind it on the same object, as its data last said;
    # None if its data does not say (another library's node, a recipe that does not publish
    # it: see docs/observability.md, "Local queues").
    local_waiters: int | None = None
    # The lock-delay it waits out before it holds (a holder ahead of it vanished without a
    # release): it would hold otherwise, and ``is_holder`` is False until the delay ends.
    lock_delay: RunningLockDelay | None = None


class Identity:
    """Our nodes' data: who queued (identifier, host, pid, task), as JSON, and with
    ``revocable``, ``"revocable": true`` (so that ``zk.revoke()`` and operators can tell).
    When is the node's own creation time."""

    __slots__ = ("_identifier", "_last", "_revocable")

    def __init__(self, identifier: str | None, *, revocable: bool = False) -> None:
        self._identifier = identifier  # the rest is built when needed: one object per lock
        self._revocable = revocable
        # A lock's task and count rarely change: the last data built, and what it was for.
        self._last: tuple[str | None, int | None, bytes] | None = None

    @property
    def last_task(self) -> str | None:
        """The task named in the data built last (that of our newest node)."""
        return None if self._last is None else self._last[0]

    def data(self, task_name: str | None, waiters: int | None = None, **extra: str) -> bytes:
        """The JSON object for one enqueue, with ``extra`` fields; ``waiters``: the local
        waiters to publish (``local_waiters``; None: a recipe that does not publish it)."""
        last = self._last
        if last is not None and last[0] == task_name and last[1] == waiters and not extra:
            return last[2]
        head: dict[str, object] = {
            "identifier": self._identifier,
            "host": _HOST,
            "pid": os.getpid(),
        }
        if self._revocable:
            head["revocable"] = True
        fields = {**head, "task": task_name, **extra}
        if waiters is not None:
            fields["local_waiters"] = waiters
        data = validate_data(_ENCODE(fields).encode())
        if not extra:
            self._last = (task_name, waiters, data)
        return data


async def read_contenders(session: Session, queue: Queue, path: str) -> list[Contender]:
    """The queue under ``path``, holders first, read from ZooKeeper (one round trip for the
    listing, one for the nodes' data, with the lock-delay record's if one is listed).
    Readers' nodes (a read/write lock's) share the lock: each one with no exclusive node
    ahead of it holds (``holds_now``); those that would hold but wait out a lock-delay do
    not (``Contender.lock_delay``)."""
    try:
        children = await queue.list_children(path, None, None)
    except NoNodeError:
        return []
    names = queue_order(children)
    ops = [get_data_op(session.server_path(join(path, name))) for name in names]
    if names and RECORD in children:
        ops.append(get_data_op(session.server_path(join(path, RECORD))))
    results = await session.pipeline(ops) if ops else []
    # A node that vanished while we read was released: those behind it may hold now.
    present = [(n, r) for n, r in zip(names, results, strict=False) if isinstance(r, tuple)]
    holds = holds_now([(is_reader(name), sequence_of(name)) for name, _ in present])
    record = results[len(names) :]
    delay = _delay_of(record[0], path, [name for name, _ in present]) if record else None
    return [
        contender_of(
            name, data, stat, is_holder=held and delay is None, lock_delay=delay if held else None
        )
        for held, (name, (data, stat)) in zip(holds, present, strict=True)
    ]


async def read_delay(session: Session, path: str, queued: Sequence[str]) -> RunningLockDelay | None:
    """The lock-delay that the record under ``path`` imposes now on the head of ``queued``
    (the queue's node names as listed), read from ZooKeeper (one read: call it only where
    the record is listed). Raises what ``session.call`` raises but ``NoNodeError``."""
    op = get_data_op(session.server_path(join(path, RECORD)))
    try:
        found = await session.call(op)
    except NoNodeError:
        return None
    return _delay_of(found, path, queued)


def _delay_of(reply: object, path: str, queued: Sequence[str]) -> RunningLockDelay | None:
    """The lock-delay that the record's ``reply`` imposes on the ``queued`` nodes now (by
    this machine's clock: the record's times are the server's)."""
    if not isinstance(reply, tuple):
        return None  # deleted since the listing: nothing holds the queue back
    data, stat = reply
    now_ms = round(time.time() * 1000)
    return running_delay(data, stat.mtime, stat.mzxid, join(path, RECORD), queued, now_ms)


def is_reader(name: str) -> bool:
    """Whether the contender's node ``name`` is a reader's (it shares the lock)."""
    parts = parts_of(name)
    return parts is not None and parts[1] in _READ_MARKERS


def holds_now(queue: Sequence[tuple[bool, int]]) -> list[bool]:
    """Which contenders of a queue hold now, given each one's ``(is_reader, sequence)`` in
    queue order. Every node blocks an exclusive one (a writer's, a mutex's, an election's);
    only exclusive nodes block a reader; a blocker with the node's own sequence does not (a
    downgrade's read node shares its writer's place: Curator 5.5+, ours). So a queue without
    readers has one holder, its first; readers ahead of the first exclusive node all hold.
    Curator's read/write lock decides so, as do kazoo's ReadLock and WriteLock."""
    held = []
    ahead: set[int] = set()  # the sequences of the nodes ahead, and of the exclusive ones
    exclusive: set[int] = set()
    for reader, sequence in queue:
        blockers = exclusive if reader else ahead
        held.append(not blockers or blockers == {sequence})
        ahead.add(sequence)
        if not reader:
            exclusive.add(sequence)
    return held


def contender_of(
    name: str,
    data: bytes,
    stat: Stat,
    *,
    is_holder: bool,
    sequence: int | None = None,
    lock_delay: RunningLockDelay | None = None,
) -> Contender:
    """A contender from its node's name, data and stat; ``sequence`` defaults to the one in
    the node's name; ``lock_delay``: the lock-delay it waits out, if any. The data is our
    identity JSON; a peer's node (kazoo's, Curator's) holds its identifier as plain text
    instead, which is read as the identifier (as the peers' own ``contenders()`` and
    ``getParticipants()`` read it)."""
    identity = _identity(data)
    return Contender(
        node=name,
        sequence=sequence_of(name) if sequence is None else sequence,
        is_holder=is_holder,
        fencing_token=stat.czxid,
        session_id=stat.ephemeral_owner,
        identifier=identity.get("identifier"),
        host=identity.get("host"),
        pid=identity.get("pid"),
        task=identity.get("task"),
        enqueued_at=stat.ctime / 1000 if stat.ctime else None,
        revocable=revocable_of(name, data, identity),
        local_waiters=_count(identity.get("local_waiters")),
        lock_delay=lock_delay,
    )


def _identity(data: bytes) -> dict[str, Any]:
    """Our identity JSON as a dict; a peer's plain-text identifier as ``{"identifier":
    text}``; ``{}`` for empty data, a revoke request, or data that is not text."""
    if data == REVOKE:
        return {}
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return {}
    try:
        identity = json.loads(text) if text else {}
    except ValueError:
        return {"identifier": text}
    if isinstance(identity, dict):
        return identity
    return {"identifier": text}


def revocable_of(name: str, data: bytes, identity: dict[str, object]) -> bool | None:
    """Whether the contender of node ``name`` (its ``data``, read as ``identity``) lets a
    revoke request end its holding: ours say so in their data; Curator's revocable mutex
    writes empty data (and any other Curator node has data: its IP address by default);
    kazoo has no revocation. None when it cannot be known."""
    if "pid" in identity:  # ours
        return identity.get("revocable") is True
    parts = parts_of(name)
    kazoo = parts is not None and parts[1] in _KAZOO_MARKERS
    if data == REVOKE or (not data and parts is not None and not kazoo):
        return None  # asked already, or an empty Curator node: perhaps
    return False


def _count(value: object) -> int | None:
    """A published count: a non-negative int (not a bool), else None."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


__all__ = (
    "Contender",
    "Identity",
    "contender_of",
    "holds_now",
    "is_reader",
    "read_contenders",
    "revocable_of",
)
