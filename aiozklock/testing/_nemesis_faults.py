"""The nemesis's faults, executed: each planned :class:`FaultSpec` resolved to its target (a
client, a child process or a server) when it starts, applied, healed, and recorded in a
:class:`FaultRecord`; then the safety net that lifts every fault, and the real expiries
turned into the history's pauses."""

from __future__ import annotations

import logging
import signal
import time
from typing import Literal

import anyio
import anyio.to_thread

from ._expiry import expire_session
from ._nemesis import _Nemesis
from ._nemesis_clients import _Client, _kill_quietly
from ._nemesis_partition import heal_links, partition_fault
from ._nemesis_plan import PARTITION_KINDS, PROCESS_KINDS, SERVER_KINDS, FaultGroup, FaultSpec
from ._nemesis_tally import FaultRecord
from ._nemesis_targets import client_target, cuttable, described, direct_hosts, member_target
from ._proxy_records import Opcode
from ._rawclient_records import RawConnectionClosed, RawSessionExpired, RawZooKeeperError
from ._server import ZooKeeperCluster
from ._server_member import ZooKeeperMember

__all__ = ["EXPIRE_REACTION", "heal_all", "register_expiries", "restore_cluster", "run_group"]

logger = logging.getLogger(__name__)

_SERVER_TIMEOUT = 60.0  # a restarted member serving again
#: A one-way cut's watch notifications come this often (x the session timeout): far more
#: often than the silence rule's half, as for a session whose other tasks wait on watches.
ONE_WAY_CHATTER = 1 / 8
#: A holder whose session is expired must stop acting this soon after (fault-matrix F6: the
#: EOF tells it at once).
EXPIRE_REACTION = 0.5


async def run_group(n: _Nemesis, group: FaultGroup) -> None:
    """Run ``group``'s faults, each from its offset, until all have healed."""
    async with anyio.create_task_group() as tg:
        for spec in group.faults:
            record = FaultRecord(group.index, spec)
            n.faults.append(record)
            tg.start_soon(_run_fault, n, spec, record)


async def _run_fault(n: _Nemesis, spec: FaultSpec, record: FaultRecord) -> None:
    await anyio.sleep(spec.offset)
    record.start = n.now()
    n.history.count(f"fault:{spec.kind}")
    try:
        if spec.kind in PARTITION_KINDS:
            await partition_fault(n, spec, record)
        elif spec.kind in SERVER_KINDS:
            await _server_fault(n, spec, record)
        elif spec.kind in PROCESS_KINDS:
            await _process_fault(n, spec, record)
        else:
            await _client_fault(n, spec, record)
    except Exception as exc:
        logger.exception("fault %s failed", spec)
        record.note = f"ERROR {exc!r}"
        n.errors.append(f"fault {spec} failed: {exc!r}")
    finally:
        record.end = n.now()
        logger.info("fault done: %s", record)


# -------------------------------------------------------------------------- client faults


async def _client_fault(n: _Nemesis, spec: FaultSpec, record: FaultRecord) -> None:
    client = await client_target(n, spec)
    record.start = n.now()
    record.target = described(n, client)
    if spec.kind == "drop":
        for proxy in client.proxies:
            await proxy.drop_all(rst=spec.option == "rst")
    elif spec.kind.startswith("blackhole"):
        await _blackhole(client, spec)
    elif spec.kind == "one-way-cut":
        await _one_way_cut(n, client, spec, record)
    elif spec.kind in ("lost-create-reply", "lost-delete-reply"):
        await _lose_reply(n, client, spec, record)
    elif spec.kind == "expire":
        await _expire(n, client, record)
    else:
        raise ValueError(f"not a client fault: {spec.kind}")


async def _blackhole(client: _Client, spec: FaultSpec) -> None:
    mode: Literal["hang", "refuse"] = "refuse" if spec.option == "refuse" else "hang"
    for proxy in client.proxies:
        proxy.blackhole(True, new=mode)
    try:
        await anyio.sleep(spec.duration)
    finally:
        for proxy in client.proxies:
            proxy.blackhole(False)


