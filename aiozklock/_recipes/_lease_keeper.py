"""The lease lock's holding and its keeper: renewals every ttl/3, and the loss of a lease
that could not be renewed in time or was changed by someone else (see ``_lease.py``)."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import anyio

from aiozklock._exceptions import (
    AiozklockError,
    BadVersionError,
    ClientClosed,
    ConnectionLoss,
    LockLost,
    NoNodeError,
    SessionExpired,
)
from aiozklock._recipes._core._fixed import FixedHolding, FixedNode
from aiozklock._recipes._core._holding import Holding
from aiozklock._recipes._core._janitor import Spawn
from aiozklock._recipes._core._retry import RETRY_ANY_SESSION
from aiozklock._wire._now import uptime
from aiozklock._wire._protocol import Stat, get_data_op, set_data_op
from aiozklock._wire._session import Session

log = logging.getLogger("aiozklock._recipes._lease")
# A write whose outcome is unknown is looked up again, never resent blindly: the node is not
# bound to a session, so neither a lost connection nor a lost session settles it.
UNKNOWN_OUTCOME = (ConnectionLoss, SessionExpired)  # what RETRY_ANY_SESSION repeats


class LeaseLock(Protocol):
    """What the keepers need of the lease they keep (``_lease.LeaseLock``): its TTL and
    renewal period, its node (``_fixed``) and the data it holds it with, the lock that
    serialises its writes, and whether a node's content is its own."""

    ttl: float
    renew_automatically: bool
    _renew_every: float
    _writing: anyio.Lock
    _fixed: FixedNode
    _data: bytes
    _session: Session
    _label: str

    @property
    def _lost_error(self) -> type[LockLost]: ...

    def _valid_until(self, holding: Holding) -> float: ...

    def _owned(self, data: bytes, stat: Stat) -> bool: ...


@dataclass(eq=False)
class LeaseHolding(FixedHolding):
    """A holding plus what renewals need: the node's ``version`` after our last write, and
    the earliest instant (``uptime()``) the server may delete the node."""

    expires_at: float = -math.inf
    renewals: int = 0


@dataclass(frozen=True, slots=True)
class LeaseStatistics:
    """Local state of one lease lock object (no request is sent to build it)."""

    path: str
    node: str  # the lock node, ``{path}/lease``
    holder_id: str
    ttl: float
    locked: bool  # a task of this object holds the lease, not lost
    owner: anyio.TaskInfo | None
    depth: int  # reentrant acquisitions by the owner
    tasks_waiting: int  # tasks of this process waiting on this object
    fencing_token: int | None
    version: int | None  # the node's version after our last write
    expires_at: float | None  # aiozklock.clock() instant: the server may delete it from then
    renewals: int  # successful renewals of the current holding
    acquisitions: int
    losses: int
    last_wait: float | None  # seconds the last acquisition waited


class LeaseMonitor:
    """The lease's own loss monitor, in place of the session's: registering a holding starts
    its keeper (renewals, loss deadline) in the client's background task group; unregistering
    (release) cancels it. A keeper cancelled by the client's closing marks the holding lost:
    nobody can renew it any more."""

    def __init__(self, keep: Callable[[LeaseHolding], Awaitable[None]], spawn: Spawn) -> None:
        self._keep = keep
        self._spawn = spawn
        self._scopes: dict[Holding, anyio.CancelScope] = {}

    def register(self, holding: Holding) -> None:
        assert isinstance(holding, LeaseHolding)
        scope = self._scopes[holding] = anyio.CancelScope()

        async def keeper() -> None:
            try:
                with scope:
                    await self._keep(holding)
            except Exception:  # never into the client's task group
                log.exception("lease keeper of %s failed", holding.nodes[0])
                holding.mark_lost("the lease keeper failed", "lease")
            finally:
                if self._scopes.pop(holding, None) is not None:  # not released: cancelled
                    holding.mark_lost(
                        "the client was closed: the lease can not be renewed", "closed"
                    )

        try:
            self._spawn(keeper)
        except RuntimeError:  # the client is closing
            self._scopes.pop(holding, None)
            holding.mark_lost("the client is closing: the lease can not be renewed", "closed")

    async def proven(self, holding: Holding, until: float | None = None) -> bool:
        """A lease is its TTL node's, not the session's: nothing to prove."""
        return True

    def give_up(self, holding: Holding, reason: str) -> None:
        """Mark ``holding`` lost for ``reason`` (a lease is proven by its node, not the
        session: no recipe gives one up for a missing proof)."""
        holding.mark_lost(reason, "lost")

    def unregister(self, holding: Holding) -> None:
        scope = self._scopes.pop(holding, None)
        if scope is not None:
            scope.cancel()


