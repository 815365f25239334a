"""Background cleanup that outlives a cancelled caller, and never outlives its session.

A node we could not delete right away (no connection, or the caller's cleanup bound ran out) is
handed here. A job retries while the session that owns the node is alive and stops as soon as
that session is gone, because the server deletes an ephemeral node together with its session.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from aiozklock._exceptions import (
    AiozklockError,
    ClientClosed,
    NoAuthError,
    NoNodeError,
    SessionExpired,
    ZooKeeperError,
    shorten,
)
from aiozklock._recipes._core._retry import RETRY, carrying, delete_node
from aiozklock._wire._protocol import Stat, set_data_op
from aiozklock._wire._session import Session

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
        if await delete_node(self._session, path, generation, czxid=czxid):
            log.info("janitor deleted %s", path)

    async def _rewrite(self, path: str, generation: int, data: bytes) -> None:
        session = self._session
        op = set_data_op(session.server_path(path), data)
        with contextlib.suppress(NoNodeError):  # repeating it is harmless
            await RETRY.call(session, op, generation=generation)

    async def _delete_if_owned(
        self, path: str, generation: int, owned: Callable[[bytes, Stat], bool]
    ) -> None:
        await delete_node(self._session, path, generation, owned=owned)

    async def _delete_guid(self, parent: str, guid: str, generation: int) -> None:
        try:
            for node in await carrying(self._session, parent, guid, generation):
                await self._delete(node, generation)
        except ZooKeeperError:
            log.exception("janitor could not sweep %s for %s", parent, guid)
