"""Giving our place back: the release's deletes, the grant's mark, and the deletes of the
cleanup after a failed or cancelled acquire (functions of the ``Place``: the queue engine,
``_queue.py``, passes them what its other parts know, as values).

Nothing of ours is left behind: cleanup is shielded and bounded, and what cannot be done at
once goes to the janitor (in the nodes' session, which it never outlives). A release's
deletes are written at the call, their replies not awaited; once an acquire's deadline has
passed, nothing more is waited for either: the deletes are written as a release's.
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio

from aiozklock._exceptions import (
    AiozklockError,
    ClientClosed,
    ConnectionLoss,
    NoNodeError,
    SessionExpired,
)
from aiozklock._recipes._core._names import nodes_of
from aiozklock._recipes._core._place import Alone, Names, Place
from aiozklock._recipes._core._retry import GONE_ALREADY, delete_node
from aiozklock._wire._now import uptime
from aiozklock._wire._protocol import (
    MultiDelete,
    MultiResult,
    Op,
    delete_op,
    multi_op,
    set_data_op,
)
from aiozklock._wire._session import Session, SessionState
from aiozklock._wire._validation import join


def mark(place: Place, data: bytes) -> None:
    """Granted with a successor that may wait for our grant: change our node's data (to
    ``data``, the bytes it was created with), which fires the successor's watch. Written
    with the next request, no reply awaited; if it cannot be written now or its outcome is
    unknown, the janitor writes it once reconnected (until then the successor waits for our
    node's deletion or the mark). NoNode or a lost session: the deletion wakes the
    successor."""
    ((member, name),) = place.nodes.items()
    session, janitor, generation = place.session, place.janitor, place.generation
    node = join(member, name)
    op = set_data_op(session.server_path(node), data)

    def done(result: object, error: AiozklockError | None) -> None:
        if isinstance(error, ConnectionLoss):
            janitor.rewrite(node, generation, data)

    with contextlib.suppress(SessionExpired):
        if session.send_soon((op,), generation=generation, on_done=done) is None:
            janitor.rewrite(node, generation, data)


# ---------------------------------------------------------------- release


async def delete_own(place: Place, records: list[MultiDelete]) -> None:
    """Delete our nodes (with our lock-delay ``records``, in one transaction): shielded;
    returns once they are gone (or their session is)."""
    if not place.nodes:
        return
    session = place.session
    nodes = [join(m, name) for m, name in place.names()]
    with anyio.CancelScope(shield=True):
        if (len(nodes) > 1 or records) and await _delete_in_one(
            place, [MultiDelete(session.server_path(node)) for node in nodes] + records
        ):
            return
        for node in nodes:
            # Gone with its session: the server deletes it with the session.
            with contextlib.suppress(SessionExpired, ClientClosed):
                await delete_node(session, node, place.generation)


def delete_own_nowait(
    place: Place, records: list[MultiDelete], alone: Alone | None
) -> Names | None:
    """Write the deletes of our nodes (with our lock-delay ``records``) now, and return
    without their replies: when this returns they are handed to the OS (a caller that
    blocks next keeps nothing from anyone), and every later request of this session is
    ordered after them, so a re-acquire goes out at once: one round trip per cycle. A delete
    that fails, or that cannot be written now (disconnected: there is no wire), is the
    janitor's, in the same session. ``alone``: what our grant proved of our node, on which
    the deletes' outcome is recorded for the next join's proof (``_alone.py``).

    Returns the nodes whose deletes were written (never to be adopted after a lost create
    reply: ``Round.released``), None if we had none."""
    if not place.nodes:
        return None
    session, janitor, generation = place.session, place.janitor, place.generation
    names = place.names()
    nodes = [join(m, name) for m, name in names]

    def done(result: Any, error: AiozklockError | None) -> None:
        failed_multi = isinstance(result, MultiResult) and not result.ok
        if alone is not None:  # for the next join's proof (``_alone.py``)
            alone.deleted = error is None and not failed_multi
        if error is None and not failed_multi:
            return
        if isinstance(error, GONE_ALREADY):
            return
        for node in nodes:  # outcome unknown, or a multi that a missing node failed
            janitor.delete(node, generation)

    ops = _deletes(session, nodes, records)
    try:
        written = session.send(ops, generation=generation, on_done=done)
    except SessionExpired:
        return names  # their session is gone, and the server deletes them with it
    if not written:
        for node in nodes:
            janitor.delete(node, generation)  # once reconnected, in this session
    elif alone is not None:
        alone.written = True
    return names


async def _delete_in_one(place: Place, deletes: list[MultiDelete]) -> bool:
    """One ``multi`` of deletes (one round trip); False to fall back to single deletes of
    our nodes (a node already gone fails the whole transaction; a lost reply is resolved by
    them; a record left behind only delays the next holder)."""
    session = place.session
    op = multi_op(deletes, session.client_path)
    try:
        result = await session.call(op, generation=place.generation)
    except (SessionExpired, ClientClosed):
        return True  # their session is gone, and the server deletes them with it
    except ConnectionLoss:
        return False
    return result.ok


# ---------------------------------------------------------------- after a failed acquire


async def delete_bounded(place: Place, nodes: dict[str, str], generation: int) -> bool:
    """Delete ``nodes`` (none known: sweep our GUID), shielded, within half the session
    timeout; True once nothing of ours is left in session ``generation``."""
    session = place.session
    with anyio.CancelScope(shield=True):
        if session.state is SessionState.CONNECTED and session.generation == generation:
            with anyio.move_on_after(session.timeout / 2):
                return await _delete_now(place, nodes, generation)
            return False
    # Not connected: done only if the nodes' session is gone, and the nodes with it.
    return session.generation != generation or session.state is SessionState.CLOSED


async def _delete_now(place: Place, nodes: dict[str, str], generation: int) -> bool:
    """One attempt, sending nothing once disconnected; False if it may have failed."""
    try:
        if nodes:
            return await _delete_named(place.session, nodes, generation)
        listings = await place.list_all(generation, uptime())
        ours = [
            (m, n) for m in place.members for n in nodes_of(listings[m], place.guid, place.marker)
        ]
        await place.delete_stale(ours)
        return True
    except (NoNodeError, SessionExpired):
        return True
    except (AiozklockError, TimeoutError):  # ClientClosed included
        return False


async def _delete_named(session: Session, nodes: dict[str, str], generation: int) -> bool:
    ops = [delete_op(session.server_path(join(m, n)), ephemeral=True) for m, n in nodes.items()]
    results = await session.pipeline(ops, generation=generation, wait_until=uptime())
    errors = [r for r in results if isinstance(r, BaseException)]
    return all(isinstance(e, NoNodeError | SessionExpired) for e in errors)


def _deletes(session: Session, nodes: list[str], records: list[MultiDelete]) -> list[Op[Any]]:
    """The deletes of ``nodes`` (and of our lock-delay ``records``, in the same
    transaction): one delete, or one multi of them (one transaction: the next waiter is
    woken once), or single deletes if that multi is too large to send (a record then
    stays, which only delays the next holder)."""
    paths = [session.server_path(node) for node in nodes]
    if len(paths) == 1 and not records:
        return [delete_op(paths[0], ephemeral=True)]
    multi = multi_op([MultiDelete(path) for path in paths] + records, session.client_path)
    return [multi] if session.fits(multi) else [delete_op(p, ephemeral=True) for p in paths]


__all__ = ("delete_bounded", "delete_own", "delete_own_nowait", "mark")
