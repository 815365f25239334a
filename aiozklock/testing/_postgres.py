"""A throwaway PostgreSQL server for tests: ``initdb`` and ``pg_ctl`` in a private temp dir.

The server binaries come from a local install: Debian's ``postgresql`` package
(``/usr/lib/postgresql/<version>/bin``, the highest version), else ``pg_ctl`` on ``PATH``.
PostgreSQL refuses to run as root: as root, every command runs as the ``postgres`` system
user (``runuser -u postgres --``), in a temp dir that user owns. The server listens on a free
port of 127.0.0.1 and puts its Unix socket in its temp dir; it trusts every local connection.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import weakref
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

__all__ = [
    "DEFAULT_SETTINGS",
    "PostgresServer",
    "PostgresStartError",
    "PostgresUnavailableForTests",
    "find_postgres_bin",
]

logger = logging.getLogger(__name__)

_DEBIAN_ROOT = Path("/usr/lib/postgresql")
_SYSTEM_USER = "postgres"
_SUPERUSER = "postgres"
_INSTALL_HINT = (
    "No local PostgreSQL server binaries (initdb, pg_ctl) were found, and AIOZKLOCK_PG_DSN "
    "is not set. Install them with `apt-get install postgresql` (Debian/Ubuntu; `bash "
    ".ci/dev.sh setup` does it), or set AIOZKLOCK_PG_DSN=postgresql://... to use a running "
    "server."
)
#: Test settings: durability off (a test server's data is thrown away), fast to start.
DEFAULT_SETTINGS: Mapping[str, str] = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}


class PostgresUnavailableForTests(RuntimeError):
    """No usable local PostgreSQL (binaries, or a ``postgres`` user to run them as root) was
    found; the message says how to get one."""


class PostgresStartError(RuntimeError):
    """``initdb`` or ``pg_ctl start`` failed; the message carries their output."""


def find_postgres_bin() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or None."""
    versions = []
    if _DEBIAN_ROOT.is_dir():
        for entry in _DEBIAN_ROOT.iterdir():
            if entry.name.isdigit() and (entry / "bin" / "pg_ctl").is_file():
                versions.append((int(entry.name), entry / "bin"))
    if versions:
        return max(versions)[1]
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


def _reachable_by_others(directory: Path) -> bool:
    """Whether users other than its owners can traverse ``directory`` and its parents."""
    try:
        resolved = directory.resolve()
        return all(d.stat().st_mode & stat.S_IXOTH for d in (resolved, *resolved.parents))
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


_live: weakref.WeakSet[PostgresServer] = weakref.WeakSet()


@atexit.register
def _stop_leftovers() -> None:
    for server in list(_live):
        server.close()


