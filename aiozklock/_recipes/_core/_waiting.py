"""Waiting for a wake-up (a watch or a session state change) within an acquire's deadline."""

from __future__ import annotations

import time

import anyio

from aiozklock._exceptions import LockTimeout


async def wait_woken(woken: anyio.Event, deadline: float | None, message: str) -> None:
    """Wait until ``woken`` is set, or raise ``LockTimeout(message)`` at ``deadline``."""
    if deadline is None:
        await woken.wait()
        return
    with anyio.move_on_after(deadline - time.monotonic()):
        await woken.wait()
    if not woken.is_set():
        raise LockTimeout(message)


__all__ = ("wait_woken",)
