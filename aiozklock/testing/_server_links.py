"""Cuttable server-to-server links of a partitionable :class:`ZooKeeperCluster`.

Every member's own ``zoo.cfg`` lists the member itself at its real quorum and election
ports, and every other member *i* at two proxy ports dedicated to the ordered pair
(member -> *i*), which forward to *i*'s real ports. Cutting a pair stops both of its
proxies (see :mod:`._server_links_pump`); client ports are never proxied.

An observer is listed with ``:observer`` in every member's file. An observer served by an
ObserverMaster (``observer_master`` of :class:`ZooKeeperCluster`) dials that voter at its
own ``observerMasterPort``: a third proxy per (observer -> master) pair, cut with the pair.

The election link needs one more step. In ZooKeeper 3.5-3.9 (checked in 3.8.0,
``QuorumCnxManager``) every election connection starts with an initial message announcing
the dialer's own election address, taken from the dialer's config: its *real* port. A
member that receives a connection from a lower server id drops it and dials back
(``handleConnection`` -> ``connectOne(sid, electionAddr)``) at that announced address, not
at the one in its own config. That dial-back would bypass the proxies, and an election
link established that way would survive a cut. So each election proxy rewrites the
announced address in the initial message to the proxy of the reverse pair: the dial-back
goes through the proxies too (:func:`rewrite_initial_message`). The quorum link (a
follower dialling its leader's quorum port, found in its own config) needs no rewriting.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from ._server_links_pump import How, LinkPump, Listener, Pair
from ._server_member import ZooKeeperMember

__all__ = [
    "ServerLinks",
    "check_how",
    "member_id",
    "pairs_between",
    "pairs_isolating",
    "rewrite_initial_message",
    "server_line",
]

logger = logging.getLogger(__name__)

#: QuorumCnxManager's PROTOCOL_VERSION_V1 and _V2 (3.5+: the latter with several addresses).
_PROTOCOL_VERSIONS = frozenset({-65536, -65535})
_INITIAL = struct.Struct("!qqi")  # protocol version, sid, length of the address string
_MAX_ADDRESS = 2048  # QuorumCnxManager.InitialMessage's maxBuffer
_HOWS = ("silent", "reset")


def rewrite_initial_message(buffer: bytearray, dialer: int, announce: bytes) -> bool:
    """Replace, in place, the election address announced by member ``dialer`` in the first
    message of an election connection (``buffer`` holds the stream's first bytes) with
    ``announce``. Returns False while the message is incomplete, True once it is rewritten
    or found not to need it (an old protocol version without an address, another sender,
    or not an initial message at all: then it is left alone)."""
    if len(buffer) < 8:
        return False
    version = int.from_bytes(buffer[:8], "big", signed=True)
    if version not in _PROTOCOL_VERSIONS:
        return True  # pre-3.5: the first long is the sid, and no address follows
    if len(buffer) < _INITIAL.size:
        return False
    _, sid, length = _INITIAL.unpack_from(buffer)
    if not 0 < length <= _MAX_ADDRESS:
        return True  # the server refuses it anyway
    if len(buffer) < _INITIAL.size + length:
        return False
    if sid != dialer:
        logger.warning("election link of member %d carries sid %d: not rewritten", dialer, sid)
        return True
    buffer[8 : _INITIAL.size + length] = struct.pack("!qi", sid, len(announce)) + announce
    return True


def server_line(ports: tuple[int, int], observer: bool) -> str:
    """A ``server.N`` value: 127.0.0.1 at quorum and election ``ports``, a voter or an
    observer."""
    line = f"127.0.0.1:{ports[0]}:{ports[1]}"
    return f"{line}:observer" if observer else line


def _rewriter(dialer: int, announce: bytes) -> Callable[[bytearray], bool]:
    return lambda buffer: rewrite_initial_message(buffer, dialer, announce)


def pairs_isolating(ids: Iterable[int], member: int) -> set[Pair]:
    """Every ordered pair into and out of ``member``."""
    others = [other for other in ids if other != member]
    return {(member, other) for other in others} | {(other, member) for other in others}


def pairs_between(ids: Collection[int], groups: Sequence[Collection[int]]) -> set[Pair]:
    """Every ordered pair of members in different groups; members in no group form one
    more group. Raises ``ValueError`` if a member is in two groups."""
    group_of: dict[int, int] = {}
    for index, group in enumerate(groups):
        for member in group:
            if group_of.setdefault(member, index) != index:
                raise ValueError(f"member {member} is in two groups of the partition")
    rest = len(groups)
    return {
        (a, b)
        for a in ids
        for b in ids
        if a != b and group_of.get(a, rest) != group_of.get(b, rest)
    }


def member_id(members: Sequence[ZooKeeperMember], member: ZooKeeperMember | int) -> int:
    """The id of ``member`` (a member or its 1-based id); ``ValueError`` if unknown."""
    if isinstance(member, ZooKeeperMember):
        if member not in members:
            raise ValueError(f"{member!r} is not a member of this cluster")
        return member.id
    if isinstance(member, int) and not isinstance(member, bool) and 1 <= member <= len(members):
        return member
    raise ValueError(f"unknown member {member!r}: ids are 1..{len(members)}")


def check_how(how: str) -> How:
    """``how`` as a :data:`How`; ``ValueError`` if it is neither "silent" nor "reset"."""
    if how == "silent":
        return "silent"
    if how == "reset":
        return "reset"
    raise ValueError(f"how must be one of {_HOWS}, not {how!r}")


class ServerLinks:
    """The proxies of an ensemble of members ``ids`` and their pump thread, running from
    :meth:`start` until :meth:`close`. The proxies listen from construction on: choose the
    members' real ports after it, so that none of them can be a proxy's."""

    def __init__(
        self, ids: Iterable[int], observers: Collection[int] = (), master: int | None = None
    ) -> None:
        ids = list(ids)
        self._pump = LinkPump()
        self._real: dict[int, tuple[int, int]] = {}
        self._observers = frozenset(observers)
        self._proxies: dict[Pair, tuple[Listener, Listener]] = {}
        self._masters: dict[int, Listener] = {}  # observer -> the proxy to its master
        try:
            for pair in ((dialer, target) for dialer in ids for target in ids):
                if pair[0] != pair[1]:  # quorum, election
                    self._proxies[pair] = (self._pump.listen(pair), self._pump.listen(pair))
            if master is not None:
                for observer in self._observers:
                    self._masters[observer] = self._pump.listen((observer, master))
        except BaseException:
            self._pump.close()
            raise

    def start(self, real: Mapping[int, tuple[int, int]], master_port: int = 0) -> None:
        """Forward to the members' ``real`` quorum and election ports (and to the
        ObserverMaster's ``master_port``), from now on."""
        self._real = dict(real)
        for (dialer, target), (quorum, election) in self._proxies.items():
            quorum.upstream_port, election.upstream_port = real[target]
            # The target dials back (if it must) through the reverse pair's proxy.
            back = self._proxies[(target, dialer)][1].port
            election.rewrite = _rewriter(dialer, f"127.0.0.1:{back}".encode())
        for listener in self._masters.values():
            listener.upstream_port = master_port
        self._pump.start()

    def master_port(self, observer: int) -> int:
        """The port at which ``observer`` dials its ObserverMaster (a proxy of the kit)."""
        return self._masters[observer].port

    def servers_for(self, member: int) -> dict[str, str]:
        """The ``server.N`` lines of ``member``'s ``zoo.cfg``: itself at its real ports, the
        others at the proxies of its pairs; observers marked ``:observer``."""
        lines = {}
        for other, ports in self._real.items():
            if other != member:
                quorum, election = self._proxies[(member, other)]
                ports = (quorum.port, election.port)
            lines[f"server.{other}"] = server_line(ports, other in self._observers)
        return lines

    @property
    def cut_links(self) -> frozenset[Pair]:
        return self._pump.cut_links

    def cut(self, pairs: Iterable[Pair], how: How) -> None:
        self._pump.set_cut(pairs, how)

    def heal(self) -> None:
        self._pump.heal()

    def close(self) -> None:
        self._pump.close()
