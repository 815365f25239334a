"""Hypothesis ``@given`` tests with a ZooKeeper client per example: the plugin's session-scoped
``zk_connect`` (a :class:`ZooKeeperConnector`) makes them in the test's body, each in a
chroot of its own, under anyio's plugin and under pytest-asyncio."""

from __future__ import annotations

import pytest
import pytest_asyncio  # noqa: F401  (its plugin runs the asyncio-marked test)
from hypothesis import given, settings
from hypothesis import strategies as st

from aiozklock.testing import ZooKeeperConnector

NAMES = st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=4, unique=True)
EXAMPLES = settings(max_examples=8, deadline=None)  # connecting takes what it takes


async def _one_example(zk_connect: ZooKeeperConnector, names: list[str], seen: set[str]) -> None:
    """A fresh tree for this example, shared by a second session on request."""
    async with zk_connect() as zk, zk_connect(chroot=zk.chroot) as other:
        assert zk.chroot not in seen
        seen.add(zk.chroot)
        assert await zk.get_children("/", missing_ok=True) == []  # nothing of an earlier example
        await zk.ensure_path("/")
        for name in names:
            await zk.create(f"/{name}", b"")
        assert sorted(await other.get_children("/")) == sorted(names)
        assert other.session_id != zk.session_id


SEEN_ANYIO: set[str] = set()
SEEN_ASYNCIO: set[str] = set()


@pytest.mark.anyio
@EXAMPLES
@given(names=NAMES)
async def test_each_example_has_its_own_client_and_chroot_under_anyio(
    zk_connect: ZooKeeperConnector, names: list[str]
) -> None:
    await _one_example(zk_connect, names, SEEN_ANYIO)


@pytest.mark.asyncio
@EXAMPLES
@given(names=NAMES)
async def test_each_example_has_its_own_client_and_chroot_under_pytest_asyncio(
    zk_connect: ZooKeeperConnector, names: list[str]
) -> None:
    await _one_example(zk_connect, names, SEEN_ASYNCIO)


def test_a_connector_keeps_the_chroot_of_its_hosts_and_validates() -> None:
    connector = ZooKeeperConnector("127.0.0.1:2181,127.0.0.1:2182/app")
    assert connector.hosts == "127.0.0.1:2181,127.0.0.1:2182"
    client = connector()  # not connected: nothing is sent until `async with`
    assert client.chroot.startswith("/app/aiozklock-test-")
    assert connector(chroot="/shared").chroot == "/shared"
    with pytest.raises(ValueError, match="chroot"):
        connector(chroot="relative")
