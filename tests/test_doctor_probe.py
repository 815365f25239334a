"""The doctor's server-clock probe when the connection keeps being lost (issue 30, item 6):
it asks again a bounded number of times, then gives up, says so, and the diagnosis ages
by this machine's clock; on real ZooKeeper, behind a fault proxy that loses the reply of
every probe."""

from __future__ import annotations

import logging

import anyio
import pytest

import aiozklock
from aiozklock._doctor._scan import CLOCK_ATTEMPTS
from aiozklock.testing import FaultProxy, Opcode
from tests.conftest import ClientFactory

pytestmark = [pytest.mark.anyio]

HANG = 30.0  # a hang bound, not a duration: unbounded, the probe asked for ever


async def _lose_every_probe(proxy: FaultProxy) -> None:
    """Lose the reply of every multi (only the probe sends one) and reset the connection."""
    seen = 0
    while True:
        proxy.arm_drop_after([Opcode.MULTI])
        seen += 1
        await proxy.wait_for_request(Opcode.MULTI, seen)  # targeted: arm the next one


async def test_a_clock_probe_whose_connection_keeps_dropping_gives_up_and_says_so(
    proxy: FaultProxy,
    open_client: ClientFactory,
    zk: aiozklock.ZooKeeperClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    doctor = await open_client(proxy)
    caplog.set_level(logging.WARNING, logger="aiozklock._doctor")
    async with zk.lock("/probe/job"):  # a holder: its age needs the server's clock
        proxy.reset_counters()
        with anyio.fail_after(HANG):
            async with anyio.create_task_group() as tg:
                tg.start_soon(_lose_every_probe, proxy)
                diagnosis = await doctor.diagnose("/probe")
                tg.cancel_scope.cancel()
    assert proxy.count(Opcode.MULTI) == CLOCK_ATTEMPTS  # asked again, within the bound
    assert diagnosis.clock == "local"  # ages by this machine's clock ...
    (queue,) = diagnosis.queues
    assert [h.session_id for h in queue.holders] == [zk.session_id]
    said = [r.getMessage() for r in caplog.records if r.name.startswith("aiozklock._doctor")]
    assert any("server's clock" in line and "this machine's" in line for line in said), said
