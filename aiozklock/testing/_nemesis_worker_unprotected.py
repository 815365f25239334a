"""The negative control's critical section: a holder that ignores the loss of its lock.

It runs shielded from the loss policy's cancellation (the notification is not heard), makes
no pre-write check, and keeps writing with its old token, for its planned pauses and then,
once it has seen that its lock is gone, for ``linger`` more seconds: past the server's expiry
of its session, and so past the next grant. With the store's fence off too, the history
must then show overlapping holders and stale writes accepted; that it does is the proof that
the checker sees what it reports absent in a protected run.
"""

from __future__ import annotations

import time

import anyio

from ._nemesis_worker_config import Held, Section, WorkerSink

__all__ = ["act_ignoring_loss"]

#: Between two writes of a holder that lingers after its loss.
_LINGER_STEP = 0.1


async def act_ignoring_loss(
    primitive: Held, section: Section, pauses: list[float], sink: WorkerSink, linger: float
) -> str:
    """The section's fenced reads, pauses and writes, whatever happens to the lock; returns
    its outcome: ``ignored-loss`` if it saw the loss (and went on), else ``completed``."""
    lost_at: float | None = None
    with anyio.CancelScope(shield=True):
        counters: dict[str, int] = {}
        stores = () if section.shared or section.shares_resource else section.resources
        for resource in stores:
            _, counters[resource] = await sink.read(resource, section.token)
        planned = list(pauses)
        while planned or (lost_at is not None and time.monotonic() < lost_at + linger):
            await anyio.sleep(planned.pop(0) if planned else _LINGER_STEP)
            if lost_at is None and not primitive.is_held:
                lost_at = time.monotonic()  # seen, and ignored
            if section.shared:
                continue
            await sink.before_write()
            if section.shares_resource:
                section.acts.append(time.monotonic())
            for resource in stores:
                await sink.write(resource, section.token, counters[resource] + 1)  # any verdict
                counters[resource] += 1
    return "ignored-loss" if lost_at is not None else "completed"
