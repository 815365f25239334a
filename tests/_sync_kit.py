"""What the tests of ``aiozklock.sync`` share: clients in the test's chroot, closed at
teardown (fixtures, imported by conftest.py), threads whose failures reach the test, and
waits on watches (no polling)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from aiozklock.testing import wait_for_children

if TYPE_CHECKING:
    from aiozklock.sync import SyncClient

SESSION_TIMEOUT = 4.0
BOUND = 10.0  # a hang guard only: what it bounds happens in milliseconds


@pytest.fixture
def open_sync(hosts: str) -> Iterator[Callable[..., SyncClient]]:
    """``open_sync(**connect_kwargs)``: a sync client (its own session) in this test's
    chroot, opened now; all are closed at teardown."""
    import aiozklock.sync  # here: the suite's other tests never import it

    clients: list[SyncClient] = []

    def factory(**kwargs: Any) -> SyncClient:
        kwargs.setdefault("session_timeout", SESSION_TIMEOUT)
        kwargs.setdefault("connect_timeout", 5.0)
        client = aiozklock.sync.connect(hosts, **kwargs)
        clients.append(client)
        client.open()
        return client

    yield factory
    for client in clients:
        client.close()


@pytest.fixture
def szk(open_sync: Callable[..., SyncClient]) -> SyncClient:
    """A sync client in this test's chroot."""
    return open_sync()


@pytest.fixture
def szk2(open_sync: Callable[..., SyncClient]) -> SyncClient:
    """Another sync client (another session) in this test's chroot: the observer."""
    return open_sync()


def wait_children(zk: SyncClient, path: str, done: Callable[[list[str]], bool]) -> list[str]:
    """Wait on watches, through ``zk``, until ``done(children of path)``; bounded."""

    async def wait(proxy: Any) -> list[str]:
        with anyio.fail_after(BOUND):
            return await wait_for_children(proxy.client, path, done, await_creation=True)

    result: list[str] = zk._call(wait)
    return result


class Worker:
    """A thread running ``func``; ``join()`` re-raises its exception in the test."""

    def __init__(self, func: Callable[[], object], name: str = "worker") -> None:
        self.result: object = None
        self.error: BaseException | None = None
        self._func = func
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = self._func()
        except BaseException as exc:
            self.error = exc

    def join(self) -> object:
        self.thread.join(BOUND)
        assert not self.thread.is_alive(), "the worker thread hung"
        if self.error is not None:
            raise self.error
        return self.result


def in_thread(func: Callable[[], object], name: str = "worker") -> object:
    """Run ``func`` in a new thread, to its end; its result, or its exception."""
    return Worker(func, name).join()
