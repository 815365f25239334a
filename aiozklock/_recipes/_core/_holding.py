"""The holding record of one acquisition, and the loss policy that cancels its holders.

A recipe registers a ``Holding`` when it is granted; the ``LossMonitor`` marks it lost (and
cancels the ``async with`` bodies in its scopes) as soon as the session can no longer be
trusted under the client's loss policy, and leaves the nodes to the janitor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

import anyio

from aiozklock._exceptions import MESSAGE_LIMIT, LockLost, LockRevoked, shorten
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._observe import RecipeObserver
from aiozklock._wire._session import Session, SessionState, StateChange

log = logging.getLogger(__name__)

E = TypeVar("E", bound=BaseException)

LossPolicy = Literal["suspended", "expired"]
LOSS_POLICIES: tuple[LossPolicy, ...] = ("suspended", "expired")


@dataclass(eq=False, slots=True)  # thousands may be held at once
class Holding:
    """One acquisition: our node(s), the session generation they live in, the fencing token
    (czxid), and the cancel scopes of the bodies to cancel if it can no longer be trusted.

    ``listeners``: callbacks told of the loss (``when_lost``), for holders that cannot be
    cancelled (a synchronous body, in another thread). ``guarded``: the node names are not
    unique to us (a fixed node), so a background delete must first check that the node
    still has our czxid. ``observer``: told of the loss (``connect(telemetry=...)``).
    ``revoked``: lost because its holder was asked to let go (a revocable holding,
    ``_revocation.py``): unlike any other loss, the session is sound, so the release still
    deletes our nodes, and raises ``LockRevoked``. ``lost_cause``: the error behind a loss,
    if one says more than ``lost_reason`` (a peer's ``LayoutConflict``: ``_newcomers.py``),
    the ``__cause__`` of the ``LockLost`` a holder gets.
    """

    nodes: tuple[str, ...]
    generation: int
    token: int
    guarded: bool = False
    scopes: list[anyio.CancelScope] | None = None  # made with the first body (acquire(): none)
    lost: bool = False
    lost_reason: str = ""
    observer: RecipeObserver | None = None
    revoked: bool = False
    listeners: list[Callable[[], object]] | None = None
    lost_cause: BaseException | None = None

    def when_lost(self, listener: Callable[[], object]) -> Callable[[], None]:
        """Call ``listener()`` once when the holding is marked lost (now, if it is already):
        synchronously, in the event loop, so it must not block. What it raises is logged.
        Returns a callable that forgets it (a holder that let go of a shared holding)."""
        if self.lost:
            _tell(listener)
        elif self.listeners is None:
            self.listeners = [listener]
        else:
            self.listeners.append(listener)

        def forget() -> None:
            if self.listeners is not None and listener in self.listeners:
                self.listeners.remove(listener)

        return forget

    def mark_lost(self, reason: str, cause: str, error: BaseException | None = None) -> bool:
        """Mark the holding lost and cancel its bodies; True if it was not lost before.

        ``reason`` says what happened, for messages; ``cause`` is one of a few words, for
        metrics (see ``RecipeObserver.lost``); ``error``, if given, is the ``__cause__``
        of the ``LockLost`` its holders get (``lost_error``)."""
        if self.lost:
            return False
        self.lost = True
        self.lost_reason = reason
        self.lost_cause = error
        for scope in self.scopes or ():
            scope.cancel()
        listeners, self.listeners = self.listeners or (), None
        for listener in listeners:
            _tell(listener)
        if self.observer is not None:
            self.observer.lost(cause)
        return True

    @property
    def left_to_janitor(self) -> bool:
        """Lost, and its nodes are the loss policy's (its janitor's): not its holder's to
        delete. A revoked holding's still are: its session is sound (``revoked``)."""
        return self.lost and not self.revoked

    def loss(self, label: str, kind: type[LockLost]) -> LockLost:
        """What a holder of this lost holding gets (``label`` names the recipe object):
        ``LockRevoked`` if it was revoked, else the ``kind`` of ``LockLost``
        (``lost_error``)."""
        if self.revoked:
            return LockRevoked(f"{label} was revoked: {self.lost_reason}")
        return lost_error(self, kind, f"{label} was lost: {self.lost_reason}")

    def mark_revoked(self, reason: str) -> bool:
        """A revoke request reached the holder: a loss with its own cause (``mark_lost``),
        unless it was lost already (then its nodes are the janitor's). True if it was not."""
        if self.lost:
            return False
        self.revoked = True
        return self.mark_lost(reason, "revoked")


def lost_error(holding: Holding, kind: type[E], message: str) -> E:
    """The ``kind`` of ``LockLost`` (``message``) that a holder of the lost ``holding``
    gets, with the holding's ``lost_cause`` as its ``__cause__`` (if it has one)."""
    error = kind(message)
    if holding.lost_cause is not None:
        error.__cause__ = holding.lost_cause
    return error


