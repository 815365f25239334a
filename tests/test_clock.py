"""Every deadline is on ``aiozklock.clock()``: CLOCK_BOOTTIME on Linux, which counts the
time the machine was suspended (CLOCK_MONOTONIC, ``time.monotonic()``, does not).

A suspend cannot be made here. What can be made is a Linux time namespace in which
CLOCK_BOOTTIME is offset from CLOCK_MONOTONIC (``unshare --time --boottime``, root only):
there the two clocks differ by the offset, as they do after a suspend of that length, and
a deadline tells which one it was computed on. So this proves the scale every deadline is
on (a lock's ``valid_until`` and ``is_held``, the liveness clock's instants, a lease's
``expires_at`` and ``valid_until``, the sync face's ``valid_until`` and ``check()``), and
that the clock is read where the decisions are made; it does not prove the event loop's
behaviour across a real suspend (its timers run on CLOCK_MONOTONIC and wake late: the
decisions re-read the clock when they wake, which this cannot exercise).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest

import aiozklock
from tests._docs_samples import REPO
from tests._sync_processes import environment

OFFSET = 1000.0  # seconds of "suspend" the namespace's boottime is ahead
SESSION_TIMEOUT = 2.0
TTL = 3.0


def test_the_clock_is_boottime_on_linux() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("CLOCK_BOOTTIME is Linux's")
    before = time.clock_gettime(time.CLOCK_BOOTTIME)
    now = aiozklock.clock()
    assert before <= now <= time.clock_gettime(time.CLOCK_BOOTTIME)


def _time_namespaces() -> bool:
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    probe = ["unshare", "--time", "--boottime", "1", "true"]
    return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0


@pytest.mark.skipif(not _time_namespaces(), reason="needs Linux time namespaces (root)")
def test_every_deadline_counts_a_suspend(hosts: str) -> None:
    command = [
        "unshare",
        "--time",
        "--boottime",
        str(int(OFFSET)),
        sys.executable,
        "tests/_boottime_holder.py",
        hosts,
        str(SESSION_TIMEOUT),
        str(TTL),
    ]
    done = subprocess.run(
        command, cwd=REPO, env=environment(hosts), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    # The namespace holds: boottime is OFFSET ahead of monotonic there (a "suspend").
    assert seen["lock_after"] - seen["monotonic"] >= OFFSET - 1
    assert seen["lock_before"] <= seen["clock"] <= seen["boottime"]

    # A session-bound holding: the send time of an answered request (between the step's
    # two readings) plus 90 % of the timeout, on the boottime scale; on time.monotonic()'s
    # it would be OFFSET seconds short, and vouch for a holding OFFSET seconds too long
    # after a real suspend.
    margin = 0.9 * seen["timeout"]
    assert seen["lock_before"] + margin <= seen["valid_until"] <= seen["lock_after"] + margin
    assert seen["lock_before"] <= seen["last_heard"] <= seen["lock_after"]
    assert seen["is_held"] is True
    # The lease: the renewal's send time plus the TTL; valid until 10 % of the TTL before.
    assert seen["lease_before"] + TTL <= seen["expires_at"] <= seen["lease_after"] + TTL
    assert seen["lease_valid_until"] == pytest.approx(seen["expires_at"] - 0.1 * TTL)
    assert seen["lease_is_held"] is True
    # The sync face: check() passed (it compares with the same clock), and its valid_until.
    sync_range = (seen["sync_before"] + margin, seen["sync_after"] + margin)
    assert sync_range[0] <= seen["sync_valid_until"] <= sync_range[1]
    assert seen["sync_is_held"] is True
