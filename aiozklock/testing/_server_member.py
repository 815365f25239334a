"""One real ZooKeeper server process for tests: start, stop, kill, pause, resume, restart.

A member runs ``QuorumPeerMain`` from a local install (see :mod:`._server_install`) on ports
of 127.0.0.1 and in a private temp directory. Only PIDs started here are ever signalled; an
``atexit`` hook kills whatever is still running when the test process exits, and on Linux
the kernel kills it when that process dies by a signal (:mod:`._process`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import anyio.to_thread

from ._process import POLL_INTERVAL, log_tail, start_bound, stop_process, unregister_process
from ._server_install import four_letter_word

__all__ = [
    "ZooKeeperMember",
    "ZooKeeperStartError",
]

logger = logging.getLogger(__name__)

_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
_JVM_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC")
#: More JVM options for every server the kit starts, read at each start (shell words), after
#: the kit's own, e.g. ``-XX:TieredStopAtLevel=1`` for faster starts where servers are short-lived.
JVM_OPTIONS_ENV = "AIOZKLOCK_ZK_JVM_OPTIONS"
_SERVING_MODES = frozenset({"standalone", "leader", "follower", "observer"})
_QUORUM_MODES = frozenset({"leader", "follower", "observer"})


class ZooKeeperStartError(RuntimeError):
    """A server did not come up (or did not serve) in time; the message has its log tail."""


class PortTaken(ZooKeeperStartError):
    """Another process's server answers on a member's client port: it took the free port
    before our JVM could bind it (a fresh start with other ports may succeed)."""


def _parse_mode(srvr_answer: str) -> str | None:
    for line in srvr_answer.splitlines():
        if line.startswith("Mode:"):
            return line.partition(":")[2].strip() or None
    return None  # e.g. "This ZooKeeper instance is not currently serving requests"


def _thread_states(pid: int) -> list[str] | None:
    """The scheduler state letter of every thread (Linux ``/proc``), None if unknown."""
    states = []
    try:
        for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
            with contextlib.suppress(OSError):  # a thread may exit meanwhile
                states.append(stat.read_text().rpartition(")")[2].split()[0])
    except OSError:
        return None
    return states or None


def _wait_thread_states(pid: int, *, stopped: bool, timeout: float = 5.0) -> None:
    # Signals are delivered asynchronously: poll /proc until all threads are (not) in
    # state "T". Without /proc (not Linux) there is nothing to poll; return at once.
    deadline = time.monotonic() + timeout
    while True:
        states = _thread_states(pid)
        if states is None or all((state == "T") == stopped for state in states):
            return
        if time.monotonic() >= deadline:
            logger.warning(
                "pid %d: threads not %s after %ss: %s",
                pid,
                "stopped" if stopped else "running",
                timeout,
                states,
            )
            return
        time.sleep(0.001)


class ZooKeeperMember:
    """One ZooKeeper server process: standalone, or one member of an ensemble.

    Created by :class:`ZooKeeperCluster`; its config and ``dataDir`` survive restarts, so a
    restarted member recovers its data (and, in an ensemble, rejoins).
    """

    def __init__(
        self,
        id: int,
        client_port: int,
        member_dir: Path,
        config: Mapping[str, str],
        *,
        in_ensemble: bool,
        classpath: str,
        java: str,
        jvm_properties: Mapping[str, str] | None = None,
        secure_client_port: int | None = None,
        conf_allowed: bool = True,
    ) -> None:
        self.id = id
        self._conf_allowed = conf_allowed
        self.client_port = client_port
        self.address = f"127.0.0.1:{client_port}"
        #: The TLS port (``secureClientPort``) and its address; None without TLS.
        self.secure_client_port = secure_client_port
        self.secure_address = (
            f"127.0.0.1:{secure_client_port}" if secure_client_port is not None else None
        )
        self.member_dir = member_dir
        self.data_dir = member_dir / "data"
        self.log_path = member_dir / "zookeeper.log"
        self.config_path = member_dir / "zoo.cfg"
        self.in_ensemble = in_ensemble
        self._classpath = classpath
        self._java = java
        self._jvm_properties = tuple(f"-D{k}={v}" for k, v in (jvm_properties or {}).items())
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if in_ensemble:
            (self.data_dir / "myid").write_text(f"{id}\n")
        self.config_path.write_text("".join(f"{key}={value}\n" for key, value in config.items()))

    def __repr__(self) -> str:
        return f"<ZooKeeperMember id={self.id} address={self.address} pid={self.pid}>"

    @property
    def pid(self) -> int | None:
        """The PID of the running process, ``None`` when stopped or killed."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    @property
    def running(self) -> bool:
        """The process exists (it may be paused)."""
        return self.pid is not None

    @property
    def paused(self) -> bool:
        return self.running and self._paused

    def start(self, *, wait: bool = True, timeout: float = 30.0) -> None:
        """(Re)start with the same config and ``dataDir``.

        With ``wait`` (the default) returns once ``srvr`` answers, and in an ensemble once
        the member reports leader/follower, i.e. it rejoined a quorum. Pass ``wait=False``
        when no quorum can form yet (e.g. restarting the first of two killed members).
        """
        if self.running:
            raise RuntimeError(f"{self!r} is already running")
        self._reap()
        with self.log_path.open("ab") as log_file:
            log_file.write(f"\n==== aiozklock: starting at {time.time():.3f} ====\n".encode())
            log_file.flush()
            # The child keeps its own copy of the descriptor; ours can close right away.
            # Bound: it dies with this process, even one killed by SIGKILL (Linux).
            proc = start_bound(
                [
                    self._java,
                    *_JVM_OPTIONS,
                    *shlex.split(os.environ.get(JVM_OPTIONS_ENV, "")),
                    *self._jvm_properties,
                    "-cp",
                    self._classpath,
                    _MAIN_CLASS,
                    str(self.config_path),
                ],
                cwd=self.member_dir,
                output=log_file,
            )
        self._proc = proc
        self._paused = False
        logger.info("started ZooKeeper %d on %s (pid %d)", self.id, self.address, proc.pid)
        if wait:
            self.wait_serving(timeout)

    def wait_serving(self, timeout: float = 30.0) -> None:
        """Block until this member serves clients (see :meth:`start`), bounded."""
        wanted = _QUORUM_MODES if self.in_ensemble else _SERVING_MODES
        deadline = time.monotonic() + timeout
        while True:
            if not self.running:
                raise ZooKeeperStartError(
                    f"ZooKeeper {self.id} ({self.address}) is not running "
                    f"(exit code {self._proc.returncode if self._proc else None}); "
                    f"log tail of {self.log_path}:\n{log_tail(self.log_path)}"
                )
            if self.mode() in wanted:
                return
            if time.monotonic() >= deadline:
                raise ZooKeeperStartError(
                    f"ZooKeeper {self.id} ({self.address}) not serving after {timeout}s; "
                    f"log tail of {self.log_path}:\n{log_tail(self.log_path)}"
                )
            time.sleep(POLL_INTERVAL)  # polling readiness: there is nothing to await

    def mode(self, timeout: float = 1.0) -> str | None:
        """``standalone``/``leader``/``follower``/``observer`` from ``srvr``; ``None`` if not
        serving.

        ``None`` covers: not running, paused, not answering within ``timeout``, and a
        member that has no quorum ("not currently serving requests").
        """
        if not self.running or self._paused:
            return None
        try:
            return _parse_mode(four_letter_word(self.address, "srvr", timeout))
        except OSError:
            return None

    def answers_for_itself(self, timeout: float = 1.0) -> bool:
        """Whether the server answering on our client port is this member (its ``conf``
        names our ``dataDir``), not another process's that took the free port first. Where
        this member refuses ``conf`` (its whitelist), a refusal is all it can tell: taken
        for this member's."""
        try:
            conf = four_letter_word(self.address, "conf", timeout)
        except OSError:
            return False
        if not self._conf_allowed and "not in the whitelist" in conf:
            return True
        return f"dataDir={self.data_dir}" in conf

    def stop(self) -> None:
        """Graceful stop: SIGCONT (a paused JVM cannot handle SIGTERM), SIGTERM, then
        SIGKILL if it has not exited within a bounded grace period."""
        proc = self._proc
        if proc is None:
            return
        stop_process(proc, f"ZooKeeper {self.id}")
        logger.info("stopped ZooKeeper %d (pid %d)", self.id, proc.pid)
        self._reap()

    def kill(self) -> None:
        """SIGKILL and wait: a crash, with no chance to close sessions or sockets cleanly."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
            logger.info("killed ZooKeeper %d (pid %d)", self.id, proc.pid)
        self._reap()

    def pause(self) -> None:
        """SIGSTOP: the server freezes; its sockets stay open but nothing is answered.

        Returns once every thread of the JVM is stopped: ``kill()`` returns before the
        stop takes effect, and a loaded machine was seen answering ``srvr`` after it.
        """
        proc = self._require_running()
        proc.send_signal(signal.SIGSTOP)
        self._paused = True
        _wait_thread_states(proc.pid, stopped=True)
        logger.info("paused ZooKeeper %d (pid %d)", self.id, proc.pid)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`; returns once no thread is stopped any more."""
        proc = self._require_running()
        proc.send_signal(signal.SIGCONT)
        self._paused = False
        _wait_thread_states(proc.pid, stopped=False)
        logger.info("resumed ZooKeeper %d (pid %d)", self.id, proc.pid)

    def restart(self, *, wait: bool = True, timeout: float = 30.0) -> None:
        """SIGKILL, then :meth:`start` with the same ``dataDir``."""
        self.kill()
        self.start(wait=wait, timeout=timeout)

    # The timeouts below bound a blocking wait in a worker thread, which cancellation
    # cannot interrupt; hence a parameter rather than the caller's cancel scope.

    async def astart(self, *, wait: bool = True, timeout: float = 30.0) -> None:  # noqa: ASYNC109
        """:meth:`start` in a worker thread, so the event loop (and clients) keep running."""
        await anyio.to_thread.run_sync(lambda: self.start(wait=wait, timeout=timeout))

    async def arestart(self, *, wait: bool = True, timeout: float = 30.0) -> None:  # noqa: ASYNC109
        """:meth:`restart` in a worker thread."""
        await anyio.to_thread.run_sync(lambda: self.restart(wait=wait, timeout=timeout))

    async def await_serving(self, timeout: float = 30.0) -> None:  # noqa: ASYNC109
        """:meth:`wait_serving` in a worker thread."""
        await anyio.to_thread.run_sync(self.wait_serving, timeout)

    def _require_running(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            raise RuntimeError(f"{self!r} is not running")
        return self._proc

    def _reap(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            unregister_process(self._proc)
            self._proc = None
        self._paused = False
