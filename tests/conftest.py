"""Shared fixtures: every test gets its own chroot on the real ZooKeeper under test."""

from __future__ import annotations

import contextlib
import getpass
import os
import tempfile
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import anyio
import pytest

import aiozklock
from aiozklock._recipes._core._queue import Queue
from aiozklock._recipes._core._waiting import Wakeup
from aiozklock.testing import FaultProxy, ZooKeeperCluster, wait_for_children
from tests._jvm_archive import JVM_OPTIONS_ENV, use_class_archive
from tests._order import reorder
from tests._sync_kit import open_sync, szk, szk2  # noqa: F401 (the sync tests' fixtures)

pytest_plugins = ("aiozklock.testing.pytest_plugin",)

SESSION_TIMEOUT = 4.0
#: The mypy cache of the tests that type-check a user's program: the project's own (the one
#: ``mypy`` fills in .ci/dev.sh), so that the program is checked, not aiozklock and its
#: dependencies again (mypy checks each cached module against its source before using it).
MYPY_CACHE = str(Path(__file__).resolve().parent.parent / ".mypy_cache")


def _cache_subprocess_bytecode() -> None:
    """Let the suite's Python subprocesses (nemesis children, benchmark workers, CLI runs,
    pytest runs of samples: hundreds) cache their bytecode outside the tree instead of each
    compiling aiozklock again, the tree kept clean: what .ci/dev.sh exports for every step
    (its ``PYTHONPYCACHEPREFIX``), for a plain ``pytest`` run too."""
    if not os.environ.get("PYTHONPYCACHEPREFIX"):
        prefix = Path(tempfile.gettempdir()) / f"aiozklock-pycache-{getpass.getuser()}"
        os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


_cache_subprocess_bytecode()

#: The suite's servers live seconds to minutes and serve light traffic: the C1 compiler alone
#: (no C2 compiles in the background) and no perf-data file start one in about half the time
#: and CPU (measured: 0.7 -> 0.4 s of CPU per standalone start). Exported, so that servers
#: started by the suite's subprocesses (nemesis, ``aiozklock server``) get them too.
QUICK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:-UsePerfData"
os.environ.setdefault(JVM_OPTIONS_ENV, QUICK_JVM_OPTIONS)


def pytest_configure(config: pytest.Config) -> None:
    """The servers' class-data archive (tests/_jvm_archive.py), made or found by the process
    that runs the session, before any worker starts (they inherit it)."""
    if not hasattr(config, "workerinput"):
        use_class_archive(QUICK_JVM_OPTIONS)


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected: xdist's slices are counts
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist worksteal``, each worker's first share about as long as the others',
    longest modules first (tests/_order.py)."""
    reorder(config, items)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run every ``@pytest.mark.anyio`` test on asyncio and on trio."""
    backend: str = request.param
    return backend


@pytest.fixture(scope="session")
def quiet_zk_hosts() -> Iterator[str]:
    """A server of this worker's own, started on first use, for tests whose claim needs no
    other session's transaction between two of ours (a re-join proven alone, ``_alone.py``):
    on the shared server, earlier tests' sessions write at any time (an expiry, a janitor's
    delete). A module overrides ``zk_hosts`` with it; its tests close every session they open."""
    with ZooKeeperCluster() as cluster:
        yield cluster.hosts


@pytest.fixture
def chroot(zk_chroot: str) -> str:
    return zk_chroot


@pytest.fixture
def hosts(zk_hosts: str, chroot: str) -> str:
    """The servers under test, rooted in this test's own chroot."""
    return zk_hosts + chroot


@pytest.fixture
def zk(zk_client: aiozklock.ZooKeeperClient) -> aiozklock.ZooKeeperClient:
    """The plugin's per-test client (4 s session), in this test's chroot."""
    return zk_client


ClientFactory = Callable[..., Any]


@pytest.fixture
async def open_client(zk_hosts: str, chroot: str) -> AsyncIterator[Callable[..., Any]]:
    """``await open_client(proxy=None, **connect_kwargs)``: another client (its own session)
    in this test's chroot, optionally behind a FaultProxy; all are closed at teardown.

    Request ``proxy`` *before* ``open_client`` in a test's parameters: fixtures are torn
    down in reverse order, and the clients must close before the proxy they run through."""
    async with AsyncExitStack() as stack:

        async def factory(
            proxy: FaultProxy | None = None, **kwargs: Any
        ) -> aiozklock.ZooKeeperClient:
            kwargs.setdefault("session_timeout", SESSION_TIMEOUT)
            kwargs.setdefault("connect_timeout", 5.0)
            address = proxy.address if proxy is not None else zk_hosts
            client = aiozklock.connect(address + chroot, **kwargs)
            return await stack.enter_async_context(client)

        yield factory


