"""Writing the probes through the leader (``_leader``) and reading their answers: the glue
between the liveness clock's ``Tick.PROBE`` and the session's requests. No await: a probe
is numbered and framed at once; its answer arrives as a reply callback."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from aiozklock._exceptions import AiozklockError, SessionExpired
from aiozklock._wire._core import SessionCore
from aiozklock._wire._leader import PROBE_WAIT, LeaderProof, probe_op, relay_hops, standalone
from aiozklock._wire._multi import MultiResult
from aiozklock._wire._now import uptime

# The session logs on one logger, whichever of its modules speaks (docs/observability.md).
log = logging.getLogger("aiozklock._wire._session")

_SESSION_ERRORS = (SessionExpired,)


def write_probe(core: SessionCore, now: float, wake: Callable[[], None]) -> bytes:
    """The bytes of a probe written at ``now`` (the clock counted it written). ``wake`` is
    called when its answer is in (the clock then schedules the next one)."""
    _, probe = core.frame_now([probe_op()], None, partial(_probe_answered, core, now, wake), now)
    return probe


def server_kind(leader: LeaderProof, data: bytes | None) -> None:
    """``/zookeeper/config`` held ``data`` (None: it could not be read, e.g. a 3.4 server
    has none): a standalone server is its own leader, anything else is probed, over two
    hops where it lists observers (``relay_hops``)."""
    direct = data is not None and standalone(data)
    leader.hops = relay_hops(data)
    log.info(
        "ZooKeeper is %s",
        "a standalone server"
        if direct
        else "an ensemble: probing through the leader"
        + (" (observers: a touch may take two hops)" if leader.hops > 1 else ""),
    )
    leader.direct = direct


def _probe_answered(
    core: SessionCore,
    sent: float,
    wake: Callable[[], None],
    result: MultiResult | None,
    error: AiozklockError | None,
) -> None:
    proof = error is None and result is not None
    if proof and result is not None:
        failure = result.failure
        if failure is not None and isinstance(failure[1], _SESSION_ERRORS):
            log.warning("session 0x%x: the leader refused a probe: %s", core.session_id, failure[1])
            proof = False
    core.leader.answered(sent, uptime(), proof, core.timeout)
    wake()


def unproven_reason(core: SessionCore, now: float) -> str:
    """Why the clock dropped a connection with ``Tick.UNPROVEN``, with the numbers."""
    leader = core.leader
    outstanding = leader.outstanding
    if outstanding is not None and now - outstanding >= core.timeout * PROBE_WAIT:
        return (
            f"no answer through the leader for {now - outstanding:.3f} s "
            f"({PROBE_WAIT:.3g} of the session timeout): the server may be cut off from it"
        )
    keeper = "the server" if leader.direct else "the leader"
    return (
        f"{keeper} was last proven to know the session {now - core.proven:.3f} s ago "
        f"(session timeout {core.timeout:g} s): no answer since, whatever else arrived"
    )
