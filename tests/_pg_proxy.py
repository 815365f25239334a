"""A TCP proxy in front of PostgreSQL that can stop a client's COMMIT at a precise point.

The test kit's ``FaultProxy`` reads ZooKeeper's framing; this one passes bytes through and
only looks for a simple-query ``COMMIT`` (what asyncpg sends, under SQLAlchemy too):

* ``hold_commit()``: the next chunk holding a COMMIT is not forwarded until ``release()``
  (``commit_seen`` is set when it arrives): a loss can land while the COMMIT is under way;
* ``lose_commit_reply()``: the next COMMIT is forwarded, and the server's reply to it is
  swallowed and the client's connection reset: the transaction is committed, and the
  client only sees its connection die during COMMIT.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

import anyio
import anyio.abc
from anyio.abc import SocketStream

COMMIT = b"COMMIT"


@dataclass
class PgProxy:
    upstream_port: int
    port: int = 0
    mode: Literal["pass", "hold", "lose-reply"] = "pass"
    commit_seen: anyio.Event = field(default_factory=anyio.Event)
    _released: anyio.Event = field(default_factory=anyio.Event)

    def hold_commit(self) -> None:
        self.mode, self.commit_seen, self._released = "hold", anyio.Event(), anyio.Event()

    def lose_commit_reply(self) -> None:
        self.mode, self.commit_seen = "lose-reply", anyio.Event()

    def release(self) -> None:
        self._released.set()

    def dsn(self, scheme: str = "postgresql") -> str:
        return f"{scheme}://postgres@127.0.0.1:{self.port}/postgres"

    async def _handle(self, client: SocketStream) -> None:
        async with client, await anyio.connect_tcp("127.0.0.1", self.upstream_port) as server:
            reply_lost = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._to_server, client, server, reply_lost)
                tg.start_soon(self._to_client, server, client, reply_lost, tg.cancel_scope)

    async def _to_server(
        self, client: SocketStream, server: SocketStream, reply_lost: anyio.Event
    ) -> None:
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            while True:
                chunk = await client.receive()
                if COMMIT in chunk and self.mode != "pass":
                    mode, self.mode = self.mode, "pass"
                    self.commit_seen.set()
                    if mode == "hold":
                        await self._released.wait()
                    else:
                        reply_lost.set()
                await server.send(chunk)
        with contextlib.suppress(OSError, anyio.BrokenResourceError):
            await server.send_eof()

    async def _to_client(
        self,
        server: SocketStream,
        client: SocketStream,
        reply_lost: anyio.Event,
        scope: anyio.CancelScope,
    ) -> None:
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            while True:
                chunk = await server.receive()
                if reply_lost.is_set():  # the COMMIT's reply: dropped, the connection reset
                    break
                await client.send(chunk)
        scope.cancel()  # either side gone: close both (a reset for the client, as by a crash)


@contextlib.asynccontextmanager
async def pg_proxy(pg_dsn: str) -> AsyncIterator[PgProxy]:
    """A ``PgProxy`` in front of ``pg_dsn``'s server (``...@127.0.0.1:PORT/...``)."""
    port = int(pg_dsn.rsplit(":", 1)[1].split("/", 1)[0])
    proxy = PgProxy(port)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    proxy.port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, proxy._handle)
        try:
            yield proxy
        finally:
            proxy.release()
            tg.cancel_scope.cancel()
