"""Holds each kind of deadline once and prints them beside the clocks, for
tests/test_clock.py, which runs it in a Linux time namespace whose CLOCK_BOOTTIME is offset
from CLOCK_MONOTONIC (``unshare --time --boottime SECONDS``).

    python tests/_boottime_holder.py HOSTS SESSION_TIMEOUT TTL

One JSON line: for each step, the CLOCK_BOOTTIME instants read just before it began
(``*_before``) and once held (``*_after``), and what the library said meanwhile.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import anyio

import aiozklock
import aiozklock.sync
from aiozklock.testing import session_of


def boottime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


async def held_async(hosts: str, session_timeout: float, ttl: float) -> dict[str, Any]:
    report: dict[str, Any] = {"lock_before": boottime()}
    async with aiozklock.connect(hosts, session_timeout=session_timeout) as zk:
        report["timeout"] = zk.negotiated_timeout
        lock = zk.lock("/locks/boottime")
        async with lock:
            report["valid_until"] = lock.valid_until
            report["is_held"] = lock.is_held
            report["last_heard"] = session_of(zk).last_heard
            report["monotonic"] = time.monotonic()
            report["lock_after"] = boottime()
        lease = zk.lease_lock("/leases/boottime", ttl=ttl)
        report["lease_before"] = boottime()
        async with lease:
            report["expires_at"] = lease.expires_at
            report["lease_valid_until"] = lease.valid_until
            report["lease_is_held"] = lease.is_held
            report["lease_after"] = boottime()
    return report


def held_sync(hosts: str, timeout: float) -> dict[str, Any]:
    report: dict[str, Any] = {"sync_before": boottime()}
    with aiozklock.sync.connect(hosts, session_timeout=timeout) as zk, zk.lock("/s") as lock:
        lock.check()  # raises if it judged the holding past its validity
        report["sync_valid_until"] = lock.valid_until
        report["sync_is_held"] = lock.is_held
        report["sync_after"] = boottime()
    return report


def main() -> None:
    hosts, timeout, ttl = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    report = anyio.run(held_async, hosts, timeout, ttl)
    report.update(held_sync(hosts, timeout))
    report["clock"], report["boottime"] = aiozklock.clock(), boottime()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