@pytest.fixture
async def proxy(zk_hosts: str) -> AsyncIterator[FaultProxy]:
    async with FaultProxy(zk_hosts) as fault_proxy:
        yield fault_proxy


async def wait_for_queue(zk: aiozklock.ZooKeeperClient, path: str, size: int) -> list[str]:
    """Wait until ``path`` has at least ``size`` children."""
    return await wait_for_children(zk, path, lambda children: len(children) >= size)


async def gone(zk: aiozklock.ZooKeeperClient, *paths: str, within: float = 5.0) -> None:
    """Wait (children watches, bounded) until no path has a child left (a missing path has
    none). A release returns once its delete is written, so another session, or a listing
    sent before it, may still see the node for a moment."""
    with anyio.fail_after(within):
        for path in paths:
            if await zk.exists(path) is not None:
                with contextlib.suppress(aiozklock.NoNodeError):  # a container reaped
                    await wait_for_children(zk, path, lambda children: children == [])


async def node_gone(zk: aiozklock.ZooKeeperClient, node: str, within: float = 5.0) -> None:
    """Wait (a children watch on the parent, bounded) until ``node`` does not exist."""
    parent, _, name = node.rpartition("/")
    with anyio.fail_after(within), contextlib.suppress(aiozklock.NoNodeError):
        await wait_for_children(zk, parent or "/", lambda children: name not in children)


# ---------------------------------------------------------------- a waiter that waits


class _WaitSpy:
    """Spies on the queue engine's waits for one test (the library has no test hook):
    ``Queue._wait`` notes which queue waits (in a context variable of its task), and
    ``Wakeup.wait``, the one wait for a wake-up, calls that queue's callback right before
    it waits, the watches armed and the decision to wait made."""

    def __init__(self) -> None:
        self.callbacks: weakref.WeakKeyDictionary[Queue, Callable[[], object]] = (
            weakref.WeakKeyDictionary()
        )
        self.waiting: ContextVar[Queue | None] = ContextVar("waiting_queue", default=None)
        self.originals: tuple[Any, Any] | None = None

    def install(self) -> None:
        if self.originals is not None:
            return
        queue_wait, wakeup_wait = Queue._wait, Wakeup.wait
        callbacks, waiting = self.callbacks, self.waiting

        async def spied_queue_wait(queue: Queue, *args: Any) -> None:
            token = waiting.set(queue)
            try:
                await queue_wait(queue, *args)
            finally:
                waiting.reset(token)

        async def spied_wakeup_wait(wakeup: Wakeup, deadline: float | None, message: str) -> None:
            queue = waiting.get()
            callback = None if queue is None else callbacks.get(queue)
            if callback is not None:
                callback()
            await wakeup_wait(wakeup, deadline, message)

        self.originals = (queue_wait, wakeup_wait)
        Queue._wait = spied_queue_wait  # type: ignore[method-assign,assignment]
        Wakeup.wait = spied_wakeup_wait  # type: ignore[method-assign]

    def uninstall(self) -> None:
        if self.originals is not None:
            Queue._wait, Wakeup.wait = self.originals  # type: ignore[method-assign]
            self.originals = None
        self.callbacks.clear()


_WAIT_SPY = _WaitSpy()


def on_wait(queue: Queue, callback: Callable[[], object]) -> None:
    """Call ``callback()`` each time ``queue`` (a queue recipe's ``_queue``) is about to
    wait for a wake-up: after the reads that armed its watches, right before the wait (a
    callback that deletes the predecessor there races the wait itself). Replaces an earlier
    callback of ``queue``; for the current test only."""
    _WAIT_SPY.install()
    _WAIT_SPY.callbacks[queue] = callback


@pytest.fixture(autouse=True)
def _wait_spy_removed() -> Iterator[None]:
    """``on_wait``'s spies last one test."""
    yield
    _WAIT_SPY.uninstall()
