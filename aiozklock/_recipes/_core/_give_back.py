"""Giving our place back: the release's deletes, the grant's mark, and the cleanup after a
failed or cancelled acquire.

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
from aiozklock._recipes._core._delay_record import RECORD
from aiozklock._recipes._core._names import nodes_of
from aiozklock._recipes._core._queue_state import Alone, QueueState
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


class GivingBack(QueueState):
    """The queue engine's release and cleanup (see the module docstring)."""

    __slots__ = ()

    def _mark(self, data: bytes) -> None:
        """Granted with a successor that may wait for our grant: change our node's data (to
        ``data``, the bytes it was created with), which fires the successor's watch. Written
        with the next request, no reply awaited; if it cannot be written now or its outcome
        is unknown, the janitor writes it once reconnected (until then the successor waits
        for our node's deletion or the mark). NoNode or a lost session: the deletion wakes
        the successor."""
        ((member, name),) = self.nodes.items()
        session, janitor, generation = self._session, self._janitor, self.generation
        node = join(member, name)
        op = set_data_op(session.server_path(node), data)

        def done(result: object, error: AiozklockError | None) -> None:
            if isinstance(error, ConnectionLoss):
                janitor.rewrite(node, generation, data)

        with contextlib.suppress(SessionExpired):
            if session.send_soon((op,), generation=generation, on_done=done) is None:
                janitor.rewrite(node, generation, data)

    async def _delete_all_of_ours(self) -> None:
        """One member lost its node: delete the others, so all are enqueued again together."""
        await self._delete_stale(list(self.nodes.items()))
        self.nodes = {}

    # ---------------------------------------------------------------- release

    async def delete_own(self) -> None:
        """Delete our nodes: shielded; returns once they are gone (or their session is)."""
        self._stop_watching()
        if not self.nodes:
            return
        session = self._session
        nodes = [join(m, self.nodes[m]) for m in self.members]
        records = self._our_records()
        with anyio.CancelScope(shield=True):
            if (len(nodes) > 1 or records) and await self._delete_in_one(
                [MultiDelete(session.server_path(node)) for node in nodes] + records
            ):
                return
            for node in nodes:
                # Gone with its session: the server deletes it with the session.
                with contextlib.suppress(SessionExpired, ClientClosed):
                    await delete_node(session, node, self.generation)

    def delete_own_nowait(self) -> None:
        """Write the deletes of our nodes now, and return without their replies: when this
        returns they are handed to the OS (a caller that blocks next keeps nothing from
        anyone), and every later request of this session is ordered after them, so a
        re-acquire goes out at once: one round trip per cycle. A delete that fails, or that
        cannot be written now (disconnected: there is no wire), is the janitor's, in the
        same session."""
        self._stop_watching()
        if not self.nodes:
            return
        session, janitor, generation = self._session, self._janitor, self.generation
        names = [(m, self.nodes[m]) for m in self.members]
        nodes = [join(m, name) for m, name in names]
        lead = self._lead  # what our grant left for the next join (``_queue.py``)
        alone = lead if isinstance(lead, Alone) and lead.name == names[0][1] else None

        def done(result: Any, error: AiozklockError | None) -> None:
            failed_multi = isinstance(result, MultiResult) and not result.ok
            if alone is not None:  # for the next join's proof (``_enqueue.py``)
                alone.answered, alone.deleted = True, error is None and not failed_multi
            if error is None and not failed_multi:
                return
            if isinstance(error, GONE_ALREADY):
                return
            for node in nodes:  # outcome unknown, or a multi that a missing node failed
                janitor.delete(node, generation)

        self._released = names  # never adopted after a lost create reply
        ops = _deletes(session, nodes, self._our_records())
        try:
            written = session.send(ops, generation=generation, on_done=done)
        except SessionExpired:
            return  # their session is gone, and the server deletes them with it
        if not written:
            for node in nodes:
                janitor.delete(node, generation)  # once reconnected, in this session
        elif alone is not None:
            alone.written = True

    def _stop_watching(self) -> None:
        """Our holding ends: our own deletes must not read as a newcomer's change."""
        if self._newcomers is not None:
            self._newcomers.forget()

    def _our_records(self) -> list[MultiDelete]:
        """The deletes of the lock-delay records our grant wrote (``_delay.py``), at the
        versions we wrote: a release deletes them with our nodes, in one transaction, so
        that the next contender knows it was a release (none without lock-delay)."""
        delay = self._delay
        if delay is None or not delay.versions:
            return []
        server_path = self._session.server_path
        return [MultiDelete(server_path(join(m, RECORD)), v) for m, v in delay.versions.items()]

    async def _delete_in_one(self, deletes: list[MultiDelete]) -> bool:
        """One ``multi`` of deletes (one round trip); False to fall back to single deletes
        of our nodes (a node already gone fails the whole transaction; a lost reply is
        resolved by them; a record left behind only delays the next holder)."""
        session = self._session
        op = multi_op(deletes, session.client_path)
        try:
            result = await session.call(op, generation=self.generation)
        except (SessionExpired, ClientClosed):
            return True  # their session is gone, and the server deletes them with it
        except ConnectionLoss:
            return False
        return result.ok

    # ---------------------------------------------------------------- after a failed acquire

    async def abandon(self) -> None:
        """After a failed or cancelled acquire: leave nothing of ours in the queues.

        Once the acquire's deadline has passed, nothing is waited for: the deletes are
        written as a release's are (``delete_own_nowait``), and a create of unknown outcome
        is the janitor's; a caller whose time is up must not wait for a slow or silent
        server. Otherwise (an error, a cancellation) the deletes are confirmed, within half
        the session timeout, and what is not done by then is the janitor's. Raises nothing."""
        deadline = self._deadline
        if deadline is not None and uptime() >= deadline:
            self._abandon_nowait()
            return
        nodes, generation = self.nodes, self.generation
        in_doubt = self._take_doubt()
        self.forget()
        if not nodes and not in_doubt:
            return
        if not nodes:
            generation = self._session.generation
        if not await self._delete_bounded(nodes, generation):
            for member in self.members:
                if member in nodes:
                    self._janitor.delete(join(member, nodes[member]), generation)
                elif not nodes:
                    self._janitor.delete_guid(member, self.guid, generation)
            self.retire_guid()

    def _abandon_nowait(self) -> None:
        in_doubt = self._take_doubt()
        if self.nodes:
            self.delete_own_nowait()
            self.retire_guid()  # the deletes may yet be the janitor's (see retire_guid)
        elif in_doubt:
            generation = self._session.generation
            for member in self.members:
                self._janitor.delete_guid(member, self.guid, generation)
            self.retire_guid()
        self.forget()

    async def _delete_bounded(self, nodes: dict[str, str], generation: int) -> bool:
        """Delete ``nodes`` (none known: sweep our GUID), shielded, within half the session
        timeout; True once nothing of ours is left in session ``generation``."""
        session = self._session
        with anyio.CancelScope(shield=True):
            if session.state is SessionState.CONNECTED and session.generation == generation:
                with anyio.move_on_after(session.timeout / 2):
                    return await self._delete_now(nodes, generation)
                return False
        # Not connected: done only if the nodes' session is gone, and the nodes with it.
        return session.generation != generation or session.state is SessionState.CLOSED

    async def _delete_now(self, nodes: dict[str, str], generation: int) -> bool:
        """One attempt, sending nothing once disconnected; False if it may have failed."""
        try:
            if nodes:
                return await self._delete_named(nodes, generation)
            listings = await self._list_all(generation, uptime())
            ours = [
                (m, n) for m in self.members for n in nodes_of(listings[m], self.guid, self._marker)
            ]
            await self._delete_stale(ours)
            return True
        except (NoNodeError, SessionExpired):
            return True
        except (AiozklockError, TimeoutError):  # ClientClosed included
            return False

    async def _delete_named(self, nodes: dict[str, str], generation: int) -> bool:
        session = self._session
        ops = [delete_op(session.server_path(join(m, n))) for m, n in nodes.items()]
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
        return [delete_op(paths[0])]
    multi = multi_op([MultiDelete(path) for path in paths] + records, session.client_path)
    return [multi] if session.fits(multi) else [delete_op(path) for path in paths]


__all__ = ("GivingBack",)
