"""Validation of every argument, done before any request is sent.

Path rules are ZooKeeper's own (``PathUtils.validatePath``): checking them here turns what would
be a server error, a silently rewritten path or a closed connection into a clear ``ValueError``.
"""

from __future__ import annotations

import math
import re
import ssl

from aiozklock._exceptions import InvalidArgument, short_repr

DEFAULT_PORT = 2181
# ZooKeeper bounds a path only by jute.maxbuffer, but a path travels in every request on
# its node, its children's and the watches re-armed after a reconnect, and is kept in every
# watch and listing: 32 KiB (UTF-8) is far beyond any naming scheme, and small enough that
# each request on one path stays far below the buffer.
MAX_PATH_BYTES = 32 * 1024


def _invalid_char(ch: str) -> bool:
    code = ord(ch)
    return (
        code == 0
        or 0x01 <= code <= 0x1F
        or 0x7F <= code <= 0x9F
        or 0xD800 <= code <= 0xF8FF
        or 0xFFF0 <= code <= 0xFFFF
    )


def validate_path(path: object, *, what: str = "path") -> str:
    """Return ``path`` if it is a valid absolute znode path of at most ``MAX_PATH_BYTES``
    (UTF-8), else raise ``InvalidArgument``."""
    if not isinstance(path, str):
        raise InvalidArgument(f"{what} must be a str, not {type(path).__name__}")
    if not path.startswith("/"):
        raise InvalidArgument(f"{what} must be absolute (start with '/'): {short_repr(path)}")
    if path == "/":
        return path
    # Characters first (no encoding, no scan of a huge path), then bytes once it is valid.
    if len(path) > MAX_PATH_BYTES:
        raise _too_long(what, path, len(path.encode(errors="replace")))
    if path.endswith("/"):
        raise InvalidArgument(f"{what} must not end with '/': {short_repr(path)}")
    for segment in path[1:].split("/"):
        if not segment:
            raise InvalidArgument(f"{what} has an empty segment ('//'): {short_repr(path)}")
        if segment in (".", ".."):
            raise InvalidArgument(f"{what} has a relative segment {segment!r}: {short_repr(path)}")
        for ch in segment:
            if _invalid_char(ch):
                raise InvalidArgument(f"{what} has an invalid character {ch!r}: {short_repr(path)}")
    if len(path) * 4 > MAX_PATH_BYTES and len(path.encode()) > MAX_PATH_BYTES:
        raise _too_long(what, path, len(path.encode()))
    return path


def _too_long(what: str, path: str, size: int) -> InvalidArgument:
    return InvalidArgument(
        f"{what} is {size} bytes (UTF-8), more than the {MAX_PATH_BYTES} a path may have: "
        f"{short_repr(path)}"
    )


def validate_data(data: object, *, what: str = "data") -> bytes:
    """Return ``data`` as bytes (its size is checked with the whole request, when sent)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidArgument(f"{what} must be bytes, not {type(data).__name__}")
    return bytes(data)


def validate_recipe_path(path: object, *, what: str = "lock path") -> str:
    """A path a recipe may queue under: valid, not the root, not under ``/zookeeper``."""
    checked = validate_path(path, what=what)
    if checked == "/":
        raise InvalidArgument(f"the {what} cannot be the root '/'")
    if checked == "/zookeeper" or checked.startswith("/zookeeper/"):
        raise InvalidArgument(f"/zookeeper is reserved for ZooKeeper itself: {short_repr(checked)}")
    return checked


def validate_timeout(timeout: object) -> float | None:
    """A wait bound in seconds: ``None`` or infinity mean no bound."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise InvalidArgument(
            f"timeout must be a number of seconds or None, not {short_repr(timeout)}"
        )
    if math.isnan(timeout) or timeout < 0:
        raise InvalidArgument(f"timeout must be >= 0, not {short_repr(timeout)}")
    return None if math.isinf(timeout) else float(timeout)


_NO_WAIT = (
    "for one attempt without waiting use try_acquire() (True if acquired, False if held "
    "elsewhere: kazoo's acquire(blocking=False)); to bound the wait, acquire(timeout=SECONDS)"
)


