"""A randomized fault nemesis with a history checker (fault-matrix F18).

N clients, each with its own session behind its own fault proxies (one per server), loop
acquire -> fenced writes -> release with one recipe, some of them in child processes so that
a holder *process* can be stopped. Meanwhile a nemesis driven by ``random.Random(seed)`` runs a
schedule of fault groups (one fault, sometimes two at once, then a heal period): connection
drops (RST/FIN), black-holes shorter and longer than the session timeout (new connections
hung or refused), lost replies after creates and after deletes, real session expiries,
SIGSTOP/SIGCONT of a holder process (also right between its pre-write check and its write),
and SIGSTOP/SIGKILL/restart of ZooKeeper servers and of the ensemble leader. Client faults
are biased toward the current holder, server faults toward the holder's server and the
leader.

The schedule is a pure function of the seed and the run's parameters (see
:func:`plan_faults`): a failing seed replays the same faults; the timing (and so which client
holds when a fault starts) differs between runs. The report prints the schedule, what each
fault hit, and the checks of :meth:`History.check <aiozklock.testing.History.check>` plus the
end-of-run ones: no orphan lock node once every client has closed, no leaked watch, progress
after the last fault, and the integrity of the fenced counter.

The fenced counter lives in this process (``store="memory"``), or in a real PostgreSQL or
Redis that decides every fenced read and write (``store="postgres"``/``"redis"``, see
:mod:`._nemesis_store`): a paused holder's stale write is then refused by the server itself.

Recipes (``recipe=``, ``--recipe``): ``lock`` (the fair ``zk.lock``), ``nonfair``
(``zk.lock(path, fair=False)``), ``election`` (the section runs as leader), ``multilock``
(each acquisition takes a random 2-3 of :data:`MULTI_PATHS` shared paths, in a random order;
mutual exclusion, token order and fencing are judged per path, one fenced store each; holders
of disjoint subsets run at the same time),
``lease`` (``zk.lease_lock(path, ttl)`` with the TTL equal to the session timeout),
``rwlock`` (``zk.rw_lock(path)``: each acquisition its read or its write lock, at random;
read sections are shared: they may overlap each other, never a write section, and do not
touch the fenced store) and ``semaphore`` (``zk.semaphore(path, max_leases)``). Every fault
applies to every recipe; how they differ:

* ``multilock``: its creates and its release are one ``multi`` transaction each, so the
  lost-reply faults lose the reply of the client's next ``multi`` (acquire or release) or
  plain create/delete;
* ``lease``: the lease is not bound to the session: a real expiry, or a partition longer
  than the session, does not end it by itself. It is judged by its own validity: a holder
  keeps the lease until its ``expires_at`` (renewals failing), every write of a non-paused
  holder must reach the store before it (``expired_writes``), expiries are not "windows the
  holder could not know" (they take nothing from it), and its margins (``ttl``) are the
  server's deletion of the lease minus the holder's exit. A lease needs servers that reap TTL
  nodes promptly: a :class:`ZooKeeperCluster` target must have been started with
  ``jvm_properties={"znode.container.checkIntervalMs": ...}`` of at most 1 s (see
  :data:`LEASE_JVM_PROPERTIES`), or a lost lease blocks everyone for up to a minute.
* ``semaphore``: up to ``max_leases`` holders at once, so the history is checked with
  ``History(max_holders=max_leases)``: never more than that many non-paused holders at once
  (instead of pairwise exclusion). Concurrent holders enter in any token order and share the
  resource, so there is no single fenced store whose token order could judge them (and slots
  are not identifiable: a holder does not know whose lease it follows); instead each act of
  a holder is recorded, and none of a non-paused holder may come after the server deleted
  its node (its loss must be signalled before the lease is gone). Paused holders (which
  nothing can stop from acting) are counted apart. Also: each holder's token is the czxid
  of its own node (where the observer saw the node), and every client completed a section
  (no starvation).

Use :func:`run_nemesis` from any anyio program (asyncio or trio; child processes run the same
backend), or ``python -m aiozklock nemesis``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Collection
from dataclasses import asdict
from pathlib import Path

from aiozklock._recipes._traits import traits_of

from ._history_report import HistoryReport
from ._nemesis import _Nemesis
from ._nemesis_checks import _check_reaping, _counter_integrity, _real_values
from ._nemesis_control import check_unprotected, control_plan
from ._nemesis_faults import register_expiries, restore_cluster
from ._nemesis_phases import _run
from ._nemesis_plan import (
    FAULT_KINDS,
    PARTITION_KINDS,
    PROCESS_KINDS,
    SERVER_KINDS,
    FaultGroup,
    plan_faults,
)
from ._nemesis_report import NemesisReport
from ._nemesis_store import check_store, open_store
from ._nemesis_tally import tally_by_kind
from ._nemesis_targets import cuttable, sync_time
from ._server import ZooKeeperCluster

__all__ = ["run_nemesis"]


async def run_nemesis(
    target: ZooKeeperCluster | str,
    *,
    seed: int,
    duration: float = 60.0,
    clients: int = 4,
    processes: int = 2,
    session_timeout: float = 6.0,
    acquire_timeout: tuple[float, float] | None = None,
    attempt_grace: float | None = None,
    kinds: Collection[str] | None = None,
    loss_policy: str = "suspended",
    path: str | None = None,
    log_dir: str | os.PathLike[str] | None = None,
    command: str = "",
    recipe: str = "lock",
    max_leases: int = 2,
    store: str = "memory",
    store_url: str | None = None,
    unprotected: bool = False,
) -> NemesisReport:
    """Run the nemesis for ``duration`` seconds (plus healing and the end checks).

    ``target``: a :class:`ZooKeeperCluster` started by the caller (server faults need one of
    at least 3 members; they are restored in any case before this returns) or a connection
    string of running servers (no server faults then). ``clients`` clients take part,
    ``processes`` of them in child processes (process faults need at least one); each has
    ``session_timeout`` and the default ``loss_policy``. Every acquire attempt draws its
    timeout from ``acquire_timeout`` (default: 0.25-1 x the session timeout) and must end
    within it plus ``attempt_grace`` (default: one session timeout: a request in flight is
    not abandoned, and the cleanup of a failed attempt is bounded by half of it). ``kinds``
    restricts the fault kinds (default: every kind that the target allows). ``recipe``: ``lock``,
    ``multilock``, ``election``, ``nonfair``, ``lease``, ``rwlock`` or ``semaphore`` (see the
    module docstring); ``path`` is its lock path (the multi-lock's paths are ``{path}/m1``
    ...), default a fresh one. ``max_leases``: the semaphore's.

    ``store``: where the fenced counter lives. ``memory`` (default): a :class:`FencedStore`
    in this process decides each access. ``postgres`` or ``redis``: the real server decides
    (``PostgresFence.advance`` in an asyncpg transaction, ``RedisFence.set``), and the
    ``FencedStore`` records its verdicts; ``store_url`` is a running server's
    (``postgresql://...``, ``redis://...``), default a throwaway server of the test kit,
    stopped at the end. A real store needs the asyncio backend (its drivers run on asyncio
    only) and a recipe with a fenced store (not ``semaphore``).

    ``unprotected=True`` runs the negative control (:mod:`._nemesis_control`): workers ignore
    the loss of their lock and the store does not fence, and the schedule starts with a fault
    that costs the holder its session while it holds; the report says so, and never passes
    (``report.caught``: its checks found overlapping holders and accepted stale writes, as
    they must). It needs the memory store and a recipe with a fenced store.

    The ensemble's cuts (``isolate-follower``, ``isolate-leader``, ``split``, ``flap``) need
    a cluster created with ``partitionable=True``: included by default on one, refused
    (``ValueError``) if asked for on another target.

    Logs of the child processes go to ``log_dir`` (default: a temporary directory, removed
    if the run passes). Returns the report; raises only if the run could not take place
    (e.g. ``ZooKeeperUnavailable``), and ``ValueError`` for bad arguments (an unknown
    recipe; a lease on a cluster started without :data:`LEASE_JVM_PROPERTIES`;
    ``max_leases`` < 1; a store it cannot use), ``ImportError`` for a real store whose
    driver is missing, and ``RuntimeError`` (``StoreUnavailable``, its cause the test
    kit's or the driver's error) when the store cannot be started or reached.
    """
    _check_arguments(recipe, max_leases, clients, processes, duration, session_timeout)
    _check_fence(recipe, store, store_url, unprotected)
    cluster = target if isinstance(target, ZooKeeperCluster) else None
    allowed, plan = _schedule(
        seed, duration, session_timeout, kinds, cluster, processes, recipe, unprotected
    )
    logs = _log_dir(log_dir)
    nemesis = _Nemesis(
        seed=seed,
        duration=duration,
        session_timeout=session_timeout,
        acquire_timeout=acquire_timeout or (0.25 * session_timeout, session_timeout),
        attempt_grace=session_timeout if attempt_grace is None else attempt_grace,
        n_clients=clients,
        processes=processes,
        kinds=sorted(allowed),
        loss_policy=loss_policy,
        backend=_current_backend(),
        path=path or f"/aiozklock-nemesis/{seed}-{uuid.uuid4().hex[:8]}/{recipe}",
        recipe=recipe,
        max_leases=max_leases,
        cluster=cluster,
        hosts=_hosts(target),
        log_dir=logs,
        unprotected=unprotected,
    )
    report = _new_report(nemesis, plan, command)
    await _run_and_judge(nemesis, plan, report, store, store_url)
    _keep_logs(report, logs, asked=log_dir is not None)
    return report


def _check_fence(recipe: str, store: str, store_url: str | None, unprotected: bool) -> None:
    """Raises ``ValueError`` (``ImportError`` for a missing driver) for a fenced store the
    run cannot use, or a negative control it cannot run."""
    if unprotected:
        check_unprotected(store, recipe)
    check_store(
        store, store_url, _current_backend(), shares_resource=traits_of(recipe).shares_resource
    )


def _schedule(
    seed: int,
    duration: float,
    session_timeout: float,
    kinds: Collection[str] | None,
    cluster: ZooKeeperCluster | None,
    processes: int,
    recipe: str,
    unprotected: bool,
) -> tuple[set[str], list[FaultGroup]]:
    """The fault kinds the target allows (see ``_allowed_kinds``) and the run's schedule of
    them (the negative control's for an ``unprotected`` run). Raises ``ValueError`` for a
    lease on a cluster that does not reap TTL nodes promptly."""
    if traits_of(recipe).ttl_lease and cluster is not None:
        _check_reaping(cluster)
    allowed = _allowed_kinds(kinds, cluster, processes)
    ordered = [k for k in FAULT_KINDS if k in allowed]
    planner = control_plan if unprotected else plan_faults
    return allowed, planner(seed, duration, session_timeout, ordered, sync_time=sync_time(cluster))


async def _run_and_judge(
    nemesis: _Nemesis,
    plan: list[FaultGroup],
    report: NemesisReport,
    store: str,
    store_url: str | None,
) -> None:
    """Run the schedule, restore the cluster whatever happened, then judge the history and
    the stores into ``report`` and dump what was recorded next to the children's logs."""
    try:
        held = await _run_on_store(nemesis, plan, report, store, store_url)
    finally:
        if nemesis.cluster is not None:
            await restore_cluster(nemesis.cluster)
    _judge(nemesis, report, held)
    _dump(nemesis, report, nemesis.log_dir / "history.json")


def _keep_logs(report: NemesisReport, logs: Path, *, asked: bool) -> None:
    """Remove the logs of a run that passed unless the caller named their directory; the
    report names the directory of those kept."""
    if report.ok and not asked:
        shutil.rmtree(logs, ignore_errors=True)
    else:
        report.log_dir = str(logs)


async def _run_on_store(
    nemesis: _Nemesis,
    plan: list[FaultGroup],
    report: NemesisReport,
    store: str,
    store_url: str | None,
) -> dict[str, int] | None:
    """Run the nemesis with its fenced store open; a real store's final counters (None for
    the in-memory one)."""
    async with open_store(store, store_url, nemesis.gate.resources) as opened:
        if opened is not None:
            nemesis.gate.real = opened.real
            report.store, report.store_where = opened.real.name, opened.where
        await _run(nemesis, plan, report)
        return None if opened is None else await opened.real.values()


def _check_arguments(
    recipe: str,
    max_leases: int,
    clients: int,
    processes: int,
    duration: float,
    session_timeout: float,
) -> None:
    """Raises ``ValueError`` for arguments a run cannot take."""
    traits_of(recipe)  # raises ValueError for an unknown recipe
    if max_leases < 1:
        raise ValueError(f"max_leases must be >= 1, not {max_leases}")
    if clients < 1 or not 0 <= processes <= clients:
        raise ValueError("need clients >= 1 and 0 <= processes <= clients")
    if duration < 0 or session_timeout <= 0:
        raise ValueError("duration must be >= 0 and session_timeout > 0")


def _log_dir(log_dir: str | os.PathLike[str] | None) -> Path:
    """``log_dir`` (created if need be), or a fresh temporary directory."""
    logs = (
        Path(log_dir)
        if log_dir is not None
        else Path(tempfile.mkdtemp(prefix="aiozklock-nemesis-"))
    )
    logs.mkdir(parents=True, exist_ok=True)
    return logs


def _hosts(target: ZooKeeperCluster | str) -> list[str]:
    """The servers' addresses: the cluster's members, or those of a connection string."""
    if isinstance(target, ZooKeeperCluster):
        return [m.address for m in target.members]
    return [h.strip() for h in target.split("/")[0].split(",") if h.strip()]


def _allowed_kinds(
    kinds: Collection[str] | None, cluster: ZooKeeperCluster | None, processes: int
) -> set[str]:
    """``kinds`` (default: all), less those the target cannot take: server faults need a
    cluster of at least 3 members, process faults a child process. The ensemble's cuts need
    a partitionable cluster: ``ValueError`` if ``kinds`` names one for another target."""
    allowed = set(FAULT_KINDS if kinds is None else kinds)
    if cuttable(cluster) is None or len(cluster.members if cluster else ()) < 3:
        asked = sorted(allowed & PARTITION_KINDS)
        if kinds is not None and asked:
            raise ValueError(
                f"fault kind(s) {asked} cut the ensemble's links: they need a "
                "ZooKeeperCluster(3 or more, partitionable=True)"
            )
        allowed -= PARTITION_KINDS
    if cluster is None or len(cluster.members) < 3:
        allowed -= SERVER_KINDS
    if processes == 0:
        allowed -= PROCESS_KINDS
    return allowed


def _current_backend() -> str:
    """``trio`` when called from trio, else ``asyncio`` (the children run the same)."""
    try:
        import trio.lowlevel

        trio.lowlevel.current_task()
    except (ImportError, RuntimeError):
        return "asyncio"
    return "trio"


def _new_report(n: _Nemesis, plan: list[FaultGroup], command: str) -> NemesisReport:
    """The report of a run about to start (its history is judged at the end)."""
    cluster = n.cluster
    servers = (
        f"{len(cluster.members)}-node {'ensemble' if len(cluster.members) > 1 else 'standalone'}"
        f" at {cluster.hosts}"
        if cluster is not None
        else ",".join(n.hosts)
    )
    return NemesisReport(
        seed=n.seed,
        backend=n.backend,
        duration=n.duration,
        session_timeout=n.session_timeout,
        clients=n.n_clients,
        processes=n.processes,
        servers=servers,
        plan=plan,
        faults=n.faults,
        history=HistoryReport(0, (), 0.0, (), True),
        command=command,
        recipe=n.recipe,
        max_leases=n.max_leases if n.traits.shares_resource else 0,
        unprotected=n.unprotected,
    )


def _judge(n: _Nemesis, report: NemesisReport, held: dict[str, int] | None) -> None:
    """Check the history (with the real expiries as pauses) and the fenced stores;
    ``held``: what a real store holds at the end, per resource."""
    register_expiries(n)
    stores = n.stores
    report.history = n.history.check(stores=stores)
    report.errors = n.errors
    report.by_kind = tally_by_kind(
        n.faults,
        report.history.overlaps,
        report.history.fencing_violations,
        started=n.started,
        session_timeout=n.session_timeout,
    )
    report.store_accepted = sum(len(store.accepted) for store in stores.values())
    report.store_rejected = sum(len(store.rejected) for store in stores.values())
    values = {resource.rpartition("/")[2]: store.value for resource, store in stores.items()}
    report.store_value = values if len(values) != 1 else next(iter(values.values()))
    report.integrity_errors = [
        error for store in stores.values() for error in _counter_integrity(store)
    ]
    if held is not None:
        report.integrity_errors += _real_values(report.store, stores, held)


def _dump(nemesis: _Nemesis, report: NemesisReport, path: Path) -> None:
    """Everything recorded, as JSON, for a closer look at a failing seed."""
    history = nemesis.history
    writes = [w for store in nemesis.stores.values() for w in [*store.accepted, *store.rejected]]
    data = {
        "seed": report.seed,
        "recipe": report.recipe,
        "started": nemesis.started,
        "faults": [{**asdict(record), "spec": asdict(record.spec)} for record in report.faults],
        "sections": [asdict(section) for section in history.sections],
        "pauses": [asdict(pause) for pause in history.pauses],
        "attempts": [asdict(attempt) for attempt in history.attempts],
        "deletions": history.deletions,
        "imprecise_deletions": sorted(history.imprecise_deletions),
        "lost_sessions": {str(k): v for k, v in history.lost_sessions.items()},
        "session_states": {str(k): v for k, v in history.session_states.items()},
        "reads": {
            resource: [asdict(read) for read in store.reads]
            for resource, store in nemesis.stores.items()
        },
        "writes": [asdict(w) for w in sorted(writes, key=lambda w: w.seq)],
        "sessions": {str(k): v for k, v in nemesis.sessions.items()},
    }
    with contextlib.suppress(OSError, TypeError, ValueError):
        path.write_text(json.dumps(data, default=repr))
