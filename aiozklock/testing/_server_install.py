"""Discovering a local ZooKeeper install, and talking to a server with four-letter words.

Servers are started from a local ZooKeeper install (``ZOOKEEPER_HOME`` or Debian's jars in
``/usr/share/java``); :func:`four_letter_word` asks a running one what it is doing.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import time
from pathlib import Path

__all__ = [
    "ZooKeeperUnavailableForTests",
    "find_java",
    "find_zookeeper_classpath",
    "four_letter_word",
]

logger = logging.getLogger(__name__)

#: Debian's jars (fault-matrix D): netty-all is a stub there, so the NIO factory is used,
#: except by TLS servers, which need Netty: its split jars come with the zookeeper package.
_DEBIAN_JARS = (
    "zookeeper",
    "zookeeper-jute",
    "slf4j-api",
    "slf4j-simple",
    "netty-all",
    "metrics-core",
    "snappy-java",
    "netty-buffer",
    "netty-codec",
    "netty-common",
    "netty-handler",
    "netty-resolver",
    "netty-transport",
    "netty-transport-native-epoll",
    "netty-transport-native-unix-common",
)
_DEBIAN_JAVA_DIR = Path("/usr/share/java")

_INSTALL_HINT = (
    "No local ZooKeeper installation was found, and AIOZKLOCK_ZK_HOSTS is not set. "
    "Install one with `apt-get install zookeeper` (Debian/Ubuntu; needs a Java runtime), "
    "or point ZOOKEEPER_HOME at an unpacked Apache ZooKeeper release, or set "
    "AIOZKLOCK_ZK_HOSTS=host:port[,host:port...] to use running servers."
)

#: The JVM property that makes a digest superuser (``ZooKeeperCluster(superuser=...)``).
SUPER_DIGEST_PROPERTY = "zookeeper.DigestAuthenticationProvider.superDigest"


class ZooKeeperUnavailableForTests(RuntimeError):
    """No usable local ZooKeeper (jars or java) was found; the message says how to get one."""


def find_zookeeper_classpath() -> str | None:
    """The classpath of a local ZooKeeper install, or ``None`` if there is none.

    ``$ZOOKEEPER_HOME`` wins (jars in ``$ZOOKEEPER_HOME/lib/*.jar`` and
    ``$ZOOKEEPER_HOME/*.jar``, as in an Apache release); otherwise Debian's jars in
    ``/usr/share/java``.
    """
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        classpath = home_classpath(Path(home))
        if classpath is not None:
            return classpath
        logger.warning("ZOOKEEPER_HOME=%s holds no zookeeper jar; trying Debian's", home)
    return debian_classpath()


def home_classpath(home: Path) -> str | None:
    """The classpath of the Apache ZooKeeper release unpacked in ``home`` (its ``*.jar`` and
    ``lib/*.jar``), or ``None`` if no ``zookeeper*.jar`` is there."""
    jars = sorted(home.glob("*.jar")) + sorted((home / "lib").glob("*.jar"))
    if any(jar.name.startswith("zookeeper") for jar in jars):
        return os.pathsep.join(str(jar) for jar in jars)
    return None


def debian_classpath() -> str | None:
    """The classpath of Debian's ``zookeeper`` package (``/usr/share/java``), or ``None``."""
    debian = [_DEBIAN_JAVA_DIR / f"{name}.jar" for name in _DEBIAN_JARS]
    if all(jar.is_file() for jar in debian[:4]):  # the rest only matter for optional features
        return os.pathsep.join(str(jar) for jar in debian if jar.is_file())
    return None


def find_java() -> str | None:
    """The ``java`` to run ZooKeeper with: ``$JAVA_HOME/bin/java`` if there is one, else the
    first on ``PATH``; None if there is none. The kit's API for ``aiozklock server`` too (it
    refuses to start without Java)."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file():
            return str(candidate)
    return shutil.which("java")


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    return host or "127.0.0.1", int(port)


def four_letter_word(address: str, word: str, timeout: float = 1.0) -> str:
    """Send a four-letter command (``srvr``, ``ruok``, ``mntr``...) and return the answer.

    Blocking. Raises ``OSError`` (``TimeoutError`` included) if the server does not answer
    completely within ``timeout`` seconds, e.g. because it is paused with SIGSTOP.
    """
    if len(word) != 4:
        raise ValueError(f"four-letter words have four letters, got {word!r}")
    host, port = _split_address(address)
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode("ascii"))
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{word} to {address}: no complete answer in {timeout}s")
            sock.settimeout(remaining)
            chunk = sock.recv(65536)
            if not chunk:  # the server closes after answering
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")
