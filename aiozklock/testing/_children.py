"""Waiting on a node's children, on watches: the condition tests and the kit wait for."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from aiozklock._client import ZooKeeperClient
from aiozklock._exceptions import NoNodeError
from aiozklock._wire._ops import exists_op, get_children_op

from ._internals import session_of

__all__ = ["wait_for_children"]


async def wait_for_children(
    zk: ZooKeeperClient,
    path: str,
    done: Callable[[list[str]], bool],
    *,
    await_creation: bool = False,
) -> list[str]:
    """Wait, on watches (no polling), until ``done(children of path)``, and return them.
    Raises ``NoNodeError`` if ``path`` does not exist, or is deleted meanwhile, unless
    ``await_creation``: then its creation is awaited (also where ``zk``'s server has not
    seen it yet: a follower lags). Unbounded: put it under a deadline (``anyio.fail_after``)."""
    session = session_of(zk)
    server_path = session.server_path(path)
    while True:
        changed = anyio.Event()

        def wake(_: object, changed: anyio.Event = changed) -> None:
            changed.set()

        try:
            children: list[str] = await session.call(get_children_op(server_path, wake))
        except NoNodeError:
            if not await_creation:
                raise
            if await session.call(exists_op(server_path, wake)) is None:
                await changed.wait()  # created meanwhile: list it again
            else:
                session.remove_watcher(server_path, wake)
            continue
        if done(children):
            session.remove_watcher(server_path, wake)
            return children
        await changed.wait()
