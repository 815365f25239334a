"""A create whose outcome is unknown, and the deletes that must happen even under
cancellation, written once for the recipes that do not queue (``_queue.py`` does its own).

* A ``Claim`` says where a create of ours may have left a node and how to tell it is ours:
  a fixed name whose data carries our attempt's GUID and whose ephemeral owner is our
  session (``FixedClaim``, with ``owned_by``), or a name that carries our GUID
  (``NamedClaim``). A recipe keeps one while the outcome is unknown, and hands it to
  ``abandon`` if the acquire fails: never a node of ours left behind, never another's
  deleted.
* ``delete_shielded``: the release's delete (shielded, optionally bounded); ``release_nowait``
  writes it without waiting; what fails goes to the janitor.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

import anyio

from aiozklock._exceptions import AiozklockError, ClientClosed, SessionExpired
from aiozklock._recipes._core._janitor import Janitor
from aiozklock._recipes._core._retry import (
    GONE_ALREADY,
    RETRY,
    Owned,
    Retry,
    carrying,
    delete_node,
)
from aiozklock._wire._protocol import Stat, delete_op, exists_op
from aiozklock._wire._session import Session, SessionState


def guid_in(data: bytes) -> str | None:
    """The attempt GUID a node's data carries (``Identity.data(guid=)``), or None."""
    try:
        identity = json.loads(data.decode())
    except ValueError:
        return None
    guid = identity.get("guid") if isinstance(identity, dict) else None
    return guid if isinstance(guid, str) else None


def owned_by(session: Session, guid: str) -> Owned:
    """Whether a node read back carries ``guid`` and belongs to our session now (a node of
    ours from an old session dies with it: it is waited on like anyone's)."""

    def owned(data: bytes, stat: Stat) -> bool:
        return stat.ephemeral_owner == session.session_id and guid_in(data) == guid

    return owned


class Claim(Protocol):
    """A node a create of ours may have made in session ``generation``."""

    @property
    def generation(self) -> int: ...

    async def delete(self, session: Session) -> None:
        """Delete it if it exists and is ours (raises as ``delete_node``)."""

    def give_to(self, janitor: Janitor) -> None:
        """Have the janitor delete it once possible."""


@dataclass(frozen=True, slots=True)
class FixedClaim:
    """The fixed-name node ``path``: ours if ``owned(data, stat)``."""

    path: str
    generation: int
    owned: Owned

    async def delete(self, session: Session) -> None:
        await delete_node(session, self.path, self.generation, owned=self.owned)

    def give_to(self, janitor: Janitor) -> None:
        janitor.delete_if_owned(self.path, self.generation, self.owned)


@dataclass(frozen=True, slots=True)
class NamedClaim:
    """A child of ``parent`` whose name carries ``guid``; ``node`` once known."""

    parent: str
    guid: str
    generation: int
    node: str | None = None

    async def delete(self, session: Session) -> None:
        nodes = [self.node] if self.node is not None else []
        for node in nodes or await carrying(session, self.parent, self.guid, self.generation):
            await delete_node(session, node, self.generation)

    def give_to(self, janitor: Janitor) -> None:
        if self.node is None:
            janitor.delete_guid(self.parent, self.guid, self.generation)
        else:
            janitor.delete(self.node, self.generation)


async def abandon(session: Session, janitor: Janitor, claim: Claim | None) -> None:
    """After a failed or cancelled acquire: make sure the node ``claim`` names, if it exists,
    does not stay. Shielded, and bounded by half the session timeout; the janitor finishes
    what cannot be done at once (at once if disconnected). Raises nothing."""
    if claim is None or session.generation != claim.generation:
        return  # nothing of ours, or only in a session that is gone (with its nodes)
    if session.state is SessionState.CLOSED:
        return
    with anyio.CancelScope(shield=True):
        if session.state is SessionState.CONNECTED:
            with anyio.move_on_after(session.timeout / 2):
                try:
                    await claim.delete(session)
                    return
                except (SessionExpired, ClientClosed):
                    return
                except AiozklockError:
                    pass  # a connection loss, most likely: the janitor retries
    claim.give_to(janitor)


async def delete_shielded(
    session: Session,
    node: str,
    generation: int | None,
    *,
    bound: float | None = None,
    czxid: int | None = None,
    version: int | None = None,
    owned: Owned | None = None,
    retry: Retry = RETRY,
) -> bool:
    """Delete our ``node`` as ``delete_node`` does, shielded from cancellation and, with
    ``bound``, given up after that many seconds. True once it is gone, or is not ours, or
    its (ephemeral) session is; False if it could not be deleted by then, or (with
    ``bound``) the server refused: the caller's fallback. Without ``bound``, the server's
    errors other than a lost session are raised."""
    with anyio.CancelScope(shield=True):
        with anyio.move_on_after(bound if bound is not None else float("inf")):
            try:
                await delete_node(
                    session,
                    node,
                    generation,
                    czxid=czxid,
                    version=version,
                    owned=owned,
                    retry=retry,
                )
                return True
            except (SessionExpired, ClientClosed):
                return generation is not None  # an ephemeral node goes with its session
            except (AiozklockError, TimeoutError):
                if bound is None:
                    raise
                return False
    return False


def release_nowait(
    session: Session,
    janitor: Janitor,
    node: str,
    generation: int,
    *,
    version: int = -1,
    czxid: int | None = None,
) -> None:
    """Have our ephemeral ``node`` deleted (with ``version``) before the event loop next
    waits, and return without the reply. Every later request of this session is ordered
    after it. A delete that fails, or that cannot be written now, is the janitor's (which
    checks ``czxid`` first, if given: a fixed name another holder may reuse)."""

    def done(result: object, error: AiozklockError | None) -> None:
        if error is not None and not isinstance(error, GONE_ALREADY):
            janitor.delete(node, generation, czxid=czxid)  # the outcome is unknown

    op = delete_op(session.server_path(node), version)
    try:
        if not session.send((op,), generation=generation, on_done=done):
            janitor.delete(node, generation, czxid=czxid)  # once reconnected
    except SessionExpired:
        pass  # our session is gone, and the server deletes its node with it


async def find_ours(
    session: Session, parent: str, guid: str, generation: int
) -> tuple[str, Stat] | None:
    """After a lost create reply: our node under ``parent`` (its name carries ``guid``, its
    ephemeral owner is our session) and its stat, or None if the create made nothing.
    Raises ``SessionExpired`` if ``generation`` is gone (and the node with it)."""
    for node in await carrying(session, parent, guid, generation):
        op = exists_op(session.server_path(node))
        stat = await RETRY.call(session, op, generation=generation)
        if stat is not None and stat.ephemeral_owner == session.session_id:
            return node, stat
    return None


__all__ = (
    "Claim",
    "FixedClaim",
    "NamedClaim",
    "abandon",
    "delete_shielded",
    "find_ours",
    "guid_in",
    "owned_by",
    "release_nowait",
)
