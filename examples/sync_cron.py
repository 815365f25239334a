"""A cron job that runs on many machines but must run once at a time: "skip if another run
is active", with aiozklock's synchronous API.

    */5 * * * *  AIOZKLOCK_HOSTS=zk1:2181,zk2:2181,zk3:2181 python examples/sync_cron.py

Exit status (the same as ``aiozklock run``'s): 0 the job ran, 75 (``EX_TEMPFAIL``) skipped
because another run holds the lock, 69 (``EX_UNAVAILABLE``) no ZooKeeper answered, 70 the
lock was lost while the job ran (it stopped at its next step, and its last write was
refused if it came after the loss).

The job's steps write through the lock: each step first checks that the lock is still held
(``lock.check()``), and the result is written with ``guard=lock``, which ZooKeeper refuses
(nothing written) if the lock's node is gone.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

import aiozklock
import aiozklock.sync

EX_UNAVAILABLE, EX_SOFTWARE, EX_TEMPFAIL = 69, 70, 75
STEPS = 3


def run_job(zk: aiozklock.sync.SyncClient, lock: aiozklock.sync.SyncLock, out: Path) -> None:
    """The job itself: a few steps, then its result written under the lock's guard."""
    for step in range(STEPS):
        lock.check()  # LockLost if the lock was lost: stop before doing more
        with out.open("a") as log:  # stands for the real work (a report, a clean-up...)
            log.write(f"{os.getpid()} step {step} token {lock.fencing_token}\n")
    result = f"done by {socket.gethostname()} at {time.time():.0f}".encode()
    zk.ensure_path("/jobs")
    try:
        zk.create("/jobs/report", result, guard=lock)
    except aiozklock.NodeExistsError:
        zk.set_data("/jobs/report", result, guard=lock)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default=os.environ.get("AIOZKLOCK_HOSTS", "127.0.0.1:2181"))
    parser.add_argument("--lock", default="/locks/cron/report", help="the lock's path")
    parser.add_argument("--out", type=Path, default=Path("report.log"), help="the job's output")
    parser.add_argument(
        "--hold-until",
        type=Path,
        help="keep the lock, once the job is done, until this file exists (to show a second "
        "run skipping while this one holds)",
    )
    args = parser.parse_args(argv)
    try:
        with aiozklock.sync.connect(args.hosts, session_timeout=10.0) as zk:
            lock = zk.lock(args.lock, identifier=f"cron@{socket.gethostname()}")
            if not lock.try_acquire():
                print(f"{args.lock} is held by another run: skipped", file=sys.stderr)
                return EX_TEMPFAIL
            try:
                print(f"acquired {args.lock} (token {lock.fencing_token})", flush=True)
                run_job(zk, lock, args.out)
                while args.hold_until is not None and not args.hold_until.exists():
                    lock.check()
                    time.sleep(0.02)  # a long job, for the demonstration
            finally:
                lock.release()
    except aiozklock.LockLost as exc:
        print(f"lost {args.lock} while the job ran: {exc}", file=sys.stderr)
        return EX_SOFTWARE
    except aiozklock.ZooKeeperUnavailable as exc:
        print(f"no ZooKeeper: {exc}", file=sys.stderr)
        return EX_UNAVAILABLE
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
