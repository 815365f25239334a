"""The test kit's throwaway PostgreSQL: ``PostgresServer`` serves until closed and leaves
nothing behind; the plugin's ``pg_dsn`` in a user's suite starts one server on first use
only, kept for the session, or uses ``$AIOZKLOCK_PG_DSN``."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import asyncpg
import pytest

from aiozklock.testing import PostgresServer, PostgresStartError
from aiozklock.testing.pytest_plugin import PG_DSN_ENV
from tests._pg import anyio_backend

pytest_plugins = ["pytester"]

__all__ = ["anyio_backend"]  # a fixture, imported to be used here


@pytest.mark.anyio
async def test_server_serves_until_closed_and_leaves_nothing() -> None:
    with PostgresServer() as server:
        work_dir, dsn = server.work_dir, server.dsn
        assert work_dir is not None
        assert work_dir.is_dir()
        conn = await asyncpg.connect(dsn)
        assert await conn.fetchval("SHOW fsync") == "off"
        await conn.close()
        # and on its Unix socket, in its own temp dir
        conn = await asyncpg.connect(host=str(server.socket_dir), port=server.port, user="postgres")
        assert await conn.fetchval("SELECT 1") == 1
        await conn.close()
    assert not work_dir.exists()
    with pytest.raises(ConnectionRefusedError):  # nothing listens there any more
        await asyncpg.connect(dsn, timeout=10)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another user")
def test_a_base_dir_the_server_user_cannot_reach_is_refused(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    with pytest.raises(PostgresStartError, match="cannot reach"):
        PostgresServer(base_dir=private).start()
    assert list(private.iterdir()) == []


SUITE = """
import pathlib
import tempfile
import uuid

import asyncpg
import pytest

from aiozklock.fencing import PostgresFence


def servers():
    return sorted(pathlib.Path(tempfile.gettempdir()).glob("aiozklock-pg-*"))


def test_1_a_test_without_pg_dsn_starts_no_server():
    assert servers() == []


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_2_pg_dsn_serves(pg_dsn):
    assert len(servers()) == EXPECTED_SERVERS
    conn = await asyncpg.connect(pg_dsn)
    fence = PostgresFence("fence_" + uuid.uuid4().hex[:12])
    await fence.create_table(conn)
    async with conn.transaction():
        await fence.advance(conn, "orders/1", 34)
    assert await fence.current(conn, "orders/1") == 34
    await conn.execute(f"DROP TABLE {fence.table}")
    await conn.close()


def test_3_the_server_lasts_for_the_session(pg_dsn):
    assert len(servers()) == EXPECTED_SERVERS
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("from_env", [False, True])
def test_a_users_suite_gets_a_server_on_first_use_only(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, pg_dsn: str, from_env: bool
) -> None:
    # The suite's own temp dir (one the server's user can reach): only its servers are there.
    private_tmp = Path(tempfile.mkdtemp(prefix="aiozklock-suite-"))
    private_tmp.chmod(0o755)
    try:
        monkeypatch.setenv("TMPDIR", str(private_tmp))
        if from_env:
            monkeypatch.setenv(PG_DSN_ENV, pg_dsn)
        else:
            monkeypatch.delenv(PG_DSN_ENV, raising=False)
        pytester.makepyfile(test_users=f"EXPECTED_SERVERS = {0 if from_env else 1}\n{SUITE}")
        result = pytester.runpytest_subprocess("-v", "-p", "no:randomly", timeout=90)
        result.assert_outcomes(passed=3)
        assert sorted(private_tmp.glob("aiozklock-pg-*")) == []  # stopped and removed
    finally:
        shutil.rmtree(private_tmp, ignore_errors=True)
