"""The core's seam for the faces built on it (the sync face, FastAPI's dependencies): what
they may ask of a recipe object besides its public API, in one place, so that no face reads
an engine's private state. Each function takes the object (a ``Handle``) and a task id (the
face's own task for the caller: a thread's proxy task, a request's task)."""

from __future__ import annotations

from aiozklock._exceptions import LockLost, NotLockOwner
from aiozklock._recipes._core._handle import Handle
from aiozklock._recipes._core._holding import Holding


def label(handle: Handle) -> str:
    """What the object is called in messages, e.g. ``"lock /locks/a"``."""
    return handle._label


async def acquire(handle: Handle, limit: float | None) -> None:
    """Take it for the current task within ``limit`` seconds (None: no limit), as
    ``acquire(timeout=limit)`` does, without the awaitable wrapper a face does not need."""
    await handle._acquire(limit)


def holds(handle: Handle, task_id: int) -> bool:
    """``is_held`` for the task ``task_id``: held by it, not lost, within ``valid_until``."""
    return handle._holds(task_id)


def holding(handle: Handle, task_id: int) -> Holding | None:
    """The holding the task ``task_id`` holds through ``handle`` (lost or not), or None."""
    try:
        engine = handle._held_engine("")
    except NotLockOwner:
        return None
    held = engine._holding
    if held is None or not engine._held_by_task(task_id):
        return None
    return held


def lost_error(handle: Handle) -> type[LockLost]:
    """The class a loss of ``handle`` raises (``LeadershipLost`` for an election)."""
    return getattr(handle, "_lost_error", LockLost)


def check(handle: Handle, task_id: int, owner: str = "the current task") -> None:
    """Raise unless the task ``task_id`` holds ``handle`` and it is still certainly ours:
    ``NotLockOwner`` (``owner`` names the caller in its message) if it does not hold it, the
    loss (``LockRevoked`` if revoked, else the recipe's ``LockLost``) if it was lost, or
    ``LockLost`` once past ``valid_until`` (its loss may follow). Sends nothing."""
    if handle._holds(task_id):
        return
    held = holding(handle, task_id)
    if held is None:
        raise NotLockOwner(f"{owner} does not hold the {handle._label}")
    if held.lost:
        raise handle._held_engine("")._loss(held)
    raise lost_error(handle)(
        f"{handle._label} is no longer certainly ours: past its valid_until (the process was "
        "paused, or the session has been silent); its loss may follow"
    )


def commit(handle: Handle) -> None:
    """The commit point of an integration (FastAPI's ``Commit``): from now on a loss no
    longer cancels the bodies entered so far (the holding is still marked lost, and its
    release raises it), because what they wait for has been sent and cannot be called
    back."""
    handle._held_engine("")._detach_bodies()


__all__ = ("acquire", "check", "commit", "holding", "holds", "label", "lost_error")