class PostgresServer:
    """A PostgreSQL server of its own, in a temp dir, on a free port of 127.0.0.1.

    Nothing runs until :meth:`start` (which ``with PostgresServer() as pg:`` calls on entering;
    a second ``start()`` is harmless); :meth:`close` stops it (``pg_ctl -m immediate``: its data
    is thrown away) and removes the temp dir. Use as a context manager, or let the ``pg_dsn``
    pytest fixture start one per test session. ``settings`` are server settings (``-c
    name=value``) on top of :data:`DEFAULT_SETTINGS` (durability off). The temp dir is made in
    ``base_dir`` (default: the system's, or ``/tmp`` when run as root and the ``postgres`` user
    could not reach the system's). Raises :class:`PostgresUnavailableForTests` when no install
    is found, and :class:`PostgresStartError` when the server does not start.
    """

    def __init__(
        self,
        *,
        settings: Mapping[str, str] | None = None,
        bin_dir: Path | None = None,
        base_dir: Path | None = None,
    ) -> None:
        self.settings = {**DEFAULT_SETTINGS, **(settings or {})}
        self._bin_dir = bin_dir
        self._base_dir = base_dir
        self.work_dir: Path | None = None
        self.port: int | None = None

    def __repr__(self) -> str:
        return f"<PostgresServer port={self.port} work_dir={self.work_dir}>"

    @property
    def dsn(self) -> str:
        """``postgresql://postgres@127.0.0.1:PORT/postgres`` (no password: trust)."""
        if self.port is None:
            raise RuntimeError("the server is not started")
        return f"postgresql://{_SUPERUSER}@127.0.0.1:{self.port}/postgres"

    @property
    def socket_dir(self) -> Path:
        """The directory of the server's Unix socket (``host=`` for libpq)."""
        if self.work_dir is None:
            raise RuntimeError("the server is not started")
        return self.work_dir

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self, timeout: float = 60.0) -> PostgresServer:
        """Run ``initdb``, then ``pg_ctl start`` and wait until the server accepts
        connections (a port taken meanwhile by someone else: retried on another). Returns
        the server; a started one (``with`` starts it) at once, unchanged."""
        if self.work_dir is not None:
            return self
        bin_dir = self._bin_dir or find_postgres_bin()
        if bin_dir is None:
            raise PostgresUnavailableForTests(_INSTALL_HINT)
        runner = _runner()
        base = self._base_dir
        if runner:  # root: the server runs as another user, who must reach the temp dir
            if base is None and not _reachable_by_others(Path(tempfile.gettempdir())):
                base = Path("/tmp")  # e.g. TMPDIR in a root-only directory
            if not _reachable_by_others(base or Path(tempfile.gettempdir())):
                raise PostgresStartError(
                    f"PostgreSQL runs as the {_SYSTEM_USER!r} user here (the server refuses "
                    f"root), which cannot reach {base}: pass base_dir= a directory that "
                    "every user can traverse"
                )
        self.work_dir = Path(tempfile.mkdtemp(prefix="aiozklock-pg-", dir=base))
        _live.add(self)
        try:
            if runner:  # root: the temp dir must belong to the user that runs the server
                import pwd  # POSIX only, like running as root

                account = pwd.getpwnam(_SYSTEM_USER)
                os.chown(self.work_dir, account.pw_uid, account.pw_gid)
            data = self.work_dir / "data"
            initdb = [str(bin_dir / "initdb"), "-D", str(data), "-A", "trust"]
            initdb += ["-U", _SUPERUSER, "-E", "UTF8", "--locale=C", "--no-sync"]
            self._run([*runner, *initdb], timeout)
            for attempt in range(1, 4):
                self.port = _free_port()
                try:
                    self._run([*runner, *self._pg_ctl_start(bin_dir, data, timeout)], timeout)
                except PostgresStartError as exc:
                    if attempt < 3 and "already in use" in str(exc):
                        logger.warning("port clash starting PostgreSQL, retrying: %s", exc)
                        continue
                    raise
                break
        except BaseException:
            self.close()
            raise
        logger.info("PostgreSQL serving at %s (in %s)", self.dsn, self.work_dir)
        return self

    def _pg_ctl_start(self, bin_dir: Path, data: Path, timeout: float) -> list[str]:
        assert self.work_dir is not None
        options = [
            f"-p {self.port}",
            f"-k {shlex.quote(str(self.work_dir))}",
            "-c listen_addresses=127.0.0.1",
        ]
        options += [f"-c {shlex.quote(f'{k}={v}')}" for k, v in self.settings.items()]
        log = self.work_dir / "server.log"
        command = [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w"]
        return [*command, f"-t{int(timeout)}", "-o", " ".join(options), "start"]

    def _run(self, command: list[str], timeout: float) -> None:
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PostgresStartError(f"{shlex.join(command)}: {exc}") from exc
        if done.returncode != 0:
            raise PostgresStartError(
                f"{shlex.join(command)} exited with {done.returncode}:\n{done.stdout}"
                f"{done.stderr}{self._log_tail()}"
            )

    def _log_tail(self, lines: int = 20) -> str:
        if self.work_dir is None:
            return ""
        try:
            text = (self.work_dir / "server.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\nserver.log:\n" + "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        """Stop the server at once (``pg_ctl -m immediate``; a kill if that fails) and
        remove its temp dir. Safe to call more than once."""
        work_dir, self.work_dir = self.work_dir, None
        _live.discard(self)
        if work_dir is None:
            return
        data = work_dir / "data"
        bin_dir = self._bin_dir or find_postgres_bin()
        if (data / "postmaster.pid").exists() and bin_dir is not None:
            stop = [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
            try:
                subprocess.run([*_runner(), *stop], capture_output=True, timeout=30, check=True)
            except (OSError, subprocess.SubprocessError) as exc:
                logger.warning("pg_ctl stop failed (%s): killing the postmaster", exc)
                _kill_postmaster(data)
        shutil.rmtree(work_dir, ignore_errors=True)
        self.port = None


def _runner() -> list[str]:
    """The prefix that runs a server command as a user PostgreSQL accepts."""
    if os.geteuid() != 0:
        return []
    import pwd

    try:
        pwd.getpwnam(_SYSTEM_USER)
    except KeyError:
        raise PostgresUnavailableForTests(
            f"running as root, and there is no {_SYSTEM_USER!r} user to run PostgreSQL as "
            "(the server refuses root): install Debian's postgresql package, which creates "
            "it, or run the tests as another user"
        ) from None
    runuser = shutil.which("runuser")
    if runuser is None:
        raise PostgresUnavailableForTests("running as root, and runuser is missing")
    return [runuser, "-u", _SYSTEM_USER, "--"]


def _kill_postmaster(data: Path) -> None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        first = (data / "postmaster.pid").read_text().split("\n", 1)[0]
        if re.fullmatch(r"\d+", first.strip()):
            os.kill(int(first), signal.SIGKILL)
