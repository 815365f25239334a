"""How the client's recipe factories (``_factories.py``) make their objects: from what the
client gives each (``_Given``), shared per arguments by the registry, their ACL checked."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from ssl import SSLContext
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar

from aiozklock._acl import ACL, Credentials
from aiozklock._recipes._core._holding import LossMonitor
from aiozklock._recipes._core._janitor import Janitor, Spawn
from aiozklock._recipes._core._options import RecipeOptions
from aiozklock._recipes._core._registry import Recipes, Registered
from aiozklock._settings import usable_acl
from aiozklock._wire._session import Session


class _Recipe(Registered, Protocol):
    """A recipe class the client's factories make (through ``_FactoryMade._construct``)."""

    @classmethod
    def _construct(cls, *args: Any, **kwargs: Any) -> Self: ...


R = TypeVar("R", bound=_Recipe)


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


class RecipeMaking:
    """How the client's factories make their objects (``RecipeFactories``): shared per
    arguments, given what the client gives. ``ZooKeeperClient`` supplies what they read."""

    default_acl: tuple[ACL, ...]
    _auth: Credentials
    _tls: SSLContext | None
    _janitor: Janitor | None
    _spawn: Spawn | None
    _loss_monitor: LossMonitor | None
    _recipes: Recipes

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

    def _queued(
        self,
        cls: type[R],
        kind: str,
        where: object,
        acl: Sequence[ACL] | None,
        options: RecipeOptions,
    ) -> R:
        """``_made`` for a queue recipe (a lock, a multi-lock, an election) on ``where``
        (its path or paths), keyed by ``where`` and its ``options`` (built by the factory:
        ``_core/_options.py``), which it is given as one value."""
        return self._made(cls, kind, (where, options), acl, where, options=options)

    def _acl(self, acl: Sequence[ACL] | None) -> tuple[ACL, ...]:
        return self.default_acl if acl is None else self._usable_acl(acl, "acl")

    def _usable_acl(self, acl: object, what: str) -> tuple[ACL, ...]:
        """``acl`` validated; an ``"auth"`` entry (the creator's identities) also needs an
        identity: credentials, or a TLS client certificate (the server would refuse every
        create with InvalidACL)."""
        return usable_acl(acl, what, identified=bool(self._auth) or self._tls is not None)


__all__ = ("R", "RecipeMaking")
