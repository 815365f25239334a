"""The liveness clock's allowance for a slow ping reply.

Silence is declared half the session timeout after the last frame heard. An idle client pings
every sixth of the timeout, so a ping reply has a third of the timeout (Java's client allows
the same: pings at a third, silence at two thirds) before a healthy connection is taken for a
silent one: with pings every third, it had only a sixth, and a JVM pause of 0.35 s was enough
to suspend a 2 s session.
"""

from __future__ import annotations

import anyio
import pytest

from aiozklock import SessionState
from aiozklock.testing import FaultProxy, Opcode
from tests.conftest import ClientFactory
from tests.test_faults import StateLog

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

TIMEOUT = 12.0
# Halfway between the old allowance (timeout/6) and the new one (timeout/3): a whole
# timeout/12 (1 s) of margin either way, for a loaded machine's scheduling.
SLOW_REPLY = TIMEOUT / 4


async def test_a_ping_reply_late_by_a_quarter_of_the_timeout_is_not_silence(
    proxy: FaultProxy, open_client: ClientFactory
) -> None:
    client = await open_client(proxy, session_timeout=TIMEOUT)
    states = StateLog(client)
    await client.exists("/")  # the last exchange: answered at once
    pings = proxy.count(Opcode.PING)
    proxy.set_delay(SLOW_REPLY)  # from now on, every request is answered late

    with anyio.fail_after(TIMEOUT):  # a hang bound: the idle ping comes at timeout/6
        await proxy.wait_for_request(Opcode.PING, pings + 1)
    async with anyio.create_task_group() as tg:

        async def stop_at_suspended() -> None:
            await states.wait_for(lambda c: c.state is SessionState.SUSPENDED)
            tg.cancel_scope.cancel()

        tg.start_soon(stop_at_suspended)
        # Queued behind the ping (requests are answered in order): once this returns, the
        # ping's late reply has been heard.
        with anyio.fail_after(2 * TIMEOUT):  # a hang bound
            await client.exists("/")
        tg.cancel_scope.cancel()
    proxy.set_delay(0)
    assert states.states() == [], states.changes
    assert client.state is SessionState.CONNECTED
