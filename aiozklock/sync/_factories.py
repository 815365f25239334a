"""The synchronous client's recipe factories: the async client's, with the same arguments
(each one's object is made by calling the async factory), plus ``on_lost``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from aiozklock._acl import ACL, validate_acl
from aiozklock._exceptions import InvalidArgument
from aiozklock._recipes._core._names import Compat, validate_compat
from aiozklock._recipes._multilock import validate_members
from aiozklock._recipes._semaphore import validate_max_leases
from aiozklock._wire._validation import (
    validate_flag,
    validate_holder_id,
    validate_identifier,
    validate_lock_delay,
    validate_recipe_path,
    validate_ttl,
)
from aiozklock.sync._handle import LostCallback, SyncHandle
from aiozklock.sync._recipes import (
    SyncElection,
    SyncLeaseLock,
    SyncLock,
    SyncMultiLock,
    SyncNonFairLock,
    SyncReadLock,
    SyncReadWriteLock,
    SyncSemaphore,
    SyncWriteLock,
)

if TYPE_CHECKING:
    from aiozklock._client import ZooKeeperClient
    from aiozklock.sync._client import SyncClient

S = TypeVar("S", bound=SyncHandle[Any])


def _checked(on_lost: object) -> LostCallback | None:
    if on_lost is not None and not callable(on_lost):
        raise InvalidArgument(f"on_lost must be a callable or None, not {on_lost!r}")
    return on_lost


def _precheck(
    path: object, what: str, identifier: object, acl: object, compat: object = "curator"
) -> None:
    """The arguments every factory shares, checked in the caller's thread before the
    session is opened (nothing sent for a bad one); the async factory then checks them all,
    as the authority."""
    if path is not None:  # None: a multi-lock's members, checked on their own
        validate_recipe_path(path, what=what)
    validate_identifier(identifier)
    if acl is not None:
        validate_acl(acl)
    if compat is not None:
        validate_compat(compat)


class SyncFactories:
    """The recipe factories of ``SyncClient``. Each returns a new synchronous object over
    the async client's one object for the arguments (so reentrancy and this process's
    local queueing hold across call sites, per thread). Arguments are validated at the
    call, in the calling thread, as the async factory validates them (``InvalidArgument``,
    before the session is opened or anything sent; ``UsageError``); then the call opens
    the session if it is not open yet (``ClientClosed`` once closed).

    ``on_lost``: optional, called once with no argument when a holding taken through the
    returned object is lost, from the client's event loop thread: it must not block and
    must not call the client (see ``SyncHandle``).
    """

    def _made(self, cls: type[S], make: Callable[[ZooKeeperClient], Any], on_lost: object) -> S:
        client: SyncClient = self  # type: ignore[assignment]
        return cls(client, make, _checked(on_lost))

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
        on_lost: LostCallback | None = None,
    ) -> SyncLock: ...

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
        on_lost: LostCallback | None = None,
    ) -> SyncNonFairLock: ...

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
        on_lost: LostCallback | None = None,
    ) -> SyncLock | SyncNonFairLock: ...

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
        on_lost: LostCallback | None = None,
    ) -> SyncLock | SyncNonFairLock:
        """A reentrant, loss-aware lock on ``path``: ``with zk.lock(path) as lock:``. Fair
        (``SyncLock``) by default; ``fair=False``: a ``SyncNonFairLock``. The arguments and
        errors are the async ``lock()``'s."""
        _precheck(path, "lock path", identifier, acl, compat)
        delay = validate_lock_delay(lock_delay)
        revoke = validate_flag("revocable", revocable)
        if validate_flag("fair", fair):
            return self._made(
                SyncLock,
                lambda zk: zk.lock(
                    path,
                    identifier=identifier,
                    acl=acl,
                    compat=compat,
                    lock_delay=delay,
                    revocable=revoke,
                ),
                on_lost,
            )
        if revoke:  # what the async factory would refuse, said before the session opens
            raise InvalidArgument("the non-fair lock is not revocable: use the fair lock")
        return self._made(
            SyncNonFairLock,
            lambda zk: zk.lock(
                path, identifier=identifier, fair=False, acl=acl, compat=compat, lock_delay=delay
            ),
            on_lost,
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
        on_lost: LostCallback | None = None,
    ) -> SyncMultiLock:
        """All-or-nothing lock of several paths, deadlock-free; a ``SyncMultiLock``. The
        arguments and errors are the async ``multi_lock()``'s."""
        # Read once: the object is made again from them in a forked child.
        members = paths if isinstance(paths, str) else tuple(paths)
        validate_members(members)
        _precheck(None, "lock path", identifier, acl, compat)
        delay = validate_lock_delay(lock_delay)
        revoke = validate_flag("revocable", revocable)
        return self._made(
            SyncMultiLock,
            lambda zk: zk.multi_lock(
                members,
                identifier=identifier,
                acl=acl,
                compat=compat,
                lock_delay=delay,
                revocable=revoke,
            ),
            on_lost,
        )

    def election(
        self,
        path: str,
        *,
        identifier: str | None = None,
        acl: Sequence[ACL] | None = None,
        compat: Compat = "curator",
        lock_delay: float | None = None,
        on_lost: LostCallback | None = None,
    ) -> SyncElection:
        """A leader election on ``path``: ``with zk.election(path):`` runs the block as
        leader; a ``SyncElection``. ``on_lost``: leadership lost. The arguments and errors
        are the async ``election()``'s."""
        _precheck(path, "election path", identifier, acl, compat)
        delay = validate_lock_delay(lock_delay)
        return self._made(
            SyncElection,
            lambda zk: zk.election(
                path, identifier=identifier, acl=acl, compat=compat, lock_delay=delay
            ),
            on_lost,
        )

    def rw_lock(
        self,
        path: str,
        *,
        identifier: str | None = None,
        acl: Sequence[ACL] | None = None,
        compat: Compat = "curator",
        revocable: bool = False,
        on_lost: LostCallback | None = None,
    ) -> SyncReadWriteLock:
        """A read/write lock on ``path``: its ``read_lock`` and ``write_lock`` (``on_lost``
        applies to both). The arguments and errors are the async ``rw_lock()``'s."""
        _precheck(path, "lock path", identifier, acl, compat)
        revoke = validate_flag("revocable", revocable)

        def both(zk: ZooKeeperClient) -> Any:
            return zk.rw_lock(path, identifier=identifier, acl=acl, compat=compat, revocable=revoke)

        write = self._made(SyncWriteLock, lambda zk: both(zk).write_lock, on_lost)
        read = self._made(SyncReadLock, lambda zk: both(zk).read_lock, on_lost)
        return SyncReadWriteLock(path, identifier, read, write)

    def lease_lock(
        self,
        path: str,
        ttl: float,
        *,
        holder_id: str | None = None,
        identifier: str | None = None,
        renew: bool = True,
        acl: Sequence[ACL] | None = None,
        on_lost: LostCallback | None = None,
    ) -> SyncLeaseLock:
        """A lock held as a TTL lease on ``{path}/lease``, not bound to the session (see the
        async ``lease_lock()``, whose arguments and errors these are); a
        ``SyncLeaseLock``."""
        _precheck(path, "lock path", identifier, acl, None)
        validate_ttl(ttl)
        if holder_id is not None:
            validate_holder_id(holder_id)
        return self._made(
            SyncLeaseLock,
            lambda zk: zk.lease_lock(
                path, ttl, holder_id=holder_id, identifier=identifier, renew=renew, acl=acl
            ),
            on_lost,
        )

    def semaphore(
        self,
        path: str,
        max_leases: int,
        *,
        identifier: str | None = None,
        acl: Sequence[ACL] | None = None,
        compat: Compat | None = None,
        on_lost: LostCallback | None = None,
    ) -> SyncSemaphore:
        """A counting semaphore on ``path``: at most ``max_leases`` holders at once, each
        thread with its own lease; a ``SyncSemaphore``. The arguments and errors are the
        async ``semaphore()``'s."""
        _precheck(path, "semaphore path", identifier, acl, compat)
        validate_max_leases(max_leases)
        return self._made(
            SyncSemaphore,
            lambda zk: zk.semaphore(
                path, max_leases, identifier=identifier, acl=acl, compat=compat
            ),
            on_lost,
        )


__all__ = ("SyncFactories",)
