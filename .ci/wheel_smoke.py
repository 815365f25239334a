"""The wheel's smoke test, run by .ci/wheel-smoke.sh; never imports the repository's tests.

    python wheel_smoke.py check-wheel DIST_DIR   # any Python: what the wheel holds
    python wheel_smoke.py run VERSION            # in a clean venv with only the wheel installed

`run` imports the installed package, runs its `aiozklock` script, starts a throwaway
ZooKeeper with the package's own test kit (or uses $AIOZKLOCK_ZK_HOSTS), takes a lock and
runs `aiozklock run` against it; then it installs pytest (the venv is no longer clean) and
runs a one-file suite in a temp directory that only the plugin's entry point can serve.
Each step prints what it did; any failure exits non-zero.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

HANG_BOUND = 30.0  # seconds: a hang guard for each step, not a timing check


def say(message: str) -> None:
    print(f"  {message}", flush=True)


def check(condition: bool, message: str) -> None:
    if not condition:
        raise SystemExit(f"wheel smoke: FAILED: {message}")


def check_wheel(dist: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = sorted({name.split("/")[0] for name in names})
    say(f"{wheel.name}: {len(names)} files, top-level: {', '.join(tops)}")
    info = next(top for top in tops if top.endswith(".dist-info"))
    check(tops == ["aiozklock", info], f"only the package and its dist-info, got {tops}")
    check(not [n for n in names if re.search(r"(^|/)(tests?|conftest\.py)(/|$)", n)], "tests")
    for required in ("aiozklock/py.typed", f"{info}/licenses/LICENSE", f"{info}/licenses/NOTICE"):
        check(required in names, f"{required} is missing")
    license_text = zipfile.ZipFile(wheel).read(f"{info}/licenses/LICENSE").decode()
    check("TERMS AND CONDITIONS FOR USE" in license_text, "LICENSE is not the license's text")
    say("no tests/ or conftest.py; py.typed, LICENSE (the full Apache-2.0 text), NOTICE: present")


def run_cli(*args: str, expect: int = 0) -> str:
    script = Path(sysconfig.get_path("scripts")) / "aiozklock"
    done = subprocess.run(
        [str(script), *args], capture_output=True, text=True, timeout=HANG_BOUND, check=False
    )
    shown = shlex.join(args)
    check(
        done.returncode == expect,
        f"`aiozklock {shown}` exited {done.returncode}, expected {expect}:\n"
        f"{done.stdout}{done.stderr}",
    )
    say(f"`aiozklock {shown}`: exit {done.returncode} (expected {expect})")
    return done.stdout


@contextlib.contextmanager
def zookeeper() -> Iterator[str]:
    hosts = os.environ.get("AIOZKLOCK_ZK_HOSTS")
    if hosts:
        say(f"ZooKeeper: $AIOZKLOCK_ZK_HOSTS={hosts} (none started)")
        yield hosts
        return
    from aiozklock.testing import ZooKeeperCluster

    with ZooKeeperCluster(1) as cluster:  # free ports; stopped and removed on exit
        say(f"ZooKeeper: started a throwaway server with aiozklock.testing at {cluster.hosts}")
        yield cluster.hosts
    say("ZooKeeper: stopped")


async def lock_cycle(hosts: str, prefix: str) -> None:
    import anyio

    import aiozklock

    with anyio.fail_after(HANG_BOUND):
        async with aiozklock.connect(hosts) as zk:
            async with zk.lock(f"{prefix}/cycle") as lock:
                check(lock.is_held and (lock.fencing_token or 0) > 0, "lock held with a token")
                say(f"lock cycle: held {prefix}/cycle, fencing token {lock.fencing_token}")
                # Held here, so a non-blocking `aiozklock run` on it must find it taken.
                await anyio.to_thread.run_sync(
                    lambda: run_cli(
                        "run", "--hosts", hosts, "-n", f"{prefix}/cycle", "--", "true", expect=75
                    )
                )
            check(not lock.is_held, "released on leaving `async with`")
            say("lock cycle: released")


def run_under_lock(hosts: str, prefix: str) -> None:
    code = (
        "import os; print(os.environ['AIOZKLOCK_FENCING_TOKEN'], os.environ['AIOZKLOCK_LOCK_PATH'])"
    )
    out = run_cli(
        "run",
        "--hosts",
        hosts,
        "--timeout",
        "20",
        f"{prefix}/run",
        "--",
        sys.executable,
        "-c",
        code,
    )
    token, path = out.split()
    check(int(token) > 0 and path == f"{prefix}/run", f"the command saw token and path: {out!r}")
    say(f"`aiozklock run`: the command ran holding {path}, fencing token {token}")
    run_cli(
        "run",
        "--hosts",
        hosts,
        f"{prefix}/run",
        "--",
        sys.executable,
        "-c",
        "raise SystemExit(3)",
        expect=3,
    )


def run(version: str) -> None:
    import anyio

    import aiozklock

    site = Path(sysconfig.get_path("purelib"))
    where = Path(aiozklock.__file__).resolve()
    check(where.is_relative_to(site.resolve()), f"aiozklock imported from {where}, not {site}")
    check(aiozklock.__version__ == version, f"__version__ {aiozklock.__version__} != {version}")
    say(f"import aiozklock: {aiozklock.__version__} from {where.parent}")
    for absent in ("pytest", "mypy", "ruff", "hypothesis", "trio", "fastapi"):
        check(not _importable(absent), f"{absent} is installed: the venv is not clean")
    say("clean venv: no pytest, mypy, ruff, hypothesis, trio, fastapi")
    check("run a command while holding a lock" in run_cli("--help"), "--help lists `run`")
    check(run_cli("--version").strip() == version, "`aiozklock --version`")
    prefix = f"/aiozklock-wheel-smoke-{os.getpid()}"
    with zookeeper() as hosts:
        anyio.run(lock_cycle, hosts, prefix)
        run_under_lock(hosts, prefix)
        pytest_plugin(hosts)


def pytest_plugin(hosts: str) -> None:
    """pytest from PyPI, last: no conftest and no -p, so only the entry point gives the
    fixtures. The plugin uses this server ($AIOZKLOCK_ZK_HOSTS) instead of starting one."""
    pip = [sys.executable, "-m", "pip", "install", "-q", "pytest"]
    subprocess.run(pip, check=True, timeout=120, stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory(prefix="aiozklock-plugin-smoke-") as directory:
        Path(directory, "test_plugin_smoke.py").write_text(PYTEST_FILE)
        # -v: the header's "plugins:" line names the distributions whose entry points loaded.
        command = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider"]
        env = {**os.environ, "AIOZKLOCK_ZK_HOSTS": hosts}
        done = subprocess.run(
            command, cwd=directory, env=env, capture_output=True, text=True, timeout=120
        )
    print(textwrap.indent(done.stdout.strip(), "  | "), flush=True)
    check(done.returncode == 0, f"pytest exited {done.returncode}:\n{done.stderr}")
    say("pytest plugin: loaded from its entry point, zk_hosts and zk_client served the tests")


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


PYTEST_FILE = '''\
"""No conftest and no -p: the fixtures come from the wheel's pytest11 entry point."""
import os

import pytest


def test_zk_hosts_fixture(zk_hosts):
    assert zk_hosts == os.environ["AIOZKLOCK_ZK_HOSTS"]


@pytest.mark.anyio
async def test_zk_client_takes_a_lock(zk_client):
    async with zk_client.lock("/smoke") as lock:
        assert lock.fencing_token > 0
'''


def main() -> None:
    command, arg = sys.argv[1:3]
    if command == "check-wheel":
        check_wheel(Path(arg))
    elif command == "run":
        run(arg)
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
