"""A class-data archive of ZooKeeper's classes (Java's AppCDS) for the suite's servers.

The suite starts its servers a few hundred times; a start spends most of its CPU loading and
verifying the same classes. Java 13+ writes the classes a run loaded to an archive at its exit
(``-XX:ArchiveClassesAtExit``) and maps them from it at the next start
(``-XX:SharedArchiveFile``). Measured here (CPU until the server serves): a standalone start
0.40 -> 0.25 s on a quiet machine (0.69 -> 0.41 s on a busy one), a 3-node ensemble 1.66 ->
1.15-1.38 s.

The archive is made once per machine (one server started and stopped, about 2 s) by the
process that runs the session (xdist's controller, before its workers start: they and their
subprocesses inherit the option), and reused while the JVM and ZooKeeper's classpath are the
same (its name is a digest of both). A JVM that cannot use the archive (another JVM, a damaged
file) warns in the server's log and starts without it (``-Xshare:auto``, the default).
"""

from __future__ import annotations

import getpass
import hashlib
import os
import tempfile
import warnings
from pathlib import Path

from aiozklock.testing import ZooKeeperCluster
from aiozklock.testing._server_install import find_java, find_zookeeper_classpath
from aiozklock.testing._server_member import JVM_OPTIONS_ENV


def _archive_path(java: str, classpath: str) -> Path:
    real = os.path.realpath(java)
    key = f"{real} {os.stat(real).st_mtime_ns} {classpath}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"aiozklock-cds-{getpass.getuser()}" / f"{digest}.jsa"


def _dump(archive: Path, options: str) -> None:
    """One server started and stopped with ``options``, its loaded classes archived at exit."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f"{archive.stem}.{os.getpid()}.partial")
    os.environ[JVM_OPTIONS_ENV] = f"{options} -XX:ArchiveClassesAtExit={partial}"
    try:
        with ZooKeeperCluster(1):
            pass
    except Exception as exc:  # only a speed-up: the suite's own servers will say what fails
        warnings.warn(f"no class-data archive for ZooKeeper: {exc!r}", stacklevel=1)
    finally:
        os.environ[JVM_OPTIONS_ENV] = options
    if partial.exists():
        os.replace(partial, archive)  # whole or absent: another session may be reading


def use_class_archive(options: str) -> None:
    """Add the archive to the servers' JVM options (``$AIOZKLOCK_ZK_JVM_OPTIONS``), making it
    first if needed, when those options are still ``options`` (the suite's own: a caller's
    choice is kept) and a JVM and ZooKeeper are installed."""
    java, classpath = find_java(), find_zookeeper_classpath()
    if os.environ.get(JVM_OPTIONS_ENV) != options or java is None or classpath is None:
        return
    archive = _archive_path(java, classpath)
    if not archive.exists():
        _dump(archive, options)
    if archive.exists():
        os.environ[JVM_OPTIONS_ENV] = f"{options} -XX:SharedArchiveFile={archive}"
