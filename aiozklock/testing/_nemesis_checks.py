"""The nemesis's own checks, besides the history's: before a run, that the servers reap
expired leases promptly; after it, the fenced counter's integrity (and that a real store holds
what its accepted writes left) and, for a semaphore, each holder's token and that nobody
starved."""

from __future__ import annotations

from collections.abc import Mapping

from ._history_records import FencedStore
from ._nemesis import LEASE_JVM_PROPERTIES, _Nemesis
from ._nemesis_observer import _Observer
from ._nemesis_report import NemesisReport
from ._server import ZooKeeperCluster

_MAX_REAP_MS = 1000  # the longest reaping interval a lease run accepts


def _check_reaping(cluster: ZooKeeperCluster) -> None:
    """A lease run needs servers that reap expired TTL nodes within a second (else a lost
    lease blocks everyone for up to a minute): raises ``ValueError`` if not configured."""
    key = next(iter(LEASE_JVM_PROPERTIES))
    interval = cluster.jvm_properties.get(key)
    if interval is None or not interval.isdigit() or int(interval) > _MAX_REAP_MS:
        raise ValueError(
            f"recipe lease needs a cluster started with jvm_properties={{{key!r}: '100'}} "
            f"(at most {_MAX_REAP_MS} ms; see LEASE_JVM_PROPERTIES), not {interval!r}"
        )


def _counter_integrity(store: FencedStore) -> list[str]:
    """Every accepted write incremented the value it replaced: no update was lost."""
    errors = []
    for write in store.accepted:
        previous = write.previous if isinstance(write.previous, int) else 0
        if write.value != previous + 1:
            errors.append(
                f"{write.client}#{write.token} wrote {write.value} over {previous} at {write.t:.3f}"
            )
    if store.accepted and store.value != len(store.accepted):
        errors.append(f"counter {store.value} != {len(store.accepted)} accepted writes")
    return errors


def _real_values(
    name: str, stores: Mapping[str, FencedStore], held: Mapping[str, int]
) -> list[str]:
    """The real store holds, for each resource, the value of the last write it accepted
    (the record's): no write was applied that the record does not know of."""
    errors = []
    for resource, store in stores.items():
        recorded = store.value if isinstance(store.value, int) else 0
        if held.get(resource) != recorded:
            errors.append(
                f"{name} holds {held.get(resource)} for {resource}, its accepted writes {recorded}"
            )
    return errors


def _check_leases(nemesis: _Nemesis, observer: _Observer, report: NemesisReport) -> None:
    """Semaphore: each section's token is the czxid of its own node (its key is
    ``{node}#{token}``; checked where the observer saw the node: sequential names are never
    reused), and every client completed a section (nobody starved)."""
    completed: set[str] = set()
    for section in nemesis.history.sections:
        if section.outcome == "completed":
            completed.add(section.client)
        node, _, token = (section.node or "").rpartition("#")
        czxid = observer.czxids.get(node)
        if czxid is None:
            continue
        report.tokens_checked += 1
        if str(czxid) != token:
            report.token_mismatches.append(f"{section.describe()}: {node} has czxid {czxid}")
    report.starved = [c.name for c in nemesis.clients if c.name not in completed]
