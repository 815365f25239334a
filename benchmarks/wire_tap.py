"""A counting TCP proxy in front of ZooKeeper, in its own process (so it costs the clients
under test nothing but a hop; it is only used for counting runs, never for timed ones):

    python -m benchmarks.wire_tap UPSTREAM_HOST:PORT

It prints its own ``127.0.0.1:PORT``, then answers one JSON line per command on stdin:
``reset`` (forget the counts) and ``counts``. It counts, over all connections:

- ``requests``: client requests by opcode (xid > 0: pings, auth, set-watches and the
  session's close request are left out);
- ``round_trips``: how often a connection went from no request outstanding to one: a
  pipelined burst counts once, and so do requests sent while others are still in flight;
- ``notifications``: server→client watch events (WATCHER_EVENT, xid -1);
- ``pings``: the sessions' pings (xid -2), and ``probes``: the multis of one version
  check (aiozklock's probe through the leader on an ensemble, ``multi([check(path, v)])``;
  also counted in ``requests``).

aiozklock's ``FaultProxy`` is not used here: it lives in the caller's event loop (kazoo is
threaded, Curator is a JVM) and does not look at server→client frames.
"""

from __future__ import annotations

import asyncio
import json
import struct
import sys
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

_LENGTH = struct.Struct("!i")
_REQUEST_HEADER = struct.Struct("!ii")  # xid, opcode
_REPLY_XID = struct.Struct("!i")
WATCHER_EVENT_XID = -1
PING_XID = -2
CLOSE_OPCODE = -11
MULTI_OPCODE, CHECK_OPCODE = 14, 13
_MULTI_HEADER = struct.Struct("!i?i")  # type, done, err
_PROBE_END = _MULTI_HEADER.pack(-1, True, -1)


@dataclass
class Counts:
    requests: Counter[int] = field(default_factory=Counter)
    round_trips: int = 0
    notifications: int = 0
    pings: int = 0
    probes: int = 0

    def as_json(self) -> str:
        return json.dumps(
            {
                "requests": sum(self.requests.values()),
                "by_opcode": {str(op): n for op, n in sorted(self.requests.items())},
                "round_trips": self.round_trips,
                "notifications": self.notifications,
                "pings": self.pings,
                "probes": self.probes,
            }
        )


class WireTap:
    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.split(",")[0].rpartition(":")
        self.upstream = (host or "127.0.0.1", int(port))
        self.counts = Counts()

    async def handle(
        self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
    ) -> None:
        try:
            server_in, server_out = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_out.close()
            return
        try:
            head = await client_in.readexactly(4)
            server_out.write(head)
            if head.isalpha():  # a four-letter word such as aiozk's "srvr": not framed
                pumps = [copy_raw(client_in, server_out), copy_raw(server_in, client_out)]
            else:
                server_out.write(await client_in.readexactly(_LENGTH.unpack(head)[0]))
                outstanding: set[int] = set()  # xids of this connection awaiting a reply
                pumps = [
                    self.pump_requests(client_in, server_out, outstanding),
                    self.pump_replies(server_in, client_out, outstanding),
                ]
            await first_to_finish(pumps)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for writer in (client_out, server_out):
                writer.close()

    async def pump_requests(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, outstanding: set[int]
    ) -> None:
        while frame := await read_frame(source):
            xid, opcode = _REQUEST_HEADER.unpack_from(frame, 4)
            if xid == PING_XID:
                self.counts.pings += 1
            elif opcode == MULTI_OPCODE and is_probe(frame):
                self.counts.probes += 1
            if xid > 0 and opcode != CLOSE_OPCODE:
                self.counts.requests[opcode] += 1
                if not outstanding:
                    self.counts.round_trips += 1
                outstanding.add(xid)
            sink.write(frame)
            await sink.drain()

    async def pump_replies(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, outstanding: set[int]
    ) -> None:
        sink.write(await read_frame(source))  # the handshake's answer
        while frame := await read_frame(source):
            (xid,) = _REPLY_XID.unpack_from(frame, 4)
            if xid == WATCHER_EVENT_XID:
                self.counts.notifications += 1
            outstanding.discard(xid)
            sink.write(frame)
            await sink.drain()


def is_probe(frame: bytes) -> bool:
    """A multi request ``frame`` (length, xid, opcode, ...) of exactly one version check."""
    offset = 12
    kind, _, _ = _MULTI_HEADER.unpack_from(frame, offset)
    if kind != CHECK_OPCODE:
        return False
    offset += _MULTI_HEADER.size
    offset += 4 + _LENGTH.unpack_from(frame, offset)[0] + 4  # the path, the version
    return frame[offset:] == _PROBE_END


async def first_to_finish(pumps: list[Coroutine[Any, Any, None]]) -> None:
    """Run both directions until one ends (EOF or error), then stop the other."""
    tasks = [asyncio.create_task(pump) for pump in pumps]
    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def read_frame(source: asyncio.StreamReader) -> bytes:
    """One whole frame with its length prefix, or b"" at the end of the stream."""
    try:
        head = await source.readexactly(4)
        return head + await source.readexactly(_LENGTH.unpack(head)[0])
    except asyncio.IncompleteReadError:
        return b""


async def copy_raw(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    while chunk := await source.read(65536):
        sink.write(chunk)
        await sink.drain()


async def main(upstream: str) -> None:
    tap = WireTap(upstream)
    server = await asyncio.start_server(tap.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(f"127.0.0.1:{port}", flush=True)
    loop = asyncio.get_running_loop()
    while command := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
        if command == "reset":
            tap.counts = Counts()
            print(json.dumps({"ok": True}), flush=True)
        elif command == "counts":
            print(tap.counts.as_json(), flush=True)
    server.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
