"""The client's recipe factories: ``lock``, ``multi_lock``, ``election``, ``rw_lock``,
``lease_lock``, ``semaphore`` (a part of ``ZooKeeperClient``)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from ssl import SSLContext
from typing import TYPE_CHECKING, Any, Literal, Protocol, Self, TypeVar, overload

from aiozklock._acl import ACL, Credentials, validate_acl
from aiozklock._exceptions import InvalidArgument, UsageError
from aiozklock._recipes._core._holding import LossMonitor
from aiozklock._recipes._core._janitor import Janitor, Spawn
from aiozklock._recipes._core._names import Compat, validate_compat
from aiozklock._recipes._core._registry import Recipes, Registered
from aiozklock._recipes._election import Election
from aiozklock._recipes._lease import LeaseLock
from aiozklock._recipes._lock import Lock
from aiozklock._recipes._multilock import MultiLock
from aiozklock._recipes._nonfair import NonFairLock
from aiozklock._recipes._rwlock import ReadLock, ReadWriteLock, WriteLock
from aiozklock._recipes._semaphore import Semaphore
from aiozklock._recipes._semaphore_compat import CompatSemaphore
from aiozklock._recipes._traits import TRAITS
from aiozklock._wire._session import Session
from aiozklock._wire._validation import validate_flag


class _Recipe(Registered, Protocol):
    """A recipe class the client's factories make (through ``_FactoryMade._construct``)."""

    @classmethod
    def _construct(cls, *args: Any, **kwargs: Any) -> Self: ...


R = TypeVar("R", bound=_Recipe)

# The telemetry kind of each object (its ``aiozklock.recipe`` label), read once from its
# recipe's description entry: a factory passes a constant, looked up at import, not per call.
(_LOCK,) = TRAITS["lock"].kinds
(_NONFAIR,) = TRAITS["nonfair"].kinds
(_MULTI,) = TRAITS["multilock"].kinds
(_ELECTION,) = TRAITS["election"].kinds
_WRITE, _READ = TRAITS["rwlock"].kinds
(_LEASE,) = TRAITS["lease"].kinds
(_SEMAPHORE,) = TRAITS["semaphore"].kinds


@dataclass(slots=True)
class _Given:
    """What every recipe object gets from its client: the live session, the loss monitor
    (the loss policy), the janitor, the background task spawner (a lease's keepers), and
    its ACL (validated, or ``default_acl``)."""

    session: Session
    monitor: LossMonitor
    janitor: Janitor
    spawn: Spawn
    acl: tuple[ACL, ...]


