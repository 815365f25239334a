"""What etcd's server does per lock cycle, and where its contended hand-offs stall.

    PYTHONPATH=. .venv/bin/python benchmarks/etcd_server_ops.py [--members 1] [--cycles 500]

Starts etcd (``benchmarks.peers.etcd_cluster``), runs the etcd column's uncontended and
contended (``--sessions``, ``--duration``) scenarios in this process, and prints per cycle
(per grant) the client's gRPC requests (counted by the client) and the server's work from
its ``/metrics`` (summed over the members): raft proposals committed, WAL fsyncs, and MVCC
puts, deletes, range reads and transactions. Then the hand-offs of the contended run: the
median, and how many took 20 ms or more and how much of the run they took (etcd 3.4 wakes a
waiter through a watch started at the current revision, an "unsynced" watcher that its
resync loop delivers every 100 ms).
"""

from __future__ import annotations

import argparse
import itertools
import urllib.request
from collections.abc import Sequence

from benchmarks.clients import etcd_bench
from benchmarks.common import Gate, Params
from benchmarks.peers import etcd_cluster

METRICS = {
    "etcd_server_proposals_committed_total": "raft proposals committed",
    "etcd_disk_wal_fsync_duration_seconds_count": "WAL fsyncs",
    "etcd_mvcc_put_total": "MVCC puts",
    "etcd_mvcc_delete_total": "MVCC deletes",
    "etcd_mvcc_range_total": "MVCC range reads",
    "etcd_mvcc_txn_total": "MVCC transactions",
}
STALL_MS = 20.0


def scrape(endpoint: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    found = dict.fromkeys(METRICS, 0.0)
    for line in text.splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name in METRICS:
            found[name] += float(line.split()[-1])
    return found


def server_work(endpoints: list[str], before: list[dict[str, float]]) -> dict[str, float]:
    after = [scrape(endpoint) for endpoint in endpoints]
    return {
        key: sum(a[key] - b[key] for a, b in zip(after, before, strict=True)) for key in METRICS
    }


def report(title: str, cycles: int, requests: dict[str, int], work: dict[str, float]) -> None:
    print(f"{title}: {cycles} cycles")
    print(f"  client gRPC requests per cycle: {sum(requests.values()) / cycles:.2f} {requests}")
    for key, label in METRICS.items():
        print(f"  {label} per cycle (all members): {work[key] / cycles:.2f}")


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=1)
    parser.add_argument("--cycles", type=int, default=500)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--duration", type=float, default=2.0)
    args = parser.parse_args(argv)
    with etcd_cluster(args.members) as hosts:
        endpoints = hosts.split(",")
        before = [scrape(endpoint) for endpoint in endpoints]
        params = Params(hosts=hosts, path="/ops/uncontended", iterations=args.cycles)
        result = etcd_bench.run("uncontended", params, Gate(None))
        work = server_work(endpoints, before)
        report(f"{args.members} member(s), uncontended", args.cycles, result["requests"], work)
        before = [scrape(endpoint) for endpoint in endpoints]
        params = Params(
            hosts=hosts,
            path="/ops/contended",
            sessions=args.sessions,
            warmup=1,
            duration=args.duration,
        )
        result = etcd_bench.run("contended", params, Gate(None))
        work = server_work(endpoints, before)
        grants = result["counter"]
        report(f"{args.sessions} sessions, contended", grants, result["requests"], work)
        sections = sorted(result["intervals"])
        gaps = sorted((b[0] - a[1]) / 1e6 for a, b in itertools.pairwise(sections))
        stalls = [gap for gap in gaps if gap >= STALL_MS]
        span = (sections[-1][1] - sections[0][0]) / 1e9
        print(
            f"  hand-offs: median {gaps[len(gaps) // 2]:.2f} ms; {len(stalls)} of {len(gaps)} "
            f"took {STALL_MS:g} ms or more, {sum(stalls) / 1000:.2f} s of the {span:.2f} s run"
        )


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
