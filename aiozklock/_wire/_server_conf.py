"""What the ensemble's settings mean for the leader proof (``_leader``), said once at connect.

The proof needs to know how often each server hears from its upstream: the leader pings
every learner every ``tickTime/2`` (``Leader.lead``; an ObserverMaster its observers as
often, ``ObserverMaster.start``). The ``conf`` four-letter word tells ``tickTime``
(``ZooKeeperServer.dumpConf``), where the server allows it: since 3.5.3 the default
``4lw.commands.whitelist`` is ``srvr`` alone (``FourLetterCommands.isEnabled``). Where
``conf`` is refused, nothing a client can ask bounds the tick (``srvr`` does not say it, and
a server whose ``minSessionTimeout`` was lowered hands out timeouts of any length:
``ZooKeeperServer.setMinSessionTimeout``), so the proof assumes the timeout is at least two
ticks, ZooKeeper's default ``minSessionTimeout``, and a WARNING says so, and what to allow.
Where the tick is known, a timeout too short for any proof to keep up with (``probe_gap``
None) is refused at connect, with the numbers.
"""

from __future__ import annotations

import logging
import ssl

import anyio
from anyio.abc import ByteStream
from anyio.streams.tls import TLSStream

from aiozklock._exceptions import InvalidArgument
from aiozklock._wire._leader import TOUCH_GAP, LeaderProof

log = logging.getLogger("aiozklock._wire._session")

_MAX_ANSWER = 64 * 1024
_REFUSED = "not in the whitelist"  # ZooKeeper's answer to a word it does not allow


async def read_conf(host: str, port: int, tls: ssl.SSLContext | None, bound: float) -> str:
    """The answer to ``conf`` from ``host:port`` ("" if none within ``bound`` seconds)."""
    chunks: list[bytes] = []
    with anyio.move_on_after(bound):
        try:
            stream: ByteStream = await anyio.connect_tcp(host, port)
            if tls is not None:
                stream = await TLSStream.wrap(stream, ssl_context=tls, hostname=host)
            async with stream:
                await stream.send(b"conf")
                while sum(map(len, chunks)) < _MAX_ANSWER:
                    chunks.append(await stream.receive())
        except (OSError, anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError):
            pass  # EOF ends the answer; a refused or reset connection has none
    return b"".join(chunks).decode("utf-8", "replace")


def tick_time(answer: str) -> float | None:
    """``tickTime`` in seconds from ``conf``'s ``answer``; None if it has none."""
    values = dict(line.partition("=")[::2] for line in answer.splitlines() if "=" in line)
    try:
        return int(values["tickTime"]) / 1000
    except (KeyError, ValueError):
        return None


def unknown_tick_warning(answer: str, timeout: float) -> str:
    """The WARNING for a ``conf`` ``answer`` without ``tickTime`` (refused or none), for a
    session of ``timeout`` seconds: what is assumed, and what to allow."""
    why = (
        "the 'conf' four-letter word is not allowed (ZooKeeper's default "
        "4lw.commands.whitelist, since 3.5.3, is srvr alone)"
        if _REFUSED in answer
        else "the server did not answer 'conf'"
    )
    return (
        f"could not read the ensemble's tickTime: {why}. aiozklock assumes that the leader "
        f"pings each server at least every {timeout * TOUCH_GAP:g} s (a quarter of the "
        f"session timeout, {timeout:g} s), i.e. that the timeout is at least 2 x tickTime, "
        "ZooKeeper's default minSessionTimeout; where minSessionTimeout was lowered below "
        "that, a holder whose server is cut off from the leader may run on after the "
        "leader expired its session. Allow 'conf' on the servers "
        "(4lw.commands.whitelist=srvr,conf) to have it checked"
    )


def too_short(leader: LeaderProof, timeout: float) -> str | None:
    """Why no proof can keep up with a session of ``timeout`` seconds on this ensemble
    (``leader``'s tick known), else None."""
    tick = leader.tick
    if tick is None or leader.probe_gap(timeout) is not None:
        return None
    hops = " over two hops (the ensemble has observers)" if leader.hops > 1 else ""
    return (
        f"session timeout {timeout:g} s is too short for this ensemble's tickTime "
        f"({tick * 1000:g} ms): the leader hears of a session every {tick * 500:g} ms"
        f"{hops}, too seldom for aiozklock to prove in time that it still has the session. "
        f"Use session_timeout >= {2 * tick:g} s (2 x tickTime), and keep the servers' "
        "minSessionTimeout at its default (2 x tickTime)"
    )


async def check_server_conf(
    host: str,
    port: int,
    tls: ssl.SSLContext | None,
    leader: LeaderProof,
    session_timeout: float,
    bound: float,
) -> None:
    """Set ``leader.tick`` from ``conf`` (None where it is refused: a WARNING says what is
    assumed). Raises ``InvalidArgument`` if the timeout is too short for any proof."""
    answer = await read_conf(host, port, tls, bound)
    leader.tick = tick_time(answer)
    if leader.tick is None:
        log.warning("%s", unknown_tick_warning(answer, session_timeout))
        return
    reason = too_short(leader, session_timeout)
    if reason is not None:
        raise InvalidArgument(reason)
    log.info(
        "tickTime %g ms: probing through the leader every %.3g s, a touch %.3g s apart (%d hop%s)",
        leader.tick * 1000,
        leader.probe_gap(session_timeout) or 0.0,
        leader.touch_gap(session_timeout),
        leader.hops,
        "s" if leader.hops > 1 else "",
    )