class RecipeFactories:
    """The recipe factories of ``ZooKeeperClient``, which supplies what they read here."""

    default_acl: tuple[ACL, ...]
    _auth: Credentials
    _tls: SSLContext | None
    _janitor: Janitor | None
    _spawn: Spawn | None
    _loss_monitor: LossMonitor | None
    _recipes: Recipes
    _semaphores: weakref.WeakValueDictionary[str, Semaphore | CompatSemaphore]

    if TYPE_CHECKING:  # ZooKeeperClient's

        def _live_session(self) -> Session: ...

    # Every factory takes ``acl``: what the recipe's nodes, and the containers it creates for
    # them (the path, and its missing ancestors), are created with; ``default_acl`` if None.

    def _kept(
        self,
        cls: type[R],
        kind: str,
        key: Hashable,
        acl: Sequence[ACL] | None,
        build: Callable[[_Given], R],
    ) -> R:
        """This client's object of recipe ``cls`` for ``key`` (its factory's arguments), or
        if there is none, one built by ``build`` from what the client gives (``_Given``).
        Every factory goes through here: the client must be connected (``ClientClosed``),
        then ``acl`` is validated, then the registry (``_core/_registry.py``) shares, checks
        the ACL of, and observes the object (as ``kind``, its description entry's)."""
        session = self._live_session()
        entries = self._acl(acl)
        monitor, janitor, spawn = self._loss_monitor, self._janitor, self._spawn
        assert monitor is not None
        assert janitor is not None
        assert spawn is not None

        def create() -> R:  # only for a new object: an existing one is found without it
            return build(_Given(session, monitor, janitor, spawn, entries))

        return self._recipes.get(cls, kind, key, create, entries)

    def _made(
        self,
        cls: type[R],
        kind: str,
        key: Hashable,
        acl: Sequence[ACL] | None,
        *args: Any,
        **kwargs: Any,
    ) -> R:
        """``_kept`` for a recipe of the common shape, whose holdings the client's loss
        policy watches: ``cls._construct(session, *args, monitor=, janitor=, acl=,
        **kwargs)``."""

        def build(given: _Given) -> R:
            return cls._construct(
                given.session,
                *args,
                monitor=given.monitor,
                janitor=given.janitor,
                acl=given.acl,
                **kwargs,
            )

        return self._kept(cls, kind, key, acl, build)

    def _acl(self, acl: Sequence[ACL] | None) -> tuple[ACL, ...]:
        return self.default_acl if acl is None else self._usable_acl(acl, "acl")

    def _usable_acl(self, acl: object, what: str) -> tuple[ACL, ...]:
        """``acl`` validated; an ``"auth"`` entry (the creator's identities) also needs an
        identity: credentials, or a TLS client certificate (the server would refuse every
        create with InvalidACL)."""
        entries = validate_acl(acl, what=what)
        if not self._auth and self._tls is None and any(e.scheme == "auth" for e in entries):
            raise InvalidArgument(
                f"{what} grants the creator ('auth' scheme), but this client has no identity: "
                "pass auth=[('digest', 'user:password')] (or ssl= with a client certificate)"
            )
        return entries

    @overload
    def lock(
        self,
        path: str,
        *,
        identifier: str | None = None,
        fair: Literal[True] = True,
        acl: Sequence[ACL] | None = None,
        compat: Compat = "curator",
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

        Raises ``InvalidArgument`` for a bad path, identifier, acl, compat (or a kazoo one
        with ``fair=False``), a non-bool ``fair`` or ``revocable``, or ``revocable=True``
        with ``fair=False``,
        ``UsageError`` if this client's object for the path has another ``acl``, or when
        called outside the event loop the client was opened in, ``ClientClosed`` if the
        client is not connected.
        """
        compat = validate_compat(compat)
        revocable = validate_flag("revocable", revocable)
        if validate_flag("fair", fair):
            key = (path, identifier, compat, revocable)
            given = {"identifier": identifier, "compat": compat, "revocable": revocable}
            return self._made(Lock, _LOCK, key, acl, path, **given)
        if revocable:
            raise InvalidArgument("the non-fair lock is not revocable: use the fair lock")
        if compat != "curator":
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
        revocable: bool = False,
    ) -> MultiLock:
        """All-or-nothing lock of several paths, deadlock-free; returns a ``MultiLock``.
        ``compat``: as for ``lock()``, on each path. ``revocable``: as for ``lock()``; a
        request written to its node on any one path ends the whole holding.

        Validated now: bad or empty paths, identifier, acl, compat or a non-bool
        ``revocable`` raise ``InvalidArgument`` (duplicates are dropped); ``UsageError`` if
        this client's object for the paths has another ``acl``; ``ClientClosed`` if the
        client is not connected.
        """
        members = paths if isinstance(paths, str) else tuple(paths)
        compat = validate_compat(compat)
        revocable = validate_flag("revocable", revocable)
        key = (members, identifier, compat, revocable)
        given = {"identifier": identifier, "compat": compat, "revocable": revocable}
        return self._made(MultiLock, _MULTI, key, acl, members, **given)

    def election(
        self,
        path: str,
        *,
        identifier: str | None = None,
        acl: Sequence[ACL] | None = None,
        compat: Compat = "curator",
    ) -> Election:
        """A leader election on ``path``; returns an ``Election``: ``async with
        zk.election(path):`` runs its body as leader. ``compat``: whose node names to
        write: ``"curator"`` (Curator's ``LeaderLatch`` orders them) or ``"kazoo"``
        (kazoo's ``Election``). Validated now: a bad path, identifier, acl or compat raises
        ``InvalidArgument``; ``UsageError`` if this client's object for the path has
        another ``acl``; ``ClientClosed`` if the client is not connected."""
        compat = validate_compat(compat)
        key = (path, identifier, compat)
        return self._made(Election, _ELECTION, key, acl, path, identifier=identifier, compat=compat)

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
        compat = validate_compat(compat)
        revocable = validate_flag("revocable", revocable)
        key = (path, identifier, compat, revocable)
        given = {"identifier": identifier, "compat": compat, "revocable": revocable}
        write = self._made(WriteLock, _WRITE, key, acl, path, **given)
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
