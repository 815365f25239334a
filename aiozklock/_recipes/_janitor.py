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
    NoNodeError,
    SessionExpired,
    ZooKeeperError,
)
from aiozklock._recipes._decision import nodes_of
from aiozklock._wire._paths import join
from aiozklock._wire._protocol import delete_op, get_children_op
from aiozklock._wire._session import Session

log = logging.getLogger(__name__)

Job = Callable[[], Coroutine[Any, Any, None]]
Spawn = Callable[[Job], object]


class Janitor:
    def __init__(self, session: Session, spawn: Spawn) -> None:
        self._session = session
        self._spawn = spawn

    def spawn(self, job: Job, what: str) -> None:
        """Run a best-effort background job; its errors are logged, never raised into the
        client's task group (which would take the user's code down with it)."""
        self._run(job, what)

    def delete(self, path: str, generation: int) -> None:
        """Delete ``path`` once possible, unless its session ends first."""
        self._run(lambda: self._delete(path, generation), f"delete {path}")

    def delete_guid(self, parent: str, guid: str, generation: int) -> None:
        """Delete every child of ``parent`` carrying ``guid`` (a create whose outcome is
        unknown), once possible, unless the session ends first."""
        self._run(lambda: self._delete_guid(parent, guid, generation), f"sweep {parent}/{guid}")

    def _run(self, job: Job, what: str) -> None:
        async def wrapper() -> None:
            try:
                await job()
            except (SessionExpired, ClientClosed):
                pass  # the session and its ephemeral nodes are gone
            except AiozklockError as exc:
                log.info("janitor job gave up: %s: %r", what, exc)
            except Exception:
                log.exception("janitor job failed: %s", what)

        try:
            self._spawn(wrapper)
        except RuntimeError:  # the client is shutting down: its session, and our nodes, go too
            log.debug("janitor job not started, client closing: %s", what)

    async def _delete(self, path: str, generation: int) -> None:
        session = self._session
        while True:
            try:
                await session.call(delete_op(session.server_path(path)), generation=generation)
                log.info("janitor deleted %s", path)
                return
            except NoNodeError:
                return
            except ConnectionLoss:
                continue  # outcome unknown: try again (NoNode then means it worked)

    async def _delete_guid(self, parent: str, guid: str, generation: int) -> None:
        session = self._session
        while True:
            try:
                children = await session.call(
                    get_children_op(session.server_path(parent)), generation=generation
                )
                for name in nodes_of(children, guid):
                    await self._delete(join(parent, name), generation)
                return
            except NoNodeError:
                return
            except ConnectionLoss:
                continue
            except ZooKeeperError:
                log.exception("janitor could not sweep %s for %s", parent, guid)
                return