def _tell(listener: Callable[[], object]) -> None:
    try:
        listener()
    except Exception:  # the loss must reach every holder and the loss policy's cleanup
        log.exception("aiozklock: a lock loss listener %r raised", listener)


class HoldingMonitor(Protocol):
    """What a recipe registers its holdings with, to be told when one is lost: the client's
    ``LossMonitor`` (the loss policy), or a lease's own ``LeaseMonitor`` (its keepers)."""

    def register(self, holding: Holding) -> None: ...

    def unregister(self, holding: Holding) -> None: ...

    async def proven(self, holding: Holding, until: float | None = None) -> bool: ...

    def give_up(self, holding: Holding, reason: str) -> None:
        """Mark ``holding`` lost for ``reason`` (its bodies cancelled, its nodes deleted)."""


class LossMonitor:
    """Decides when a session-bound holding can no longer be trusted, and tells its holder.

    ``"suspended"``: as soon as the session is SUSPENDED (connection lost, or no answer for
    half the session timeout): before the server can expire the session and grant the lock
    to someone else. ``"expired"``: once the session is LOST, or at the latest when its
    proof runs out while suspended (the session's horizon); the holder keeps the lock through
    short disconnections. Either way, a holding never outlives the session's ``valid_until``,
    and the session itself is kept for its waiters.

    The holdings it watches are what the session must prove itself for
    (``Session.demand_proof``): with none, an idle session costs the ensemble nothing.
    """

    def __init__(self, session: Session, mode: LossPolicy, janitor: Janitor) -> None:
        self._session = session
        self._mode = mode
        self._janitor = janitor
        self._holdings: set[Holding] = set()
        session.add_listener(self._on_state)
        session.add_horizon_listener(self._on_horizon)

    def register(self, holding: Holding) -> None:
        """Watch ``holding``; it is marked lost at once if the session is unsafe now."""
        self._holdings.add(holding)
        self._session.demand_proof(len(self._holdings))
        reason = self._unsafe(self._session.state, self._session.generation, holding)
        if reason is None and self._session.beyond_horizon:
            reason = "the session's proof ran out while no server answered"
        if reason:
            self._lose(holding, reason)

    def unregister(self, holding: Holding) -> None:
        """Stop watching ``holding`` (released)."""
        self._holdings.discard(holding)
        self._session.demand_proof(len(self._holdings))

    async def proven(self, holding: Holding, until: float | None = None) -> bool:
        """Wait until the session is proven far enough ahead for ``holding``'s body to start
        (``Session.wait_proven``: at most one probe's round trip after idleness), or
        ``holding`` is lost meanwhile: True; False if ``until`` came first."""
        return await self._session.wait_proven(lambda: holding.lost, until)

    def give_up(self, holding: Holding, reason: str) -> None:
        """Mark ``holding`` lost for ``reason``, as the loss policy would: its bodies are
        cancelled, the janitor deletes its nodes (fail closed where a proof did not come)."""
        self._lose(holding, reason)

    def _unsafe(self, state: SessionState, generation: int, holding: Holding) -> str | None:
        if generation != holding.generation or state in (SessionState.LOST, SessionState.CLOSED):
            return f"session {state.value.lower()}"
        if self._mode == "suspended" and state is not SessionState.CONNECTED:
            return f"session {state.value.lower()} (loss_policy='suspended')"
        return None

    def _on_horizon(self, reason: str) -> None:
        for holding in list(self._holdings):
            self._lose(holding, f"session unproven: {reason}")

    def _on_state(self, change: StateChange) -> None:
        for holding in list(self._holdings):
            reason = self._unsafe(change.state, self._session.generation, holding)
            if reason:
                self._lose(holding, f"{reason}: {change.reason}")

    def _lose(self, holding: Holding, reason: str) -> None:
        # The state that made it unsafe (a newer generation means the session was lost).
        state = self._session.state
        cause = state.value.lower() if state is not SessionState.CONNECTED else "lost"
        if holding.mark_lost(reason, cause):
            closed = self._session.state is SessionState.CLOSED
            # A close is the user's own doing: worth a note, not a warning.
            level = logging.INFO if closed else logging.WARNING
            nodes = shorten(", ".join(holding.nodes), MESSAGE_LIMIT)
            log.log(level, "lock node(s) %s lost: %s", nodes, reason)
            if not closed:
                # If the session comes back, the nodes must not stay behind, held by nobody.
                for node in holding.nodes:
                    czxid = holding.token if holding.guarded else None
                    self._janitor.delete(node, holding.generation, czxid=czxid)


__all__ = (
    "LOSS_POLICIES",
    "Holding",
    "HoldingMonitor",
    "LossMonitor",
    "LossPolicy",
    "lost_error",
)
