"""All-or-nothing locking of several paths, deadlock-free by construction.

We enqueue on every member path with one ``multi`` transaction (pipelined with the listing of
each member: 1 round trip when all are free). ZooKeeper's leader serialises transactions, so
our nodes carry one zxid, and for any two multi-locks one's nodes precede the other's on
*every* path they share: a contender only waits for nodes created before its own, so no
wait-for cycle can form, whatever order the caller lists the paths in. The queue engine keeps
this true: a member node that goes missing is never re-created alone.

Release is one ``multi`` of deletes. Curator releases members one by one in reverse order, so
that a partially released set is always a prefix of the acquisition order; here the deletes
are one transaction, so no contender ever observes a partial release at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import anyio

from aiozklock._acl import ACL
from aiozklock._exceptions import InvalidArgument, short_repr
from aiozklock._recipes._core._contenders import Contender, read_contenders
from aiozklock._recipes._core._holding import HoldingMonitor
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._names import KAZOO_MARKER, LOCK_MARKER
from aiozklock._recipes._core._options import RecipeOptions
from aiozklock._recipes._core._peers import Layout
from aiozklock._recipes._core._queued import QueuedPrimitive
from aiozklock._recipes._decision import decide
from aiozklock._wire._session import Session
from aiozklock._wire._validation import validate_identifier, validate_recipe_path

MAX_MEMBERS = 256  # a multi must fit one request (~1 MiB); far below that, and checked again


@dataclass(frozen=True, slots=True)
class MultiLockStatistics:
    """Local state of one multi-lock object (no request is sent to build it)."""

    paths: tuple[str, ...]
    locked: bool  # a task of this object holds every member
    owner: anyio.TaskInfo | None
    depth: int  # reentrant acquisitions by the owner
    tasks_waiting: int  # tasks of this process waiting on this object
    nodes: dict[str, str]  # member path -> our znode's name, while queued or holding
    fencing_token: int | None
    acquisitions: int
    losses: int
    last_wait: float | None  # seconds the last acquisition waited
    lock_delay_waited: float  # of which, waiting out a lock-delay (0.0 if none)


def validate_members(paths: object) -> tuple[str, ...]:
    """The member paths, validated and de-duplicated (in the given order)."""
    if isinstance(paths, str | bytes) or not isinstance(paths, Iterable):
        raise InvalidArgument(
            f"paths must be an iterable of lock paths (e.g. a list), not {type(paths).__name__}"
        )
    members = tuple(dict.fromkeys(validate_recipe_path(path) for path in paths))
    if not members:
        raise InvalidArgument("a multi-lock needs at least one path")
    if len(members) > MAX_MEMBERS:
        raise InvalidArgument(f"a multi-lock takes at most {MAX_MEMBERS} paths, not {len(members)}")
    return members


class MultiLock(QueuedPrimitive):
    """Several locks taken together: all or nothing. Create it with ``zk.multi_lock(paths)``.

    Same interface as ``Lock`` (fair, reentrant per task, loss-aware), plus
    ``fencing_tokens``. Members are queued atomically (see the module docstring), so
    overlapping multi-locks never deadlock. Bad arguments raise ``InvalidArgument`` here.
    """

    paths: tuple[str, ...]
    """The member paths, as given (each once)."""

    _publishes = True  # its local waiters, in its nodes' data (``_core/_local_waiters.py``)

    def __init__(
        self,
        session: Session,
        paths: Iterable[str],
        *,
        options: RecipeOptions,
        monitor: HoldingMonitor,
        janitor: Janitor,
        acl: tuple[ACL, ...],
    ) -> None:
        self.paths = validate_members(paths)
        self.identifier = validate_identifier(options.identifier)
        super().__init__(
            session,
            monitor,
            janitor,
            self.paths,
            decide,
            f"multi-lock {list(self.paths)}",
            options.checked(self.identifier),
            acl,
            layout=Layout(options.compat, LOCK_MARKER, KAZOO_MARKER, "zk.multi_lock()"),
        )

    @property
    def fencing_tokens(self) -> dict[str, int]:
        """Member path -> the czxid of our node there (one transaction created them all, so
        they are equal). Raises ``NotLockOwner`` if not held."""
        token = self.fencing_token
        return dict.fromkeys(self.paths, token)

    def statistics(self) -> MultiLockStatistics:
        """Local state of this object; sends nothing and raises nothing."""
        holding = self._holding
        return MultiLockStatistics(
            paths=self.paths,
            locked=holding is not None and not holding.lost,
            owner=None if self._owner is None else self._owner.info(),
            depth=self._depth,
            tasks_waiting=self._local.tasks_waiting,
            nodes=dict(self._queue.nodes),
            fencing_token=holding.token if holding is not None else None,
            acquisitions=self._acquisitions,
            losses=self._losses,
            last_wait=self._last_wait,
            lock_delay_waited=self._delay_waited(),
        )

    async def contenders(self) -> dict[str, list[Contender]]:
        """Each member's queue as ZooKeeper has it, holder first. Connection losses are
        retried; raises ``ClientClosed`` once closed, ``UsageError`` outside the client's
        event loop."""
        return {
            path: await read_contenders(self._session, self._queue, path) for path in self.paths
        }

    def __repr__(self) -> str:
        state = "held" if self._holding is not None else "free"
        return (
            f"<aiozklock.MultiLock {short_repr(list(self.paths))} {state} "
            f"identifier={short_repr(self.identifier)}>"
        )


__all__ = ("MultiLock", "MultiLockStatistics", "validate_members")
