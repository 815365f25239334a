"""The I/O of attaching a session to a new connection: the ConnectRequest and its answer,
authentication, re-arming the watches, and closing a session we let go of. What to
present and what the answers mean is ``SessionCore``'s (``_core``); these only talk."""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Iterator

import anyio

from aiozklock._acl import Credentials
from aiozklock._exceptions import AuthenticationFailed
from aiozklock._wire import _framing as framing
from aiozklock._wire._connection import (
    Connection,
    HandshakeRejected,
    TLSRejected,
    describe_tls_failure,
    is_tls_rejection,
    open_connection,
)
from aiozklock._wire._core import SessionCore
from aiozklock._wire._now import uptime
from aiozklock._wire._ops import close_op

# The session logs on one logger, whichever of its modules speaks (docs/observability.md).
log = logging.getLogger("aiozklock._wire._session")


class ExpiredAnswer(HandshakeRejected):
    """The server answered that the session we presented expired."""


def parse_handshake(frame: bytes) -> framing.Handshake:
    try:
        return framing.parse_connect_response(frame)
    except Exception as exc:  # a short or garbled answer: not a ZooKeeper server we can use
        raise HandshakeRejected(f"unreadable handshake answer: {exc!r}") from None


async def handshake(
    conn: Connection, core: SessionCore, auth: Credentials
) -> tuple[framing.Handshake, int, float]:
    """Attach our session (or ask for a new one), authenticate, re-arm the watches.
    Returns the answer, the session id we presented and when we asked; raises
    ``ExpiredAnswer`` (the presented session expired), ``HandshakeRejected`` (also when the
    session was forgotten meanwhile), ``AuthenticationFailed`` or a stream error."""
    request, session_id = core.connect_request()
    sent_at = uptime()
    conn.write(request)
    await conn.drain()
    answer = parse_handshake(await conn.read_frame())
    if answer.expired:
        raise (ExpiredAnswer if session_id else HandshakeRejected)("session expired")
    await authenticate(conn, core, answer, auth)
    if session_id:
        # Same session: re-arm every watch before any other request.
        rearm = core.rearm_request(uptime())
        if rearm:
            conn.write(rearm)
            await conn.drain()
    if session_id != core.session_id:
        # Forgotten while we were reconnecting (only a server's expiry answer forgets one:
        # ``forget_session``): this answer attached a session that is no longer ours.
        raise HandshakeRejected("session given up during the handshake")
    return answer, session_id, sent_at


async def authenticate(
    conn: Connection, core: SessionCore, answer: framing.Handshake, auth: Credentials
) -> None:
    """Send each credential and wait for its answer, before any other request. The server
    answers AuthFailed and closes the connection if it refuses one: then the session it
    attached is marked stale (to be closed) and ``AuthenticationFailed`` raised."""
    for scheme, credential in auth:
        conn.write(framing.auth_frame(scheme, credential))
        await conn.drain()
        reply = await conn.read_frame()
        xid, _, err = framing.REPLY_HEADER.unpack_from(reply, 0)
        if xid != framing.AUTH_XID:
            raise HandshakeRejected(f"unexpected reply (xid {xid}) to authentication")
        if err:
            core.mark_stale(answer.session_id, answer.password)
            who = credential.split(b":", 1)[0].decode(errors="replace")
            user = f" for user {who!r}" if scheme == "digest" else ""
            raise AuthenticationFailed(
                f"ZooKeeper refused the {scheme!r} credentials{user} (code {err}); "
                "the client does not retry with them"
            )


@contextlib.contextmanager
def explained(tls: ssl.SSLContext | None) -> Iterator[None]:
    """Turn an end of stream before the handshake's answer into ``HandshakeRejected``, and
    a TLS failure that retrying cannot cure into ``TLSRejected``, saying what the likely
    cause is."""
    try:
        yield
    except anyio.EndOfStream:
        if tls is None:
            hint = "if it is a TLS port (secureClientPort), connect with ssl="
        else:
            hint = "does it require a client certificate (ssl.clientAuth=need)?"
        raise HandshakeRejected(
            "closed the connection without answering (a server that lags behind the "
            f"transactions we have seen does so; {hint})"
        ) from None
    except ssl.SSLError as exc:
        if not is_tls_rejection(exc):
            raise
        reason = describe_tls_failure(exc)
        raise TLSRejected(reason) from exc


async def close_stale_session(
    core: SessionCore, host: str, port: int, tls: ssl.SSLContext | None
) -> None:
    """Close the session we let go of (``core.stale_to_close``) through ``host``, if
    there is one still to close. An "expired" answer leaves nothing to close. Raises what a
    handshake raises."""
    stale = core.stale_to_close(uptime())
    if stale is None:
        return
    session_id, password = stale
    conn = await open_connection(host, port, tls)
    try:
        conn.write(
            framing.connect_frame(core.last_zxid, core.requested_timeout_ms, session_id, password)
        )
        await conn.drain()
        answer = parse_handshake(await conn.read_frame())
        if not answer.expired:
            core.stale_answered(uptime())
            conn.write(framing.frame(1, close_op().body))
            await conn.drain()
            await conn.read_frame()
            log.info("closed session 0x%x that we had let go of", session_id)
        core.stale_closed()
    finally:
        await conn.aclose()
