"""The doctor's reads: a prefix's tree, level by level, in pipelined batches; the listings of
a few paths again (to confirm a deadlock); and the server's clock.

Every node is read with one ``getData`` (its data and ``Stat``) and, if it has children, one
``getChildren``: a level's requests go out in batches of ``BATCH`` in one write each, so a
tree of 10,000 locks costs a few dozen round trips, not 30,000. Reads lost with the
connection are asked again. A node that vanished while we read is left out (it was released);
one whose ACL refuses us is listed as unreadable.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiozklock._exceptions import ConnectionLoss, NoAuthError, NoNodeError, ZooKeeperError
from aiozklock._wire._protocol import (
    CreateMode,
    MultiCreate,
    MultiDelete,
    MultiSetData,
    Op,
    Stat,
    exists_op,
    get_children_op,
    get_data_op,
    multi_op,
)
from aiozklock._wire._session import Session
from aiozklock._wire._validation import join

BATCH = 2000  # requests per pipelined write
SYSTEM = "/zookeeper"  # the server's own nodes (quotas, config): never a recipe's
PROBE_PREFIX = "aiozklock-doctor-clock-"
CLOCK_ATTEMPTS = 3  # the probe is asked this many times at most when its reply is lost

log = logging.getLogger("aiozklock._doctor")


@dataclass(frozen=True, slots=True)
class Znode:
    """One node as read: its data, its ``Stat`` and its children's names (sorted)."""

    data: bytes
    stat: Stat
    children: tuple[str, ...] = ()


@dataclass(slots=True)
class Scan:
    """A prefix's tree (client paths to nodes) and the paths we could not read."""

    tree: dict[str, Znode] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)


async def scan(session: Session, prefix: str) -> Scan:
    """Read every node under ``prefix`` (itself included); an empty ``Scan`` if it does not
    exist. Raises what the session raises other than NoNode and NoAuth (a closed client,
    an unavailable ZooKeeper)."""
    found = Scan()
    level = [prefix]
    while level:
        listed = await _read_level(session, level, found)
        level = await _list_level(session, listed, found)
    return found


async def _read_level(session: Session, paths: list[str], found: Scan) -> list[str]:
    """getData of every path; returns those that have children to list."""
    replies = await pipelined(session, [get_data_op(session.server_path(p)) for p in paths])
    listed = []
    for path, reply in zip(paths, replies, strict=True):
        if _skipped(path, reply, found):
            continue
        data, stat = reply
        found.tree[path] = Znode(data, stat)
        if stat.num_children and session.server_path(path) != SYSTEM:
            listed.append(path)
    return listed


async def _list_level(session: Session, paths: list[str], found: Scan) -> list[str]:
    """getChildren of every path; returns the next level's paths."""
    replies = await pipelined(session, [get_children_op(session.server_path(p)) for p in paths])
    level: list[str] = []
    for path, reply in zip(paths, replies, strict=True):
        if _skipped(path, reply, found):
            continue
        children = tuple(sorted(reply))
        node = found.tree[path]
        found.tree[path] = Znode(node.data, node.stat, children)
        level.extend(join(path, child) for child in children)
    return level


def _skipped(path: str, reply: Any, found: Scan) -> bool:
    if isinstance(reply, NoNodeError):  # gone since its parent was listed: released
        return True
    if isinstance(reply, NoAuthError):
        found.unreadable.append(path)
        return True
    if isinstance(reply, BaseException):
        raise reply
    return False


async def pipelined(session: Session, ops: Sequence[Op[Any]]) -> list[Any]:
    """Every reply (or its error) in order, ``BATCH`` requests per write; requests whose
    reply was lost with the connection are sent again (they are reads)."""
    replies: list[Any] = []
    for start in range(0, len(ops), BATCH):
        batch = ops[start : start + BATCH]
        answers = await session.pipeline(batch)
        lost = [i for i, answer in enumerate(answers) if isinstance(answer, ConnectionLoss)]
        while lost:
            again = await session.pipeline([batch[i] for i in lost])
            for i, answer in zip(lost, again, strict=True):
                answers[i] = answer
            lost = [i for i in lost if isinstance(answers[i], ConnectionLoss)]
        replies.extend(answers)
    return replies


async def relist(session: Session, paths: Iterable[str]) -> dict[str, frozenset[str]]:
    """The children of each path now (none for a path that is gone or unreadable)."""
    ordered = sorted(set(paths))
    replies = await pipelined(session, [get_children_op(session.server_path(p)) for p in ordered])
    return {
        path: frozenset(reply) if isinstance(reply, list) else frozenset()
        for path, reply in zip(ordered, replies, strict=True)
    }


async def created(session: Session, paths: Iterable[str]) -> dict[str, int]:
    """The czxid of each node now (0 for one that is gone or unreadable)."""
    ordered = sorted(set(paths))
    replies = await pipelined(session, [exists_op(session.server_path(p)) for p in ordered])
    return {
        path: reply.czxid if isinstance(reply, Stat) else 0
        for path, reply in zip(ordered, replies, strict=True)
    }


async def server_clock(session: Session, prefix: str) -> tuple[int, float] | None:
    """The server's time now, as the zxid of a write and its time (Unix seconds), or None
    if it cannot be read.

    ZooKeeper tells the time only in what it writes: a ``Stat``'s ``mtime`` is the leader's
    clock when the write was applied, the same clock as every node's ``ctime``. So this
    writes one ``multi`` under ``prefix``: create an ephemeral probe node, set its data,
    delete it. All or nothing, it leaves no node (no listing can ever see the probe); what
    lasts is the parent's child-change counters (``cversion``, ``pzxid``), and children
    watches on ``prefix`` fire once. A refusal (ACL, an ephemeral ``prefix``) gives None,
    and so does a connection lost ``CLOCK_ATTEMPTS`` times in a row (logged as a warning: a
    flapping link must not keep the doctor asking for ever). Raises what the session raises
    other than ConnectionLoss and a server's error (``SessionExpired``, ``ClientClosed``).
    """
    probe = session.server_path(join(prefix, PROBE_PREFIX + uuid.uuid4().hex))
    op = multi_op(
        [
            MultiCreate(probe, b"", CreateMode.EPHEMERAL),
            MultiSetData(probe, b"clock"),
            MultiDelete(probe),
        ],
        session.client_path,
    )
    for _ in range(CLOCK_ATTEMPTS):
        try:
            result = await session.call(op)
        except ConnectionLoss:
            continue  # applied or not, it left nothing: asking again is safe
        except ZooKeeperError:
            return None
        stat = result.results[1]
        if not result.ok or not isinstance(stat, Stat):
            return None
        return stat.mzxid, stat.mtime / 1000
    log.warning(
        "the server's clock could not be read under %s: the connection was lost %d times "
        "in a row; ages are by this machine's clock",
        prefix,
        CLOCK_ATTEMPTS,
    )
    return None


__all__ = (
    "BATCH",
    "CLOCK_ATTEMPTS",
    "created",
    "Scan",
    "Znode",
    "pipelined",
    "relist",
    "scan",
    "server_clock",
)
