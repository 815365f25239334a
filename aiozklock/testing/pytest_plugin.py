"""pytest plugin: ZooKeeper server fixtures.

Registered through the ``pytest11`` entry point ``aiozklock``; without the package installed
use ``-p aiozklock.testing.pytest_plugin``. Fixtures:

- ``zk_cluster``: a standalone server, started once per session;
- ``zk_ensemble``: a 3-node ensemble, started lazily by the first test that asks for it;
- ``zk_hosts``: the connection string: ``$AIOZKLOCK_ZK_HOSTS`` if set (no local server is
  started then), else ``zk_cluster.hosts``;
- ``zk_chroot``: a fresh chroot path per test (``/aiozklock-test-<random>``);
- ``zk_client``: an ``aiozklock`` client rooted in that chroot, closed after the test, for
  async tests run by pytest-asyncio (``asyncio_mode = "auto"``, or ``@pytest.mark.asyncio``)
  or by anyio's plugin (``@pytest.mark.anyio``), in the test's event loop;
- ``zk_connect``: a :class:`~aiozklock.testing.ZooKeeperConnector` for those servers
  (session scope): ``async with zk_connect() as zk:`` in a test's body is a client with a
  chroot of its own, e.g. one per example of a hypothesis ``@given`` test (which refuses
  function-scoped fixtures such as ``zk_client``);
- ``zk_tls_files``: a CA, server and client certificates (:class:`TLSFiles`), made once per
  session; ``zk_tls_cluster`` / ``zk_tls_ensemble``: a standalone server / a 3-node
  ensemble serving TLS with them (``secure_hosts``; ``hosts`` stays plain), each started by
  the first test that asks for it. These are always local servers.
- ``pg_server``: a throwaway PostgreSQL (:class:`~aiozklock.testing.PostgresServer`), started
  by the first test that asks for it and kept for the session (per xdist worker);
  ``pg_dsn``: its DSN, or ``$AIOZKLOCK_PG_DSN`` if set (no local server is started then).
- ``redis_server``: a throwaway ``redis-server`` (:class:`~aiozklock.testing.RedisServer`),
  started by the first test that asks for it and kept for the session;
  ``redis_url``: ``$AIOZKLOCK_REDIS_URL`` if set (no server is started then), else its
  ``redis://127.0.0.1:PORT/0``. Tests share the server: use keys of their own.

Without a local ZooKeeper and without ``AIOZKLOCK_ZK_HOSTS`` the fixtures fail with
:class:`~aiozklock.testing.ZooKeeperUnavailableForTests` (never a silent skip: CI must not
pass by not testing); likewise ``pg_dsn`` without PostgreSQL's binaries and without
``AIOZKLOCK_PG_DSN``, with :class:`~aiozklock.testing.PostgresUnavailableForTests`.
Process faults (kill, pause) need the local fixtures.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Literal

import pytest

try:
    import pytest_asyncio
except ImportError:  # optional: then only anyio's plugin runs zk_client
    _PYTEST_ASYNCIO = False
else:
    _PYTEST_ASYNCIO = True

if TYPE_CHECKING:
    from aiozklock import ZooKeeperClient

    from ._connector import ZooKeeperConnector
    from ._postgres import PostgresServer
    from ._redis import RedisServer
    from ._server import ZooKeeperCluster
    from ._tls import TLSFiles

__all__ = [
    "PG_DSN_ENV",
    "REDIS_URL_ENV",
    "ZK_HOSTS_ENV",
    "pg_dsn",
    "pg_server",
    "redis_server",
    "redis_url",
    "zk_chroot",
    "zk_client",
    "zk_cluster",
    "zk_connect",
    "zk_ensemble",
    "zk_hosts",
    "zk_tls_cluster",
    "zk_tls_ensemble",
    "zk_tls_files",
]

logger = logging.getLogger(__name__)

ZK_HOSTS_ENV = "AIOZKLOCK_ZK_HOSTS"
PG_DSN_ENV = "AIOZKLOCK_PG_DSN"
REDIS_URL_ENV = "AIOZKLOCK_REDIS_URL"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "ensemble: needs a 3-node ZooKeeper ensemble started by the harness"
    )
    config.addinivalue_line("markers", "slow: fault tests that take several seconds")


def _running_cluster(size: int, tls: TLSFiles | None = None) -> Iterator[ZooKeeperCluster]:
    """A started cluster, closed when the fixture ends."""
    # Imported here so that loading the plugin never starts or probes anything.
    from ._server import ZooKeeperCluster

    cluster = ZooKeeperCluster(size, tls=tls).start()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def zk_cluster() -> Iterator[ZooKeeperCluster]:
    """A standalone ZooKeeper on a free port of 127.0.0.1, for the whole session.

    Tests that kill, pause or restart it must leave it serving again (``restart()``).
    """
    yield from _running_cluster(1)


@pytest.fixture(scope="session")
def zk_ensemble() -> Iterator[ZooKeeperCluster]:
    """A 3-node ZooKeeper ensemble, started on first use and kept for the session.

    Tests that kill members must restart them (``member.start()``) before finishing.
    """
    yield from _running_cluster(3)


@pytest.fixture(scope="session")
def zk_tls_files(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    """Certificates for TLS servers and their clients, made once per session."""
    from ._tls import TLSFiles

    return TLSFiles.generate(tmp_path_factory.mktemp("aiozklock-tls"))


@pytest.fixture(scope="session")
def zk_tls_cluster(zk_tls_files: TLSFiles) -> Iterator[ZooKeeperCluster]:
    """A standalone ZooKeeper serving TLS (``secure_hosts``) with ``zk_tls_files``, started
    on first use and kept for the session; the same rules as ``zk_cluster``."""
    yield from _running_cluster(1, zk_tls_files)


@pytest.fixture(scope="session")
def zk_tls_ensemble(zk_tls_files: TLSFiles) -> Iterator[ZooKeeperCluster]:
    """A 3-node ensemble serving TLS to clients (quorum traffic stays plain), started on
    first use; the same rules as ``zk_ensemble``."""
    yield from _running_cluster(3, zk_tls_files)


@pytest.fixture(scope="session")
def zk_hosts(request: pytest.FixtureRequest) -> str:
    """``host:port[,host:port...]`` of the servers under test."""
    hosts = os.environ.get(ZK_HOSTS_ENV, "").strip()
    if hosts:
        logger.info("using ZooKeeper at %s from $%s", hosts, ZK_HOSTS_ENV)
        return hosts
    cluster: ZooKeeperCluster = request.getfixturevalue("zk_cluster")
    return cluster.hosts


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A throwaway ``redis-server`` on a free port of 127.0.0.1 (in memory only), started
    by the first test that asks for it and stopped at the end of the session (per xdist
    worker). Raises :class:`~aiozklock.testing.RedisUnavailableForTests` without one."""
    from ._redis import RedisServer

    with RedisServer() as server:
        yield server


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL on a free port of 127.0.0.1, started on first use and kept for
    the session; stopped, and its data thrown away, at the end. Tests share it: give each
    test its own table names (or database)."""
    from ._postgres import PostgresServer

    with PostgresServer() as server:
        yield server


@pytest.fixture(scope="session")
def redis_url(request: pytest.FixtureRequest) -> str:
    """``redis://...`` of the Redis under test: ``$AIOZKLOCK_REDIS_URL`` if set, else the
    ``redis_server`` fixture's."""
    url = os.environ.get(REDIS_URL_ENV, "").strip()
    if url:
        logger.info("using Redis at %s from $%s", url, REDIS_URL_ENV)
        return url
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url