async def _one_way_cut(n: _Nemesis, client: _Client, spec: FaultSpec, record: FaultRecord) -> None:
    """Cut the client's path to its server one way (the proxy of the member it is connected
    to; all of them if none is): its requests lost, its server's frames still delivered with
    a watch notification every ``ONE_WAY_CHATTER`` x the session timeout, half-open."""
    active = client.active_member()
    cut = [p for i, p in enumerate(client.proxies) if active is None or i == active]
    before = sum(proxy.lost_to_cut for proxy in cut)
    for proxy in cut:
        proxy.one_way_cut(True, chatter=ONE_WAY_CHATTER * n.session_timeout)
    try:
        await anyio.sleep(spec.duration)
    finally:
        for proxy in cut:
            proxy.one_way_cut(False)
    where = "every member" if active is None else f"member {active + 1}"
    lost = sum(proxy.lost_to_cut for proxy in cut) - before
    record.note = f"to {where}: {lost} frame(s) lost"


async def _lose_reply(n: _Nemesis, client: _Client, spec: FaultSpec, record: FaultRecord) -> None:
    proxies = client.proxies
    opcodes = set(Opcode.CREATES if spec.kind == "lost-create-reply" else {Opcode.DELETE})
    if n.traits.multi_path:
        opcodes.add(Opcode.MULTI)  # its acquire and its release are one multi each
    before = sum(proxy.swallowed_replies for proxy in proxies)
    active = client.active_member()
    for index, proxy in enumerate(proxies):
        if active is None or index == active:
            proxy.arm_drop_after(opcodes, 1)
    try:
        await anyio.sleep(spec.duration)
    finally:
        for proxy in proxies:
            proxy.disarm()
    fired = sum(proxy.swallowed_replies for proxy in proxies) - before
    record.note = f"{fired} reply(ies) lost"


async def _expire(n: _Nemesis, client: _Client, record: FaultRecord) -> None:
    session_id, password = client.session_id, client.password
    if client.state != "CONNECTED" or not session_id:
        record.note = f"not connected ({client.state}): skipped"
        return
    start = time.monotonic()
    try:
        await expire_session(direct_hosts(n), session_id, password, timeout=5.0)
        record.note = f"session 0x{session_id:x} expired"
    except RawSessionExpired:
        record.note = f"session 0x{session_id:x} already gone"
        return
    except (
        TimeoutError,
        ConnectionError,
        RawConnectionClosed,
        RawZooKeeperError,
    ) as exc:
        # The closeSession may have been executed all the same: judge it as if.
        record.note = f"may not have expired: {exc!r}"
    n.expiries.append((client.name, start, time.monotonic(), record))


# -------------------------------------------------------------------------- process faults


async def _process_fault(n: _Nemesis, spec: FaultSpec, record: FaultRecord) -> None:
    children = [c for c in n.clients if c.process and c.pid and not c.stopped]
    if not children:
        record.note = "no running child process: skipped"
        return
    client = await client_target(n, spec, children)
    record.start = n.now()
    record.target = described(n, client)
    assert client.pid is not None
    if spec.kind == "pause-before-write":
        await _pause_before_write(client, spec, record)
        return
    client.stopped = True
    start = time.monotonic()
    _kill_quietly(client.pid, signal.SIGSTOP)
    try:
        await anyio.sleep(spec.duration)
    finally:
        _kill_quietly(client.pid, signal.SIGCONT)
        n.history.record_pause(client.name, start, time.monotonic())
        client.stopped = False


async def _pause_before_write(client: _Client, spec: FaultSpec, record: FaultRecord) -> None:
    """Arm the child to stop itself after its next pre-write check; it is resumed by
    ``_Nemesis._resume_later`` (it announces its stop)."""
    client.self_stop = anyio.Event()
    client.resumed = anyio.Event()
    await client.send({"type": "pause_before_write", "duration": spec.duration})
    with anyio.move_on_after(spec.window):
        await client.self_stop.wait()
    if not client.self_stop.is_set():
        await client.send({"type": "disarm"})
        record.note = "armed, but it wrote nothing in time"
        return
    record.note = "stopped itself after its pre-write check"
    await client.resumed.wait()


