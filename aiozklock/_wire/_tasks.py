"""The current task and the backend's checkpoints, looked up cheaply: every acquire and
release needs the calling task, and anyio's ``get_current_task()`` finds the backend anew
(sniffio) and builds a ``TaskInfo`` each time. A session lives in one event loop, so its
``Tasks`` chooses the backend once, as the session chooses its event class.

``TaskRef`` is what the recipes keep of a task (its id, name and coroutine, as anyio's
``TaskInfo``); the public statistics still give an anyio ``TaskInfo``, built only when asked
(``TaskRef.info()``).
"""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from aiozklock._wire._connection import running_asyncio_loop


class TaskRef:
    """A task as the recipes keep it: ``id`` (anyio's task id: ``id()`` of the backend's
    task), ``name`` and ``coro`` (as ``anyio.TaskInfo`` has them), and the task itself."""

    __slots__ = ("coro", "id", "name", "task")

    def __init__(self, task: Any, name: str | None, coro: Any) -> None:
        self.task = task
        self.id = id(task)
        self.name = name
        self.coro = coro

    def info(self) -> anyio.TaskInfo:
        """The task as ``anyio.get_current_task()`` would describe it (for statistics)."""
        task = self.task
        try:
            if isinstance(task, asyncio.Task):
                from anyio._backends._asyncio import AsyncIOTaskInfo

                if task.get_coro() is not None:
                    return AsyncIOTaskInfo(task)
            elif "trio" in sys.modules:
                from anyio._backends._trio import TrioTaskInfo

                return TrioTaskInfo(task)
        except ImportError:  # an anyio without them: the generic description below
            pass
        return anyio.TaskInfo(self.id, None, self.name, self.coro)

    def __repr__(self) -> str:
        return f"TaskRef(id={self.id!r}, name={self.name!r})"


class Tasks:
    """The running backend's task lookup and checkpoints, chosen once (in the session's
    event loop).

    ``current()``: the calling task, as a ``TaskRef``; ``current_id()``: its id only;
    ``checkpoint_if_cancelled()``: anyio's, without its backend lookup;
    ``cancelled``: the backend's cancellation exception class; ``cancel_scope()``: a new
    anyio cancel scope (not entered)."""

    __slots__ = ("cancel_scope", "cancelled", "checkpoint_if_cancelled", "current", "current_id")

    def __init__(self) -> None:
        from anyio._core._eventloop import get_async_backend

        backend = get_async_backend()
        self.checkpoint_if_cancelled: Callable[[], Awaitable[None]] = (
            backend.checkpoint_if_cancelled
        )
        self.cancelled: type[BaseException] = backend.cancelled_exception_class()
        self.cancel_scope: Callable[[], anyio.CancelScope] = backend.create_cancel_scope
        loop = running_asyncio_loop()
        if loop is not None:
            self.current, self.current_id = _asyncio_lookups(loop)
        else:
            self.current, self.current_id = _trio_lookups()


def _current_task_of(loop: asyncio.AbstractEventLoop) -> Callable[[], Any]:
    """``asyncio.current_task(loop)`` without a Python frame: on Python 3.11 that function
    is Python, over a dict of the C module (``_current_tasks``); from 3.12 it is C."""
    running = getattr(asyncio.tasks, "_current_tasks", None)
    if sys.version_info < (3, 12) and isinstance(running, dict):
        return functools.partial(running.get, loop)
    return functools.partial(asyncio.current_task, loop)


def _asyncio_lookups(
    loop: asyncio.AbstractEventLoop,
) -> tuple[Callable[[], TaskRef], Callable[[], int]]:
    current_task = _current_task_of(loop)

    def current() -> TaskRef:
        task = current_task()
        if task is None:
            raise RuntimeError("There is no task currently running")
        return TaskRef(task, task.get_name(), task.get_coro())

    def current_id() -> int:
        task = current_task()
        if task is None:
            raise RuntimeError("There is no task currently running")
        return id(task)

    return current, current_id


def _trio_lookups() -> tuple[Callable[[], TaskRef], Callable[[], int]]:
    import trio

    current_task = trio.lowlevel.current_task

    def current() -> TaskRef:
        task = current_task()
        return TaskRef(task, task.name, task.coro)

    def current_id() -> int:
        return id(current_task())

    return current, current_id


__all__ = ("TaskRef", "Tasks")
