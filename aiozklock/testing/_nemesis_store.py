"""Where a nemesis's (or a demo's) fenced reads and writes go: the in-process
:class:`FencedStore` (``memory``), or a real server (``postgres``, ``redis``: see
:mod:`._nemesis_store_drivers`) whose verdicts the ``FencedStore`` records.

With a real store, the server decides whether each read or write is accepted; the record
keeper makes one call at a time per resource and records the server's answer in call order,
so that the history's fencing replay sees the accesses in the order the server saw them (the
server's own concurrency, writers waiting on the fence row, is tested on its own in
``tests/test_fencing_postgres_concurrency.py``). A throwaway server is started when no URL is
given, and stopped at the end.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import anyio
import anyio.to_thread

from ._history_records import FencedRead, FencedStore, FencedWrite
from ._nemesis_store_drivers import RealStore

__all__ = ["STORES", "OpenedStore", "StoreGate", "StoreUnavailable", "check_store", "open_store"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: What ``--store`` offers: the in-process record alone, or a real server.
STORES = ("memory", "postgres", "redis")
#: The URL schemes each real store takes.
_SCHEMES = {
    "postgres": ("postgresql://", "postgres://"),
    "redis": ("redis://", "rediss://", "unix://"),
}
_DRIVERS = {"postgres": ("asyncpg", "postgres"), "redis": ("redis", "redis")}
#: A call to the real store that takes longer is a failed run (there is no store fault).
_CALL_TIMEOUT = 60.0


class StoreUnavailable(RuntimeError):
    """A real store could not be started or reached; the message says why (its cause is
    the test kit's or the driver's error)."""


def check_store(store: str, url: str | None, backend: str, *, shares_resource: bool) -> None:
    """Raises ``ValueError`` for a store the run cannot use: an unknown one, a URL without a
    real store or of another scheme, a real store on trio (its drivers run on asyncio
    only), or a recipe whose holders share the resource (no fenced store at all); and
    ``ImportError`` (with the extra to install) when its driver is missing."""
    if store not in STORES:
        raise ValueError(f"unknown store {store!r}: one of {', '.join(STORES)}")
    if store == "memory":
        if url is not None:
            raise ValueError("a store URL needs a real store: postgres or redis")
        return
    if backend != "asyncio":
        raise ValueError(
            f"store {store} needs the asyncio backend: its driver ({_DRIVERS[store][0]}) runs "
            "on asyncio only"
        )
    if shares_resource:
        raise ValueError(
            f"store {store}: a semaphore's holders share the resource, so there is no fenced "
            "store to put there"
        )
    if url is not None and not url.startswith(_SCHEMES[store]):
        raise ValueError(f"a {store} URL starts with {' or '.join(_SCHEMES[store])}: {url!r}")
    module, extra = _DRIVERS[store]
    try:
        __import__(module)
    except ImportError as exc:
        needs = f"store {store} needs {module}: pip install 'aiozklock[{extra}]'"
        raise ImportError(needs) from exc


@dataclass
class OpenedStore:
    """A real store opened for a run: the server's answers, and where it is."""

    real: RealStore
    where: str  # the URL, and whether the run started the server


@contextlib.asynccontextmanager
async def open_store(
    store: str, url: str | None, resources: Sequence[str]
) -> AsyncIterator[OpenedStore | None]:
    """The real ``store`` at ``url`` (None: a throwaway server, stopped on exit), its
    counters of ``resources`` reset; None for ``memory``. Raises :class:`StoreUnavailable`
    if no local server can be started (none installed: the message says how to get one)
    or the server cannot be reached."""
    if store == "memory":
        yield None
        return
    async with contextlib.AsyncExitStack() as stack:
        try:
            where = url
            if url is None:
                url = await stack.enter_async_context(_throwaway(store))
                where = f"{url} (throwaway)"
            real = await _connect(store, url, resources)
        except Exception as exc:
            raise StoreUnavailable(f"{store}: {exc}") from exc
        stack.push_async_callback(_shielded_close, real)
        yield OpenedStore(real, str(where))


