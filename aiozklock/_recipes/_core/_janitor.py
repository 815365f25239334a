"""Background cleanup that outlives a cancelled caller, and never outlives its session.

A node we could not delete right away (no connection, or the caller's cleanup bound ran out) is
handed here. A job retries while the session that owns the node is alive and stops as soon as
that session is gone, because the server deletes an ephemeral node together with its session.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from aiozklock._exceptions import (
    AiozklockError,
    ClientClosed,
    ConnectionLoss,
    NoAuthError,
    NoNodeError,
    SessionExpired,
    ZooKeeperError,
    shorten,
)
from aiozklock._wire._protocol import (
    Stat,
    delete_op,
    exists_op,
    get_children_op,
    get_data_op,
    set_data_op,
)
from aiozklock._wire._session import Session
from aiozklock._wire._validation import join

log = logging.getLogger(__name__)

Job = Callable[[], Coroutine[Any, Any, None]]
Spawn = Callable[[Job], object]


class Janitor:
    """Runs the deletes a caller could not finish; errors are logged, never raised into the
    client's task group (which would take the user's code down with it)."""

    def __init__(self, session: Session, spawn: Spawn) -> None:
        self._session = session
        self._spawn = spawn

    def delete(self, path: str, generation: int, *, czxid: int | None = None) -> None:
        """Delete ``path`` once possible, unless its session ends first. With ``czxid``, only
        if the node found there is still that one (a fixed name another holder may reuse)."""
        self._run(lambda: self._delete(path, generation, czxid), f"delete {path}")

    def delete_guid(self, parent: str, guid: str, generation: int) -> None:
        """Delete every child of ``parent`` whose name carries ``guid`` (a create whose
        outcome is unknown), once possible, unless the session ends first."""
        self._run(lambda: self._delete_guid(parent, guid, generation), f"sweep {parent}/{guid}")

    def delete_if_owned(
        self, path: str, generation: int, owned: Callable[[bytes, Stat], bool]
    ) -> None:
        """Delete ``path`` once possible if ``owned(data, stat)`` says the node found there is
        ours (a fixed-name create whose outcome is unknown), unless its session ends first."""
        self._run(lambda: self._delete_if_owned(path, generation, owned), f"delete {path} if ours")

    def rewrite(self, path: str, generation: int, data: bytes) -> None:
        """Set ``path``'s data to ``data`` once possible (a write whose reply was lost, or
        that could not be written: repeating it is harmless), unless the node or its
        session is gone first."""
        self._run(lambda: self._rewrite(path, generation, data), f"rewrite {path}")

    def _run(self, job: Job, what: str) -> None:
        what = shorten(what)  # for the log lines: a path may be long

        async def wrapper() -> None:
            try:
                await job()
            except (SessionExpired, ClientClosed):
                pass  # the session and its ephemeral nodes are gone
            except NoAuthError as exc:  # retrying cannot help: an ACL refuses it
                log.error(
                    "janitor gave up: %s: %s; the node stays (an ephemeral one until "
                    "its session ends)",
                    what,
                    exc,
                )
            except AiozklockError as exc:
                log.info("janitor job gave up: %s: %r", what, exc)
            except Exception:
                log.exception("janitor job failed: %s", what)

        try:
            self._spawn(wrapper)
        except RuntimeError:  # the client is shutting down: its session, and our nodes, go too
            log.debug("janitor job not started, client closing: %s", what)

    async def _delete(self, path: str, generation: int, czxid: int | None = None) -> None:
        session = self._session
        server_path = session.server_path(path)
        while True:
            try:
                version = -1
                if czxid is not None:
                    stat = await session.call(exists_op(server_path), generation=generation)
                    if stat is None or stat.czxid != czxid:
                        return  # gone, or another holder's node now
                    version = stat.version
                await session.call(delete_op(server_path, version), generation=generation)
                log.info("janitor deleted %s", path)
                return
            except NoNodeError:
                return
            except ConnectionLoss:
                continue  # outcome unknown: try again (NoNode then means it worked)

    async def _rewrite(self, path: str, generation: int, data: bytes) -> None:
        session = self._session
        while True:
            try:
                await session.call(
                    set_data_op(session.server_path(path), data), generation=generation
                )
                return
            except NoNodeError:
                return
            except ConnectionLoss:
                continue

    async def _delete_if_owned(
        self, path: str, generation: int, owned: Callable[[bytes, Stat], bool]
    ) -> None:
        session = self._session
        while True:
            try:
                data, stat = await session.call(
                    get_data_op(session.server_path(path)), generation=generation
                )
            except NoNodeError:
                return
            except ConnectionLoss:
                continue  # a read: safe to repeat
            if owned(data, stat):
                await self._delete(path, generation, stat.czxid)
            return

    async def _delete_guid(self, parent: str, guid: str, generation: int) -> None:
        session = self._session
        while True:
            try:
                children = await session.call(
                    get_children_op(session.server_path(parent)), generation=generation
                )
                # GUIDs are 32 random hex digits: whatever the recipe's naming, a name
                # carrying ours is ours.
                for name in (child for child in children if guid in child):
                    await self._delete(join(parent, name), generation)
                return
            except NoNodeError:
                return
            except ConnectionLoss:
                continue
            except ZooKeeperError:
                log.exception("janitor could not sweep %s for %s", parent, guid)
                return
