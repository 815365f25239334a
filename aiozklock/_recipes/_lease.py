"""The TTL lease lock: one persistent node with a TTL, renewed by its holder, not bound to its
session.

The lock node is ``{path}/lease``, a PERSISTENT node WITH TTL (``CreateTTL``). The server deletes
it once it has not been modified for the TTL (checked every ``znode.container.checkIntervalMs``),
so the holder renews it with a version-checked ``setData`` every ttl/3. Its data is JSON
(``holder_id``, ``identifier``, ``host``, ``pid``, ``ttl``): TTL nodes show no ephemeral owner,
so the data is how a contender tells whose node it is (recipes-pitfalls §4, 24).

* Acquire: ``createTTL`` (1 round trip when free). ``NodeExists``: read the node with a data
  watch; our ``holder_id`` on it means we re-attach (a lost create reply, or a restart that
  passed the same ``holder_id``): renew it at once and hold it, with its czxid as the fencing
  token. Otherwise wait for the deletion event (release, or the server's TTL expiry).
* While held: ``renew()`` = ``setData(version=ours)``; ``BadVersion`` or ``NoNode`` means
  someone else changed or deleted the node: the lease is lost (pitfalls 23, 24). A renewal
  whose reply was lost is resolved by reading the node back, never resent blindly.
* ``expires_at``: the send time of the last successful write plus the TTL (the server cannot
  delete the node earlier, pitfall 21); ``valid_until`` is that less 10 % of the TTL, and the
  lease is marked lost there (bodies cancelled, ``LockLost`` at exit) if renewals keep failing.
* Release: a version-checked delete; after a lost reply, or when the version does not match,
  the node is read first and deleted only if it still has our czxid and ``holder_id``.

Limits. A waiter's data watch fires on each renewal, so it reads the node once per ttl/3.
ZooKeeper has no write conditional on the czxid: a renewal delayed in flight past the expiry
could land on a successor's node of the same version. The returned czxid shows it (this
holder: lost, pitfall 24), and the successor's next renewal fails with ``BadVersion`` (lost
too): never two holders, at the price of a spurious loss.

The session's loss policy does not apply: a disconnection, or even a new session, does not
lose the lease. Its keeper (renewals and the loss deadline) is one task per holding in the
client's background task group, started when the lease is granted and cancelled when it is
released, so no task outlives the holding or the client.

What is done on the node (the create, its read-back, the wait, the owned delete) is
``_core/_fixed.py``'s ``FixedNode``, which the non-fair lock shares.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import uuid

import anyio

from aiozklock._acl import ACL
from aiozklock._exceptions import (
    BadVersionError,
    NoNodeError,
    NotLockOwner,
    TTLNotSupported,
    UnimplementedError,
    short_repr,
)
from aiozklock._recipes._core._fixed import Bid, FixedNode
from aiozklock._recipes._core._handle import FIXED_NODE
from aiozklock._recipes._core._holding import Holding
from aiozklock._recipes._core._janitor import Janitor, Spawn
from aiozklock._recipes._core._primitive import Primitive
from aiozklock._recipes._lease_keeper import (
    UNKNOWN_OUTCOME,
    LeaseHolding,
    LeaseMonitor,
    LeaseStatistics,
    keep,
    refresh,
)
from aiozklock._wire._now import uptime
from aiozklock._wire._protocol import Stat, set_data_op
from aiozklock._wire._session import Session
from aiozklock._wire._validation import (
    validate_data,
    validate_flag,
    validate_holder_id,
    validate_identifier,
    validate_recipe_path,
    validate_ttl,
)

log = logging.getLogger(__name__)

LEASE_NODE = "lease"
RENEW_FRACTION = 1 / 3  # renew every ttl/3 (pitfall 21: at most TTL/3)
MARGIN_FRACTION = 0.1  # valid_until = expires_at - 10 % of the TTL
_HOST = socket.gethostname()


class LeaseLock(Primitive):
    """A lock held as a TTL lease, not bound to the holder's session. Create it with
    ``zk.lease_lock(path, ttl)``.

    ``async with lease:`` / ``await lease.acquire(timeout=)`` / ``try_acquire()`` /
    ``release()``, reentrant per task, like ``Lock``. While held, a background renewal runs
    every ttl/3 (``renew=True``; with ``renew=False`` call ``await lease.renew()`` yourself).
    The body is cancelled, and ``LockLost`` raised when it exits, if the node was changed or
    deleted by someone else, or if renewals keep failing until ``valid_until``. A
    disconnection alone, or the loss of the session, does not lose the lease.

    **When to prefer it over ``zk.lock()``:** when the holder must keep the lock across a
    restart or a session loss (pass the same ``holder_id`` to re-attach and keep the same
    fencing token), or when the session-bound lock's loss policy would interrupt long work on
    short ZooKeeper outages. **The risk:** a holder that dies without releasing keeps the lock
    until its TTL runs out, and the server only deletes expired nodes every
    ``znode.container.checkIntervalMs`` (a JVM property, default 60 s), so a stale lease can
    block others for TTL + up to a minute. The server measures the TTL on the leader's wall
    clock: a clock jump there shifts the expiry. Use the fencing token on the protected
    resource. The servers need ``extendedTypesEnabled=true`` (else ``TTLNotSupported`` on
    acquire, before any waiting).

    **A ``holder_id`` names one holder:** whoever presents it re-attaches at once, so two
    live processes (or two objects) given the same ``holder_id`` would both hold the lease
    until the next renewal of one of them fails. Give each live holder its own (the default
    is a random one) and reuse it only to resume after that holder stopped.

    Bad arguments raise ``InvalidArgument`` here, before any request: ``ttl`` must be a
    positive, finite number of seconds within ZooKeeper's 1 ms .. 2^40-1 ms.
    """

    path: str
    """The lock's path."""
    node: str
    """The lease's node (``{path}/lease``)."""
    ttl: float
    """The lease's time to live, in seconds."""
    holder_id: str
    """Who holds the lease: the same ``holder_id`` re-attaches to it."""
    renew_automatically: bool
    """Whether it is renewed in the background while held (``renew=``)."""

    _unguardable = FIXED_NODE  # guard= would not be sound (see FIXED_NODE)

    def __init__(
        self,
        session: Session,
        path: str,
        ttl: float,
        *,
        holder_id: str | None,
        identifier: str | None,
        renew: bool,
        janitor: Janitor,
        spawn: Spawn,
        acl: tuple[ACL, ...],
    ) -> None:
        self.path = validate_recipe_path(path)
        ttl_ms = validate_ttl(ttl)
        self.ttl = float(ttl)
        self.holder_id = uuid.uuid4().hex if holder_id is None else validate_holder_id(holder_id)
        self.identifier = validate_identifier(identifier)
        self.renew_automatically = validate_flag("renew", renew)
        super().__init__(
            session,
            LeaseMonitor(lambda holding: keep(self, holding), spawn),
            f"lease lock {self.path}",
            (self.path,),
            acl,
        )
        self._fixed = FixedNode(
            session, janitor, self.path, LEASE_NODE, acl, self._label, ttl_ms=ttl_ms
        )
        self.node = self._fixed.node
        self._margin = self.ttl * MARGIN_FRACTION
        self._renew_every = self.ttl * RENEW_FRACTION
        self._writing = anyio.Lock()  # one write of ours on the node at a time
        identity = {
            "holder_id": self.holder_id,
            "identifier": self.identifier,
            "host": _HOST,
            "pid": os.getpid(),
            "ttl": self.ttl,
        }
        self._data = validate_data(json.dumps(identity, ensure_ascii=False).encode())
        self._bid = Bid(self._data, self._owned, self._granted, self._reattach)

    # ---------------------------------------------------------------- public API

    async def renew(self) -> None:
        """Renew the lease now: ``valid_until`` moves to about now + ttl (less the margin).

        Retries through disconnections until ``valid_until``. Raises ``NotLockOwner`` if
        this object does not hold the lease, and ``LockLost`` if it is lost (the node was
        changed or deleted by someone else, or it could not be renewed in time).
        """
        await refresh(self, self._current("renew it"))

    @property
    def expires_at(self) -> float:
        """The ``aiozklock.clock()`` instant from which the server may delete our node: the
        send time of our last successful write plus the TTL. Raises ``NotLockOwner`` if not
        held."""
        return self._current("have an expiry").expires_at

    def statistics(self) -> LeaseStatistics:
        """Local state of this object; sends nothing and raises nothing."""
        holding = self._holding
        assert holding is None or isinstance(holding, LeaseHolding)
        return LeaseStatistics(
            path=self.path,
            node=self.node,
            holder_id=self.holder_id,
            ttl=self.ttl,
            locked=holding is not None and not holding.lost,
            owner=None if self._owner is None else self._owner.info(),
            depth=self._depth,
            tasks_waiting=self._local.tasks_waiting,
            fencing_token=holding.token if holding is not None else None,
            version=holding.version if holding is not None else None,
            expires_at=holding.expires_at if holding is not None else None,
            renewals=holding.renewals if holding is not None else 0,
            acquisitions=self._acquisitions,
            losses=self._losses,
            last_wait=self._last_wait,
        )

    def __repr__(self) -> str:
        state = "held" if self._holding is not None else "free"
        return (
            f"<aiozklock.LeaseLock {short_repr(self.path)} {state} ttl={self.ttl} "
            f"holder_id={short_repr(self.holder_id)}>"
        )

    def _current(self, what: str) -> LeaseHolding:
        holding = self._holding
        if holding is None:
            raise NotLockOwner(f"the {self._label} is not held, so it can not {what}")
        assert isinstance(holding, LeaseHolding)
        return holding

    def _valid_until(self, holding: Holding) -> float:
        assert isinstance(holding, LeaseHolding)
        return -math.inf if holding.lost else holding.expires_at - self._margin

    def _owned(self, data: bytes, stat: Stat) -> bool:
        """Whether the node read back is ours: it carries our ``holder_id``."""
        try:
            identity = json.loads(data.decode())
        except ValueError:
            return False
        return isinstance(identity, dict) and identity.get("holder_id") == self.holder_id

    def _granted(self, stat: Stat, generation: int, sent: float) -> LeaseHolding:
        return LeaseHolding(
            nodes=(self.node,),
            generation=generation,
            token=stat.czxid,
            guarded=True,
            version=stat.version,
            expires_at=sent + self.ttl,
        )

    # ---------------------------------------------------------------- acquire

    async def _take(self, deadline: float | None, task_name: str | None) -> Holding:
        try:
            return await self._fixed.take(self._bid, deadline)
        except UnimplementedError:
            raise TTLNotSupported(self.node) from None

    async def _reattach(self, stat: Stat, deadline: float | None) -> LeaseHolding | None:
        """Our ``holder_id`` is on the node (a lost create reply, or a restart with the same
        ``holder_id``): adopt it, renewing at once, since its expiry is unknown until we
        write. None if it changed meanwhile, or the outcome is unknown: create again."""
        sent = uptime()
        op = set_data_op(self._fixed.server_node, self._data, stat.version)
        try:
            renewed = await self._session.call(op, wait_until=deadline)
        except (BadVersionError, NoNodeError, *UNKNOWN_OUTCOME):
            return None
        log.info("%s: re-attached to our lease node (czxid %d)", self._label, renewed.czxid)
        return self._granted(renewed, self._session.generation, sent)

    async def _abandon(self, deadline: float | None) -> None:
        """After a failed or cancelled acquire: delete our node if there may be one
        (shielded, bounded). If that is not possible in time, it is never renewed, and the
        server deletes it after its TTL."""
        if not await self._fixed.abandon():
            log.warning(
                "%s: could not delete our node after a failed acquire; the server deletes "
                "it after its TTL (%s s) and the reaper's interval",
                self._label,
                self.ttl,
            )

    # ---------------------------------------------------------------- release

    async def _give_back(self, holding: Holding) -> None:
        assert isinstance(holding, LeaseHolding)
        with anyio.CancelScope(shield=True):
            async with self._writing:  # a renewal cancelled in flight settles first
                # While the lease is valid the server cannot have deleted our node, so the
                # node with our version is ours. Bounded like every cleanup (an outage must
                # not block the caller for a TTL); what is left goes to the janitor, and
                # failing that, to the TTL.
                valid_until, bound = self._valid_until(holding), self._session.timeout / 2
                if not await self._fixed.release(
                    holding, valid_until=valid_until, bound=bound, owned=self._owned
                ):
                    log.warning(
                        "%s: could not delete our node on release yet: the janitor retries "
                        "while the session lives, else the server deletes it after its TTL "
                        "(%s s) and the reaper's interval",
                        self._label,
                        self.ttl,
                    )
                    self._fixed.delete_later(holding.token)

    def _drop(self, holding: Holding) -> None:
        """Nothing to forget: the holding carries the lease's state."""


__all__ = ("LeaseHolding", "LeaseLock", "LeaseStatistics")