@pytest.fixture(scope="session")
def pg_dsn(request: pytest.FixtureRequest) -> str:
    """A ``postgresql://`` DSN of a server to test against (superuser ``postgres``):
    ``$AIOZKLOCK_PG_DSN`` if set, else ``pg_server``'s."""
    dsn = os.environ.get(PG_DSN_ENV, "").strip()
    if dsn:
        logger.info("using PostgreSQL at $%s", PG_DSN_ENV)
        return dsn
    server: PostgresServer = request.getfixturevalue("pg_server")
    return server.dsn


@pytest.fixture
def zk_chroot() -> str:
    """A fresh chroot for one test: its nodes cannot collide with any other test's."""
    from ._connector import fresh_chroot

    return fresh_chroot()


@pytest.fixture(scope="session")
def zk_connect(zk_hosts: str) -> ZooKeeperConnector:
    """Makes clients of ``zk_hosts`` in the test's body, each in a fresh chroot unless given
    one: ``async with zk_connect() as zk:``, ``zk_connect(chroot=zk.chroot)`` for another
    session in the same tree (:class:`~aiozklock.testing.ZooKeeperConnector`).

    Session-scoped, so a hypothesis ``@given`` test may use it: a client made in the body is
    one per example, where ``zk_client`` (one per test, function-scoped) fails hypothesis's
    ``function_scoped_fixture`` health check. Works under any async test host."""
    from ._connector import ZooKeeperConnector

    return ZooKeeperConnector(zk_hosts)


