"""The phases of a nemesis run: the observer, the control listener and the clients start;
once every client is connected the schedule runs, then healing, progress, the workers'
stop, the clients' close and the search for orphans; whatever happens, every fault is lifted
and every child ended."""

from __future__ import annotations

import contextlib
import logging
import time
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import anyio.abc

import aiozklock

from ._nemesis import _Nemesis
from ._nemesis_checks import _check_leases
from ._nemesis_clients import _Client
from ._nemesis_faults import heal_all, run_group
from ._nemesis_observer import _Observer
from ._nemesis_plan import FaultGroup
from ._nemesis_report import NemesisReport
from ._nemesis_worker_config import WorkerConfig
from ._proxy import FaultProxy

__all__: list[str] = []

logger = logging.getLogger(__name__)

_READY_TIMEOUT = 60.0  # clients connected and children started (JVMs share 2 cores)
_ORPHAN_WAIT = 3.0  # for the observer's server to catch up with the closes


async def _run(n: _Nemesis, plan: list[FaultGroup], report: NemesisReport) -> None:
    """Run ``plan`` with ``n``'s clients, filling ``report`` with what the end checks find."""
    async with AsyncExitStack() as stack:
        observer = await _open_observer(stack, n)
        listener = await stack.enter_async_context(
            await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        )
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        n.control_address = f"127.0.0.1:{port}"
        await _add_clients(stack, n)
        async with anyio.create_task_group() as tg:
            n.task_group = tg
            tg.start_soon(observer.run)
            tg.start_soon(listener.serve, n.serve_child)
            for client in n.clients:
                config = _worker_config(n, client)
                if client.process:
                    tg.start_soon(n.run_child, client, config)
                else:
                    tg.start_soon(n.run_local, client, config)
            try:
                await _drive(n, plan, report, observer)
            finally:
                report.elapsed = n.now()
                with anyio.CancelScope(shield=True):
                    await heal_all(n)
                    for client in n.clients:
                        await n.end_child(client)
                tg.cancel_scope.cancel()


async def _open_observer(stack: AsyncExitStack, n: _Nemesis) -> _Observer:
    """The observer's own client, straight to the servers, and the lock paths it watches."""
    direct = ",".join(n.hosts)
    observer_client = await stack.enter_async_context(
        aiozklock.connect(direct, session_timeout=20.0, connect_timeout=30.0)
    )
    for path in n.paths:
        await observer_client.ensure_path(path)
    return _Observer(observer_client, n.paths, n.history)


async def _add_clients(stack: AsyncExitStack, n: _Nemesis) -> None:
    """The clients under test, each behind its own proxies: ``w1``... in this process, then
    ``p1``... in child processes."""
    n_local = n.n_clients - n.processes
    for i in range(n.n_clients):
        process = i >= n_local
        name = f"p{i - n_local + 1}" if process else f"w{i + 1}"
        proxies = [await stack.enter_async_context(FaultProxy(host)) for host in n.hosts]
        client = _Client(name, i, process, proxies)
        n.clients.append(client)
        n.by_name[name] = client


def _worker_config(n: _Nemesis, client: _Client) -> WorkerConfig:
    """What ``client`` does. Unprotected (the negative control), every section holds long
    (0.6-1.2 x the session timeout: a fault aimed at the holder lands while it acts) and
    lingers 1.5 session timeouts after it saw its loss: past the server's expiry of its
    session, and so past the next grant."""
    timeout = n.session_timeout
    return WorkerConfig(
        name=client.name,
        hosts=",".join(p.address for p in client.proxies),
        path=n.path,
        seed=n.seed,
        session_timeout=n.session_timeout,
        loss_policy=n.loss_policy,
        acquire_timeout=n.acquire_timeout,
        attempt_grace=n.attempt_grace,
        long_hold=(0.6 * timeout, 1.2 * timeout) if n.unprotected else (0.3 * timeout, timeout),
        long_hold_probability=1.0 if n.unprotected else 0.06,
        backend=n.backend,
        control=n.control_address,
        recipe=n.recipe,
        paths=n.paths if n.traits.multi_path else (),
        lease_ttl=n.session_timeout if n.traits.ttl_lease else 0.0,
        max_leases=n.max_leases,
        unprotected=n.unprotected,
        linger=1.5 * timeout if n.unprotected else 0.0,
    )


