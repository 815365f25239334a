"""One description per recipe: what the client, telemetry, the demo, the nemesis and the
command line need to know about it, read from its entry in :data:`TRAITS` instead of
branching on its name.

An entry names the recipe as the command line does (``--recipe lock``), the telemetry kinds
of the objects it makes (the client's factories pass them to the registry, which tells the
observer; :data:`RECIPE_KINDS` is every entry's), how a contender's object is made from a
client (a small function over the client's public factory), and the few ways recipes differ
for a harness that races contenders and judges their history: an acquisition over several
paths, holders that share the resource, a TTL lease that outlives its session, a shared
read side. An entry whose nodes the read-only commands (``contenders``, ``holders``) tell
apart says how to read them. This module imports nothing but the core and two recipes' node
names, so the client's factories, the command line (which must not import the test kit) and
the test kit can all read it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Literal, NamedTuple, Protocol, overload

from aiozklock._exceptions import NoNodeError
from aiozklock._recipes._core._contenders import Contender, contender_of
from aiozklock._recipes._core._names import is_lock_node
from aiozklock._recipes._lease import LEASE_NODE
from aiozklock._recipes._nonfair import NODE_NAME
from aiozklock._wire._validation import join

if TYPE_CHECKING:
    from aiozklock._recipes._core._handle import Handle
    from aiozklock._recipes._election import Election
    from aiozklock._recipes._lease import LeaseLock
    from aiozklock._recipes._lock import Lock
    from aiozklock._recipes._multilock import MultiLock
    from aiozklock._recipes._nonfair import NonFairLock
    from aiozklock._recipes._rwlock import ReadWriteLock
    from aiozklock._recipes._semaphore import Semaphore
    from aiozklock._wire._protocol import Stat


class Client(Protocol):
    """What an entry uses of a client (``ZooKeeperClient`` is one): the factories it makes
    contenders with, and a read. Named here, not imported: the client's factories read this
    module (for the kinds), so it must not depend on the client."""

    @overload
    def lock(self, path: str, *, identifier: str | None = None) -> Lock: ...

    @overload
    def lock(
        self, path: str, *, identifier: str | None = None, fair: Literal[False]
    ) -> NonFairLock: ...

    def multi_lock(self, paths: Iterable[str], *, identifier: str | None = None) -> MultiLock: ...

    def election(self, path: str, *, identifier: str | None = None) -> Election: ...

    def lease_lock(
        self,
        path: str,
        ttl: float,
        *,
        holder_id: str | None = None,
        identifier: str | None = None,
    ) -> LeaseLock: ...

    def rw_lock(self, path: str, *, identifier: str | None = None) -> ReadWriteLock: ...

    def semaphore(
        self, path: str, max_leases: int, *, identifier: str | None = None
    ) -> Semaphore: ...

    async def get_data(self, path: str) -> tuple[bytes, Stat]: ...


#: How the read-only commands read a recipe at a path, given the path's children: its
#: contenders, holder first, or None if its nodes are not there.
Reader = Callable[[Client, str, list[str]], Awaitable[list[Contender] | None]]


# Named tuples, not dataclasses: the client's factories import this module (for the kinds),
# and a named tuple is a fraction of a dataclass's import time.


class Setup(NamedTuple):
    """What one contender's object is made with. ``paths``: the path (several for a
    multi-path recipe); ``ttl`` and ``holder_id``: a TTL lease's; ``max_leases``: the limit
    of a recipe whose holders share the resource."""

    paths: tuple[str, ...]
    identifier: str
    ttl: float = 0.0
    holder_id: str | None = None
    max_leases: int = 1

    @property
    def path(self) -> str:
        return self.paths[0]


class Sides(NamedTuple):
    """A contender's object: ``main``, what it takes to hold the resource (a lock; a read/
    write lock's write side), and ``read``, its shared read side if it has one."""

    main: Handle
    read: Handle | None = None


class RecipeTraits(NamedTuple):
    """How one recipe is made and judged (see the module docstring).

    * ``name``: its name on the command line (``demo --recipe``, ``nemesis --recipe``);
    * ``summary``: what it is, in a few words (``--recipe``'s help, after the name);
    * ``kinds``: the telemetry kinds (the ``aiozklock.recipe`` label) of the objects it
      makes, in ``Sides`` order (a read/write lock's write side, then its read side);
    * ``make``: a contender's object from a client (its client factory);
    * ``multi_path``: an acquisition takes several paths at once, in one ``multi``
      transaction (so does its release): the demo locks PATH and PATH-b, the nemesis draws
      2-3 of its shared paths per acquisition and loses ``multi`` replies too;
    * ``shares_resource``: up to ``max_leases`` holders at once share the resource, so the
      history counts holders instead of excluding them, and no fenced store orders them;
    * ``ttl_lease``: its node is a TTL lease, not bound to the session: a session expiry
      takes nothing from its holder, a lease left behind goes when its TTL runs out, and
      the servers must reap expired TTL nodes promptly;
    * ``reads``: it has a shared read side (``Sides.read``): the demo takes it each round
      besides the race on the main side, the nemesis takes either side at random;
    * ``inspect``: how ``contenders`` and ``holders`` find it at a path (a ``Reader``), the
      first entry whose reader answers naming the path's ``kind``; None for a recipe that
      they do not tell apart (an election's or a read/write lock's queue reads as a lock's).
    """

    name: str
    summary: str
    kinds: tuple[str, ...]
    make: Callable[[Client, Setup], Sides]
    multi_path: bool = False
    shares_resource: bool = False
    ttl_lease: bool = False
    reads: bool = False
    inspect: Reader | None = None


