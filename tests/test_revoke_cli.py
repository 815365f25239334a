"""``aiozklock revoke PATH [--wait S]`` (issue 33, item 2): its exit status says what
happened (0 the holder let go, 1 no holder, 77 not revocable, 75 not gone in time, 64 bad
usage). A real subprocess, bounded (bad usage, which contacts nothing, in this process)."""

from __future__ import annotations

import uuid

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


async def test_on_a_read_write_path_every_reader_is_counted_and_named(
    zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    """Issue 37, item 7: beside a reader that is not revocable (ours) the status is 77 even
    though another reader was asked; with every reader asked and one still there, 75; the
    message names each reader that still holds."""
    path = PATH + "-rw"
    ours = Holder(zk.rw_lock(path).read_lock)
    name = f"_c_{uuid.uuid4()}-__READ__"  # a Curator reader's, empty data: perhaps revocable
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(ours.hold)
            await ours.held.wait()
            curator = await zk.create(f"{path}/{name}", ephemeral=True, sequential=True)
            mixed = await _cli("revoke", "--hosts", hosts, "--wait", "0.2", path)
            ours.done.set()
        late = await _cli("revoke", "--hosts", hosts, "--wait", "0.2", path)  # Curator's alone
        other = await zk.create(f"{path}/{name}", ephemeral=True, sequential=True)
        both = await _cli("revoke", "--hosts", hosts, "--wait", "0.2", path)
    assert mixed.returncode == 77, mixed.stderr
    said = mixed.stderr.decode()
    assert f"2 of 2 holders of {path} still hold (1 asked, 0 let go)" in said
    assert f"not written to: {ours.node}" in said
    assert f"did not let go within 0.2 s (may not be revocable): {curator}" in said
    assert late.returncode == 75
    assert b"did not let go within 0.2 s (it may not be revocable)" in late.stderr
    assert both.returncode == 75
    assert f"2 of 2 holders of {path} still hold (2 asked, 0 let go)" in both.stderr.decode()
    assert f"{curator}, {other}" in both.stderr.decode()
