"""Real ZooKeeper servers for tests: one standalone server or a small ensemble.

Servers are started from a local ZooKeeper install (see :mod:`._server_install`) with
``QuorumPeerMain``, on free ports of 127.0.0.1 and in private temp directories, so they never
collide with other servers on the machine; each is a :class:`ZooKeeperMember` (see
:mod:`._server_member`).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType

import anyio.to_thread

from aiozklock._acl import digest_id

from ._process import POLL_INTERVAL, log_tail
from ._server_install import (
    _INSTALL_HINT,
    SUPER_DIGEST_PROPERTY,
    ZooKeeperUnavailableForTests,
    find_java,
    find_zookeeper_classpath,
)
from ._server_layout import base_config, check_port_free, conf_allowed
from ._server_layout import free_ports as _free_ports
from ._server_links import (
    ServerLinks,
    check_how,
    member_id,
    pairs_between,
    pairs_isolating,
    server_line,
)
from ._server_member import (
    _QUORUM_MODES,
    _SERVING_MODES,
    PortTaken,
    ZooKeeperMember,
    ZooKeeperStartError,
)
from ._server_workdir import make_work_dir, work_dir_property
from ._tls import ClientAuth, TLSFiles

__all__ = ["ZooKeeperCluster"]

logger = logging.getLogger(__name__)


class ZooKeeperCluster:
    """A standalone server (``size=1``) or an ensemble of ``size`` voting servers (and
    ``observers``) on 127.0.0.1.

    Nothing runs until :meth:`start`, which ``with ZooKeeperCluster(3) as zk:`` calls on
    entering (and :meth:`close` on leaving); without ``with``, call :meth:`start`, then
    :meth:`close`, which stops every process and removes the temp directory. :meth:`start`
    on a started cluster returns it as it is, so ``with ... as zk: zk.start()`` is harmless.

    ``client_port``: the client port of the first member (the others get the next ones:
    2181, 2182, 2183), instead of free ports; :meth:`start` raises
    :class:`~aiozklock.testing.PortTaken` if one is in use. ``data_dir``: a directory that
    holds the members' data (``zk1``, ``zk2``... in it) and outlives :meth:`close`, so
    that a cluster started again on it has the nodes of the last one; by default the data
    is in the temp directory.

    ``extra_config`` adds ``zoo.cfg`` keys or overrides the defaults (e.g.
    ``{"extendedTypesEnabled": "false"}`` for a server without TTL nodes). ``jvm_properties``
    are passed as ``-Dkey=value`` to every member's JVM, for settings read only from system
    properties, e.g. ``{"znode.container.checkIntervalMs": "100"}`` (how often the server
    deletes expired TTL nodes and empty containers; 60 s by default). Every member's JVM
    also gets the options in ``$AIOZKLOCK_ZK_JVM_OPTIONS`` (shell words, read at each
    start), e.g. ``-XX:TieredStopAtLevel=1`` (the C1 compiler only: a server starts in
    about half the time and CPU, for tests whose servers live seconds; not for benchmarks).

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

    ``observers`` adds that many observers (``peerType=observer``, listed ``:observer``):
    members ``size + 1`` onwards, after the voters in :attr:`members`, in :attr:`hosts` too.
    ``observer_master=True`` (3.6+, ``size >= 2``) makes voter 1 (``members[0]``) run an
    ObserverMaster (``observerMasterPort``) that serves every observer, so that their
    sessions' touches reach the leader in two hops. ZooKeeper finds observer masters at
    each voter's address and the observer's own ``observerMasterPort``; all members share
    127.0.0.1, so only voter 1 listens there, and observers cannot connect while it leads
    (it never does after a fresh start: an election picks the highest id of a quorum).

    ``four_letter_words``: ``4lw.commands.whitelist`` (``"*"``, every word, by default);
    None leaves it out, ZooKeeper's own default since 3.5.3 (``srvr`` alone), e.g. to test
    a client where ``conf`` is refused.

    ``partitionable=True`` (``size > 1``) routes the server-to-server links (quorum and
    election) through per-pair proxies, so that they can be cut and healed while client
    connections stay up: :meth:`isolate`, :meth:`partition`, :meth:`cut`, :meth:`heal`;
    an observer's link to its ObserverMaster is cut with the pair (observer, voter 1).
    Raises ``ValueError`` if there is one member only. The election proxies rewrite the
    address a member announces when it dials, so ZooKeeper's election dial-back (at that
    address, not at the one in its config) stays behind the proxies too.
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
        partitionable: bool = False,
        client_port: int | None = None,
        data_dir: Path | None = None,
        observers: int = 0,
        observer_master: bool = False,
        four_letter_words: str | None = "*",
    ) -> None:
        if size < 1 or observers < 0:
            raise ValueError("size must be >= 1 and observers >= 0")
        if observer_master and (observers < 1 or size < 2):
            raise ValueError("observer_master=True needs observers and size >= 2")
        count = size + observers
        if client_port is not None and not 0 < client_port <= 65536 - count:
            raise ValueError(f"client_port {client_port}: the ports up to +{count - 1} must fit")
        self.client_port = client_port
        self.data_dir = data_dir
        if partitionable and count < 2:
            raise ValueError("partitionable=True needs an ensemble (size > 1)")
        self.observers = observers
        self.observer_master = observer_master
        self.four_letter_words = four_letter_words
        self._count = count
        self.partitionable = partitionable
        self._links: ServerLinks | None = None
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
        return (
            f"<ZooKeeperCluster size={self.size} observers={self.observers} hosts={self.hosts!r}>"
        )

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
        """Start every member and wait until all serve (with a leader if ``size > 1``).

        Returns the cluster; on a started one (``with`` started it), at once and unchanged
        (members stopped since are restarted with their own ``start()``). Raises
        :class:`ZooKeeperUnavailableForTests` without jars or Java, :class:`PortTaken` if
        ``client_port`` is in use, :class:`ZooKeeperStartError` if a member does not serve
        within ``timeout`` seconds (with its log tail); nothing keeps running then."""
        if self.work_dir is not None:  # started, and not closed since
            return self
        classpath = find_zookeeper_classpath()
        java = find_java()
        if classpath is None or java is None:
            missing = "ZooKeeper jars" if classpath is None else "a java executable"
            raise ZooKeeperUnavailableForTests(f"{_INSTALL_HINT} (missing: {missing})")
        self.work_dir = make_work_dir(self._base_dir)  # swept of dead owners' folders first
        try:
            for port in self._client_ports():
                check_port_free(port)
            # A free port can be taken by someone else before the JVM binds it: retry afresh.
            attempts = 3
            for attempt in range(1, attempts + 1):
                root = self.data_dir or self.work_dir / f"attempt{attempt}"
                self._create_members(classpath, java, root)
                for member in self.members:
                    member.start(wait=False)
                try:
                    self.wait_serving(timeout)
                except ZooKeeperStartError as exc:
                    clash = isinstance(exc, PortTaken) or any(
                        "Address already in use" in log_tail(m.log_path, 200) for m in self.members
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
        logger.info("ZooKeeper cluster of %d serving at %s", self._count, self.hosts)
        return self

    def _create_members(self, classpath: str, java: str, root: Path) -> None:
        count = self._count
        ensemble = count > 1
        self._bind_links()  # before choosing the real ports, so none of them is a proxy's
        main = count * (3 if ensemble else 1)
        ports = _free_ports(main + self.observer_master + count * (self.tls is not None))
        client_ports = self._client_ports() or ports[:count]
        secure_ports = ports[len(ports) - count :] if self.tls is not None else None
        base = base_config(self.tick_time, self.four_letter_words)
        if self.tls is not None:
            base.update(self.tls.server_config(self.client_auth))
        real = {
            i + 1: (ports[count + 2 * i], ports[count + 2 * i + 1])
            for i in range(count if ensemble else 0)
        }
        master_port = ports[main] if self.observer_master else 0
        servers = self._servers_by_member(real, master_port)
        self.members = []
        for i in range(count):
            member_dir = root / f"zk{i + 1}"
            config = {
                **base,
                **servers.get(i + 1, {}),
                **self._role_config(i + 1, master_port),
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
                    jvm_properties={**self.jvm_properties, **work_dir_property(self.work_dir)},
                    secure_client_port=secure_ports[i] if secure_ports else None,
                    conf_allowed=conf_allowed(self.four_letter_words),
                )
            )

    def _role_config(self, member: int, master_port: int) -> dict[str, str]:
        """An observer's ``peerType``; the ObserverMaster's port, for voter 1 (where it
        listens) and for observers (where they dial it: the proxy, if partitionable)."""
        config = {}
        observer = member > self.size
        if observer:
            config["peerType"] = "observer"
        if self.observer_master and (observer or member == 1):
            links = self._links
            port = links.master_port(member) if links is not None and observer else master_port
            config["observerMasterPort"] = str(port)
        return config

    def _client_ports(self) -> list[int]:
        """The fixed client ports (``client_port``), or none: free ones are chosen."""
        if self.client_port is None:
            return []
        return list(range(self.client_port, self.client_port + self._count))

    def _bind_links(self) -> None:
        if self._links is not None:  # a retried start: the old proxies led to old ports
            self._links.close()
            self._links = None
        if self.partitionable:
            observers = range(self.size + 1, self._count + 1)
            master = 1 if self.observer_master else None
            self._links = ServerLinks(range(1, self._count + 1), observers, master)

    def _servers_by_member(
        self, real: dict[int, tuple[int, int]], master_port: int
    ) -> dict[int, dict[str, str]]:
        """Each member's ``server.N`` lines: the same real ports for all, or (partitionable)
        each member's own view, through the proxies (started here)."""
        if self._links is None:
            lines = {f"server.{i}": server_line(ports, i > self.size) for i, ports in real.items()}
            return dict.fromkeys(real, lines)
        self._links.start(real, master_port)
        return {member: self._links.servers_for(member) for member in real}

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
                        f"{log_tail(member.log_path)}"
                    )
            running = [m for m in self.members if m.running]
            if not running:
                raise ZooKeeperStartError("no ZooKeeper member is running")
            modes = [m.mode() for m in running]
            wanted = _QUORUM_MODES if self._count > 1 else _SERVING_MODES
            if all(mode in wanted for mode in modes) and (self._count == 1 or "leader" in modes):
                foreign = [m.address for m in running if not m.answers_for_itself()]
                if foreign:
                    raise PortTaken(f"another process's ZooKeeper serves on {foreign}")
                return
            if time.monotonic() >= deadline:
                tails = "\n".join(
                    f"--- member {m.id} ({m.address}) mode={mode}, {m.log_path}:\n"
                    f"{log_tail(m.log_path, 20)}"
                    for m, mode in zip(running, modes, strict=True)
                )
                raise ZooKeeperStartError(
                    f"ZooKeeper cluster not serving after {timeout}s:\n{tails}"
                )
            time.sleep(POLL_INTERVAL)  # polling readiness: there is nothing to await

    async def await_serving(self, timeout: float = 30.0) -> None:  # noqa: ASYNC109
        """:meth:`wait_serving` in a worker thread, so the event loop keeps running (the
        timeout bounds the thread, which cancellation cannot interrupt)."""
        await anyio.to_thread.run_sync(self.wait_serving, timeout)

    def leader(self) -> ZooKeeperMember:
        """The member whose ``srvr`` says ``Mode: leader`` (the standalone server if
        ``size == 1``). Raises ``LookupError`` if there is none right now."""
        for member in self.members:
            mode = member.mode()
            if mode == "leader" or (mode == "standalone" and self._count == 1):
                return member
        raise LookupError("no ZooKeeper member reports Mode: leader")

    def followers(self) -> list[ZooKeeperMember]:
        """The members that currently report ``Mode: follower``."""
        return [member for member in self.members if member.mode() == "follower"]

    def observer_members(self) -> list[ZooKeeperMember]:
        """The observers (members ``size + 1`` onwards), serving or not."""
        return self.members[self.size :]

    # --- server-to-server link faults (partitionable=True) ------------------------------

    def isolate(self, member: ZooKeeperMember | int, *, how: str = "silent") -> None:
        """Cut every server-to-server link into and out of ``member`` (a member or its
        1-based id); its client port stays reachable.

        ``how="silent"``: the links' bytes are held (neither forwarded nor dropped, the
        connections stay open, new ones are accepted but not forwarded) and delivered in
        order by :meth:`heal`, as after a real partition. ``how="reset"``: the links'
        connections are reset, and new ones too until :meth:`heal`. Cuts add up; the
        latest ``how`` wins for a link cut twice. Returns at once (no byte crosses a cut
        link after it returns; resets are sent by the pump thread right after).

        Raises ``RuntimeError`` if the cluster is not partitionable or not started,
        ``ValueError`` for an unknown member or ``how``.
        """
        links, ids = self._links_or_raise(), [m.id for m in self.members]
        links.cut(pairs_isolating(ids, member_id(self.members, member)), check_how(how))

    def partition(self, *groups: Iterable[ZooKeeperMember | int], how: str = "silent") -> None:
        """Cut every link between members of different ``groups``; members in no group
        form one more group: ``partition([1], [2, 3])``, or on 5 members
        ``partition([1, 2])`` (same as ``partition([1, 2], [3, 4, 5])``). ``how`` and the
        errors as for :meth:`isolate`; ``ValueError`` also if a member is in two groups.
        """
        links, ids = self._links_or_raise(), [m.id for m in self.members]
        resolved = [{member_id(self.members, member) for member in group} for group in groups]
        links.cut(pairs_between(ids, resolved), check_how(how))

    def cut(
        self, a: ZooKeeperMember | int, b: ZooKeeperMember | int, *, how: str = "silent"
    ) -> None:
        """Cut the links between ``a`` and ``b``, both directions. ``how`` and the errors as
        for :meth:`isolate`; ``ValueError`` also if ``a`` and ``b`` are the same member."""
        links = self._links_or_raise()
        first, second = member_id(self.members, a), member_id(self.members, b)
        if first == second:
            raise ValueError(f"cannot cut member {first} from itself")
        links.cut({(first, second), (second, first)}, check_how(how))

    def heal(self) -> None:
        """Restore every link: held bytes are delivered in order, held connections are
        forwarded. Returns at once. Raises ``RuntimeError`` as :meth:`isolate` does."""
        self._links_or_raise().heal()

    @property
    def cut_links(self) -> frozenset[tuple[int, int]]:
        """The cut links as ordered pairs of member ids ``(dialer, target)``: a cut
        between 1 and 2 is ``{(1, 2), (2, 1)}``. Empty if not partitionable."""
        return self._links.cut_links if self._links is not None else frozenset()

    def _links_or_raise(self) -> ServerLinks:
        if self._links is None:
            if not self.partitionable:
                raise RuntimeError(
                    "this cluster's server links cannot be cut: create it with "
                    "ZooKeeperCluster(size, partitionable=True)"
                )
            raise RuntimeError("the cluster is not started (or closed): call start() first")
        return self._links

    def close(self) -> None:
        """Stop every member and remove the temp directory (never ``data_dir``).
        Idempotent."""
        self._stop_members(self.members)
        if self._links is not None:
            self._links.close()
            self._links = None
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
