"""The plugin's fixtures, and a user's own ``async with connect()`` fixture, in a user's test
suite run by each host: pytest-asyncio (auto and strict modes) and anyio's plugin (asyncio
and trio). Each suite is a small project run by pytest in a subprocess (the hosts' plugins
keep global state: two sessions in one process would share it), against this run's server
(``AIOZKLOCK_ZK_HOSTS``: no other server is started)."""

from __future__ import annotations

import pytest

from aiozklock.testing.pytest_plugin import ZK_HOSTS_ENV

pytest_plugins = ["pytester"]

# Each suite: the plugin's zk_client holds a lock; the user's own fixture holds one that
# zk_client (another session) sees; under pytest-asyncio, the user's module- and
# session-scoped clients (their loop too) last across tests, with zk_client in that loop.
IMPORTS = """
import uuid

import pytest
import pytest_asyncio
import sniffio

import aiozklock

PATH = "/locks/job"
"""

COMMON = """

async def test_the_plugins_client_holds_a_lock(zk_client):
    assert sniffio.current_async_library() == LIBRARY
    async with zk_client.lock(PATH):
        assert len(await zk_client.get_children(PATH)) == 1


async def test_a_users_own_client_holds_a_lock(own, zk_client):
    async with own.lock(PATH):
        assert len(await zk_client.get_children(PATH)) == 1  # seen by another session
    assert await own.get_children(PATH, missing_ok=True) == []
"""

WIDER_LOOPS = """
SHARED = "/shared-" + uuid.uuid4().hex[:8]
seen = []


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def module_client(zk_hosts):
    async with aiozklock.connect(zk_hosts) as client:
        yield client


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def session_client(zk_hosts):
    async with aiozklock.connect(zk_hosts) as client:
        yield client


@pytest.mark.asyncio(loop_scope="module")
async def test_module_loop_first(module_client, zk_client):
    await module_client.create(SHARED, ephemeral=True)
    seen.append(module_client.session_id)
    async with zk_client.lock(PATH):
        assert len(await zk_client.get_children(PATH)) == 1


@pytest.mark.asyncio(loop_scope="module")
async def test_module_loop_second(module_client):
    assert [module_client.session_id] == seen  # the same session, still open
    assert await module_client.exists(SHARED) is not None


@pytest.mark.asyncio(loop_scope="session")
async def test_session_loop(session_client, zk_client):
    async with session_client.lock(PATH):
        assert len(await session_client.get_children(PATH)) == 1
    async with zk_client.lock(PATH):
        assert len(await zk_client.get_children(PATH)) == 1
"""

ASYNCIO_INI = "asyncio_default_fixture_loop_scope = function\n"


def anyio_conftest(backend: str) -> str:
    return f"import pytest\n\n\n@pytest.fixture\ndef anyio_backend():\n    return {backend!r}\n"


# host: (ini lines, conftest, the user's fixture decorator, module mark, its tests, library)
HOSTS = {
    "asyncio-auto": (
        "asyncio_mode = auto\n" + ASYNCIO_INI,
        "",
        "@pytest.fixture",
        "",
        COMMON + WIDER_LOOPS,
        "asyncio",
    ),
    "asyncio-strict": (
        "asyncio_mode = strict\n" + ASYNCIO_INI,
        "",
        "@pytest_asyncio.fixture",
        "pytestmark = pytest.mark.asyncio",
        COMMON + WIDER_LOOPS,
        "asyncio",
    ),
    "anyio-asyncio": (
        "",
        anyio_conftest("asyncio"),
        "@pytest.fixture",
        "pytestmark = pytest.mark.anyio",
        COMMON,
        "asyncio",
    ),
    "anyio-trio": (
        "",
        anyio_conftest("trio"),
        "@pytest.fixture",
        "pytestmark = pytest.mark.anyio",
        COMMON,
        "trio",
    ),
}

OWN_FIXTURE = """

{decorator}
async def own(zk_hosts, zk_chroot):
    async with aiozklock.connect(zk_hosts + zk_chroot) as client:  # what a user writes first
        yield client
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("host", list(HOSTS))
def test_a_users_suite_runs_under_each_host(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, zk_hosts: str, host: str
) -> None:
    ini, conftest, decorator, mark, tests, library = HOSTS[host]
    pytester.makeini(f"[pytest]\n{ini}")
    if conftest:
        pytester.makeconftest(conftest)
    module = f"{IMPORTS}\nLIBRARY = {library!r}\n{mark}\n{tests}"
    pytester.makepyfile(test_users=module + OWN_FIXTURE.format(decorator=decorator))
    monkeypatch.setenv(ZK_HOSTS_ENV, zk_hosts)
    result = pytester.runpytest_subprocess(
        "-v", "-p", "no:randomly", "-p", "no:random_order", "-p", "no:cacheprovider", timeout=90
    )
    expected = 2 if host.startswith("anyio") else 5
    result.assert_outcomes(passed=expected)
    # No backend parametrisation is forced on the suite: each test runs once, on its host.
    result.stdout.no_fnmatch_line("*[[]asyncio[]]*")
    result.stdout.no_fnmatch_line("*[[]trio[]]*")


MISUSES = {
    # No plugin runs a sync test's event loop.
    "sync-test": ("asyncio_mode = strict", "def test_sync(zk_client):\n    pass\n"),
    # pytest-asyncio runs the test, anyio's plugin its async fixtures (in its own loop).
    "two-hosts": (
        "asyncio_mode = auto",
        "import pytest\n\n\n@pytest.mark.anyio\nasync def test_both(zk_client):\n    pass\n",
    ),
}


@pytest.mark.parametrize("misuse", list(MISUSES))
def test_a_test_no_single_host_runs_is_told_why(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, zk_hosts: str, misuse: str
) -> None:
    ini, tests = MISUSES[misuse]
    pytester.makeini(f"[pytest]\n{ini}\n{ASYNCIO_INI}")
    pytester.makeconftest(anyio_conftest("asyncio"))
    pytester.makepyfile(test_misuse=tests)
    monkeypatch.setenv(ZK_HOSTS_ENV, zk_hosts)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    reason = "needs an async test run by" if misuse == "sync-test" else "one plugin per test"
    result.stdout.fnmatch_lines([f"*zk_client*{reason}*"])
