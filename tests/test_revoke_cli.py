"""``aiozklock revoke PATH [--wait S]`` (issue 33, item 2): its exit status says what
happened (0 the holder let go, 1 no holder, 77 not revocable, 75 not gone in time, 64 bad
usage). A real subprocess, bounded (bad usage, which contacts nothing, in this process)."""

from __future__ import annotations

import anyio
import pytest

import aiozklock
from aiozklock._cli import main
from tests.test_cli import _cli
from tests.test_revoke import Holder

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

PATH = "/locks/revoke-cli"
HANG = 30.0  # a hang bound, not a duration


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the command is a process: the backend changes nothing


async def test_the_exit_status_says_what_happened(
    zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    revocable, plain = Holder(zk.lock(PATH, revocable=True)), Holder(zk.lock(PATH + "-plain"))
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(revocable.hold)
            tg.start_soon(plain.hold)
            await revocable.held.wait()
            await plain.held.wait()
            let_go = await _cli("revoke", "--hosts", hosts, PATH)
            assert let_go.returncode == 0, let_go.stderr
            assert revocable.node in let_go.stdout.decode()
            assert isinstance(revocable.raised, aiozklock.LockRevoked)
            nobody = await _cli("revoke", "--hosts", hosts, "--wait", "1", PATH)
            assert nobody.returncode == 1
            assert b"nothing holds a lock at" in nobody.stderr
            refused = await _cli("revoke", "--hosts", hosts, PATH + "-plain")
            assert refused.returncode == 77
            assert b"is not revocable" in refused.stderr
            assert plain.lock.statistics().locked
            plain.done.set()
    # Bad usage is found before anything is contacted (in this process: no server needed).
    assert main(["revoke", "--hosts", "127.0.0.1:1", "relative/path"]) == 64
    with pytest.raises(SystemExit) as usage:
        main(["revoke", "--hosts", hosts, "--wait", "-1", PATH])
    assert usage.value.code == 64


async def test_a_holder_that_does_not_let_go_in_time_exits_75(
    zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    await zk.ensure_path(PATH)
    name = f"_c_{'0' * 8}-0000-0000-0000-{'0' * 12}-lock-"  # empty data: perhaps revocable
    await zk.create(f"{PATH}/{name}", ephemeral=True, sequential=True)
    with anyio.fail_after(HANG):
        late = await _cli("revoke", "--hosts", hosts, "--wait", "0.2", PATH)
    assert late.returncode == 75
    assert b"did not let go within 0.2 s (it may not be revocable)" in late.stderr