def _lock(zk: Client, s: Setup) -> Sides:
    return Sides(zk.lock(s.path, identifier=s.identifier))


def _multi_lock(zk: Client, s: Setup) -> Sides:
    return Sides(zk.multi_lock(s.paths, identifier=s.identifier))


def _election(zk: Client, s: Setup) -> Sides:
    return Sides(zk.election(s.path, identifier=s.identifier))


def _nonfair_lock(zk: Client, s: Setup) -> Sides:
    return Sides(zk.lock(s.path, identifier=s.identifier, fair=False))


def _lease_lock(zk: Client, s: Setup) -> Sides:
    return Sides(zk.lease_lock(s.path, s.ttl, holder_id=s.holder_id, identifier=s.identifier))


def _rw_lock(zk: Client, s: Setup) -> Sides:
    rw = zk.rw_lock(s.path, identifier=s.identifier)
    return Sides(rw.write_lock, rw.read_lock)


def _semaphore(zk: Client, s: Setup) -> Sides:
    return Sides(zk.semaphore(s.path, s.max_leases, identifier=s.identifier))


async def _read_queue(zk: Client, path: str, children: list[str]) -> list[Contender] | None:
    # Any library's contender nodes: an election's, a read/write lock's, kazoo's ... too.
    if not any(is_lock_node(child) for child in children):
        return None
    return await zk.lock(path).contenders()


async def _read_nonfair(zk: Client, path: str, children: list[str]) -> list[Contender] | None:
    if NODE_NAME not in children:
        return None
    holders = await zk.lock(path, fair=False).contenders()
    # A plain node that happens to be called "lock" has no ephemeral owner.
    return [h for h in holders if h.session_id]


async def _read_lease(zk: Client, path: str, children: list[str]) -> list[Contender] | None:
    if LEASE_NODE not in children:
        return None
    try:
        data, stat = await zk.get_data(join(path, LEASE_NODE))
    except NoNodeError:  # released meanwhile
        return []
    if not _is_lease(data):
        return None
    return [contender_of(LEASE_NODE, data, stat, is_holder=True, sequence=0)]


def _is_lease(data: bytes) -> bool:
    # A TTL node shows no owner in its stat: a lease is told by its data, JSON with holder_id.
    try:
        fields = json.loads(data)
    except ValueError:
        return False
    return isinstance(fields, dict) and "holder_id" in fields


#: Every recipe the demo and the nemesis drive, by command-line name, in ``--help`` order.
TRAITS: dict[str, RecipeTraits] = {
    t.name: t
    for t in (
        RecipeTraits(
            "lock",
            "zk.lock(): fair, FIFO across processes",
            ("lock",),
            _lock,
            inspect=_read_queue,
        ),
        RecipeTraits(
            "multilock",
            "zk.multi_lock(): several paths, all or nothing",
            ("multi_lock",),
            _multi_lock,
            multi_path=True,
        ),
        RecipeTraits(
            "election", "zk.election(): the body runs as leader", ("election",), _election
        ),
        RecipeTraits(
            "nonfair",
            "zk.lock(fair=False): one fixed node",
            ("nonfair_lock",),
            _nonfair_lock,
            inspect=_read_nonfair,
        ),
        RecipeTraits(
            "lease",
            "zk.lease_lock(): a TTL lease, not bound to the session",
            ("lease_lock",),
            _lease_lock,
            ttl_lease=True,
            inspect=_read_lease,
        ),
        RecipeTraits(
            "rwlock",
            "zk.rw_lock(): shared readers, one writer",
            ("write_lock", "read_lock"),
            _rw_lock,
            reads=True,
        ),
        RecipeTraits(
            "semaphore",
            "zk.semaphore(): up to max_leases holders at once",
            ("semaphore",),
            _semaphore,
            shares_resource=True,
        ),
    )
}


#: Every telemetry kind (``Observer.recipe``'s ``kind``, the ``aiozklock.recipe`` label).
RECIPE_KINDS: tuple[str, ...] = tuple(kind for traits in TRAITS.values() for kind in traits.kinds)


def traits_of(name: str) -> RecipeTraits:
    """The entry of the recipe called ``name``; ``ValueError`` if there is none."""
    try:
        return TRAITS[name]
    except KeyError:
        raise ValueError(f"unknown recipe {name!r}; known: {', '.join(TRAITS)}") from None


__all__ = ("RECIPE_KINDS", "TRAITS", "RecipeTraits", "Setup", "Sides", "traits_of")
