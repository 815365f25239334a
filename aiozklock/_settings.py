"""``connect()``'s options, written once: ``ConnectOptions``, their names and types, which
``connect()``, ``ZooKeeperClient``, ``aiozklock.sync.connect`` and FastAPI's ``lifespan``
all take as ``**options: Unpack[ConnectOptions]``; and ``ConnectionSettings``, the frozen
value that validates them (with their defaults), which the client keeps.

A new option is a key of ``ConnectOptions``, a field of ``ConnectionSettings`` (its default
and its check) and an entry of ``connect()``'s docstring; mypy checks every caller of the
four against the first, and ``ConnectionSettings(**options)`` against the second.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import InitVar, dataclass, field
from ssl import SSLContext
from typing import Literal, TypedDict

from aiozklock._acl import ACL, OPEN_ACL_UNSAFE, Credentials, validate_acl, validate_auth
from aiozklock._exceptions import InvalidArgument
from aiozklock._recipes._core._holding import LOSS_POLICIES, LossPolicy
from aiozklock._recipes._core._observe import Observer
from aiozklock._recipes._core._order import Mode, lock_templates, order_mode
from aiozklock._wire._limits import (
    DEFAULT_MAX_REQUEST_BYTES,
    check_auth_size,
    validate_max_request_bytes,
)
from aiozklock._wire._validation import positive_seconds, tls_context


class ConnectOptions(TypedDict, total=False):
    """The keyword options of ``aiozklock.connect()`` (each optional; see ``connect()`` for
    what each means and its default), as one type: ``ZooKeeperClient``,
    ``aiozklock.sync.connect()`` and ``aiozklock.fastapi.lifespan()`` take the same. Type a
    function that passes them on with it,
    ``def open_zk(**options: Unpack[aiozklock.ConnectOptions])``, or a dict of them built
    from configuration, ``options: aiozklock.ConnectOptions = {"session_timeout": 4.0}``."""

    session_timeout: float
    connect_timeout: float
    loss_policy: LossPolicy
    telemetry: Observer | None
    auth: Sequence[tuple[str, str | bytes]]
    default_acl: Sequence[ACL]
    ssl: SSLContext | bool | None
    max_request_bytes: int
    check_lock_order: bool | Literal["warn", "raise"] | None
    lock_classes: Sequence[str]


@dataclass(frozen=True, kw_only=True)
class ConnectionSettings:
    """``ConnectOptions`` validated (``InvalidArgument``, a ``ValueError``, naming the first
    bad one; nothing is sent), with their defaults. The options whose validated form has
    another type are kept under another name: ``auth`` as ``credentials``, ``default_acl``
    as ``acl``, ``ssl`` as ``tls``, ``check_lock_order`` as ``lock_order`` (the environment
    read when None), ``lock_classes`` as ``lock_templates``."""

    session_timeout: float = 10.0
    connect_timeout: float = 10.0
    loss_policy: LossPolicy = "suspended"
    telemetry: Observer | None = None
    auth: InitVar[Sequence[tuple[str, str | bytes]]] = ()
    default_acl: InitVar[Sequence[ACL]] = OPEN_ACL_UNSAFE
    ssl: InitVar[SSLContext | bool | None] = None
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    check_lock_order: InitVar[bool | Literal["warn", "raise"] | None] = None
    lock_classes: InitVar[Sequence[str]] = ()

    credentials: Credentials = field(init=False, repr=False)  # secrets: not in a repr
    acl: tuple[ACL, ...] = field(init=False)
    tls: SSLContext | None = field(init=False)
    lock_order: Mode | None = field(init=False)
    lock_templates: tuple[tuple[re.Pattern[str], str], ...] = field(init=False)

    def __post_init__(
        self,
        auth: Sequence[tuple[str, str | bytes]],
        default_acl: Sequence[ACL],
        ssl: SSLContext | bool | None,
        check_lock_order: bool | Literal["warn", "raise"] | None,
        lock_classes: Sequence[str],
    ) -> None:
        # The order of the checks is the order connect() always reported them in.
        limit = validate_max_request_bytes(self.max_request_bytes)
        credentials = validate_auth(auth)
        check_auth_size(credentials, limit)
        tls = tls_context(ssl)
        identified = bool(credentials) or tls is not None
        acl = usable_acl(default_acl, "default_acl", identified=identified)
        timeouts = [positive_seconds(name, getattr(self, name)) for name in _TIMEOUTS]
        if self.loss_policy not in LOSS_POLICIES:
            raise InvalidArgument(
                f"loss_policy must be one of {LOSS_POLICIES}, not {self.loss_policy!r}"
            )
        if self.telemetry is not None and not isinstance(self.telemetry, Observer):
            raise InvalidArgument(
                "telemetry must be an aiozklock.otel.Telemetry (or have its methods "
                f"recipe() and session_changed()), not {self.telemetry!r}"
            )
        templates = lock_templates(lock_classes)
        mode = order_mode(check_lock_order, os.environ)
        validated = {
            "max_request_bytes": limit,
            **dict(zip(_TIMEOUTS, timeouts, strict=True)),
            "credentials": credentials,
            "acl": acl,
            "tls": tls,
            "lock_order": mode,
            "lock_templates": templates,
        }
        for name, value in validated.items():
            object.__setattr__(self, name, value)  # frozen: set once, here


_TIMEOUTS = ("session_timeout", "connect_timeout")


def usable_acl(acl: object, what: str, *, identified: bool) -> tuple[ACL, ...]:
    """``acl`` validated; an ``"auth"`` entry (the creator's identities) also needs an
    identity (``identified``: credentials, or a TLS client certificate): the server would
    refuse every create with InvalidACL. Raises ``InvalidArgument``."""
    entries = validate_acl(acl, what=what)
    if not identified and any(entry.scheme == "auth" for entry in entries):
        raise InvalidArgument(
            f"{what} grants the creator ('auth' scheme), but this client has no identity: "
            "pass auth=[('digest', 'user:password')] (or ssl= with a client certificate)"
        )
    return entries


__all__ = ("ConnectOptions", "ConnectionSettings", "usable_acl")
