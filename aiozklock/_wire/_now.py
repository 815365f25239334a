"""The one clock of every deadline: ``uptime()``.

A holding's validity is a race against the servers' clocks, which run on while this machine
is suspended (a laptop's lid, a VM paused by its host). ``time.monotonic()`` does not, on
Linux (CLOCK_MONOTONIC) nor on macOS (``mach_absolute_time``): after a resume, a deadline
on it is late by the whole suspend, and ``valid_until``/``is_held`` would vouch for a
holding whose session the server may have expired long ago. So every instant that is a
deadline, or is compared with one (the liveness clock's, ``valid_until``, ``is_held``, a
lease's ``expires_at``, lock-delay's waits, acquire and request time-outs), is ``uptime()``:

* Linux (and Android): ``CLOCK_BOOTTIME``, CLOCK_MONOTONIC plus the time suspended;
* macOS: ``clock_gettime(CLOCK_MONOTONIC)``, which on Darwin counts sleep (unlike
  ``time.monotonic()`` there);
* elsewhere: ``time.monotonic()``. On Windows it is ``GetTickCount64()`` before Python
  3.13, which Microsoft documents as counting sleep and hibernation, and
  ``QueryPerformanceCounter()`` from 3.13; on the BSDs, CLOCK_MONOTONIC. We have not
  verified either across a suspend (docs/safety.md, "What it assumes").

Event loops time their sleeps on their own clock (CLOCK_MONOTONIC for asyncio and trio), so
a wait until an ``uptime()`` deadline is turned into a relative sleep at the moment of
sleeping. A sleep across a suspend wakes late by the suspend: which is why every decision
re-reads ``uptime()`` when it wakes and on every frame, rather than trusting that it slept as
long as it asked.

No import of the project: anything may import it.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable


def _pick() -> tuple[Callable[[], float], str]:
    """The clock for this platform, and its name (``CLOCK``)."""
    if sys.platform.startswith("linux") or sys.platform == "android":
        clock_id, name = getattr(time, "CLOCK_BOOTTIME", None), "CLOCK_BOOTTIME"
    elif sys.platform == "darwin":
        clock_id, name = getattr(time, "CLOCK_MONOTONIC", None), "CLOCK_MONOTONIC"
    else:
        clock_id, name = None, ""
    if clock_id is not None:
        try:
            time.clock_gettime(clock_id)
        except OSError:  # a kernel without it (Linux < 2.6.39)
            pass
        else:
            # A partial, not a def: it is read on every request and every frame, and a
            # partial of a C function costs no Python frame.
            return functools.partial(time.clock_gettime, clock_id), name
    return time.monotonic, "time.monotonic()"


#: ``uptime()``: seconds on the clock of every deadline; ``CLOCK``: its name.
uptime, CLOCK = _pick()


def clock() -> float:
    """Seconds on the clock of every deadline aiozklock reports: ``valid_until``, a lease's
    ``expires_at`` (``lock.valid_until - aiozklock.clock()`` is what is left).

    It counts the time the machine is suspended, which ``time.monotonic()`` does not on
    Linux and macOS: ``CLOCK_BOOTTIME`` on Linux, ``clock_gettime(CLOCK_MONOTONIC)`` on
    macOS, ``time.monotonic()`` elsewhere (see the safety page's assumptions). Its zero is
    arbitrary (the boot, on Linux): compare its instants, never read them as dates.
    """
    return uptime()


__all__ = ("CLOCK", "clock", "uptime")
