"""The local queue of one recipe object: its holding goes to one task of this process at a
time, the others wait in FIFO order. It is ``anyio.Semaphore(1, max_value=1)``, made only
once a task has to wait: an uncontended object (the usual one, and every one of thousands
held at once) keeps a flag instead of a semaphore and its waiters' deque (about 800 bytes).
"""

from __future__ import annotations

import anyio


class LocalGate:
    """``anyio.Semaphore(1, max_value=1)``'s ``acquire_nowait``, ``acquire``, ``release``
    and ``value``, plus ``tasks_waiting``; the semaphore exists only while contended. A
    semaphore, not a lock, so that an orphaned holding can be given back from another task."""

    __slots__ = ("_free", "_semaphore")

    def __init__(self) -> None:
        self._free = True  # while there is no semaphore
        self._semaphore: anyio.Semaphore | None = None

    @property
    def value(self) -> int:
        """1 if free, else 0."""
        semaphore = self._semaphore
        return int(self._free) if semaphore is None else semaphore.value

    @property
    def tasks_waiting(self) -> int:
        """How many tasks wait in ``acquire()``."""
        semaphore = self._semaphore
        return 0 if semaphore is None else semaphore.statistics().tasks_waiting

    def acquire_nowait(self) -> None:
        """Take it at once, or raise ``anyio.WouldBlock``."""
        semaphore = self._semaphore
        if semaphore is not None:
            semaphore.acquire_nowait()
        elif self._free:
            self._free = False
        else:
            raise anyio.WouldBlock

    async def acquire(self) -> None:
        """Take it, waiting in FIFO order (anyio's semaphore: cancellable, and a permit
        handed to a task cancelled meanwhile is passed on)."""
        semaphore = self._semaphore
        if semaphore is None:
            semaphore = self._semaphore = anyio.Semaphore(int(self._free), max_value=1)
        await semaphore.acquire()

    def release(self) -> None:
        """Give it back (to the first waiter, if any). Raises ``ValueError`` if it is free."""
        semaphore = self._semaphore
        if semaphore is None:
            if self._free:
                raise ValueError("the local gate was released while free")
            self._free = True
            return
        semaphore.release()
        # Free and nobody waiting: nobody can be inside the semaphore (a woken waiter holds
        # the permit), so the flag takes over again.
        if semaphore.value and not semaphore.statistics().tasks_waiting:
            self._semaphore = None
            self._free = True


__all__ = ("LocalGate",)
