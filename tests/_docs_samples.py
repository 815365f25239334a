"""The code samples of README.md and the docs site, and what they run with.

A page's ```python blocks are run in order, in one namespace per page (a page reads top to
bottom: a later block may use what an earlier one defined), with a connected client ``zk``
and the stand-ins below for the application's own functions. Example placeholders
(``zk1:2181,zk2:2181,zk3:2181``, ``ca.pem``, ``host="cache"``, ``postgresql+asyncpg://app@db/x``)
are replaced by the real servers of the test session. A block preceded by the line
``<!-- fragment -->`` is only compiled; a block that defines ``test_*`` functions is a test
module, run by pytest.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiozklock

REPO = Path(__file__).resolve().parent.parent
FRAGMENT = "<!-- fragment -->"
_FENCE = re.compile(
    r"^(?P<indent>[ ]*)```python[^\n]*\n(?P<body>.*?)^(?P=indent)```[ ]*$", re.M | re.S
)


@dataclass(frozen=True)
class Sample:
    page: str  # relative to the repository
    line: int  # of the opening fence
    source: str
    fragment: bool

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def is_test_module(self) -> bool:
        return bool(re.search(r"^(async )?def test_", self.source, re.M))


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def samples_of(page: Path) -> list[Sample]:
    text = page.read_text()
    found = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip().rsplit("\n", 1)[-1].strip()
        indent = len(match["indent"])
        source = "\n".join(line[indent:] for line in match["body"].splitlines())
        found.append(
            Sample(
                page=str(page.relative_to(REPO)),
                line=text.count("\n", 0, match.start()) + 1,
                source=source + "\n",
                fragment=before == FRAGMENT,
            )
        )
    return found


def all_samples() -> list[Sample]:
    return [sample for page in pages() for sample in samples_of(page)]


@dataclass
class Servers:
    """The test session's servers, for the placeholders."""

    zk_hosts: str  # with the test's chroot
    zk_tls_hosts: str | None = None
    tls_files: dict[str, str] | None = None  # placeholder file name -> real path
    pg_dsn: str | None = None
    redis_host_port: tuple[str, int] | None = None


_ZK_HOSTS = re.compile(r"zk1(?P<port>:\d+)?,zk2(?::\d+)?,zk3(?::\d+)?")


def needs(sample: Sample) -> set[str]:
    """Which servers a sample needs beyond the plain ZooKeeper."""
    wanted = set()
    if any(match["port"] == ":2281" for match in _ZK_HOSTS.finditer(sample.source)):
        wanted.add("tls")
    if re.search(r"\bdsn\b|\bdb\b|postgresql\+\w+://|\bOrder\b", sample.source):
        wanted.add("postgres")
    if 'host="cache"' in sample.source:
        wanted.add("redis")
    return wanted


def substitute(source: str, servers: Servers) -> str:
    def hosts(match: re.Match[str]) -> str:
        if match["port"] == ":2281":
            assert servers.zk_tls_hosts is not None
            return servers.zk_tls_hosts
        return servers.zk_hosts

    source = _ZK_HOSTS.sub(hosts, source)
    for placeholder, path in (servers.tls_files or {}).items():
        source = source.replace(f'"{placeholder}"', repr(path))
    if servers.pg_dsn is not None:
        rest = servers.pg_dsn.split("://", 1)[1]
        source = re.sub(r"(postgresql\+\w+)://app@db/\w+", rf"\1://{rest}", source)
    if servers.redis_host_port is not None:
        host, port = servers.redis_host_port
        source = source.replace('host="cache"', f'host="{host}", port={port}')
    return source


# ---------------------------------------------------------------------------------------
# Stand-ins for the application's own code. Each checks what the sample hands it: a
# fencing token must be a real one (a positive int), so a sample that passes something
# else fails.


def _check_token(token: object) -> None:
    assert token is None or (isinstance(token, int) and token > 0), f"bad token {token!r}"


async def _work(*args: Any, fencing_token: Any = None, fencing_tokens: Any = None) -> None:
    _check_token(fencing_token)


def _blocking_work(*args: Any, fencing_token: Any = None, fencing_tokens: Any = None) -> None:
    _check_token(fencing_token)
    for token in (fencing_tokens or {}).values():
        _check_token(token)


def _write(*args: Any, fencing_token: Any = None) -> None:
    _check_token(fencing_token)


class _Store:
    def __init__(self) -> None:
        self.writes: list[tuple[object, int]] = []

    async def write(self, item: object, *, fencing_token: int) -> None:
        _check_token(fencing_token)
        self.writes.append((item, fencing_token))


async def _remaining_chunks() -> AsyncIterator[int]:
    for chunk in range(3):
        yield chunk


async def _compute() -> bytes:
    return b"computed"


def blocking(page: Path) -> bool:
    """A page about blocking code (``aiozklock.sync``, kazoo): its samples run in a worker
    thread, and the application's functions that they call are plain functions."""
    return "import aiozklock.sync" in page.read_text()


def stand_ins(*, blocking: bool = False) -> dict[str, Any]:
    """The names a sample may use without defining them (besides ``zk`` and ``hosts``):
    ``aiozklock`` itself, and the application's own objects (plain functions on a
    ``blocking`` page)."""
    work = _blocking_work if blocking else _work
    return {
        "aiozklock": aiozklock,
        "store": _Store(),
        "order": 157,
        "amount": 10,
        "new_config": b"config v2",
        "write": _write,
        "remaining_chunks": _remaining_chunks,
        "compute_config": _compute,
        "compute_order": _compute,
        **{
            name: work
            for name in (
                "ship",
                "ship_order",
                "transfer",
                "run_nightly_job",
                "run_query",
                "build_report",
                "process",
                "load_catalog",
                "rebuild_catalog",
            )
        },
    }


ORDERS_TABLE = """
SELECT pg_advisory_xact_lock(157);
CREATE TABLE IF NOT EXISTS orders
    (id int PRIMARY KEY, status text, fence bigint NOT NULL DEFAULT 0);
INSERT INTO orders (id, status) VALUES (157, 'new') ON CONFLICT (id) DO NOTHING;
"""


def order_model() -> type:
    """The SQLAlchemy model a sample calls ``Order`` (the ``orders`` table above)."""
    from sqlalchemy import BigInteger, Integer, Text
    from sqlalchemy.orm import DeclarativeBase, mapped_column

    class Base(DeclarativeBase):
        pass

    class Order(Base):
        __tablename__ = "orders"
        id = mapped_column(Integer, primary_key=True)
        status = mapped_column(Text)
        fence = mapped_column(BigInteger)

    return Order
