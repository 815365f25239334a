"""Real session expiry, as the server does it (fault-matrix C.1).

A second raw connection re-attaches to the session with its id and password, then sends
closeSession. The server closes the session's old connection when the new one attaches,
deletes the session's ephemerals in the closeSession transaction, and later refuses the
original client's reconnect as expired. Unlike a client-side fake, this exercises the
server re-granting a lock to another client.
"""

from __future__ import annotations

import logging

import anyio

from ._rawclient import RawZooKeeperConnection, split_hosts

__all__ = ["expire_session"]

logger = logging.getLogger(__name__)


# One deadline over several steps (connect, re-attach, closeSession, fail over to the next
# server) is simplest for callers as a parameter; the kit's API promises it.
async def expire_session(
    address: str,
    session_id: int,
    password: bytes,
    *,
    timeout: float = 5.0,  # noqa: ASYNC109
) -> None:
    """Expire ``session_id`` for real; returns once the server has closed it.

    ``address`` must reach a server directly (not through the client's FaultProxy, which
    may be partitioned); with a host list, the servers are tried in order. When this
    returns, the session's ephemeral nodes are already deleted.
    """
    if session_id == 0:
        raise ValueError("session_id 0 is not a session")
    errors: list[BaseException] = []
    with anyio.fail_after(timeout):
        for host, port in split_hosts(address):
            try:
                conn = await RawZooKeeperConnection.open(
                    f"{host}:{port}",
                    session_id=session_id,
                    password=password,
                    request_timeout=timeout,
                )
            except OSError as exc:  # this member is down: try the next one
                errors.append(exc)
                continue
            await conn.close_session()
            logger.info("expired session 0x%x via %s:%d", session_id, host, port)
            return
    raise ConnectionError(f"could not reach any server of {address} to expire: {errors}")
