"""What a new user's first mistakes are answered (issue 32, item 3): a missing extra names
the ``pip install`` that fixes it, a URL given as hosts names its scheme and the expected
format, ``start()`` inside ``with`` is harmless, and the testing page's pytest-asyncio
configuration runs without pytest-asyncio's deprecation warning."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import aiozklock
from aiozklock.testing import RedisServer, ZooKeeperCluster

REPO = Path(__file__).resolve().parent.parent
HANG_BOUND = 120  # a Python process or a JVM start on a loaded machine; a hang bound


@pytest.mark.parametrize(
    ("hosts", "scheme", "without"),
    [
        ("http://zk:2181", "http", "'zk:2181'"),
        ("zk://zk1:2181,zk2:2181/app", "zk", "'zk1:2181,zk2:2181/app'"),
        ("zookeeper://127.0.0.1", "zookeeper", "'127.0.0.1'"),
        ("HTTPS://zk:2181/", "HTTPS", "'zk:2181/'"),
    ],
)
def test_a_url_as_hosts_names_its_scheme_and_the_expected_format(
    hosts: str, scheme: str, without: str
) -> None:
    with pytest.raises(aiozklock.InvalidArgument) as raised:
        aiozklock.connect(hosts)
    message = str(raised.value)
    assert f"the scheme {scheme!r}" in message
    assert "'host:port[,host:port...][/chroot]'" in message
    assert f"(here: {without})" in message
    assert "empty segment" not in message


def test_a_connection_string_with_a_colon_in_its_chroot_is_no_url() -> None:
    assert aiozklock.connect("zk:2181/a:b").chroot == "/a:b"


# A finder that makes `blocked` (and its submodules) missing, as if not installed.
_BLOCKER = """
import sys

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Blocker())
try:
    import {module}
except ImportError as exc:
    print(type(exc).__name__, exc)
else:
    print("imported")
"""


def _import_without(module: str, blocked: str) -> str:
    code = _BLOCKER.format(blocked=blocked, module=module)
    run = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=HANG_BOUND,
        check=True,
    )
    return run.stdout.strip()


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [("aiozklock.fastapi", "fastapi", "fastapi"), ("aiozklock.otel", "opentelemetry", "otel")],
)
def test_a_missing_extra_names_the_install_command(module: str, blocked: str, extra: str) -> None:
    printed = _import_without(module, blocked)
    assert printed == (
        f"ModuleNotFoundError {module} needs {blocked}, which is not installed: "
        f"pip install 'aiozklock[{extra}]'"
    )


def test_a_missing_dependency_of_an_installed_extra_is_not_disguised() -> None:
    printed = _import_without("aiozklock.fastapi", "starlette")
    assert printed.startswith("ModuleNotFoundError No module named 'starlette")
    assert "pip install" not in printed


@pytest.mark.timeout(2 * HANG_BOUND)
def test_start_inside_with_is_harmless(tmp_path: Path) -> None:
    with ZooKeeperCluster(1, base_dir=tmp_path) as cluster:  # `with` started it
        hosts, pids = cluster.hosts, [member.pid for member in cluster.members]
        assert cluster.start() is cluster
        assert (cluster.hosts, [member.pid for member in cluster.members]) == (hosts, pids)
        assert cluster.members[0].mode() == "standalone"
    assert [member.pid for member in cluster.members] == [None]
    assert cluster.work_dir is None


def test_redis_start_inside_with_is_harmless() -> None:
    with RedisServer() as redis:
        url, pid = redis.url, redis.pid
        assert redis.start() is redis
        assert (redis.url, redis.pid) == (url, pid)
    assert redis.pid is None


# ---- the testing page's pytest-asyncio configuration, against the installed pytest-asyncio


def _documented(language: str, containing: str) -> str:
    """The one ```language block of docs/testing.md that contains ``containing``."""
    text = (REPO / "docs" / "testing.md").read_text()
    blocks = re.findall(rf"^```{language}\n(.*?)^```", text, re.M | re.S)
    found = [block for block in blocks if containing in block]
    assert len(found) == 1, f"{len(found)} {language} blocks contain {containing!r}"
    return str(found[0])


def _pytest(directory: Path, zk_hosts: str, *args: str) -> str:
    """pytest in ``directory`` with pytest-asyncio and our plugin only: another plugin's
    deprecation warnings are not the configuration's (and loading fewer is faster)."""
    plugins = ("-p", "pytest_asyncio.plugin", "-p", "aiozklock.testing.pytest_plugin")
    env = {"AIOZKLOCK_ZK_HOSTS": zk_hosts, "PYTHONPATH": str(REPO)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *plugins, *args],
        cwd=directory,
        env={**os.environ, **env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        capture_output=True,
        text=True,
        timeout=HANG_BOUND,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    return output


@pytest.mark.timeout(3 * HANG_BOUND)
def test_the_documented_auto_mode_configuration_warns_nothing(
    tmp_path: Path, zk_hosts: str
) -> None:
    config = _documented("toml", 'asyncio_mode = "auto"')
    (tmp_path / "pyproject.toml").write_text(config)
    (tmp_path / "test_auto.py").write_text(_documented("python", "pytest_asyncio.fixture"))
    output = _pytest(tmp_path, zk_hosts, "-W", "error::DeprecationWarning")
    assert re.search(r"\b2 passed\b", output), output
    assert "Warning" not in output, output

    # The control: without its loop-scope line, the installed pytest-asyncio warns.
    unset = "\n".join(
        line for line in config.splitlines() if "asyncio_default_fixture_loop_scope" not in line
    )
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent(unset) + "\n")
    output = _pytest(tmp_path, zk_hosts, "--collect-only", "-q")
    assert 'The configuration option "asyncio_default_fixture_loop_scope" is unset' in output
