"""A queue recipe's options as one value: what, besides its path(s), makes a contender.

``RecipeOptions`` is built once, by the client's factory (``_factories.py``), which checks
``compat``, ``lock_delay`` and ``revocable`` in that order, before any traffic. It is the
key of the client's registry of recipe objects (with the path(s) and the recipe's class:
the same options give the same object), and the one value passed down: the recipe reads
its identity from it, the queue engine its lock-delay, the holding its revocation policy.

``identifier`` is checked later, by the recipe, right after its path: a bad path is told
before a bad identifier, and a closed client (``ClientClosed``) and a bad ``acl`` before
either (the order the factories have always checked in). ``acl`` is not part of a
contender's identity: the registry checks it against the object it finds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from aiozklock._recipes._core._names import Compat, validate_compat
from aiozklock._wire._validation import validate_flag, validate_lock_delay


@dataclass(frozen=True, slots=True)
class RecipeOptions:
    """A queue recipe's identity besides its path(s) (see the module docstring).

    ``identifier``: the contender's name in its nodes' data (as given until the recipe
    checks it, then checked: ``checked``); ``compat``: whose node names it writes;
    ``lock_delay``: seconds a grant waits after a holder of ours vanished without a release
    (None: none asked, a record found is honored anyway); ``revocable``: a revoke request
    ends its holding (or its wait)."""

    identifier: str | None = None
    compat: Compat = "curator"
    lock_delay: float | None = None
    revocable: bool = False

    @classmethod
    def of(
        cls,
        identifier: str | None = None,
        compat: object = "curator",
        lock_delay: object = None,
        revocable: object = False,
    ) -> RecipeOptions:
        """The options of a factory's arguments: ``compat``, ``lock_delay`` and
        ``revocable`` checked, in that order (``InvalidArgument``)."""
        checked = validate_compat(compat)
        delay = validate_lock_delay(lock_delay)
        return cls(identifier, checked, delay, validate_flag("revocable", revocable))

    def checked(self, identifier: str | None) -> RecipeOptions:
        """These options with the identifier the recipe checked (or chose: an election's
        default)."""
        if identifier is self.identifier:
            return self
        return dataclasses.replace(self, identifier=identifier)


__all__ = ("RecipeOptions",)
