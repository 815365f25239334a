"""The test kit's throwaway Redis: ``RedisServer``, and the plugin's ``redis_server`` /
``redis_url`` fixtures in a user's suite (started only when a test asks for one,
``$AIOZKLOCK_REDIS_URL`` instead when set)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from aiozklock.testing import RedisServer, RedisUnavailableForTests
from aiozklock.testing._redis import ping
from aiozklock.testing.pytest_plugin import REDIS_URL_ENV

pytest_plugins = ["pytester"]


def test_a_server_answers_and_leaves_nothing_behind(tmp_path: Path) -> None:
    with RedisServer(base_dir=tmp_path) as server:
        assert server.port is not None
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        assert ping(server.port)
        pid = server.pid
        assert pid is not None
        assert Path(f"/proc/{pid}").exists()
        assert [path.name[:16] for path in tmp_path.iterdir()] == ["aiozklock-redis-"]
    assert server.pid is None
    assert not Path(f"/proc/{pid}").exists()  # stopped and reaped
    assert not ping(server.port)
    assert list(tmp_path.iterdir()) == []
    server.close()  # idempotent


def test_without_redis_server_the_error_says_how_to_get_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RedisUnavailableForTests, match="apt-get install redis-server"):
        RedisServer(base_dir=tmp_path).start()
    assert list(tmp_path.iterdir()) == []


def test_a_server_that_does_not_answer_fails_with_its_log_and_is_cleaned_up(
    tmp_path: Path,
) -> None:
    base = tmp_path / "base"
    base.mkdir()
    server = RedisServer(executable=shutil.which("false"), base_dir=base)
    with pytest.raises(RuntimeError, match="does not answer PING"):
        server.start(timeout=10)
    assert server.pid is None
    assert list(base.iterdir()) == []


# A redis-server on PATH that records each start, then runs the real one.
WRAPPER = """#!/bin/sh
echo started >> {marker}
exec {real} "$@"
"""

USERS_SUITE = """
import socket
from urllib.parse import urlsplit


def test_without_redis():
    pass


def test_with_redis(redis_url):
    address = urlsplit(redis_url)
    with socket.create_connection((address.hostname, address.port), timeout=5) as sock:
        sock.sendall(b"PING\\r\\n")
        assert sock.recv(64).startswith(b"+PONG")
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("selection", "from_env", "starts"),
    [("test_without_redis", False, 0), ("", False, 1), ("", True, 0)],
    ids=["unused: nothing started", "used: one server", "AIOZKLOCK_REDIS_URL: none started"],
)
def test_the_plugin_starts_redis_only_for_tests_that_ask(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    redis_url: str,
    selection: str,
    from_env: bool,
    starts: int,
) -> None:
    real = shutil.which("redis-server")
    assert real is not None
    bin_dir = pytester.path / "bin"
    bin_dir.mkdir()
    marker = pytester.path / "starts.log"
    wrapper = bin_dir / "redis-server"
    wrapper.write_text(WRAPPER.format(marker=marker, real=real))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    if from_env:
        monkeypatch.setenv(REDIS_URL_ENV, redis_url)  # this run's server
    else:
        monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    pytester.makepyfile(test_users=USERS_SUITE)
    args = ["-p", "no:randomly", "-p", "no:cacheprovider"]
    result = pytester.runpytest_subprocess(*args, *(["-k", selection] if selection else []))
    result.assert_outcomes(passed=1 if selection else 2)
    lines = marker.read_text().splitlines() if marker.exists() else []
    assert len(lines) == starts
