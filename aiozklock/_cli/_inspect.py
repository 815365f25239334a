"""Read-only commands: ``contenders PATH``, ``holders PREFIX``, ``leader PATH``.

They only read (listings and node data): nothing is created, a missing path is an empty
result. Output is an aligned table, or with ``--json`` one JSON object whose shape is stable:

- a contender: ``{"position": 0, "is_holder": true, "identifier": str|null, "host":
  str|null, "pid": int|null, "task": str|null, "session_id": "0x..."|null (null for a
  lease), "fencing_token": int, "node": str, "sequence": int, "enqueued_at": float|null
  (Unix time), "queued_for": float|null (seconds, by this machine's clock),
  "local_waiters": int|null (tasks of its process queued behind it on the same object, as
  its node's data last said; null where the data does not say: another library's node, or
  a recipe that does not publish it), "revocable": bool|null (whether a revoke request
  ends its holding: ``aiozklock revoke``; null where it cannot be known, e.g. a Curator
  node with empty data), "waits_for_lock_delay": bool (it would hold, but waits out the
  path's running lock-delay: then ``is_holder`` is false)}``
- a running lock-delay (docs/fencing.md, "Lock-delay": a holder vanished without a
  release, and nobody holds until its delay has passed): ``{"until_ms": int|null (when it
  ends: Unix time in ms by the ZooKeeper leader's clock, as the record's ``mtime``; null
  for the moment before the waiter has recorded the vanish), "after": str (the vanished
  holder's node), "delay_ms": int}``; null when none runs (compared with this machine's
  clock: a delay over by it is not shown);
- ``contenders``: ``{"path": str, "kind": "lock"|"nonfair"|"lease"|null, "lock_delay":
  delay|null, "contenders": [contender, ...]}`` (holder first; ``kind`` null when nothing
  is queued);
- ``holders``: ``{"prefix": str, "locks": [{"path": str, "kind": str, "waiting": int,
  "holder": contender|null, "lock_delay": delay|null}, ...]}`` (sorted by path; during a
  lock-delay ``holder`` is null and ``waiting`` counts every contender);
- ``leader``: ``{"path": str, "leader": str|null, "lock_delay": delay|null, "contenders":
  [contender, ...]}`` (``leader`` null during a lock-delay: nobody is in office).

``kind`` names the recipe whose nodes are at the path: the first description entry
(``_recipes/_traits.py``) whose ``inspect`` reader finds them there. "lock" is a queue of
contender nodes (``zk.lock()``'s, shared by elections, multi-lock members and read/write
locks); "nonfair" a ``zk.lock(fair=False)``; "lease" a ``zk.lease_lock()``, whose holder
has no session.
"""

from __future__ import annotations

import argparse
import json
import textwrap
import time
from typing import Any

import anyio
import anyio.abc

import aiozklock
from aiozklock._cli._common import (
    EX_UNAVAILABLE,
    EX_USAGE,
    Parser,
    UsageFailure,
    add_connection_options,
    make_client,
    say,
)
from aiozklock._doctor._delays import delay_words
from aiozklock._recipes._core._contenders import Contender
from aiozklock._recipes._core._delay_record import RunningLockDelay
from aiozklock._recipes._core._names import is_lock_node
from aiozklock._recipes._traits import TRAITS, Reader, RecipeTraits
from aiozklock._wire._validation import join, validate_path, validate_recipe_path

#: The recipes whose nodes the read-only commands tell apart, with their readers, tried in
#: the description's order.
_READERS: tuple[tuple[RecipeTraits, Reader], ...] = tuple(
    (traits, traits.inspect) for traits in TRAITS.values() if traits.inspect is not None
)
_KINDS = "|".join(f'"{traits.name}"' for traits, _ in _READERS)
_KIND_HELP = (
    "kind: the recipe whose nodes are at the path, "
    + ", ".join(f'"{traits.name}" ({traits.summary})' for traits, _ in _READERS)
    + "; any other queue of contender nodes (an election's, a read/write lock's) reads as "
    + f'"{_READERS[0][0].name}".'
)

_CONTENDER = (
    'C = {"position", "is_holder", "identifier", "host", "pid", "task", "session_id": "0x..." '
    '(null for a lease), "fencing_token", "node", "sequence", "enqueued_at", "queued_for", '
    '"local_waiters": tasks of its process queued behind it (null: not published), '
    '"revocable": a revoke request ends its holding (null: cannot be known), '
    '"waits_for_lock_delay": it would hold but waits out the lock-delay (is_holder false)}'
)
_DELAY = (
    'D = {"until_ms": when the lock-delay ends (Unix ms, server time; null: not recorded '
    'yet), "after": the node that vanished without a release, "delay_ms"}, or null when no '
    "lock-delay runs (docs/fencing.md)"
)
_SHAPES = {
    "contenders": f'{{"path", "kind": {_KINDS}|null, "lock_delay": D, "contenders": [C, ...]}}',
    "holders": '{"prefix", "locks": [{"path", "kind", "waiting", "holder": C|null (null '
    'during a lock-delay), "lock_delay": D}, ...]}',
    "leader": '{"path", "leader": str|null (null during a lock-delay), "lock_delay": D, '
    '"contenders": [C, ...]}',
}


