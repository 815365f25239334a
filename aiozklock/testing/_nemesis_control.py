"""The nemesis's negative control (``run_nemesis(unprotected=True)``, ``nemesis
--unprotected``): the same run with the protection switched off, which must fail.

Its workers ignore the loss of their lock (see :mod:`._nemesis_worker_unprotected`) and the
store's fence is off, and its schedule starts with a fault that costs the holder its session
while it holds: a black-hole of 1.5 session timeouts (a one-way cut as long, where the kinds
asked for have one and no black-hole) on a holder that means to act for 0.6-1.2 timeouts
more, and lingers 1.5 timeouts after it noticed the loss. The server expires
the session, grants the lock to a waiter, and the old holder keeps writing: overlapping
holders and accepted stale writes by construction, which the checker must report.
"""

from __future__ import annotations

from collections.abc import Collection

from aiozklock._recipes._traits import traits_of

from ._nemesis_plan import FaultGroup, FaultSpec, plan_faults

__all__ = ["check_unprotected", "control_plan"]

_WARMUP = 1.0


def check_unprotected(store: str, recipe: str) -> None:
    """Raises ``ValueError`` for a negative control that could not show a stale write: a
    real store (its fence cannot be switched off) or a recipe without a fenced store."""
    if store != "memory":
        raise ValueError(
            f"an unprotected run needs store='memory' (the fence of {store} cannot be switched off)"
        )
    if traits_of(recipe).shares_resource:
        raise ValueError(
            f"an unprotected run needs a recipe with a fenced store, not {recipe!r} (its "
            "holders share the resource)"
        )


def control_plan(
    seed: int,
    duration: float,
    session_timeout: float,
    kinds: Collection[str],
    *,
    sync_time: float = 1.0,
) -> list[FaultGroup]:
    """The negative control's schedule: first, after a second, a black-hole of the holder
    for 1.5 session timeouts (new connections hang: the session surely expires), or a
    one-way cut as long where ``kinds`` has one and no black-hole; then the seed's schedule
    of ``kinds`` in what is left of ``duration``."""
    if "one-way-cut" in kinds and "blackhole-long" not in kinds:
        expiry = FaultSpec("one-way-cut", "holder", 0.0, 1.5 * session_timeout, "long")
    else:
        expiry = FaultSpec("blackhole-long", "holder", 0.0, 1.5 * session_timeout, "hang")
    first = FaultGroup(1, _WARMUP, (expiry,))
    left = duration - _WARMUP - first.length
    rest = plan_faults(seed, left, session_timeout, kinds, warmup=1.0, sync_time=sync_time)
    return [first, *(FaultGroup(g.index + 1, g.gap, g.faults) for g in rest)]
