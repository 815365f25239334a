"""Every code sample of README.md and the docs site runs (see tests/_docs_samples.py for
how): the docs cannot drift from the code. A page's samples run in order in one test, on
the test session's real ZooKeeper (and PostgreSQL, Redis, a TLS server where a sample needs
one); samples marked ``<!-- fragment -->`` are compiled only, and must stay few."""

from __future__ import annotations

import ast
import inspect
import os
import re
import subprocess
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import pytest

import aiozklock
from tests._docs_samples import (
    ORDERS_TABLE,
    REPO,
    Sample,
    Servers,
    all_samples,
    blocking,
    needs,
    order_model,
    pages,
    samples_of,
    stand_ins,
    substitute,
)

MAX_FRAGMENTS = 8
# Nodes the samples' application already has (the fencing page writes them).
APPLICATION_NODES = ("/config/current", "/config/history", "/config/draft")
SAMPLE_BOUND = 60.0  # a hang guard, not a timing assertion


def _runnable(page: Path) -> list[Sample]:
    return [s for s in samples_of(page) if not s.fragment and not s.is_test_module]


RUNNABLE_PAGES = [page for page in pages() if _runnable(page)]
TEST_MODULES = [sample for sample in all_samples() if sample.is_test_module and not sample.fragment]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the samples' database drivers are asyncio-only


def _compile(sample: Sample, source: str) -> Any:
    # Padded so that a traceback's line numbers are the page's own.
    padded = "\n" * sample.line + source
    return compile(padded, sample.page, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def test_every_sample_compiles_and_fragments_stay_few() -> None:
    samples = all_samples()
    assert len(samples) > 30, "too few samples found: the extraction is wrong"
    for sample in samples:
        _compile(sample, sample.source)
    fragments = [sample.name for sample in samples if sample.fragment]
    assert len(fragments) <= MAX_FRAGMENTS, f"too many samples are not run: {fragments}"


def _servers(request: pytest.FixtureRequest, samples: list[Sample], hosts: str) -> Servers:
    wanted = set().union(*(needs(sample) for sample in samples))
    chroot = request.getfixturevalue("zk_chroot")
    servers = Servers(zk_hosts=hosts)
    if "tls" in wanted:
        files = request.getfixturevalue("zk_tls_files")
        servers.zk_tls_hosts = request.getfixturevalue("zk_tls_cluster").secure_hosts + chroot
        servers.tls_files = {
            "ca.pem": str(files.ca),
            "client.pem": str(files.client_cert),
            "client.key": str(files.client_key),
        }
    if "postgres" in wanted:
        servers.pg_dsn = request.getfixturevalue("pg_dsn")
    if "redis" in wanted:
        url = urlsplit(request.getfixturevalue("redis_url"))
        assert url.hostname is not None
        assert url.port is not None
        servers.redis_host_port = (url.hostname, url.port)
    return servers


async def _with_postgres(stack: AsyncExitStack, dsn: str, namespace: dict[str, Any]) -> None:
    import asyncpg

    db = await asyncpg.connect(dsn)
    stack.push_async_callback(db.close)
    await db.execute(ORDERS_TABLE)
    namespace.update(dsn=dsn, db=db, Order=order_model())


async def _run(
    sample: Sample, source: str, namespace: dict[str, Any], *, blocks: bool = False
) -> None:
    code = _compile(sample, source)
    try:
        with anyio.fail_after(SAMPLE_BOUND):
            if code.co_flags & inspect.CO_COROUTINE:  # top-level await
                await eval(code, namespace)
            elif re.search(r"\b(anyio|asyncio|trio)\.run\(", source) or blocks:
                # It runs its own loop, or blocks (aiozklock.sync, kazoo), which in this
                # event loop's thread would block the loop (aiozklock.sync refuses to).
                await anyio.to_thread.run_sync(exec, code, namespace)
            else:
                exec(code, namespace)
    except BaseException as exc:
        exc.add_note(f"in the code sample at {sample.name}")
        raise


@pytest.mark.anyio
@pytest.mark.parametrize(
    "page", RUNNABLE_PAGES, ids=[str(page.relative_to(REPO)) for page in RUNNABLE_PAGES]
)
async def test_the_samples_of_a_page_run(
    page: Path,
    request: pytest.FixtureRequest,
    zk_hosts: str,
    zk_chroot: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    samples = _runnable(page)
    hosts = zk_hosts + zk_chroot
    servers = _servers(request, samples, hosts)  # started before our session: they block
    monkeypatch.setenv("AIOZKLOCK_HOSTS", hosts)  # the quickstart's script reads it
    blocks = blocking(page)
    namespace: dict[str, Any] = {"__name__": "docs_sample", **stand_ins(blocking=blocks)}
    async with AsyncExitStack() as stack:
        zk = await stack.enter_async_context(aiozklock.connect(hosts))
        if servers.pg_dsn is not None:
            await _with_postgres(stack, servers.pg_dsn, namespace)
        for node in APPLICATION_NODES:
            await zk.ensure_path(node)
        for sample in samples:
            # Each sample's zk is "your client": one that an earlier sample connected (and
            # closed) under that name is not it.
            namespace.update(zk=zk, hosts=hosts)
            await _run(sample, substitute(sample.source, servers), namespace, blocks=blocks)


@pytest.mark.timeout(300)  # a pytest run of its own
@pytest.mark.parametrize("sample", TEST_MODULES, ids=[sample.name for sample in TEST_MODULES])
def test_a_sample_test_module_passes(
    sample: Sample, request: pytest.FixtureRequest, zk_hosts: str, tmp_path: Path
) -> None:
    """A sample that is a test module passes under pytest, with the plugin, on this
    session's servers; without the anyio mark it is pytest-asyncio's, in auto mode."""
    env = {**os.environ, "AIOZKLOCK_ZK_HOSTS": zk_hosts, "PYTHONPATH": str(REPO)}
    if "pg_dsn" in sample.source:
        env["AIOZKLOCK_PG_DSN"] = request.getfixturevalue("pg_dsn")
    module = tmp_path / "test_sample.py"
    module.write_text(sample.source)
    mode = [] if "pytest.mark.anyio" in sample.source else ["-o", "asyncio_mode=auto"]
    run = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"),
            *("-o", "asyncio_default_fixture_loop_scope=function", *mode, str(module)),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, f"{sample.name}:\n{run.stdout}\n{run.stderr}"
    assert re.search(r"\d+ passed", run.stdout)
    assert "failed" not in run.stdout