def validate_acquire(timeout: object, blocking: object) -> float | None:
    """``acquire()``'s arguments: ``timeout`` as ``validate_timeout``; ``blocking`` only
    True (kazoo's spelling of the default), and a bool ``timeout`` (kazoo's first argument
    is ``blocking``) refused with the way to what was meant."""
    if blocking is not True:
        raise InvalidArgument(f"acquire() takes no blocking={short_repr(blocking)}: {_NO_WAIT}")
    if isinstance(timeout, bool):
        raise InvalidArgument(
            f"acquire({timeout!r}): timeout is a number of seconds, not a bool (kazoo's first "
            f"argument is blocking): {_NO_WAIT}"
        )
    return validate_timeout(timeout)


def positive_seconds(name: str, value: object) -> float:
    """A positive, finite duration in seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{name} must be a number of seconds, not {short_repr(value)}")
    if math.isnan(value) or math.isinf(value) or value <= 0:
        raise InvalidArgument(
            f"{name} must be a positive, finite number of seconds: {short_repr(value)}"
        )
    return float(value)


def validate_lock_delay(value: object) -> float | None:
    """``lock_delay=``: None, or a positive, finite number of seconds."""
    return None if value is None else positive_seconds("lock_delay", value)


MAX_IDENTIFIER = 1024


def validate_identifier(identifier: object, *, what: str = "identifier") -> str | None:
    """An optional human-readable name stored in a recipe's node data."""
    if identifier is None:
        return None
    if not isinstance(identifier, str):
        raise InvalidArgument(f"{what} must be a str, not {type(identifier).__name__}")
    if len(identifier) > MAX_IDENTIFIER:
        raise InvalidArgument(f"{what} is longer than {MAX_IDENTIFIER} characters")
    return identifier


def join(parent: str, child: str) -> str:
    """``parent/child`` (the root has no trailing slash to add)."""
    return f"{parent}/{child}" if parent != "/" else f"/{child}"


def parse_hosts(hosts: object) -> tuple[list[tuple[str, int]], str]:
    """Parse ``"h1:2181,h2:2181/chroot"`` into ``([(host, port), ...], chroot)``.

    ``chroot`` is ``""`` when absent (or ``/``). IPv6 addresses go in brackets
    (``[::1]:2181``). Raises ``InvalidArgument``, naming the faulty entry, for a URL
    (``zk://...``, ``http://...``: the message shows the string without the scheme), an empty
    entry, an unclosed bracket, a port that is not a decimal number in 1..65535, or a host
    name with a ``:`` outside brackets or with whitespace.
    """
    if not isinstance(hosts, str):
        raise InvalidArgument(
            f"hosts must be a str like 'zk1:2181,zk2:2181', not {short_repr(hosts)}"
        )
    text = hosts.strip()
    _refuse_url(text)
    chroot = ""
    slash = text.find("/")
    if slash != -1:
        text, chroot = text[:slash], text[slash:]
        validate_path(chroot, what="chroot")
        if chroot == "/":
            chroot = ""
    result: list[tuple[str, int]] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise InvalidArgument(f"empty entry in {short_repr(hosts)}: expected 'host[:port],...'")
        result.append(_parse_host(item, hosts))
    return result, chroot


_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def _refuse_url(hosts: str) -> None:
    """Raise ``InvalidArgument`` for a URL (``zk://zk1:2181``, ``http://...``): its scheme
    would otherwise be read as a host and its ``//`` as an empty chroot segment."""
    url = _URL.match(hosts)
    if url is None:
        return
    rest = hosts[url.end() :]
    suggestion = f" (here: {short_repr(rest)})" if rest and "://" not in rest else ""
    raise InvalidArgument(
        f"hosts {short_repr(hosts)} is a URL with the scheme {url[1]!r}: ZooKeeper takes a "
        f"connection string without a scheme, 'host:port[,host:port...][/chroot]', e.g. "
        f"'zk1:2181,zk2:2181/app'{suggestion}"
    )


