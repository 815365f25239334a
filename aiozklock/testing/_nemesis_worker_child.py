"""A nemesis worker in a child process, and the stall watchdog of the nemesis's processes.

A child runs one client (so that a holder *process* can be stopped with SIGSTOP). It is
started as ``python -m aiozklock.testing._nemesis_child CONFIG_JSON``; it connects back to the
nemesis's control port and speaks newline-delimited JSON:

* child -> parent records (``time.monotonic()`` stamps, system-wide on Linux, so the parent
  merges them with its own): ``hello``, ``session`` (state changes, with the session id and
  password so that the nemesis can expire the session for real), ``enter``, ``section``,
  ``attempt``, ``watchers``, ``self_stop``, ``closed``;
* child -> parent requests ``read``/``write`` to the fenced store of a ``resource`` (a lock
  path), which the parent keeps (:mod:`._nemesis_store`): a write's acceptance is decided
  by that single store when the request reaches it, as with any remote resource (with a
  real store, by the server the parent forwards it to); answered by ``reply``;
* parent -> child commands: ``stop`` (finish the current iteration, report, close),
  ``pause_before_write`` (stop this process with SIGSTOP right after the next pre-write check
  that passes, before the write is sent: the check-then-act window that only fencing
  covers) and ``disarm``.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import math
import os
import signal
import sys
import time
from typing import IO

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from aiozklock.testing._internals import session_of

from ._nemesis_worker import recorded_client, run_worker
from ._nemesis_worker_config import Record, WorkerConfig

__all__ = ["main", "stall_watchdog"]

logger = logging.getLogger(__name__)

_MAX_LINE = 1 << 20


async def stall_watchdog(file: IO[str], after: float = 20.0) -> None:
    """Dump every thread's stack to ``file`` if this event loop stops running for ``after``
    seconds (a livelock or a blocking call): re-armed while the loop runs. Process-wide
    (``faulthandler``): for the nemesis's own processes only; cancel it to disarm."""
    try:
        while True:
            faulthandler.dump_traceback_later(after, file=file)
            await anyio.sleep(after / 4)
    finally:
        faulthandler.cancel_dump_traceback_later()


class _ChildSink:
    """The child's side of the control connection."""

    def __init__(self, stream: anyio.abc.ByteStream, name: str) -> None:
        self._stream = stream
        self._name = name
        send, receive = anyio.create_memory_object_stream[tuple[bytes, anyio.Event | None]](
            math.inf
        )
        self._outbox = send
        self._outbox_receive = receive
        self._next_id = 0
        self._replies: dict[int, tuple[anyio.Event, list[Record]]] = {}
        self.pause_armed: float | None = None  # seconds, set by pause_before_write
        self.stop = anyio.Event()

    def emit(self, record: Record) -> None:
        self._outbox.send_nowait((json.dumps(record).encode() + b"\n", None))

    async def emit_flushed(self, record: Record) -> None:
        written = anyio.Event()
        self._outbox.send_nowait((json.dumps(record).encode() + b"\n", written))
        await written.wait()

    async def _request(self, record: Record) -> Record:
        self._next_id += 1
        request_id = self._next_id
        event = anyio.Event()
        slot: list[Record] = []
        self._replies[request_id] = (event, slot)
        try:
            self.emit({**record, "id": request_id})
            await event.wait()
        finally:
            self._replies.pop(request_id, None)
        return slot[0]

    async def read(self, resource: str, token: int) -> tuple[bool, int]:
        reply = await self._request({"type": "read", "resource": resource, "token": token})
        value = reply.get("value")
        return bool(reply["ok"]), value if isinstance(value, int) else 0

    async def write(self, resource: str, token: int, value: int) -> bool:
        reply = await self._request(
            {"type": "write", "resource": resource, "token": token, "value": value}
        )
        return bool(reply["ok"])

    async def before_write(self) -> None:
        duration = self.pause_armed
        if duration is None:
            return
        self.pause_armed = None
        # The parent resumes us after `duration`; the write below then goes out unchecked.
        await self.emit_flushed({"type": "self_stop", "t": time.monotonic(), "duration": duration})
        os.kill(os.getpid(), signal.SIGSTOP)

    async def writer(self) -> None:
        async with self._outbox_receive:
            async for data, written in self._outbox_receive:
                await self._stream.send(data)
                if written is not None:
                    written.set()

    async def reader(self) -> None:
        lines = BufferedByteReceiveStream(self._stream)
        try:
            while True:
                message: Record = json.loads(await lines.receive_until(b"\n", _MAX_LINE))
                kind = message.get("type")
                if kind == "reply":
                    entry = self._replies.get(int(message["id"]))
                    if entry is not None:
                        entry[1].append(message)
                        entry[0].set()
                elif kind == "stop":
                    self.stop.set()
                elif kind == "pause_before_write":
                    self.pause_armed = float(message["duration"])
                elif kind == "disarm":
                    self.pause_armed = None
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
            logger.warning("%s: the nemesis went away", self._name)
            raise SystemExit(3) from None


async def _child_main(config: WorkerConfig) -> None:
    host, _, port = config.control.rpartition(":")
    stream = await anyio.connect_tcp(host, int(port))
    sink = _ChildSink(stream, config.name)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sink.writer)
        tg.start_soon(sink.reader)
        tg.start_soon(stall_watchdog, sys.stderr)
        sink.emit({"type": "hello", "name": config.name, "pid": os.getpid(), "t": time.monotonic()})
        async with recorded_client(config, sink) as zk:
            baseline = session_of(zk).watcher_count()
            await run_worker(zk, config, sink, sink.stop)
            sink.emit(
                {"type": "watchers", "count": session_of(zk).watcher_count(), "baseline": baseline}
            )
        await sink.emit_flushed({"type": "closed", "t": time.monotonic()})
        tg.cancel_scope.cancel()
    await stream.aclose()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    config = WorkerConfig.from_json(args[0])
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s {config.name} %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    anyio.run(_child_main, config, backend=config.backend)
