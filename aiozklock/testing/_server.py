"""Real ZooKeeper server processes for tests: one standalone server or a small ensemble.

Servers are started from a local ZooKeeper install (``ZOOKEEPER_HOME`` or Debian's jars in
``/usr/share/java``) with ``QuorumPeerMain``, on free ports of 127.0.0.1 and in private temp
directories, so they never collide with other servers on the machine. Only PIDs started
here are ever signalled, and an ``atexit`` hook kills whatever is still running when the
test process exits.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType

import anyio.to_thread

from aiozklock._acl import digest_id

from ._tls import ClientAuth, TLSFiles

__all__ = [
    "ZooKeeperCluster",
    "ZooKeeperMember",
    "ZooKeeperStartError",
    "ZooKeeperUnavailableForTests",
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
_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
_JVM_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC")

_INSTALL_HINT = (
    "No local ZooKeeper installation was found, and AIOZKLOCK_ZK_HOSTS is not set. "
    "Install one with `apt-get install zookeeper` (Debian/Ubuntu; needs a Java runtime), "
    "or point ZOOKEEPER_HOME at an unpacked Apache ZooKeeper release, or set "
    "AIOZKLOCK_ZK_HOSTS=host:port[,host:port...] to use running servers."
)

_POLL_INTERVAL = 0.05
_STOP_GRACE = 10.0
_SERVING_MODES = frozenset({"standalone", "leader", "follower", "observer"})
_QUORUM_MODES = frozenset({"leader", "follower", "observer"})


SUPER_DIGEST_PROPERTY = "zookeeper.DigestAuthenticationProvider.superDigest"


class ZooKeeperUnavailableForTests(RuntimeError):
    """No usable local ZooKeeper (jars or java) was found; the message says how to get one."""


class ZooKeeperStartError(RuntimeError):
    """A server did not come up (or did not serve) in time; the message has its log tail."""


def find_zookeeper_classpath() -> str | None:
    """The classpath of a local ZooKeeper install, or ``None`` if there is none.

    ``$ZOOKEEPER_HOME`` wins (jars in ``$ZOOKEEPER_HOME/lib/*.jar`` and
    ``$ZOOKEEPER_HOME/*.jar``, as in an Apache release); otherwise Debian's jars in
    ``/usr/share/java``.
    """
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        root = Path(home)
        jars = sorted(root.glob("*.jar")) + sorted((root / "lib").glob("*.jar"))
        if any(jar.name.startswith("zookeeper") for jar in jars):
            return os.pathsep.join(str(jar) for jar in jars)
        logger.warning("ZOOKEEPER_HOME=%s holds no zookeeper jar; trying Debian's", home)
    debian = [_DEBIAN_JAVA_DIR / f"{name}.jar" for name in _DEBIAN_JARS]
    if all(jar.is_file() for jar in debian[:4]):  # the rest only matter for optional features
        return os.pathsep.join(str(jar) for jar in debian if jar.is_file())
    return None


def _find_java() -> str | None:
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


def _parse_mode(srvr_answer: str) -> str | None:
    for line in srvr_answer.splitlines():
        if line.startswith("Mode:"):
            return line.partition(":")[2].strip() or None
    return None  # e.g. "This ZooKeeper instance is not currently serving requests"


def _free_ports(count: int) -> list[int]:
    # Hold every socket until all are bound, so the ports are distinct.
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text("utf-8", "replace")
    except OSError as exc:
        return f"(no log at {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])


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


# --- process registry: kill whatever we started when the interpreter exits ------------

_live: dict[int, subprocess.Popen[bytes]] = {}
_live_lock = threading.Lock()


def _register(proc: subprocess.Popen[bytes]) -> None:
    with _live_lock:
        _live[proc.pid] = proc


def _unregister(proc: subprocess.Popen[bytes]) -> None:
    with _live_lock:
        _live.pop(proc.pid, None)


@atexit.register
def _kill_leftovers() -> None:
    with _live_lock:
        procs = list(_live.values())
        _live.clear()
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.send_signal(signal.SIGCONT)
                proc.kill()
    for proc in procs:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            proc.wait(timeout=5)


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
    ) -> None:
        self.id = id
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
            proc = subprocess.Popen(
                [
                    self._java,
                    *_JVM_OPTIONS,
                    *self._jvm_properties,
                    "-cp",
                    self._classpath,
                    _MAIN_CLASS,
                    str(self.config_path),
                ],
                cwd=self.member_dir,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        self._proc = proc
        self._paused = False
        _register(proc)
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
                    f"log tail of {self.log_path}:\n{_tail(self.log_path)}"
                )
            if self.mode() in wanted:
                return
            if time.monotonic() >= deadline:
                raise ZooKeeperStartError(
                    f"ZooKeeper {self.id} ({self.address}) not serving after {timeout}s; "
                    f"log tail of {self.log_path}:\n{_tail(self.log_path)}"
                )
            time.sleep(_POLL_INTERVAL)  # polling readiness: there is nothing to await

    def mode(self, timeout: float = 1.0) -> str | None:
        """``standalone``/``leader``/``follower`` from ``srvr``; ``None`` if not serving.

        ``None`` covers: not running, paused, not answering within ``timeout``, and a
        member that has no quorum ("not currently serving requests").
        """
        if not self.running or self._paused:
            return None
        try:
            return _parse_mode(four_letter_word(self.address, "srvr", timeout))
        except OSError:
            return None

    def stop(self) -> None:
        """Graceful stop: SIGCONT (a paused JVM cannot handle SIGTERM), SIGTERM, then
        SIGKILL if it has not exited within a bounded grace period."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
            try:
                proc.wait(timeout=_STOP_GRACE)
            except subprocess.TimeoutExpired:
                logger.warning("ZooKeeper %d ignored SIGTERM; killing pid %d", self.id, proc.pid)
                self.kill()
                return
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
            _unregister(self._proc)
            self._proc = None
        self._paused = False


class ZooKeeperCluster:
    """A standalone server (``size=1``) or an ensemble of ``size`` servers on 127.0.0.1.

    Nothing runs until :meth:`start`. Use as a context manager (``with
    ZooKeeperCluster(3) as zk:``) or call :meth:`close`, which stops every process and
    removes the temp directory.

    ``extra_config`` adds ``zoo.cfg`` keys or overrides the defaults (e.g.
    ``{"extendedTypesEnabled": "false"}`` for a server without TTL nodes). ``jvm_properties``
    are passed as ``-Dkey=value`` to every member's JVM, for settings read only from system
    properties, e.g. ``{"znode.container.checkIntervalMs": "100"}`` (how often the server
    deletes expired TTL nodes and empty containers; 60 s by default).

    ``superuser`` (``"user:password"``) makes a digest superuser: a client connected with
    ``auth=[("digest", superuser)]`` passes every ACL check (to inspect or clean up nodes
    other users' ACLs lock). It sets the JVM property
    ``zookeeper.DigestAuthenticationProvider.superDigest`` to :func:`digest_id` of it.
    Digest authentication itself needs no server setting. Raises ``InvalidArgument`` if
    ``superuser`` has no ``":"``.

    ``tls``: certificates (see :class:`TLSFiles`) to serve TLS with, on a ``secureClientPort``
    per member (:attr:`secure_hosts`) beside the plain port (:attr:`hosts`, which four-letter
    words and observers keep using); ``client_auth="need"`` requires a client certificate
    signed by their CA (mutual TLS). Quorum traffic stays plain.
    """

    def __init__(
        self,
        size: int = 1,
        *,
        tick_time: int = 200,
        base_dir: Path | None = None,
        extra_config: Mapping[str, str] | None = None,
        jvm_properties: Mapping[str, str] | None = None,
        superuser: str | None = None,
        tls: TLSFiles | None = None,
        client_auth: ClientAuth = "none",
    ) -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        self.tls = tls
        self.client_auth = client_auth
        self.size = size
        self.tick_time = tick_time
        self.extra_config = dict(extra_config or {})
        self.jvm_properties = dict(jvm_properties or {})
        if superuser is not None:
            self.jvm_properties[SUPER_DIGEST_PROPERTY] = digest_id(superuser)
        self._base_dir = base_dir
        self.work_dir: Path | None = None
        self.members: list[ZooKeeperMember] = []

    def __repr__(self) -> str:
        return f"<ZooKeeperCluster size={self.size} hosts={self.hosts!r}>"

    @property
    def hosts(self) -> str:
        """Connection string: ``127.0.0.1:p1,127.0.0.1:p2,...``."""
        return ",".join(member.address for member in self.members)

    @property
    def secure_hosts(self) -> str:
        """TLS connection string: ``127.0.0.1:s1,127.0.0.1:s2,...`` (``ValueError`` if the
        cluster has no ``tls``)."""
        if self.tls is None:
            raise ValueError("this cluster was created without tls=")
        return ",".join(str(member.secure_address) for member in self.members)

    def __enter__(self) -> ZooKeeperCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self, timeout: float = 30.0) -> ZooKeeperCluster:
        """Start every member and wait until all serve (with a leader if ``size > 1``)."""
        if self.members:
            raise RuntimeError("cluster already started")
        classpath = find_zookeeper_classpath()
        java = _find_java()
        if classpath is None or java is None:
            missing = "ZooKeeper jars" if classpath is None else "a java executable"
            raise ZooKeeperUnavailableForTests(f"{_INSTALL_HINT} (missing: {missing})")
        self.work_dir = Path(tempfile.mkdtemp(prefix="aiozklock-zk-", dir=self._base_dir))
        try:
            # A free port can be taken by someone else before the JVM binds it: retry afresh.
            attempts = 3
            for attempt in range(1, attempts + 1):
                self._create_members(classpath, java, self.work_dir / f"attempt{attempt}")
                for member in self.members:
                    member.start(wait=False)
                try:
                    self.wait_serving(timeout)
                except ZooKeeperStartError as exc:
                    clash = any(
                        "Address already in use" in _tail(m.log_path, 200) for m in self.members
                    )
                    if clash and attempt < attempts:
                        logger.warning("port clash starting ZooKeeper, retrying: %s", exc)
                        self._stop_members(self.members)
                        continue
                    raise
                break
        except BaseException:
            # Nothing half-started may outlive a failed start; the error carries the log tail.
            self.close()
            self.members = []
            raise
        logger.info("ZooKeeper cluster of %d serving at %s", self.size, self.hosts)
        return self

    def _create_members(self, classpath: str, java: str, root: Path) -> None:
        ensemble = self.size > 1
        ports = _free_ports(self.size * ((3 if ensemble else 1) + (self.tls is not None)))
        client_ports = ports[: self.size]
        secure_ports = ports[len(ports) - self.size :] if self.tls is not None else None
        base = {
            "tickTime": str(self.tick_time),
            "initLimit": "10",
            "syncLimit": "5",
            "minSessionTimeout": "400",
            "maxSessionTimeout": "30000",
            "clientPortAddress": "127.0.0.1",
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "*",
            "extendedTypesEnabled": "true",
            "maxClientCnxns": "0",
        }
        if self.tls is not None:
            base.update(self.tls.server_config(self.client_auth))
        if ensemble:
            for i in range(self.size):
                peer, election = ports[self.size + 2 * i], ports[self.size + 2 * i + 1]
                base[f"server.{i + 1}"] = f"127.0.0.1:{peer}:{election}"
        self.members = []
        for i in range(self.size):
            member_dir = root / f"zk{i + 1}"
            config = {
                **base,
                "dataDir": str(member_dir / "data"),
                "clientPort": str(client_ports[i]),
                **({"secureClientPort": str(secure_ports[i])} if secure_ports else {}),
                **self.extra_config,
            }
            self.members.append(
                ZooKeeperMember(
                    i + 1,
                    client_ports[i],
                    member_dir,
                    config,
                    in_ensemble=ensemble,
                    classpath=classpath,
                    java=java,
                    jvm_properties=self.jvm_properties,
                    secure_client_port=secure_ports[i] if secure_ports else None,
                )
            )

    def wait_serving(self, timeout: float = 30.0) -> None:
        """Block until every *running* member serves, and (ensemble) one is the leader."""
        deadline = time.monotonic() + timeout
        while True:
            for member in self.members:
                # Crashed by itself (a member killed or stopped by us has no process).
                if member._proc is not None and not member.running:
                    raise ZooKeeperStartError(
                        f"ZooKeeper {member.id} ({member.address}) exited with "
                        f"{member._proc.returncode}; log tail of {member.log_path}:\n"
                        f"{_tail(member.log_path)}"
                    )
            running = [m for m in self.members if m.running]
            if not running:
                raise ZooKeeperStartError("no ZooKeeper member is running")
            modes = [m.mode() for m in running]
            wanted = _QUORUM_MODES if self.size > 1 else _SERVING_MODES
            if all(mode in wanted for mode in modes) and (self.size == 1 or "leader" in modes):
                return
            if time.monotonic() >= deadline:
                tails = "\n".join(
                    f"--- member {m.id} ({m.address}) mode={mode}, {m.log_path}:\n"
                    f"{_tail(m.log_path, 20)}"
                    for m, mode in zip(running, modes, strict=True)
                )
                raise ZooKeeperStartError(
                    f"ZooKeeper cluster not serving after {timeout}s:\n{tails}"
                )
            time.sleep(_POLL_INTERVAL)  # polling readiness: there is nothing to await

    async def await_serving(self, timeout: float = 30.0) -> None:  # noqa: ASYNC109
        """:meth:`wait_serving` in a worker thread, so the event loop keeps running (the
        timeout bounds the thread, which cancellation cannot interrupt)."""
        await anyio.to_thread.run_sync(self.wait_serving, timeout)

    def leader(self) -> ZooKeeperMember:
        """The member whose ``srvr`` says ``Mode: leader`` (the standalone server if
        ``size == 1``). Raises ``LookupError`` if there is none right now."""
        for member in self.members:
            mode = member.mode()
            if mode == "leader" or (mode == "standalone" and self.size == 1):
                return member
        raise LookupError("no ZooKeeper member reports Mode: leader")

    def followers(self) -> list[ZooKeeperMember]:
        """The members that currently report ``Mode: follower``."""
        return [member for member in self.members if member.mode() == "follower"]

    def close(self) -> None:
        """Stop every member and remove the temp directory. Idempotent."""
        self._stop_members(self.members)
        if self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None

    @staticmethod
    def _stop_members(members: Iterable[ZooKeeperMember]) -> None:
        # Signal all first, then wait: a whole ensemble stops in one grace period.
        members = list(members)
        for member in members:
            proc = member._proc
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)
                    proc.terminate()
        for member in members:
            member.stop()
