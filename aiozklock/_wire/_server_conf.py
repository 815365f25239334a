"""Whether the ensemble's settings allow the leader proof (``_leader``), said once at connect.

The proof needs the leader to ping its followers at least every ``TOUCH_GAP x`` the session
timeout: it pings every ``tickTime/2``, so the timeout must be at least two ticks, which
ZooKeeper's default ``minSessionTimeout`` (2 x tickTime) ensures. A server whose
``minSessionTimeout`` was lowered can hand out shorter timeouts. The ``conf`` four-letter
word tells ``tickTime``, where the server allows it (``4lw.commands.whitelist``); where it
does not, nothing can be checked and the default is assumed (logged at INFO). Where it is
known, the proof also uses it (a follower is pinged every ``tickTime/2``, often much less
than a quarter of the timeout), which makes proofs fresher.
"""

from __future__ import annotations

import logging
import ssl

import anyio
from anyio.abc import ByteStream
from anyio.streams.tls import TLSStream

from aiozklock._wire._leader import TOUCH_GAP

log = logging.getLogger("aiozklock._wire._session")

_MAX_ANSWER = 64 * 1024


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


def tick_warning(answer: str, timeout: float) -> str | None:
    """The warning to give when ``conf``'s ``answer`` shows a ``tickTime`` too long for a
    session of ``timeout`` seconds, else None (also when ``answer`` has no tickTime)."""
    tick = tick_time(answer)
    if tick is None or tick / 2 <= timeout * TOUCH_GAP:
        return None
    return (
        f"ZooKeeper's tickTime is {tick * 1000:g} ms, more than half the session timeout "
        f"({timeout:g} s): the leader hears of a session only every {tick * 500:g} ms, too "
        "seldom for aiozklock to prove in time that the leader still has the session, so a "
        "holder whose server is cut off from the leader may run on after the leader expired "
        f"it. Use session_timeout >= {2 * tick:g} s (2 x tickTime), and keep the servers' "
        "minSessionTimeout at its default (2 x tickTime)"
    )


async def check_server_conf(
    host: str, port: int, tls: ssl.SSLContext | None, session_timeout: float, bound: float
) -> float | None:
    """The ensemble's ``tickTime`` (s), None where ``conf`` is not allowed (logged at INFO);
    a warning is logged if it is too long for ``session_timeout``."""
    answer = await read_conf(host, port, tls, bound)
    tick = tick_time(answer)
    if tick is None:
        log.info(
            "could not read the ensemble's tickTime (the 'conf' four-letter word is not "
            "allowed): assuming minSessionTimeout >= 2 x tickTime (ZooKeeper's default)"
        )
        return None
    warning = tick_warning(answer, session_timeout)
    if warning is not None:
        log.warning("%s", warning)
    return tick
