"""The seam for metrics and traces: what a client and its recipes report to an observer.

An observer (``aiozklock.otel.Telemetry``, or anything with these methods) is given to
``connect(telemetry=...)``. Recipes call it only through these protocols, so that nothing in
the library imports OpenTelemetry; without one, every hook is a single ``is None`` check.
Hooks run synchronously in the library's tasks: they must be quick and must not raise.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from aiozklock._wire._session import StateChange


class AcquireObserver(Protocol):
    """One acquisition attempt, from its start (``RecipeObserver.acquiring``) to its end."""

    def acquired(self, waited: float, ahead: int | None, token: int) -> None:
        """Granted after ``waited`` seconds; ``ahead``: how many contenders were queued
        before us when we joined the queue (None if the recipe has no queue); ``token``:
        the fencing token."""

    def failed(self, waited: float, error: BaseException) -> None:
        """Not granted: ``error`` is what the attempt raises (``LockTimeout``, a
        cancellation, ...)."""


class RecipeObserver(Protocol):
    """What one recipe object reports (made once per object by ``Observer.recipe``)."""

    def acquiring(self) -> AcquireObserver:
        """An acquisition (not a reentrant one) starts now."""

    def released(self, held: float) -> None:
        """Given back (or forgotten after a loss) after being held ``held`` seconds."""

    def queued_locally(self, delta: int) -> None:
        """``delta`` tasks of this process started (1) or stopped (-1) waiting behind this
        object's own acquisition (its local queue)."""

    def lost(self, cause: str) -> None:
        """The holding was found lost; ``cause`` is one of a few words (``"suspended"``,
        ``"lost"``, ``"closed"`` for the session's state, ``"lease"`` for a lease that could
        not be kept, ``"revoked"`` for a revocable holding asked to let go, ``"layout"`` for
        a peer that cannot order our nodes, come after the grant: ``_newcomers.py``)."""


@runtime_checkable
class Observer(Protocol):
    """What a client reports to: its recipe objects and its session's state changes."""

    def recipe(self, kind: str, paths: tuple[str, ...]) -> RecipeObserver:
        """The observer of a new recipe object: ``kind`` (the ``aiozklock.recipe`` label) is
        one of ``RECIPE_KINDS``, the kinds of the recipes' description entries
        (``_recipes/_traits.py``: ``"lock"``, ``"write_lock"``, ...); ``paths`` what it
        locks."""

    def session_changed(self, change: StateChange) -> None:
        """The session's state changed (called as a ``zk.add_listener`` listener)."""


__all__ = ("AcquireObserver", "Observer", "RecipeObserver")
