"""The tests' clocks: their own instants are ``time.monotonic()`` (system-wide on Linux,
as asyncio's and trio's), the library's deadlines (``valid_until``, ``expires_at``, the
session's ``last_heard``) are ``aiozklock.clock()``, which counts a suspend. The two move
together while the machine runs; a test that compares them converts at the moment it reads."""

from __future__ import annotations

import time

import aiozklock


def on_monotonic(instant: float) -> float:
    """An ``aiozklock.clock()`` instant on ``time.monotonic()``'s scale (``-inf`` stays)."""
    return instant - aiozklock.clock() + time.monotonic()
