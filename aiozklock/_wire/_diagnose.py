"""Why a server could not be used, in words an operator can act on: what
``ZooKeeperUnavailable`` says about each host (and so what the CLI prints)."""

from __future__ import annotations

import socket
from collections.abc import Iterator, Sequence

import anyio

_SHOWN = 40  # bytes of a foreign answer quoted in the message


def not_zookeeper(head: bytes) -> str:
    """A handshake answer that starts with ``head`` (its length prefix is nonsense), in
    words: quoted, with a guess at what answered."""
    shown = repr(bytes(head[:_SHOWN])) + ("..." if len(head) > _SHOWN else "")
    if head.startswith(b"HTTP/"):
        guess = " (an HTTP server?)"
    elif head[:2] == b"\x15\x03":
        guess = " (a TLS alert: a TLS port? connect with ssl=)"
    elif all(32 <= byte < 127 for byte in head[:4]):
        guess = " (text: another service on this port?)"
    else:
        guess = ""
    return f"does not speak ZooKeeper's protocol: it answered {shown}{guess}"


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, its causes, and the members of any exception group among them (anyio's
    ``connect_tcp`` raises "All connection attempts failed" from the errors of each
    address it tried)."""
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        if current.__cause__ is not None:
            pending.append(current.__cause__)


def describe_failure(exc: BaseException) -> str:
    """One failed attempt to use a server, in words."""
    causes = list(_causes(exc))
    for cause in causes:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, socket.gaierror):
            return f"cannot resolve the host name ({cause.strerror})"
    if isinstance(exc, TimeoutError) and str(exc):
        return str(exc)  # the session's: how far the attempt got within its bound
    if isinstance(exc, anyio.BrokenResourceError | ConnectionResetError):
        return "the connection was reset"
    last = causes[-1]
    if isinstance(last, OSError) and last.strerror:
        return last.strerror
    return str(exc) or repr(exc)


def address(host: str, port: int) -> str:
    """``host:port``, an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def per_host(hosts: Sequence[tuple[str, int]], failures: dict[tuple[str, int], str]) -> str:
    """``host:port: why; ...`` in the order of the host list (a host not tried yet says
    so: the time ran out first)."""
    return "; ".join(
        f"{address(host, port)}: {failures.get((host, port), 'not tried in time')}"
        for host, port in hosts
    )
