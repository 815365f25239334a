"""A holding that is one ephemeral node of ours whose name carries our GUID, for a recipe that
creates its node itself rather than queueing (the compat semaphore's lease, taken the peer's
way).

``UniqueNodePrimitive`` creates the node (with its container parent if that is missing:
``create_in``), optionally in one transaction with a check that another node of ours still
exists (``ConditionFailed`` if it does not). A create whose reply was lost is resolved by the
GUID (``find_ours``: only a node our current session owns), never sent again blindly. The node
is *claimed* (a ``NamedClaim``) from its create until it is held, so that an acquire that fails
or is cancelled meanwhile deletes it (``_abandon``); it is given back by a plain delete, which
may be retried blindly: the name is ours alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiozklock._acl import ACL
from aiozklock._exceptions import ConnectionLoss, NodeExistsError, SessionExpired
from aiozklock._recipes._core._holding import Holding, HoldingMonitor
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._primitive import Primitive
from aiozklock._recipes._core._retry import create_in
from aiozklock._recipes._core._uncertain import (
    NamedClaim,
    abandon,
    delete_shielded,
    find_ours,
    release_nowait,
)
from aiozklock._wire._protocol import (
    Created,
    CreateMode,
    MultiCheck,
    MultiCreate,
    MultiResult,
    Op,
    create_op,
    encode_acl,
    multi_op,
)
from aiozklock._wire._session import Session
from aiozklock._wire._validation import join

_Made = tuple[str, int]  # a node of ours and its czxid


class ConditionFailed(Exception):
    """The node a create was conditional on is gone (or not ours now): nothing was created."""


class UniqueNodePrimitive(Primitive):
    """A ``Primitive`` whose holding is one uniquely named ephemeral node (see the module
    docstring). A subclass's ``_take`` creates it with ``_create_unique`` and holds it with
    ``_hold``; the release, the cleanup and ``_node_names`` are written here."""

    def __init__(
        self,
        session: Session,
        monitor: HoldingMonitor,
        janitor: Janitor,
        label: str,
        paths: Sequence[str],
        acl: tuple[ACL, ...],
    ) -> None:
        super().__init__(session, monitor, label, paths, acl)
        self._janitor = janitor
        self._acl = encode_acl(acl)
        # A node of ours that may exist and is not held yet (its node None while the create's
        # outcome is unknown), and its czxid once known.
        self._claim: NamedClaim | None = None
        self._claim_czxid = 0
        self._held: str | None = None  # our node while held

    def _node_names(self) -> tuple[str, ...]:
        """The names of our node, held or claimed."""
        claimed = self._claim.node if self._claim else None
        return tuple(n.rsplit("/", 1)[-1] for n in (self._held, claimed) if n)

    def _claimed(self, generation: int) -> str | None:
        """Our node not held yet, if it was created in ``generation``."""
        claim = self._claim
        return claim.node if claim is not None and claim.generation == generation else None

    # ---------------------------------------------------------------- create and hold

    async def _create_unique(
        self,
        parent: str,
        guid: str,
        name: str,
        data: bytes,
        mode: CreateMode,
        generation: int,
        *,
        while_exists: str | None = None,
    ) -> str | None:
        """Create our node ``parent/name`` (``name`` carries ``guid``; ZooKeeper appends a
        sequence if ``mode`` says so) in session ``generation``; with ``while_exists`` (a
        client path), in one transaction with a check that that node still exists. Returns
        the node, claimed (``_hold`` holds it), or None if the create made nothing (or its
        session is gone, and the node with it). Raises ``ConditionFailed`` if the check
        failed, the create's other errors, and what ``create_in`` raises."""
        op = self._create_op(join(parent, name), data, mode, while_exists)
        self._claim = claim = NamedClaim(parent, guid, generation)
        try:
            created = await create_in(self._session, op, parent, self._acl, generation=generation)
        except SessionExpired:
            created = None  # not sent (the session changed)
        made = await self._made(created, claim)
        if not isinstance(made, tuple):
            self._claim = None  # a definite answer: nothing of ours was made
            if made is not None:
                raise made
            return None
        node, self._claim_czxid = made
        self._claim = NamedClaim(parent, guid, generation, node)
        return node

    def _create_op(
        self, node: str, data: bytes, mode: CreateMode, while_exists: str | None
    ) -> Op[Any]:
        session = self._session
        server_node, strip = session.server_path(node), session.client_path
        if while_exists is None:
            return create_op(server_node, data, mode, strip, acl=self._acl)
        check = MultiCheck(session.server_path(while_exists), -1)
        return multi_op([check, MultiCreate(server_node, data, mode, self._acl)], strip)

    async def _made(self, created: object, claim: NamedClaim) -> _Made | Exception | None:
        """What the create's reply says it made: our node and its czxid, None if nothing,
        or the error to raise. A lost reply (or NodeExists, our name being unique) is
        resolved by looking for the GUID among the parent's children."""
        if isinstance(created, Created):
            return created.path, created.stat.czxid
        if isinstance(created, MultiResult):
            if created.ok:  # the transaction's zxid is the czxid of the node it created
                return str(created.results[1]), created.zxid
            index, failure = created.failure or (1, created)
            if index == 0:
                return ConditionFailed()
            created = failure
        if isinstance(created, ConnectionLoss | NodeExistsError):
            session = self._session
            try:
                found = await find_ours(session, claim.parent, claim.guid, claim.generation)
            except SessionExpired:
                return None  # gone with its session
            return None if found is None else (found[0], found[1].czxid)
        if created is None or isinstance(created, SessionExpired):
            return None
        assert isinstance(created, Exception)
        return created

    def _hold(self) -> Holding:
        """Hold our claimed node."""
        claim, self._claim = self._claim, None
        assert claim is not None
        assert claim.node is not None
        self._held = claim.node
        return Holding((claim.node,), claim.generation, self._claim_czxid)

    # ---------------------------------------------------------------- release and cleanup

    async def _give_back(self, holding: Holding) -> None:
        await delete_shielded(self._session, holding.nodes[0], holding.generation)

    def _give_back_nowait(self, holding: Holding) -> bool:
        node = holding.nodes[0]  # a unique name: the janitor's retry is safe
        release_nowait(self._session, self._janitor, node, holding.generation)
        return True

    def _drop(self, holding: Holding) -> None:
        self._held = None

    async def _abandon(self, deadline: float | None) -> None:
        """After a failed or cancelled acquire: delete our node created (or maybe created)
        and not held. Shielded and bounded; the janitor finishes what cannot be done now."""
        claim, self._claim = self._claim, None
        await abandon(self._session, self._janitor, claim)


__all__ = ("ConditionFailed", "UniqueNodePrimitive")
