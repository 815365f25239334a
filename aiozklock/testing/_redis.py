"""A throwaway ``redis-server`` for tests: a free port of 127.0.0.1, no persistence, a private
temp directory, stopped by its PID.

Nothing here imports redis-py: readiness is a ``PING`` on a plain socket, so the test kit
and its pytest plugin load no Redis client unless a test uses one.
"""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from ._process import POLL_INTERVAL, log_tail, register_process, stop_process, unregister_process
from ._server_layout import free_ports as _free_ports

__all__ = ["RedisServer", "RedisUnavailableForTests"]

logger = logging.getLogger(__name__)

_INSTALL_HINT = (
    "No redis-server executable was found, and AIOZKLOCK_REDIS_URL is not set. Install one "
    "with `apt-get install redis-server` (Debian/Ubuntu; `bash .ci/dev.sh setup` does it), "
    "or set AIOZKLOCK_REDIS_URL=redis://host:port/db to use a running server."
)


class RedisUnavailableForTests(RuntimeError):
    """No ``redis-server`` executable was found; the message says how to get one."""


def ping(port: int, timeout: float = 1.0) -> bool:
    """Whether a Redis server on ``127.0.0.1:port`` answers ``PING`` with ``+PONG``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` process on a free port of 127.0.0.1, for tests.

    It keeps its data in memory only (``--save ""``, ``--appendonly no``) and runs in a
    private temp directory (its log is ``redis.log`` there). Nothing runs until
    :meth:`start`, which ``with RedisServer() as redis:`` calls on entering (a second
    ``start()`` is harmless); without ``with``, call :meth:`close`, which stops the
    process (only this PID is signalled) and removes the directory. Raises
    :class:`RedisUnavailableForTests` from :meth:`start` if there is no ``redis-server``
    (``executable`` overrides the lookup on ``PATH``), and ``RuntimeError`` with the log
    tail if the server does not answer ``PING`` in time.
    """

    def __init__(self, *, executable: str | None = None, base_dir: Path | None = None) -> None:
        self._executable = executable
        self._base_dir = base_dir
        self.work_dir: Path | None = None
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"<RedisServer port={self.port} pid={self.pid}>"

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``; ``RuntimeError`` before :meth:`start`."""
        if self.port is None:
            raise RuntimeError("the Redis server is not started")
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The PID of the running process, None when stopped."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self, timeout: float = 30.0) -> RedisServer:
        """Start the server and return it once it answers ``PING``; a started one (``with``
        starts it) is returned at once, unchanged."""
        if self._proc is not None:
            return self
        executable = self._executable or shutil.which("redis-server")
        if executable is None:
            raise RedisUnavailableForTests(_INSTALL_HINT)
        self.work_dir = Path(tempfile.mkdtemp(prefix="aiozklock-redis-", dir=self._base_dir))
        try:
            # A free port can be taken by someone else before the server binds it: retry.
            for attempt in range(1, 4):
                try:
                    self._start_once(executable, timeout)
                    return self
                except RuntimeError as exc:
                    clash = "Address already in use" in log_tail(self._log_path, 50)
                    self.stop()
                    if not clash or attempt == 3:
                        raise
                    logger.warning("port clash starting redis-server, retrying: %s", exc)
        except BaseException:
            self.close()  # nothing half-started may outlive a failed start
            raise
        raise AssertionError("unreachable")  # pragma: no cover

    @property
    def _log_path(self) -> Path:
        assert self.work_dir is not None
        return self.work_dir / "redis.log"

    def _start_once(self, executable: str, timeout: float) -> None:
        assert self.work_dir is not None
        [port] = _free_ports(1)
        self.port = port
        command = [executable, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        command += ["--appendonly", "no", "--dir", str(self.work_dir), "--daemonize", "no"]
        command += ["--logfile", str(self._log_path)]
        self._proc = subprocess.Popen(
            command,
            cwd=self.work_dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        register_process(self._proc)
        deadline = time.monotonic() + timeout
        while not ping(port):
            if self._proc.poll() is not None or time.monotonic() >= deadline:
                state = f"exit code {self._proc.returncode}" if self.pid is None else "running"
                raise RuntimeError(
                    f"redis-server on port {port} does not answer PING ({state}); log tail "
                    f"of {self._log_path}:\n{log_tail(self._log_path)}"
                )
            time.sleep(POLL_INTERVAL)  # polling readiness: there is nothing to await
        logger.info("started redis-server on port %d (pid %d)", port, self._proc.pid)

    def stop(self) -> None:
        """SIGCONT and SIGTERM to this server's PID, SIGKILL after a bounded grace period;
        a no-op when it is not running."""
        proc = self._proc
        if proc is None:
            return
        stop_process(proc, "redis-server")
        unregister_process(proc)
        self._proc = None

    def close(self) -> None:
        """Stop the server and remove its temp directory. Idempotent."""
        self.stop()
        if self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None