async def _connect(store: str, url: str, resources: Sequence[str]) -> RealStore:
    from ._nemesis_store_drivers import PostgresCounter, RedisCounter

    if store == "postgres":
        return await PostgresCounter.open(url, resources)
    return await RedisCounter.open(url, resources)


async def _shielded_close(real: RealStore) -> None:
    with anyio.CancelScope(shield=True), anyio.move_on_after(30):
        await real.aclose()


@contextlib.asynccontextmanager
async def _throwaway(store: str) -> AsyncIterator[str]:
    """A throwaway server of the test kit (its own temp dir, a free port), closed (by its
    PID) on exit; its URL."""
    from ._postgres import PostgresServer
    from ._redis import RedisServer

    server: PostgresServer | RedisServer = (
        PostgresServer() if store == "postgres" else RedisServer()
    )
    await anyio.to_thread.run_sync(server.start)
    try:
        logger.info("throwaway %s server: %r", store, server)
        yield server.dsn if isinstance(server, PostgresServer) else server.url
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(server.close)


@dataclass(eq=False)
class StoreGate:
    """The fenced accesses of a run, one :class:`FencedStore` per resource (the record),
    and the real store that decides them, if any (``fenced=False``: none, and the record's
    stores accept stale accesses). ``on_error`` hears a real store's call
    that failed (the access is then refused: a failed call is no verdict)."""

    resources: Sequence[str]
    on_error: Callable[[str], None]
    real: RealStore | None = None
    #: False: the in-process stores accept stale accesses (the negative control)
    fenced: bool = True
    stores: dict[str, FencedStore] = field(init=False)
    _turns: dict[str, anyio.Lock] = field(init=False)

    def __post_init__(self) -> None:
        self.stores = {resource: FencedStore(fenced=self.fenced) for resource in self.resources}
        self._turns = {resource: anyio.Lock() for resource in self.resources}

    @property
    def name(self) -> str:
        """``memory``, or the real store's name."""
        return "memory" if self.real is None else self.real.name

    async def read(self, client: str, resource: str, token: int) -> tuple[bool, int]:
        """A fenced read by ``client``: ``(accepted, value)``."""
        store = self.stores[resource]
        if self.real is None:
            ok, value = store.read(client, token)
            return ok, value if isinstance(value, int) else 0
        async with self._turns[resource]:
            t = time.monotonic()
            answer = await self._call(self.real.read(client, resource, token), "read", client)
            if answer is None:
                return False, 0
            ok, value = answer
            store.reads.append(FencedRead(client, token, t, ok))
            if ok:
                store.max_token = max(token, store.max_token or 0)
            return ok, value

    async def write(self, client: str, resource: str, token: int, value: int) -> bool:
        """A fenced write of ``value`` by ``client``: whether it was accepted."""
        store = self.stores[resource]
        if self.real is None:
            return store.write(client, token, value)
        async with self._turns[resource]:
            t = time.monotonic()
            call = self.real.write(client, resource, token, value)
            answer = await self._call(call, "write", client)
            if answer is None:
                return False
            ok, previous = answer
            record = FencedWrite(client, token, value, t, ok, previous if ok else store.value)
            if ok:
                store.max_token = max(token, store.max_token or 0)
                store.value = value
                store.accepted.append(record)
            else:
                store.rejected.append(record)
            return ok

    async def _call(self, call: Awaitable[T], what: str, client: str) -> T | None:
        """The real store's answer; once sent, a call is not cancelled (its answer must be
        recorded: the server may have applied it). None if it failed."""
        assert self.real is not None
        with anyio.CancelScope(shield=True):
            try:
                with anyio.fail_after(_CALL_TIMEOUT):
                    return await call
            except Exception as exc:
                logger.exception("%s: %s by %s failed", self.real.name, what, client)
                self.on_error(f"{self.real.name}: {what} by {client} failed: {exc!r}")
        return None
