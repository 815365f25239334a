"""The pump of a partitionable ensemble's server-to-server links: one thread, one selector.

Each :class:`Listener` is the TCP proxy of one ordered pair of members (dialer -> target)
and one link (quorum or election), forwarding to the target's real port. A pair is cut
``"silent"`` (nothing is read or written on its connections, so bytes and FINs stay held in
the buffers, in order, until healed; new connections are accepted and held, unforwarded) or
``"reset"`` (its connections are reset, and new ones reset on accept). The cut state is
changed from any thread under the lock the pump holds while it moves bytes, so once
:meth:`LinkPump.set_cut` returns, no byte crosses a cut pair any more.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import selectors
import socket
import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["How", "LinkPump", "Listener", "Pair"]

logger = logging.getLogger(__name__)

#: An ordered pair of member ids: (the member that dials, the member it dials).
Pair = tuple[int, int]
How = Literal["silent", "reset"]

_READ = selectors.EVENT_READ
_WRITE = selectors.EVENT_WRITE
_CHUNK = 65536
#: Bytes read ahead per direction before reading stops (the sender then blocks, as TCP does).
_LIMIT = 256 * 1024
#: Connections held per listener; more are reset on accept (a bound, never reached by
#: ZooKeeper, which keeps one connection per pair and link).
_MAX_PIPES = 64
_STOP_TIMEOUT = 5.0


def _close(sock: socket.socket | None, *, rst: bool) -> None:
    if sock is None:
        return
    if rst:  # SO_LINGER with a zero timeout: close() sends RST and discards unsent data
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


@dataclass(eq=False)
class Listener:
    """The proxy of one ordered pair and one link, listening on 127.0.0.1:``port``."""

    pair: Pair
    sock: socket.socket
    upstream_port: int = 0
    #: For an election link: rewrites the dialer's first message in place; True once done.
    rewrite: Callable[[bytearray], bool] | None = None
    pipes: set[_Pipe] = field(default_factory=set)

    @property
    def port(self) -> int:
        port: int = self.sock.getsockname()[1]
        return port


@dataclass(eq=False)
class _Pipe:
    """One proxied connection: ``down`` from the dialer, ``up`` to the target."""

    listener: Listener
    down: socket.socket
    header_done: bool
    up: socket.socket | None = None
    connecting: bool = False
    to_up: bytearray = field(default_factory=bytearray)
    to_down: bytearray = field(default_factory=bytearray)
    down_eof: bool = False
    up_eof: bool = False
    up_shut: bool = False
    down_shut: bool = False
    closed: bool = False
    events: dict[int, int] = field(default_factory=dict)  # fd -> registered interest


class LinkPump:
    """Listeners, their connections and the cut state, pumped by one daemon thread."""

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._cut: dict[Pair, How] = {}
        self._listeners: list[Listener] = []
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, _READ, None)
        self._stopping = False
        self._thread: threading.Thread | None = None

    def listen(self, pair: Pair) -> Listener:
        """A new listener on a free port of 127.0.0.1 (before :meth:`start`, which must
        follow once its ``upstream_port`` is set)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", 0))
            sock.listen(16)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        listener = Listener(pair, sock)
        self._listeners.append(listener)
        self._selector.register(sock, _READ, listener)
        return listener

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="aiozklock-links", daemon=True)
        self._thread.start()

    @property
    def cut_links(self) -> frozenset[Pair]:
        with self._lock:
            return frozenset(self._cut)

    def set_cut(self, pairs: Iterable[Pair], how: How) -> None:
        """Cut ``pairs`` (added to those cut already; the latest ``how`` wins)."""
        with self._lock:
            self._cut.update(dict.fromkeys(pairs, how))
            self._wake()

    def heal(self) -> None:
        with self._lock:
            self._cut.clear()
            self._wake()

    def close(self) -> None:
        """Stop the thread, then reset every connection and close every listener."""
        with self._lock:
            self._stopping = True
            self._wake()
        if self._thread is not None:
            self._thread.join(_STOP_TIMEOUT)
        with self._lock:
            for listener in self._listeners:
                for pipe in list(listener.pipes):
                    self._drop(pipe, rst=True)
                _close(listener.sock, rst=False)
            self._listeners.clear()
            with contextlib.suppress(OSError):
                self._selector.close()
            _close(self._wake_r, rst=False)
            _close(self._wake_w, rst=False)

    def _wake(self) -> None:
        # A full buffer means a wake-up is pending already.
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    # --- the thread ---------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                events = self._selector.select()  # woken by _wake for every change
                with self._lock:
                    if self._stopping:
                        return
                    for key, mask in events:
                        self._dispatch(key.data, mask)
                    self._apply()
        except Exception:
            logger.exception("the server-link pump failed: links no longer forward")
            raise

    def _dispatch(self, data: object, mask: int) -> None:
        if data is None:
            with contextlib.suppress(OSError):
                while self._wake_r.recv(4096):
                    pass
        elif isinstance(data, Listener):
            self._accept(data)
        elif isinstance(data, tuple):
            pipe, up = data
            self._on_pipe(pipe, up, mask)

    def _accept(self, listener: Listener) -> None:
        while True:
            try:
                sock, _ = listener.sock.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # e.g. EMFILE: the dialer retries later
                logger.warning("link %s: accept failed: %s", listener.pair, exc)
                return
            sock.setblocking(False)
            if self._cut.get(listener.pair) == "reset" or len(listener.pipes) >= _MAX_PIPES:
                _close(sock, rst=True)
                continue
            listener.pipes.add(_Pipe(listener, sock, header_done=listener.rewrite is None))

    def _on_pipe(self, pipe: _Pipe, up: bool, mask: int) -> None:
        if pipe.closed:
            return
        try:
            if up and pipe.connecting:
                self._finish_connect(pipe)
            elif pipe.listener.pair not in self._cut:  # checked under the lock: exact cuts
                if mask & _READ:
                    self._read(pipe, up)
                if mask & _WRITE and not pipe.closed:
                    self._write(pipe, up)
        except OSError as exc:  # a reset from one side is passed on as a reset
            logger.debug("link %s: %s", pipe.listener.pair, exc)
            self._drop(pipe, rst=True)

    def _finish_connect(self, pipe: _Pipe) -> None:
        assert pipe.up is not None
        error = pipe.up.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if error:  # the target is down: the dialer sees its connection reset
            raise OSError(error, f"connect to port {pipe.listener.upstream_port} failed")
        pipe.connecting = False
        pipe.up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _read(self, pipe: _Pipe, up: bool) -> None:
        sock = pipe.up if up else pipe.down
        assert sock is not None
        try:
            data = sock.recv(_CHUNK)
        except BlockingIOError:
            return
        if up:
            pipe.up_eof = not data
            pipe.to_down += data
            return
        pipe.down_eof = not data
        pipe.to_up += data
        if not pipe.header_done:
            rewrite = pipe.listener.rewrite
            # A truncated first message is passed on as it is.
            pipe.header_done = pipe.down_eof or (rewrite is not None and rewrite(pipe.to_up))

    def _write(self, pipe: _Pipe, up: bool) -> None:
        sock, buffer = (pipe.up, pipe.to_up) if up else (pipe.down, pipe.to_down)
        if sock is None or not buffer or (up and not pipe.header_done):
            return
        with contextlib.suppress(BlockingIOError):
            del buffer[: sock.send(buffer)]

    def _apply(self) -> None:
        """Make every connection follow the cut state: reset, connect, (un)register."""
        for listener in self._listeners:
            how = self._cut.get(listener.pair)
            for pipe in list(listener.pipes):
                if how == "reset":
                    self._drop(pipe, rst=True)
                    continue
                try:
                    if how is None:
                        self._progress(pipe)
                    if not pipe.closed:
                        self._register(pipe, up=False, cut=how is not None)
                        self._register(pipe, up=True, cut=how is not None)
                except OSError as exc:
                    logger.debug("link %s: %s", listener.pair, exc)
                    self._drop(pipe, rst=True)

    def _progress(self, pipe: _Pipe) -> None:
        """Connect upstream when due, pass on FINs once flushed, close when both are done."""
        if pipe.up is None:
            pipe.up = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            pipe.up.setblocking(False)
            error = pipe.up.connect_ex(("127.0.0.1", pipe.listener.upstream_port))
            if error not in (0, errno.EINPROGRESS):
                raise OSError(error, "connect failed")
            pipe.connecting = error != 0
            pipe.down.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if pipe.connecting:
            return
        if pipe.down_eof and not pipe.to_up and not pipe.up_shut:
            pipe.up.shutdown(socket.SHUT_WR)
            pipe.up_shut = True
        if pipe.up_eof and not pipe.to_down and not pipe.down_shut:
            pipe.down.shutdown(socket.SHUT_WR)
            pipe.down_shut = True
        if pipe.up_shut and pipe.down_shut:
            self._drop(pipe, rst=False)

    def _register(self, pipe: _Pipe, *, up: bool, cut: bool) -> None:
        sock = pipe.up if up else pipe.down
        if sock is None:
            return
        if up and pipe.connecting:
            events = _WRITE  # a connect completes even while cut; nothing is forwarded
        elif cut:
            events = 0
        else:
            eof, inbound, outbound = (
                (pipe.up_eof, pipe.to_down, pipe.to_up)
                if up
                else (pipe.down_eof, pipe.to_up, pipe.to_down)
            )
            events = _READ if not eof and len(inbound) < _LIMIT else 0
            if outbound and (pipe.header_done or not up):
                events |= _WRITE
        fd = sock.fileno()
        old = pipe.events.get(fd, 0)
        if events == old:
            return
        if old == 0:
            self._selector.register(sock, events, (pipe, up))
        elif events == 0:
            self._selector.unregister(sock)
        else:
            self._selector.modify(sock, events, (pipe, up))
        pipe.events[fd] = events

    def _drop(self, pipe: _Pipe, *, rst: bool) -> None:
        if pipe.closed:
            return
        pipe.closed = True
        pipe.listener.pipes.discard(pipe)
        for sock in (pipe.down, pipe.up):
            if sock is not None and pipe.events.get(sock.fileno(), 0):
                with contextlib.suppress(KeyError, ValueError, OSError):
                    self._selector.unregister(sock)
            _close(sock, rst=rst)
