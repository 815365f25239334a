"""Where a :class:`ZooKeeperCluster`'s members listen and what their ``zoo.cfg`` holds."""

from __future__ import annotations

import errno
import socket

from ._server_member import PortTaken

__all__ = ["base_config", "check_port_free", "conf_allowed", "free_ports"]


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports of 127.0.0.1 that were free a moment ago."""
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


def check_port_free(port: int) -> None:
    """Raise :class:`PortTaken` if something listens on ``127.0.0.1:port`` (bound as
    ZooKeeper binds it, with ``SO_REUSEADDR``: a port left in TIME_WAIT counts as free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise PortTaken(f"port {port} of 127.0.0.1 is in use by another process") from None


def conf_allowed(four_letter_words: str | None) -> bool:
    """Whether a ``4lw.commands.whitelist`` of ``four_letter_words`` (None: the key left
    out, ZooKeeper's default of ``srvr`` alone) lets ``conf`` through."""
    words = {word.strip() for word in (four_letter_words or "").split(",")}
    return "*" in words or "conf" in words


def base_config(tick_time: int, four_letter_words: str | None = "*") -> dict[str, str]:
    """The ``zoo.cfg`` keys every member shares: short ticks (session timeouts from 0.4 s
    to 30 s are not clamped), every four-letter word allowed by default (``srvr``,
    ``conf``, ``mntr``: health checks, leader detection, the client's ``tickTime`` check;
    ``four_letter_words`` is the whitelist, None leaves it to ZooKeeper's default), no admin
    server, TTL nodes on (``extendedTypesEnabled``), no limit on connections per client
    address."""
    config = {
        "tickTime": str(tick_time),
        "initLimit": "10",
        "syncLimit": "5",
        "minSessionTimeout": "400",
        "maxSessionTimeout": "30000",
        "clientPortAddress": "127.0.0.1",
        "admin.enableServer": "false",
        "extendedTypesEnabled": "true",
        "maxClientCnxns": "0",
    }
    if four_letter_words is not None:
        config["4lw.commands.whitelist"] = four_letter_words
    return config