async def keep(lease: LeaseLock, holding: LeaseHolding) -> None:
    """The keeper: renew every ttl/3 (if ``renew``), and mark the holding lost at
    ``valid_until`` if it was not renewed by then."""
    while not holding.lost:
        now = uptime()
        lost_at = lease._valid_until(holding)
        if now >= lost_at:
            lose(lease, holding, "not renewed in time", delete=True)
            return
        due = math.inf
        if lease.renew_automatically:
            due = holding.expires_at - lease.ttl + lease._renew_every
        if now < min(due, lost_at):
            await anyio.sleep(min(due, lost_at) - now)
            continue
        try:
            await refresh(lease, holding)
        except AiozklockError as exc:
            lose(lease, holding, f"renewal failed: {exc}")
            return


async def refresh(lease: LeaseLock, holding: LeaseHolding) -> None:
    """One renewal, retried through disconnections until ``valid_until``. Raises
    ``LockLost`` (having marked the holding lost) when it cannot be renewed."""
    async with lease._writing:
        while True:
            if holding.lost:
                raise lose(lease, holding, holding.lost_reason)
            until = lease._valid_until(holding)
            sent = uptime()
            if sent >= until:
                raise lose(lease, holding, "not renewed in time", delete=True)
            stat = None
            try:
                # A reply that comes after ``until`` is too late to count: stop waiting.
                with anyio.move_on_after(until - sent):
                    stat = await _write(lease, holding, until)
            except TimeoutError:
                pass  # not connected by ``until``: lost on the next turn
            except ClientClosed:
                raise lose(lease, holding, "the client was closed") from None
            if stat is not None:
                break
        if stat.czxid != holding.token:  # pitfall 24: another holder's node, same version
            raise lose(lease, holding, f"the node was re-created (czxid {stat.czxid})")
        holding.version = stat.version
        holding.expires_at = sent + lease.ttl
        holding.renewals += 1


async def _write(lease: LeaseLock, holding: LeaseHolding, until: float) -> Stat | None:
    """``setData(version=ours)``; None if a lost reply turns out not to have been
    applied (send again)."""
    op = set_data_op(lease._fixed.server_node, lease._data, holding.version)
    try:
        return await lease._session.call(op, wait_until=until)
    except (BadVersionError, NoNodeError) as exc:
        raise lose(lease, holding, f"the node was changed or deleted ({exc})") from None
    except UNKNOWN_OUTCOME:
        pass
    try:  # the reply was lost: did our write happen?
        read = get_data_op(lease._fixed.server_node)
        data, stat = await RETRY_ANY_SESSION.call(lease._session, read, wait_until=until)
    except NoNodeError:
        raise lose(lease, holding, "the node was deleted") from None
    if stat.czxid != holding.token or not lease._owned(data, stat):
        raise lose(lease, holding, "the node is someone else's now")
    if stat.version == holding.version:
        return None
    if stat.version == holding.version + 1 and data == lease._data:
        return stat
    raise lose(lease, holding, f"the node was changed by someone else (v{stat.version})")


def lose(lease: LeaseLock, holding: LeaseHolding, reason: str, *, delete: bool = False) -> LockLost:
    """Mark ``holding`` lost (cancelling its bodies); returns the error to raise.

    ``delete``: the node may still be ours (not renewed in time): the janitor deletes it
    once possible, if it still has our czxid, so that it does not block others for the
    rest of its TTL."""
    if holding.mark_lost(reason, "lease"):
        log.warning("%s: lease lost: %s", lease._label, reason)
        if delete:
            lease._fixed.delete_later(holding.token)
    return lease._lost_error(f"{lease._label} was lost: {holding.lost_reason}")


__all__ = (
    "UNKNOWN_OUTCOME",
    "LeaseHolding",
    "LeaseMonitor",
    "LeaseStatistics",
    "keep",
    "lose",
    "refresh",
)
