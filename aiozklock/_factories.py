"""The client's recipe factories: ``lock``, ``multi_lock``, ``election``, ``rw_lock``,
``lease_lock``, ``semaphore`` (a part of ``ZooKeeperClient``)."""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from typing import Literal, overload

from aiozklock._acl import ACL
from aiozklock._exceptions import InvalidArgument, UsageError
from aiozklock._making import RecipeMaking
from aiozklock._recipes._core._names import Compat, validate_compat
from aiozklock._recipes._core._options import RecipeOptions
from aiozklock._recipes._election import Election
from aiozklock._recipes._lease import LeaseLock
from aiozklock._recipes._lock import Lock
from aiozklock._recipes._multilock import MultiLock
from aiozklock._recipes._nonfair import NonFairLock
from aiozklock._recipes._rwlock import ReadLock, ReadWriteLock, WriteLock
from aiozklock._recipes._semaphore import Semaphore
from aiozklock._recipes._semaphore_compat import CompatSemaphore
from aiozklock._recipes._traits import TRAITS
from aiozklock._wire._validation import validate_flag

# The telemetry kind of each object (its ``aiozklock.recipe`` label), read once from its
# recipe's description entry: a factory passes a constant, looked up at import, not per call.
(_LOCK,) = TRAITS["lock"].kinds
(_NONFAIR,) = TRAITS["nonfair"].kinds
(_MULTI,) = TRAITS["multilock"].kinds
(_ELECTION,) = TRAITS["election"].kinds
_WRITE, _READ = TRAITS["rwlock"].kinds
(_LEASE,) = TRAITS["lease"].kinds
(_SEMAPHORE,) = TRAITS["semaphore"].kinds


