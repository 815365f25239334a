"""How the synchronous factories make their objects. The factories themselves
(``_factories.py``) are generated from the async ones by ``.ci/gen_sync.py``: the same
parameters plus ``on_lost``, each one's arguments checked here (``precheck``) in the caller's
thread, then its object made over the async factory's call (``SyncMaking``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from aiozklock._acl import validate_acl
from aiozklock._exceptions import InvalidArgument
from aiozklock._recipes._core._names import validate_compat
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
from aiozklock.sync._handle import LostCallback, Owner, SyncHandle
from aiozklock.sync._recipes import SyncReadLock, SyncReadWriteLock, SyncWriteLock

if TYPE_CHECKING:
    from aiozklock._client import ZooKeeperClient
    from aiozklock._recipes._rwlock import ReadWriteLock

S = TypeVar("S", bound=SyncHandle[Any])

# What a path is called in the messages of each factory's checks (the recipe's own words).
_WHAT = {"election": "election path", "semaphore": "semaphore path"}


def _optional(check: Callable[[Any], object]) -> Callable[[str, Any], object]:
    return lambda name, value: None if value is None else check(value)


def _flag(name: str, value: object) -> object:
    return validate_flag(name, value)


def _of_value(check: Callable[[Any], object]) -> Callable[[str, Any], object]:
    return lambda name, value: check(value)


# Each factory parameter's check, by name, as the async factory (or the object it makes)
# checks it. A parameter missing here fails every call of its factory (``KeyError``), so a
# new one cannot go unchecked unnoticed: the parity tests call each factory.
_CHECKS: dict[str, Callable[[str, Any], object]] = {
    "paths": _of_value(validate_members),
    "identifier": _of_value(validate_identifier),
    "fair": _flag,
    "acl": _optional(validate_acl),
    "compat": _optional(validate_compat),
    "lock_delay": _of_value(validate_lock_delay),
    "revocable": _flag,
    "ttl": _of_value(validate_ttl),
    "holder_id": _optional(validate_holder_id),
    "max_leases": _of_value(validate_max_leases),
    "renew": _flag,
}


def precheck(factory: str, **arguments: object) -> None:
    """Check a sync factory's arguments in the caller's thread, before the session is opened
    (nothing is sent for a bad one), with the async factory's errors (``InvalidArgument``);
    the async factory then checks them all again, as the authority. The one place the sync
    face validates."""
    for name, value in arguments.items():
        if name == "path":
            validate_recipe_path(value, what=_WHAT.get(factory, "lock path"))
            continue
        _CHECKS[name](name, value)
    if arguments.get("fair") is False:
        _nonfair(arguments)


def _nonfair(arguments: dict[str, object]) -> None:
    """What the async ``lock()`` refuses with ``fair=False``, in its order and words, said
    before the session opens (``test_sync_parity`` compares the messages)."""
    if arguments.get("lock_delay") is not None:
        raise InvalidArgument(
            "lock_delay needs the fair lock (fair=True): the non-fair lock has no queue "
            "to tell a release from a vanished holder in"
        )
    if arguments.get("revocable"):
        raise InvalidArgument("the non-fair lock is not revocable: use the fair lock")
    if arguments.get("compat", "curator") != "curator":
        raise InvalidArgument("the non-fair lock has no kazoo counterpart: compat='curator'")


def _checked(on_lost: object) -> LostCallback | None:
    if on_lost is not None and not callable(on_lost):
        raise InvalidArgument(f"on_lost must be a callable or None, not {on_lost!r}")
    return on_lost


class SyncMaking(Owner):
    """What the generated ``SyncFactories`` build on: a sync object over an async one. The
    client (``SyncClient``) is made of the factories, and supplies what an object needs of
    it (``Owner``)."""

    def _made(self, cls: type[S], make: Callable[[ZooKeeperClient], Any], on_lost: object) -> S:
        """A new ``cls`` over the async object ``make`` returns (made now, in the loop
        thread, and again in a forked child), telling ``on_lost`` of a loss."""
        return cls(self, make, _checked(on_lost))

    def _pair(
        self,
        path: str,
        identifier: str | None,
        make: Callable[[ZooKeeperClient], ReadWriteLock],
        on_lost: object,
    ) -> SyncReadWriteLock:
        """A read/write lock's two sides over the async ones (``on_lost`` for both)."""
        write = self._made(SyncWriteLock, lambda zk: make(zk).write_lock, on_lost)
        read = self._made(SyncReadLock, lambda zk: make(zk).read_lock, on_lost)
        return SyncReadWriteLock(path, identifier, read, write)


__all__ = ("SyncMaking", "precheck")