def _epilog(command: str) -> str:
    paragraphs = [
        "Read-only: nothing is created; a path that does not exist shows no contender.",
        f"--json prints {_SHAPES[command]}, where {_CONTENDER}, and {_DELAY}.",
        *([_KIND_HELP] if '"kind"' in _SHAPES[command] else []),
        f"exit status: 0 done (even if empty), {EX_USAGE} usage error, {EX_UNAVAILABLE} "
        "ZooKeeper unavailable.",
    ]
    return "\n\n".join(textwrap.fill(paragraph, 79) for paragraph in paragraphs)


_WALK_CONCURRENCY = 16  # listings in flight while walking a prefix
Json = dict[str, Any]


def add_inspect_parsers(commands: argparse._SubParsersAction[Parser]) -> None:
    """The ``contenders``, ``holders`` and ``leader`` subcommands' parsers."""
    for name, argument, helptext in (
        ("contenders", "PATH", "a lock's queue, holder first"),
        ("holders", "PREFIX", "every held lock under a prefix"),
        ("leader", "PATH", "an election's leader and candidates"),
    ):
        parser = commands.add_parser(
            name,
            help=helptext,
            description=f"{helptext[0].upper()}{helptext[1:]}.",
            epilog=_epilog(name),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        add_connection_options(parser)
        parser.add_argument(
            "--json", action="store_true", help="print one JSON object (shape below)"
        )
        parser.add_argument("path", metavar=argument)


def inspect_command(args: argparse.Namespace) -> int:
    """The ``contenders``, ``holders`` and ``leader`` subcommands; returns the exit status.

    Raises ``UsageFailure`` for a bad path or hosts, before anything is contacted."""
    try:
        path = (validate_path if args.command == "holders" else validate_recipe_path)(args.path)
    except aiozklock.InvalidArgument as exc:
        raise UsageFailure(str(exc)) from None
    client = make_client(args)
    report = {"contenders": _contenders, "holders": _holders, "leader": _leader}[args.command]

    async def main() -> Json:
        async with client as zk:
            return await report(zk, path)

    try:
        result = anyio.run(main)
    except aiozklock.ZooKeeperUnavailable as exc:
        say(args.command, f"ZooKeeper unavailable: {exc}")
        return EX_UNAVAILABLE
    print(json.dumps(result, indent=2) if args.json else _table(args.command, result))
    return 0


# ---------------------------------------------------------------------------- reading


async def _queue_at(
    zk: aiozklock.ZooKeeperClient, path: str, children: list[str]
) -> tuple[RecipeTraits | None, list[Contender]]:
    """The recipe whose nodes are at ``path`` (given its children) and its contenders,
    holder first: the first that its description entry's reader finds there."""
    for traits, read in _READERS:
        queue = await read(zk, path, children)
        if queue is not None:
            return traits, queue
    return None, []


async def _contenders(zk: aiozklock.ZooKeeperClient, path: str) -> Json:
    found, queue = await _queue_at(zk, path, await zk.get_children(path, missing_ok=True))
    now = time.time()
    return {
        "path": path,
        "kind": found.name if found and queue else None,
        "lock_delay": _delay_json(queue),
        "contenders": [_contender_json(c, i, now, found) for i, c in enumerate(queue)],
    }


async def _leader(zk: aiozklock.ZooKeeperClient, path: str) -> Json:
    election = zk.election(path)
    leader = await election.leader()
    queue = await election.contenders()
    now = time.time()
    delay = _delay_json(queue)
    return {
        "path": path,
        "leader": None if delay else leader,  # nobody is in office during a lock-delay
        "lock_delay": delay,
        "contenders": [_contender_json(c, i, now, None) for i, c in enumerate(queue)],
    }


async def _holders(zk: aiozklock.ZooKeeperClient, prefix: str) -> Json:
    locks: list[Json] = []
    limiter = anyio.CapacityLimiter(_WALK_CONCURRENCY)

    async def visit(path: str, tg: anyio.abc.TaskGroup) -> None:
        async with limiter:
            children = await zk.get_children(path, missing_ok=True)
            found, queue = await _queue_at(zk, path, children)
        if found and queue:
            locks.append(_lock_json(path, found, queue))
        for child in children:
            if not is_lock_node(child):  # a queue's nodes are ephemeral: they have no children
                tg.start_soon(visit, join(path, child), tg)

    async with anyio.create_task_group() as tg:
        await visit(prefix, tg)
    return {"prefix": prefix, "locks": sorted(locks, key=lambda lock: str(lock["path"]))}


def _lock_json(path: str, found: RecipeTraits, queue: list[Contender]) -> Json:
    """A lock of ``holders``: its first contender holds, but during a lock-delay."""
    delay = _delay_json(queue)
    holder = None if delay else _contender_json(queue[0], 0, time.time(), found)
    waiting = len(queue) - (holder is not None)
    return {
        "path": path,
        "kind": found.name,
        "waiting": waiting,
        "holder": holder,
        "lock_delay": delay,
    }


def _delay_json(queue: list[Contender]) -> Json | None:
    """The lock-delay that the contenders that would hold wait out, if any."""
    delay = next((c.lock_delay for c in queue if c.lock_delay is not None), None)
    if delay is None:
        return None
    return {"until_ms": delay.until_ms, "after": delay.after, "delay_ms": delay.delay_ms}


def _contender_json(
    contender: Contender, position: int, now: float, found: RecipeTraits | None
) -> Json:
    """``found``: the recipe read (None: an election's queue, read as such)."""
    enqueued = contender.enqueued_at
    session = None if found and found.ttl_lease else f"0x{contender.session_id:x}"
    return {
        "position": position,
        "is_holder": contender.is_holder,
        "identifier": contender.identifier,
        "host": contender.host,
        "pid": contender.pid,
        "task": contender.task,
        "session_id": session,  # a TTL lease's holder has none
        "fencing_token": contender.fencing_token,
        "node": contender.node,
        "sequence": contender.sequence,
        "enqueued_at": enqueued,
        "queued_for": round(max(0.0, now - enqueued), 3) if enqueued is not None else None,
        "local_waiters": contender.local_waiters,
        "revocable": contender.revocable,
        "waits_for_lock_delay": contender.lock_delay is not None,
    }


# ---------------------------------------------------------------------------- tables


def _table(command: str, result: Json) -> str:
    now = time.time()
    if command == "holders":
        if not result["locks"]:
            return f"no held lock under {result['prefix']}"
        header = ["PATH", "KIND", "WAITING", *_COLUMNS]
        rows = [
            [lock["path"], lock["kind"], str(lock["waiting"]), *_cells(lock["holder"])]
            for lock in result["locks"]
        ]
        delays = [_delay_line(lock["path"], lock["lock_delay"], now) for lock in result["locks"]]
        return "\n".join([_aligned(header, rows), *filter(None, delays)])
    lines = [f"leader: {result['leader'] or '(none)'}"] if command == "leader" else []
    lines += filter(None, [_delay_line(result["path"], result["lock_delay"], now)])
    if not result["contenders"]:
        lines.append(f"no contender on {result['path']}")
    else:
        rows = [[_state(c), *_cells(c)] for c in result["contenders"]]
        lines.append(_aligned(["STATE", *_COLUMNS], rows))
    return "\n".join(lines)


_COLUMNS = ["IDENTIFIER", "HOST", "PID", "SESSION", "TOKEN", "QUEUED", "LOCAL", "REVOCABLE", "NODE"]
_YES_NO = {True: "yes", False: "no", None: "-"}


def _state(contender: Json) -> str:
    if contender["is_holder"]:
        return "holder"
    return "lock-delay" if contender["waits_for_lock_delay"] else "waiting"


def _cells(contender: Json | None) -> list[str]:
    """A contender's cells; for none (a lock in a lock-delay has no holder), that word."""
    if contender is None:
        return ["(lock-delay)", *["-"] * (len(_COLUMNS) - 1)]
    queued = contender["queued_for"]
    values = [
        contender["identifier"],
        contender["host"],
        contender["pid"],
        contender["session_id"],
        contender["fencing_token"],
        None if queued is None else f"{queued:.1f}s",
        contender["local_waiters"],
        _YES_NO[contender["revocable"]],
        contender["node"],
    ]
    return ["-" if value is None else str(value) for value in values]


def _delay_line(path: str, delay: Json | None, now: float) -> str | None:
    """A sentence on the lock-delay running on ``path``, if any."""
    if delay is None:
        return None
    running = RunningLockDelay(delay["after"], delay["delay_ms"], delay["until_ms"])
    return delay_words(path, running, now)


def _aligned(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    )