class RecipeFactories(RecipeMaking):
    """The recipe factories of ``ZooKeeperClient``, which supplies what they read here."""

    _semaphores: weakref.WeakValueDictionary[str, Semaphore | CompatSemaphore]

    @overload
    def lock(
        self,
        path: str,
        *,
        identifier: str | None = None,
        fair: Literal[True] = True,
        acl: Sequence[ACL] | None = None,
        compat: Compat = "curator",
        lock_delay: float | None = None,
        revocable: bool = False,
    ) -> Lock: ...

    @overload
    def lock(
        self,
        path: str,
        *,
        identifier: str | None = None,
        fair: Literal[False],
        acl: Sequence[ACL] | None = None,
        compat: Compat = "curator",
        lock_delay: None = None,
        revocable: Literal[False] = False,
    ) -> NonFairLock: ...

    @overload
    def lock(
        self,
        path: str,
        *,
        identifier: str | None = None,
        fair: bool,
        acl: Sequence[ACL] | None = None,
        compat: Compat = "curator",
        lock_delay: float | None = None,
        revocable: bool = False,
    ) -> Lock | NonFairLock: ...

    def lock(
        self,
        path: str,
        *,
        identifier: str | None = None,
        fair: bool = True,
        acl: Sequence[ACL] | None = None,
        compat: Compat = "curator",
        lock_delay: float | None = None,
        revocable: bool = False,
    ) -> Lock | NonFairLock:
        """A reentrant, loss-aware lock on ``path`` (validated now, before any traffic).

        ``fair=True`` (the default): a ``Lock``, FIFO across processes. ``fair=False``: a
        ``NonFairLock`` on one fixed node, cheaper when uncontended, a herd when contended.
        The same arguments give the same object: one per path and identifier in this
        client, so that reentrancy holds per task across call sites, and this process's
        tasks queue on it locally with one node on the server at a time (each local holder
        takes a new place at the back of the server's queue: no process starves another).
        A different ``identifier`` is a different contender, as another process would be.
        ``acl``: what its nodes and containers are created with (``default_acl`` if None);
        not part of the identity. ``compat``: whose node names to write, for peers on the
        same path: ``"curator"`` (the default; Curator's ``InterProcessMutex`` orders them)
        or ``"kazoo"`` (kazoo's ``Lock``); either way every library's nodes are read. The
        non-fair lock has no counterpart in either. ``revocable=True``: a revoke request
        (``zk.revoke(path)``, ``aiozklock revoke PATH``, Curator's ``Revoker.attemptRevoke``)
        cancels the holder's body and releases, raising ``LockRevoked``, and makes a waiter
        give up its place; without it, requests are ignored (and cost nothing). Part of the
        identity, as ``compat`` is; the fair lock only.

        ``lock_delay``: seconds (Chubby's lock-delay, for a resource that cannot check a
        fencing token): a grant that follows one of ours whose node vanished without a
        release (session expired, process killed, partition) comes no earlier than
        ``lock_delay`` after it vanished; a release hands over at once. Every aiozklock
        contender on the path honors it, with or without ``lock_delay`` of its own; it
        costs one write per grant, and nothing on paths that never use it (see
        docs/fencing.md). Not with ``fair=False``.

        Raises ``InvalidArgument`` for a bad path, identifier, acl, compat (or a kazoo one
        with ``fair=False``), lock_delay (a positive number of seconds, or None; none with
        ``fair=False``), a non-bool ``fair`` or ``revocable``, or ``revocable=True`` with
        ``fair=False``,
        ``UsageError`` if this client's object for the path has another ``acl``, or when
        called outside the event loop the client was opened in, ``ClientClosed`` if the
        client is not connected.
        """
        options = RecipeOptions.of(identifier, compat, lock_delay, revocable)
        if validate_flag("fair", fair):
            return self._queued(Lock, _LOCK, path, acl, options)
        if options.lock_delay is not None:
            raise InvalidArgument(
                "lock_delay needs the fair lock (fair=True): the non-fair lock has no queue "
                "to tell a release from a vanished holder in"
            )
        if options.revocable:
            raise InvalidArgument("the non-fair lock is not revocable: use the fair lock")
        if options.compat != "curator":
            raise InvalidArgument("the non-fair lock has no kazoo counterpart: compat='curator'")
        return self._made(
            NonFairLock, _NONFAIR, (path, identifier), acl, path, identifier=identifier
        )

    def multi_lock(
        self,
        paths: Iterable[str],
        *,
        identifier: str | None = None,
        acl: Sequence[ACL] | None = None,
        compat: Compat = "curator",
        lock_delay: float | None = None,
        revocable: bool = False,
    ) -> MultiLock:
        """All-or-nothing lock of several paths, deadlock-free; returns a ``MultiLock``.
        ``compat`` and ``lock_delay``: as for ``lock()``, on each path. ``revocable``: as
        for ``lock()``; a request written to its node on any one path ends the whole
        holding.

        Validated now: bad or empty paths, identifier, acl, compat, lock_delay or a
        non-bool ``revocable`` raise ``InvalidArgument`` (duplicates are dropped);
        ``UsageError`` if this client's object for the paths has another ``acl``;
        ``ClientClosed`` if the client is not connected.
        """
        members = paths if isinstance(paths, str) else tuple(paths)
        options = RecipeOptions.of(identifier, compat, lock_delay, revocable)
        return self._queued(MultiLock, _MULTI, members, acl, options)

    def election(
        self,
        path: str,
        *,
        identifier: str | None = None,
        acl: Sequence[ACL] | None = None,
        compat: Compat = "curator",
        lock_delay: float | None = None,
    ) -> Election:
        """A leader election on ``path``; returns an ``Election``: ``async with
        zk.election(path):`` runs its body as leader. ``compat``: whose node names to
        write: ``"curator"`` (Curator's ``LeaderLatch`` orders them) or ``"kazoo"``
        (kazoo's ``Election``). ``lock_delay``: as for ``lock()`` (a leader elected after
        one whose node vanished without resigning takes office no earlier than that).
        Validated now: a bad path, identifier, acl, compat or lock_delay raises
        ``InvalidArgument``; ``UsageError`` if this client's object for the path has
        another ``acl``; ``ClientClosed`` if the client is not connected."""
        options = RecipeOptions.of(identifier, compat, lock_delay)
        return self._queued(Election, _ELECTION, path, acl, options)

    def rw_lock(
        self,
        path: str,
        *,
        identifier: str | None = None,
        acl: Sequence[ACL] | None = None,
        compat: Compat = "curator",
        revocable: bool = False,
    ) -> ReadWriteLock:
        """A read/write lock on ``path``; returns a ``ReadWriteLock`` (its ``read_lock`` and
        ``write_lock`` are this client's objects for the path and identifier, as for
        ``lock()``; this client's tasks hold the read lock together, on one node: see
        ``ReadLock``). ``compat``: whose node names to write: ``"curator"`` (Curator's
        ``InterProcessReadWriteLock``'s) or ``"kazoo"`` (kazoo's ``ReadLock`` and
        ``WriteLock`` read them as their own). ``revocable``: the write lock is revocable, as
        ``lock(revocable=True)`` is (the read lock, shared by this client's tasks on one
        node, is not). Validated now: a bad path, identifier, acl, compat or a non-bool
        ``revocable`` raises ``InvalidArgument``; ``UsageError`` if this client's object for the
        path has another ``acl``; ``ClientClosed`` if the client is not connected."""
        options = RecipeOptions.of(identifier, compat, revocable=revocable)
        key = (path, options)
        write = self._made(WriteLock, _WRITE, key, acl, path, options=options)
        # The read side is built on the write side: its session, loss monitor and ACL.
        read = self._kept(
            ReadLock,
            _READ,
            key,
            write.acl,
            lambda given: ReadLock._construct(write, given.janitor),
        )
        return ReadWriteLock._construct(read, write)

    def lease_lock(
        self,
        path: str,
        ttl: float,
        *,
        holder_id: str | None = None,
        identifier: str | None = None,
        renew: bool = True,
        acl: Sequence[ACL] | None = None,
    ) -> LeaseLock:
        """A lock held as a TTL lease on ``{path}/lease``, not bound to this session: it
        survives disconnections and restarts (re-attach with the same ``holder_id``) and
        expires ``ttl`` seconds after its last renewal (see ``LeaseLock``). Renewed every
        ttl/3 in the background while held if ``renew``. Arguments are validated now
        (``InvalidArgument``; ``UsageError`` if this client's object for them has another
        ``acl``; ``ClientClosed`` if the client is not connected); servers without TTL nodes
        raise ``TTLNotSupported`` on acquire. Returns a ``LeaseLock``.
        """
        # Not ``_made``: a lease is not bound to the session, so its holdings are watched by
        # its own keepers (which renew it in the background), not by the loss policy.
        key = (path, ttl, holder_id, identifier, renew)
        return self._kept(
            LeaseLock,
            _LEASE,
            key,
            acl,
            lambda given: LeaseLock._construct(
                given.session,
                path,
                ttl,
                holder_id=holder_id,
                identifier=identifier,
                renew=renew,
                janitor=given.janitor,
                spawn=given.spawn,
                acl=given.acl,
            ),
        )

    def semaphore(
        self,
        path: str,
        max_leases: int,
        *,
        identifier: str | None = None,
        acl: Sequence[ACL] | None = None,
        compat: Compat | None = None,
    ) -> Semaphore:
        """A counting semaphore on ``path``: at most ``max_leases`` holders at once, across
        every process; returns a ``Semaphore`` (``async with zk.semaphore(p, 5):`` holds a
        lease). Every client of the path must use the same ``max_leases``: it is stored in
        the path's data, and acquiring with another raises ``MaxLeasesMismatch``. One object
        per path, ``max_leases``, identifier and compat in this client (each task holds its
        own lease).

        ``compat``: None (the default) is our FIFO queue of leases, which no other library
        reads. ``"kazoo"`` takes leases with kazoo's ``Semaphore`` algorithm and layout
        (lock ``<path>-__lock__``, leases ``<path>/<32hex>``, the limit in ``<path>``'s
        data) and ``"curator"`` with Curator's ``InterProcessSemaphoreV2`` (mutex
        ``<path>/locks``, leases ``<path>/leases``; Curator stores no limit, so nothing
        checks that the peers agree on it): such peers on the same path then never hold
        more than ``max_leases`` in total with ours. Not FIFO: the lease goes to whoever
        holds the peer's mutex.

        Validated now: a bad path, ``max_leases`` (an int, at least 1), identifier, acl or
        compat raises ``InvalidArgument``; ``UsageError`` if this client's object for them
        has another ``acl``, or if this client already has a semaphore on ``path`` with
        another ``max_leases`` or layout (they would not count each other's leases);
        ``ClientClosed`` if the client is not connected."""
        checked = None if compat is None else validate_compat(compat)
        sem: Semaphore | CompatSemaphore
        key: tuple[object, ...]
        if checked is None:
            key = (path, max_leases, identifier)
            sem = self._made(
                Semaphore, _SEMAPHORE, key, acl, path, max_leases, identifier=identifier
            )
        else:
            key = (path, max_leases, identifier, checked)
            sem = self._made(
                CompatSemaphore,
                _SEMAPHORE,
                key,
                acl,
                path,
                max_leases,
                identifier=identifier,
                compat=checked,
            )
        other = self._semaphores.setdefault(sem.path, sem)
        if (other.compat, other.max_leases) != (checked, sem.max_leases):
            raise UsageError(
                f"this client has a semaphore on {path} with max_leases={other.max_leases}"
                f" and compat={other.compat!r}: another one with "
                f"max_leases={sem.max_leases} and compat={checked!r} would not count its "
                "leases (one layout and one limit per path)"
            )
        return sem
