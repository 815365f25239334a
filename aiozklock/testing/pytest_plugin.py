"""pytest plugin: ZooKeeper server fixtures.

Registered through the ``pytest11`` entry point ``aiozklock``; without the package installed
use ``-p aiozklock.testing.pytest_plugin``. Fixtures:

- ``zk_cluster``: a standalone server, started once per session;
- ``zk_ensemble``: a 3-node ensemble, started lazily by the first test that asks for it;
- ``zk_hosts``: the connection string: ``$AIOZKLOCK_ZK_HOSTS`` if set (no local server is
  started then), else ``zk_cluster.hosts``;
- ``zk_chroot``: a fresh chroot path per test (``/aiozklock-test-<random>``);
- ``zk_client``: an ``aiozklock`` client rooted in that chroot, closed after the test (an
  async fixture for anyio tests: ``@pytest.mark.anyio``);
- ``zk_tls_files``: a CA, server and client certificates (:class:`TLSFiles`), made once per
  session; ``zk_tls_cluster`` / ``zk_tls_ensemble``: a standalone server / a 3-node
  ensemble serving TLS with them (``secure_hosts``; ``hosts`` stays plain), each started by
  the first test that asks for it. These are always local servers.

Without a local ZooKeeper and without ``AIOZKLOCK_ZK_HOSTS`` the fixtures fail with
:class:`~aiozklock.testing.ZooKeeperUnavailableForTests` (never a silent skip: CI must not
pass by not testing). Process faults (kill, pause) need the local fixtures.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from aiozklock import ZooKeeperClient

    from ._server import ZooKeeperCluster
    from ._tls import TLSFiles

__all__ = [
    "ZK_HOSTS_ENV",
    "zk_chroot",
    "zk_client",
    "zk_cluster",
    "zk_ensemble",
    "zk_hosts",
    "zk_tls_cluster",
    "zk_tls_ensemble",
    "zk_tls_files",
]

logger = logging.getLogger(__name__)

ZK_HOSTS_ENV = "AIOZKLOCK_ZK_HOSTS"


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


@pytest.fixture
def zk_chroot() -> str:
    """A fresh chroot for one test: its nodes cannot collide with any other test's."""
    return f"/aiozklock-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def zk_client(
    zk_hosts: str, zk_chroot: str, anyio_backend: object
) -> AsyncIterator[ZooKeeperClient]:
    """A client (its own session) rooted in ``zk_chroot``; closed after the test."""
    import aiozklock

    async with aiozklock.connect(zk_hosts + zk_chroot, session_timeout=4.0) as client:
        yield client