def _parse_host(item: str, hosts: str) -> tuple[str, int]:
    """One ``host[:port]`` entry of ``hosts`` (named in the errors)."""
    where = (
        short_repr(item) if item == hosts.strip() else f"{short_repr(item)} of {short_repr(hosts)}"
    )
    if item.startswith("["):  # [ipv6]:port
        host, bracket, rest = item[1:].partition("]")
        if not bracket:
            raise InvalidArgument(f"unclosed '[' in {where}: write IPv6 as [::1]:2181")
        if rest and not rest.startswith(":"):
            raise InvalidArgument(
                f"{short_repr(rest)} after ']' in {where}: expected ':port' or nothing"
            )
        has_port, port_text = bool(rest), rest[1:]
    else:
        host, sep, port_text = item.rpartition(":")
        has_port = bool(sep)
        if not sep:
            host = item
        if ":" in host:
            raise InvalidArgument(
                f"more than one ':' in {where}: expected 'host[:port]' (IPv6 in brackets: "
                "[::1]:2181)"
            )
    if not host:
        raise InvalidArgument(f"empty host name in {where}")
    if any(ch.isspace() or _invalid_char(ch) for ch in host):
        raise InvalidArgument(f"whitespace or a control character in the host name of {where}")
    if not has_port:
        return host, DEFAULT_PORT
    # Only plain digits: int() would also take '+2181', ' 2181' or '2_181'.
    if not (port_text.isascii() and port_text.isdigit()):
        raise InvalidArgument(f"bad port {short_repr(port_text)} in {where}: expected a number")
    port = int(port_text)
    if not 0 < port < 65536:
        raise InvalidArgument(f"port {port} out of range (1..65535) in {where}")
    return host, port


# ---- TTL lease lock (append-only block) ----
# ZooKeeper keeps a node's TTL in 40 bits of milliseconds (EphemeralType.TTL; the same bound
# as _protocol.MAX_TTL_MS, which cannot be imported here: _protocol imports this module).
_MAX_TTL_MS = (1 << 40) - 1


def validate_ttl(ttl: object) -> int:
    """A lease TTL in seconds: positive, finite, and within ZooKeeper's 1..2^40-1 ms.

    Returns it in whole milliseconds, rounded up (the server never expires a node earlier
    than we count). Raises ``InvalidArgument`` otherwise.
    """
    seconds = positive_seconds("ttl", ttl)
    ttl_ms = math.ceil(seconds * 1000)
    if seconds * 1000 < 1 or ttl_ms > _MAX_TTL_MS:
        raise InvalidArgument(
            f"ttl must be between 0.001 s and {_MAX_TTL_MS / 1000:.0f} s "
            f"(ZooKeeper's 1..2^40-1 ms), not {short_repr(ttl)}"
        )
    return ttl_ms


def validate_holder_id(holder_id: object) -> str:
    """A lease holder id: a non-empty str of at most ``MAX_IDENTIFIER`` characters."""
    checked = validate_identifier(holder_id, what="holder_id")
    if not checked:
        raise InvalidArgument("holder_id must be a non-empty str")
    return checked


def validate_flag(name: str, value: object) -> bool:
    """A yes/no option: a real ``bool`` (``"yes"``, 1 or None are rejected, not guessed)."""
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name} must be True or False, not {short_repr(value)}")
    return value


def validate_version(version: object) -> int:
    """A node version for a conditional write: an int in -1..2^31-1 (-1: any version)."""
    if isinstance(version, bool) or not isinstance(version, int):
        raise InvalidArgument(f"version must be an int, not {short_repr(version)}")
    if not -1 <= version <= 2**31 - 1:
        raise InvalidArgument(f"version must be -1 (any) or in 0..2^31-1, not {version}")
    return version


def tls_context(value: object) -> ssl.SSLContext | None:
    """``connect()``'s ``ssl``: a client-side ``ssl.SSLContext``, ``True`` for
    ``ssl.create_default_context()`` (system CAs, host name checked), ``None``/``False`` for
    plain TCP. Raises ``InvalidArgument`` otherwise."""
    if value is None or value is False:
        return None
    if value is True:
        return ssl.create_default_context()
    if not isinstance(value, ssl.SSLContext):
        raise InvalidArgument(
            f"ssl must be an ssl.SSLContext, True or None, not {short_repr(value)}"
        )
    if value.protocol is ssl.PROTOCOL_TLS_SERVER:
        raise InvalidArgument(
            "ssl must be a client-side context (ssl.create_default_context() or "
            "ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)), not a PROTOCOL_TLS_SERVER one"
        )
    return value