async def _drive(
    n: _Nemesis, plan: list[FaultGroup], report: NemesisReport, observer: _Observer
) -> None:
    """From every client connected to the end checks."""
    await _await_ready(n)
    n.started = time.monotonic()
    logger.info("nemesis seed %d: %d client(s) ready", n.seed, len(n.clients))
    await _run_schedule(n, plan)
    n.healed_at = time.monotonic()
    await _await_progress(n, n.healed_at, report)
    await _stop_workers(n, report)
    n.close_clients.set()
    with anyio.move_on_after(15):
        for client in n.clients:
            await client.closed.wait()
            await client.exited.wait()
    await _find_orphans(n, observer, report)
    if n.traits.shares_resource:
        _check_leases(n, observer, report)


async def _await_ready(n: _Nemesis) -> None:
    """Raises ``RuntimeError`` if a client is not connected within ``_READY_TIMEOUT``."""
    with anyio.move_on_after(_READY_TIMEOUT):
        for client in n.clients:
            await client.ready.wait()
    late = [c for c in n.clients if not c.ready.is_set()]
    if late:
        raise RuntimeError(
            f"client(s) not connected within {_READY_TIMEOUT:g} s: "
            + "; ".join(f"{c.name}: {_log_tail(n.log_dir, c)}" for c in late)
        )


async def _run_schedule(n: _Nemesis, plan: list[FaultGroup]) -> None:
    """The fault groups, while they end within a session timeout after ``duration``; then
    the rest of ``duration``, and every fault lifted."""
    try:
        for group in plan:
            if n.now() + group.gap + group.length > n.duration + n.session_timeout:
                break
            await anyio.sleep(group.gap)
            await run_group(n, group)
        remaining = n.duration - n.now()
        if remaining > 0:
            await anyio.sleep(remaining)
    finally:
        await heal_all(n)


async def _await_progress(n: _Nemesis, healed_at: float, report: NemesisReport) -> None:
    """Liveness: a section completes after the last fault, within a bound that covers a
    session expiring and an attempt running out."""
    bound = 2 * n.session_timeout + n.acquire_timeout[1] + n.attempt_grace + 5
    with anyio.move_on_after(bound):
        await n.progress.wait()
    if n.progress.is_set():
        report.recovery = (
            min(
                s.enter
                for s in n.history.sections
                if s.outcome == "completed" and s.enter > healed_at
            )
            - healed_at
        )


async def _stop_workers(n: _Nemesis, report: NemesisReport) -> None:
    """Each worker finishes its iteration (an attempt ends within its bound), then reports
    its watches: a worker that does not stop is diagnosed, a leaked watch reported."""
    n.stop.set()
    for client in n.clients:
        if client.process and client.stream is not None:
            with contextlib.suppress(anyio.BrokenResourceError, OSError):
                await client.send({"type": "stop"})
    stop_bound = n.acquire_timeout[1] + n.attempt_grace + 10
    with anyio.move_on_after(stop_bound):
        for client in n.clients:
            await client.worker_done.wait()
    for client in n.clients:
        if not client.worker_done.is_set():
            where = await n.diagnose(client)
            n.errors.append(
                f"{client.name}: worker did not stop within {stop_bound:.0f} s ({where})"
            )
        elif client.watchers is None:
            n.errors.append(f"{client.name}: reported no watch count")
        elif client.watchers[0] != client.watchers[1]:
            report.leaked_watches[client.name] = client.watchers


async def _find_orphans(n: _Nemesis, observer: _Observer, report: NemesisReport) -> None:
    """Lock nodes left once every client has closed."""
    # A lease lost in the run may stay until its TTL runs out (then reaped).
    wait = _ORPHAN_WAIT + (n.session_timeout if n.traits.ttl_lease else 0.0)
    leftovers = await observer.leftovers(wait)
    for node in leftovers:
        owner = observer.owners.get(node, 0)
        report.orphans.append(f"{node} (session 0x{owner:x}: {n.sessions.get(owner, '?')})")


def _log_tail(log_dir: Path, client: _Client, lines: int = 5) -> str:
    if not client.process:
        return f"state {client.state}"
    try:
        text = (log_dir / f"{client.name}.log").read_text("utf-8", "replace")
    except OSError as exc:
        return f"no log: {exc}"
    return " | ".join(text.splitlines()[-lines:]) or "empty log"
