"""One fixed node that whoever creates it holds, written once for the recipes built on one:
the non-fair lock (``{path}/lock``, an ephemeral node) and the lease (``{path}/lease``, a
node with a TTL, which outlives the session that made it).

The node's name is not ours alone, so nothing done on it is blind:

* a create whose reply was lost is resolved by reading the node back (pitfall 19): it is
  ours only if the recipe's ``owned(data, stat)`` says so (the non-fair lock: our attempt's
  GUID and our current session; the lease: our ``holder_id``). Until then a ``FixedClaim``
  is kept, and ``abandon`` deletes the node it names, if ours, after a failed acquire;
* a node that is someone else's is waited on (a ``Wakeup``: its data watch, or a session
  state change) and created again once deleted; waiters that keep losing that race back off
  (pitfall 18);
* the release deletes it only while it is still ours: a delete whose reply was lost, or
  whose version no longer matches, is retried only after a read shows the same czxid (and
  ``owned``), pitfall 20.

A node with a TTL outlives its session: there a lost session settles nothing (every lost
reply is read back, ``RETRY_ANY_SESSION``), and a node carrying our mark is ours whoever
made it.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import anyio

from aiozklock._acl import ACL
from aiozklock._exceptions import (
    AiozklockError,
    ConnectionLoss,
    InvalidACLError,
    LockTimeout,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    SessionExpired,
)
from aiozklock._recipes._core._holding import Holding
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._retry import RETRY, RETRY_ANY_SESSION, Owned, create_in
from aiozklock._recipes._core._uncertain import FixedClaim, delete_shielded
from aiozklock._recipes._core._uncertain import abandon as abandon_claim
from aiozklock._recipes._core._uncertain import release_nowait as delete_nowait
from aiozklock._recipes._core._waiting import Wakeup
from aiozklock._wire._now import uptime
from aiozklock._wire._protocol import (
    Created,
    CreateMode,
    Op,
    Stat,
    create_op,
    create_ttl_op,
    delete_op,
    encode_acl,
)
from aiozklock._wire._session import Session, SessionState
from aiozklock._wire._validation import join

log = logging.getLogger(__name__)

# Pitfall 18 (herd): after this many lost races in a row, wait a jittered moment before the
# next create, so that a crowd of waiters spreads out instead of colliding on every release.
_BACKOFF_AFTER = 2
_BACKOFF_BASE = 0.002  # seconds, doubled per further loss
_BACKOFF_CAP = 0.05

_Outcome = Literal["taken", "unknown"]


@dataclass(eq=False)
class FixedHolding(Holding):
    """A holding of the fixed node (its czxid is the token): ``version`` is the node's
    version after our last write, what the release's delete sends."""

    version: int = 0


# The holding of our node: from its stat, the session generation and when our write was sent.
Grant = Callable[[Stat, int, float], FixedHolding]
# Our node found by a read-back (its stat, the deadline): its holding, or None to create again.
Adopt = Callable[[Stat, float | None], Awaitable[FixedHolding | None]]


@dataclass(frozen=True, slots=True)
class Bid:
    """One acquisition's attempt at the node, as its recipe makes it: the node's ``data``,
    whether a node read back is ours (``owned``), how to make the holding of the node our
    create made (``grant``; default: a ``FixedHolding``), and of ours found by a read-back
    (``adopt``; default: granted at once)."""

    data: bytes
    owned: Owned
    grant: Grant | None = None
    adopt: Adopt | None = None