# -------------------------------------------------------------------------- server faults


async def _server_fault(n: _Nemesis, spec: FaultSpec, record: FaultRecord) -> None:
    assert n.cluster is not None
    cluster = n.cluster
    cuts = cuttable(cluster)
    if any(not m.running or m.paused for m in cluster.members) or (cuts and cuts.cut_links):
        record.note = "a member is still down or cut off: skipped"
        return
    member = await member_target(n, spec)
    record.start = n.now()
    mode = await anyio.to_thread.run_sync(member.mode)
    record.target = f"zk{member.id} ({mode})"
    n.faulted_members.add(member)
    try:
        await _apply_server_fault(member, spec)
        started = time.monotonic()
        await cluster.await_serving(timeout=_SERVER_TIMEOUT)
        record.note = f"serving again {time.monotonic() - started:.2f} s after the heal"
    finally:
        n.faulted_members.discard(member)


async def _apply_server_fault(member: ZooKeeperMember, spec: FaultSpec) -> None:
    """Pause, kill or restart ``member``, and heal it (shielded) after ``spec.duration``."""
    if spec.kind == "server-pause":
        await anyio.to_thread.run_sync(member.pause)
        try:
            await anyio.sleep(spec.duration)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(member.resume)
    elif spec.kind in ("server-kill", "leader-kill"):
        await anyio.to_thread.run_sync(member.kill)
        try:
            await anyio.sleep(spec.duration)
        finally:
            with anyio.CancelScope(shield=True):
                await member.astart(wait=False)
    elif spec.kind == "server-restart":
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(member.kill)
            await member.astart(wait=False)
    else:
        raise ValueError(f"not a server fault: {spec.kind}")


# -------------------------------------------------------------------------- after the faults


def register_expiries(n: _Nemesis) -> None:
    """Each real expiry is a window in which its holder could not know (the server
    notifies the other clients before it closes the holder's connection): its sections
    are judged by fencing, and must end within ``EXPIRE_REACTION`` of the expiry (the
    holder hears the EOF), or within half a session timeout more if another fault was
    active meanwhile (a partition hides the EOF: only silence tells). No bound if the
    holder's process was stopped meanwhile (that pause is judged by itself). None for a
    lease: it is not bound to the session, so an expiry takes nothing from its holder
    (its sections are judged by their ``expires_at``)."""
    if n.traits.ttl_lease:
        return
    for name, start, end, record in n.expiries:
        window = (start - n.started, end - n.started + EXPIRE_REACTION)
        busy = any(
            other is not record and other.start < window[1] and other.end > window[0]
            for other in n.faults
        )
        bound = EXPIRE_REACTION + (n.session_timeout / 2 if busy else 0.0)
        stopped = any(
            p.client == name and p.reason == "SIGSTOP" and p.overlap(start, end + bound) > 0
            for p in n.history.pauses
        )
        n.history.record_pause(
            name, start, end, reason="expire", react_within=None if stopped else bound
        )


async def heal_all(n: _Nemesis) -> None:
    """Lift every fault (they heal themselves; this is the safety net)."""
    with anyio.CancelScope(shield=True):
        for client in n.clients:
            for proxy in client.proxies:
                proxy.blackhole(False)
                proxy.one_way_cut(False)
                proxy.disarm()
            if client.pid is not None and client.stopped and client not in n.resumes:
                _kill_quietly(client.pid, signal.SIGCONT)
                client.stopped = False
        with anyio.move_on_after(30):
            await n.resumes_done.wait()
        if n.cluster is not None:
            await restore_cluster(n.cluster)


async def restore_cluster(cluster: ZooKeeperCluster) -> None:
    """Heal every cut link, resume paused members, start stopped ones, and wait until all
    serve (shielded)."""
    with anyio.CancelScope(shield=True):
        heal_links(cluster)
        for member in cluster.members:
            if member.paused:
                await anyio.to_thread.run_sync(member.resume)
            if not member.running:
                await member.astart(wait=False)
        await cluster.await_serving(timeout=_SERVER_TIMEOUT)