@pytest.fixture
def zk_client(request: pytest.FixtureRequest) -> ZooKeeperClient:
    """A client (its own session) rooted in ``zk_chroot``; closed after the test.

    Connected in the event loop that runs the test, by the plugin that runs it: pytest-asyncio
    (``@pytest.mark.asyncio``, or ``asyncio_mode = "auto"``; in the test's ``loop_scope``) or
    anyio's (``@pytest.mark.anyio``, on the test's ``anyio_backend``). This fixture adds no
    parameter of its own. Fails the test, with the reason, if neither plugin runs it (a sync
    test, or an async one without a mark in strict mode), or if both were asked to (a test
    pytest-asyncio runs that also uses ``anyio_backend``, e.g. marked ``anyio`` under
    ``asyncio_mode = "auto"``: anyio's plugin may then run its async fixtures in another loop).
    """
    client: ZooKeeperClient = request.getfixturevalue(_client_fixture_for(request))
    return client


def _client_fixture_for(request: pytest.FixtureRequest) -> str:
    """The name of the client fixture that the plugin running the test runs in its loop."""
    item = request.node
    anyio_runs_fixtures = "anyio_backend" in request.fixturenames
    if _PYTEST_ASYNCIO and isinstance(item, pytest.Item) and pytest_asyncio.is_async_test(item):
        if anyio_runs_fixtures:
            # pytest-asyncio runs the test, and anyio's plugin may run its async fixtures (in
            # another event loop): a client made there would be unusable in the test.
            pytest.fail(
                f"{item.nodeid}: zk_client: this test is run by pytest-asyncio and also uses "
                "anyio_backend (@pytest.mark.anyio, or a fixture that requests it): one plugin "
                "per test. Under asyncio_mode = 'auto', drop @pytest.mark.anyio",
                pytrace=False,
            )
        return _ASYNCIO_CLIENT.format(_asyncio_loop_scope(item))
    if anyio_runs_fixtures:
        return "_zk_client_anyio"
    pytest.fail(
        f"{item.nodeid}: zk_client needs an async test run by pytest-asyncio "
        "(@pytest.mark.asyncio, or asyncio_mode = 'auto') or by anyio's plugin "
        "(@pytest.mark.anyio): the client lives in the test's event loop",
        pytrace=False,
    )


def _asyncio_loop_scope(item: pytest.Item) -> str:
    """The scope of the event loop pytest-asyncio runs ``item`` in: its marker's
    ``loop_scope``, else ``asyncio_default_test_loop_scope``."""
    marker = item.get_closest_marker("asyncio")
    scope = None
    if marker is not None:
        scope = marker.kwargs.get("loop_scope") or marker.kwargs.get("scope")
    if scope is None:
        try:
            scope = item.config.getini("asyncio_default_test_loop_scope")
        except ValueError:  # an older pytest-asyncio: every test in its own loop
            scope = None
    return str(scope or "function")


@contextlib.asynccontextmanager
async def _connected(hosts: str, chroot: str) -> AsyncIterator[ZooKeeperClient]:
    import aiozklock

    async with aiozklock.connect(hosts + chroot, session_timeout=4.0) as client:
        yield client


# One fixture per host, requested by zk_client for the test's host only: a fixture that
# declared ``anyio_backend`` would make anyio's plugin run it (in its own event loop, on
# every backend it parametrises) under pytest-asyncio too.
@pytest.fixture
async def _zk_client_anyio(zk_hosts: str, zk_chroot: str) -> AsyncIterator[ZooKeeperClient]:
    """zk_client for a test run by anyio's plugin, which runs this fixture (it runs the async
    fixtures of a test that uses ``anyio_backend``) in the test's event loop."""
    async with _connected(zk_hosts, zk_chroot) as client:
        yield client


_ASYNCIO_CLIENT = "_zk_client_asyncio_{}"
_LoopScope = Literal["function", "class", "module", "package", "session"]
_LOOP_SCOPES: tuple[_LoopScope, ...] = ("function", "class", "module", "package", "session")


def _asyncio_client_fixture(loop_scope: _LoopScope) -> object:
    """zk_client for a pytest-asyncio test whose loop has scope ``loop_scope``: it runs in
    that loop (a client is bound to one)."""

    async def client(zk_hosts: str, zk_chroot: str) -> AsyncIterator[ZooKeeperClient]:
        async with _connected(zk_hosts, zk_chroot) as connected:
            yield connected

    return pytest_asyncio.fixture(
        client, loop_scope=loop_scope, name=_ASYNCIO_CLIENT.format(loop_scope)
    )


if _PYTEST_ASYNCIO:
    for _scope in _LOOP_SCOPES:
        globals()[_ASYNCIO_CLIENT.format(_scope)] = _asyncio_client_fixture(_scope)