class FixedNode:
    """The fixed node ``{path}/{name}``, held by whoever creates it (see the module
    docstring). Ephemeral, or with a TTL of ``ttl_ms``. ``backoff``: back off after lost
    races (pitfall 18). ``claim``: a create of ours whose outcome is unknown, or our node
    not held yet; ``races_lost``: the creates that found the node taken."""

    def __init__(
        self,
        session: Session,
        janitor: Janitor,
        path: str,
        name: str,
        acl: tuple[ACL, ...],
        label: str,
        *,
        ttl_ms: int | None = None,
        backoff: bool = False,
    ) -> None:
        self.path = path
        self.node = join(path, name)
        self.server_node = session.server_path(self.node)
        self.ephemeral = ttl_ms is None
        self.claim: FixedClaim | None = None
        self.races_lost = 0
        self._session = session
        self._janitor = janitor
        self._label = label
        self._acl = encode_acl(acl)
        self._ttl_ms = ttl_ms
        self._backoff = backoff
        # A node outliving its session: a lost session is no answer, so its reply is read back.
        self._retry = RETRY if ttl_ms is None else RETRY_ANY_SESSION

    # ---------------------------------------------------------------- acquire

    async def take(self, bid: Bid, deadline: float | None) -> FixedHolding:
        """Hold the node: create it, or adopt it if it is ours (a create of ours whose reply
        was lost, or a lease's own holder); while someone else holds it, wait for its
        deletion and create it again. Raises ``LockTimeout`` at ``deadline``, the refusal of
        the container's ACL, and the create's other errors (``UnimplementedError`` for a TTL
        the servers do not support); ``abandon()`` then cleans up."""
        losses = 0
        while True:
            sent = uptime()
            created = await self._create(bid, deadline)
            if isinstance(created, tuple):
                return self._grant(bid, *created, sent)
            if created == "taken":
                losses += 1
                self.races_lost += 1
                if self.claim is None and _expired(deadline):
                    raise LockTimeout(f"{self._label} is held by another contender")
            held = await self._wait_free(bid, deadline)
            if held is not None:
                return held
            if self._backoff and losses >= _BACKOFF_AFTER:
                await _back_off(losses, deadline)

    def _grant(self, bid: Bid, stat: Stat, generation: int, sent: float) -> FixedHolding:
        self.claim = None  # held now: released, not abandoned
        if bid.grant is not None:
            return bid.grant(stat, generation, sent)
        return FixedHolding(
            (self.node,), generation, stat.czxid, guarded=True, version=stat.version
        )

    async def _create(self, bid: Bid, deadline: float | None) -> tuple[Stat, int] | _Outcome:
        """One create of the node (with its container parent if that is missing): our node's
        stat and session generation, or what the reply says (``_outcome``)."""
        session = self._session
        while True:
            generation = session.generation
            previous, self.claim = self.claim, FixedClaim(self.node, generation, bid.owned)
            try:
                created = await create_in(
                    session,
                    self._create_op(bid.data),
                    self.path,
                    self._acl,
                    generation=generation if self.ephemeral else None,
                    deadline=deadline,
                )
            except (SessionExpired, TimeoutError, NoAuthError, InvalidACLError) as exc:
                self.claim = previous  # not sent, or a definite answer: nothing was made
                if isinstance(exc, SessionExpired):
                    continue  # the session changed before we could send: use the new one
                raise
            if isinstance(created, Created):
                return created.stat, generation
            outcome = self._outcome(created, previous)
            if outcome is not None:
                return outcome

    def _create_op(self, data: bytes) -> Op[Created]:
        strip, acl = self._session.client_path, self._acl
        if self._ttl_ms is None:
            return create_op(self.server_node, data, CreateMode.EPHEMERAL, strip, acl=acl)
        return create_ttl_op(self.server_node, data, self._ttl_ms, strip, acl=acl)

    def _outcome(self, created: object, previous: FixedClaim | None) -> _Outcome | None:
        """What a create's reply other than ``Created`` says: ``"unknown"`` (resolved by
        reading the node back, pitfall 19), ``"taken"``, or None (create again); raises the
        server's other errors."""
        if isinstance(created, ConnectionLoss):
            return "unknown"
        if isinstance(created, SessionExpired) and not self.ephemeral:
            return "unknown"  # a node with a TTL outlives the session it was sent in
        if isinstance(created, NodeExistsError) and not self.ephemeral:
            return "taken"  # and it may be ours (our mark), whoever made it: the claim stays
        self.claim = previous  # a definite answer: this create made nothing
        if isinstance(created, NodeExistsError):
            return "taken"
        if isinstance(created, SessionExpired):
            return None  # gone with its session, if it was made
        assert isinstance(created, BaseException)
        raise created

    async def _wait_free(self, bid: Bid, deadline: float | None) -> FixedHolding | None:
        """Read the node with a watch: ours → its holding (None: create again); gone → None
        at once; someone else's (or ours from an old session) → wait for its deletion, then
        None. Woken by anything else, an ephemeral node is created again at once (a session
        state change may have freed it); a TTL node is read again (its holder's renewals
        change its data)."""
        session, message = self._session, f"{self._label} not acquired in time (held by another)"
        while True:
            with Wakeup(session) as wakeup:
                found = await wakeup.get_data(
                    self.server_node, deadline=deadline, retry=self._retry
                )
                generation = session.generation
                if found is not None and bid.owned(*found):
                    return await self._adopt(bid, found[1], generation, deadline)
                self.claim = None  # nothing there, someone else's, or ours from an old session
                if found is None:
                    return None
                await wakeup.wait(deadline, message)
                if wakeup.deleted or self.ephemeral:
                    return None

    async def _adopt(
        self, bid: Bid, stat: Stat, generation: int, deadline: float | None
    ) -> FixedHolding | None:
        if bid.adopt is None:
            log.info("%s: adopted our node after a lost create reply", self._label)
            return self._grant(bid, stat, generation, uptime())
        self.claim = FixedClaim(self.node, generation, bid.owned)  # ours: never left behind
        held = await bid.adopt(stat, deadline)
        if held is not None:
            self.claim = None
        return held

    async def abandon(self) -> bool:
        """After a failed or cancelled acquire: delete the node a create of ours may have
        made (``claim``), if it is there and ours. Shielded, bounded by half the session
        timeout. An ephemeral node's delete is finished by the janitor if needed
        (``_uncertain.abandon``); a TTL node outlives the session that the janitor's jobs end with:
        False if it could not be deleted in time (its TTL ends it). Raises nothing."""
        claim, self.claim = self.claim, None
        if claim is None:
            return True
        if self.ephemeral:
            await abandon_claim(self._session, self._janitor, claim)
            return True
        bound = self._session.timeout / 2
        return await delete_shielded(
            self._session, self.node, None, bound=bound, owned=claim.owned, retry=self._retry
        )

    # ---------------------------------------------------------------- release

    async def release(
        self,
        holding: FixedHolding,
        *,
        valid_until: float = math.inf,
        bound: float | None = None,
        owned: Owned | None = None,
    ) -> bool:
        """Delete our node, shielded: with our version at once (1 round trip) while a node
        with that version can only be ours, else (and after a lost reply or a changed
        version) only once a read shows it is still ours (its czxid, and ``owned``). An
        ephemeral node's version is trusted while its session lives (the delete is sent in
        it); a TTL node's only until ``valid_until``.

        True once the node is gone or not ours; False if that was not done within ``bound``
        seconds (or, with ``bound``, refused): the caller's fallback. Without ``bound``, the
        server's errors other than a lost session are raised."""
        session, czxid = self._session, holding.token
        if self.ephemeral:
            return await delete_shielded(
                session,
                self.node,
                holding.generation,
                bound=bound,
                czxid=czxid,
                version=holding.version,
            )
        until = uptime() + (math.inf if bound is None else bound)
        if await self._delete_valid(holding.version, min(valid_until, until)):
            return True
        rest = None if bound is None else until - uptime()
        return await delete_shielded(
            session, self.node, None, bound=rest, czxid=czxid, owned=owned, retry=self._retry
        )

    async def _delete_valid(self, version: int, until: float) -> bool:
        """The 1-round-trip delete of a TTL node, while its version is trusted (``until``).
        False: check by reading first (a write of ours whose reply we did not see, a lost
        reply, or no longer trusted)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(until - uptime()):
            try:
                await self._session.call(delete_op(self.server_node, version), wait_until=until)
                return True
            except NoNodeError:
                return True  # deleted by someone else: nothing of ours is left
            except (AiozklockError, TimeoutError):
                return False
        return False

    def delete_later(self, czxid: int) -> None:
        """Have the janitor delete our node once possible, if it still has ``czxid`` (a
        release not finished in time, a lease given up), unless the client is closed."""
        if self._session.state is not SessionState.CLOSED:
            self._janitor.delete(self.node, self._session.generation, czxid=czxid)

    def release_nowait(self, holding: FixedHolding) -> None:
        """Have our ephemeral node deleted without waiting for the reply
        (``_uncertain.release_nowait``: what fails is the janitor's, which checks its czxid
        first)."""
        delete_nowait(
            self._session,
            self._janitor,
            self.node,
            holding.generation,
            version=holding.version,
            czxid=holding.token,
        )


def _expired(deadline: float | None) -> bool:
    return deadline is not None and uptime() >= deadline


async def _back_off(losses: int, deadline: float | None) -> None:
    bound = min(_BACKOFF_CAP, _BACKOFF_BASE * 2 ** (losses - _BACKOFF_AFTER))
    delay = random.uniform(0, bound)
    if deadline is not None:
        delay = min(delay, max(0.0, deadline - uptime()))
    await anyio.sleep(delay)


__all__ = ("Adopt", "Bid", "FixedHolding", "FixedNode", "Grant")
