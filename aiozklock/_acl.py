"""Access control: ``ACL`` entries, ``Perms`` flags, the usual presets, and the validation of
``connect(auth=...)`` and ``acl=`` arguments (before any traffic).

How ZooKeeper checks them (``PrepRequestProcessor``, ``FinalRequestProcessor``): creating a
node needs ``CREATE`` on its *parent*, deleting one needs ``DELETE`` on its *parent*; a node's
own ACL decides who may read it (``getData``, ``getChildren``: ``READ``), change its data
(``WRITE``), create or delete its children (``CREATE``, ``DELETE``) and change its ACL
(``ADMIN``). ``exists`` is never checked. ``getACL`` needs ``READ`` or ``ADMIN`` (without
``ADMIN``, digest ids come back with the hash replaced by ``x``).
"""

from __future__ import annotations

import base64
import enum
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from aiozklock._exceptions import InvalidArgument, short_repr


class Perms(enum.IntFlag):
    """ZooKeeper permissions; combine with ``|`` (``Perms.READ | Perms.WRITE``)."""

    READ = 1  # getData, getChildren (a recipe's contenders() needs it)
    WRITE = 2  # setData
    CREATE = 4  # create a child
    DELETE = 8  # delete a child
    ADMIN = 16  # setACL
    ALL = 31


@dataclass(frozen=True, slots=True)
class ACL:
    """One ACL entry: ``perms`` granted to the identity ``id`` of ``scheme``.

    Schemes the server knows by default: ``"world"`` (id ``"anyone"``), ``"auth"`` (the id is
    ignored: the entry stands for every identity the creating session authenticated as, so
    the create fails with ``InvalidACLError`` if it has none), ``"digest"``
    (``"user:base64(sha1(user:password))"``, see ``ACL.digest``) and ``"ip"``
    (``"10.0.0.0/8"``). Raises ``InvalidArgument`` for perms outside ``Perms.ALL``, an empty
    scheme, or a non-str id.
    """

    perms: Perms
    scheme: str
    id: str

    def __post_init__(self) -> None:
        perms = self.perms
        if isinstance(perms, bool) or not isinstance(perms, int) or not 0 <= perms <= Perms.ALL:
            raise InvalidArgument(
                f"ACL perms must be Perms flags (0..{int(Perms.ALL)}): {short_repr(perms)}"
            )
        if not isinstance(self.scheme, str) or not self.scheme:
            raise InvalidArgument(
                f"ACL scheme must be a non-empty str, not {short_repr(self.scheme)}"
            )
        if not isinstance(self.id, str):
            raise InvalidArgument(f"ACL id must be a str, not {short_repr(self.id)}")
        object.__setattr__(self, "perms", Perms(perms))

    @classmethod
    def digest(cls, perms: Perms, credential: str) -> ACL:
        """The entry granting ``perms`` to the digest user of ``credential``
        (``"user:password"``), as ``connect(auth=[("digest", "user:password")])``
        authenticates it. Raises ``InvalidArgument`` if ``credential`` has no ``":"``."""
        return cls(perms, "digest", digest_id(credential))


def digest_id(credential: str) -> str:
    """``"user:base64(sha1("user:password"))"``: the digest id of ``credential``, as the
    server stores it (and as ``zookeeper.DigestAuthenticationProvider.superDigest`` wants
    it). Raises ``InvalidArgument`` if ``credential`` is not a str with a ``":"``."""
    if not isinstance(credential, str) or ":" not in credential:
        raise InvalidArgument("a digest credential is a str 'user:password'")
    user = credential.split(":", 1)[0]
    hashed = base64.b64encode(hashlib.sha1(credential.encode()).digest()).decode()
    return f"{user}:{hashed}"


OPEN_ACL_UNSAFE = (ACL(Perms.ALL, "world", "anyone"),)
"""Anyone may do anything (ZooKeeper's default, and aiozklock's unless ``default_acl``)."""

CREATOR_ALL_ACL = (ACL(Perms.ALL, "auth", ""),)
"""Only the identities the creating session authenticated as may do anything, reading
included (needs ``connect(auth=...)``)."""

READ_ACL_UNSAFE = (ACL(Perms.READ, "world", "anyone"),)
"""Anyone may read; nobody may change anything (not even its creator)."""

CREATOR_ALL_WORLD_READ_ACL = (ACL(Perms.ALL, "auth", ""), ACL(Perms.READ, "world", "anyone"))
"""The preset for locks others may observe: the creator's identities may do anything, anyone
may read. On a lock path (whose container the recipe creates with it), only sessions
authenticated as the creator may queue, release, or delete a queued node (ZooKeeper checks
``CREATE`` and ``DELETE`` on the parent), while any session can list ``contenders()``. All
contenders must therefore authenticate as the same user; for several users, list a
``digest`` entry with ``Perms.ALL`` for each, plus the world ``READ`` entry."""


def validate_acl(acl: object, *, what: str = "acl") -> tuple[ACL, ...]:
    """Return ``acl`` as a tuple of ``ACL``; ``InvalidArgument`` if it is not a non-empty
    sequence of ``ACL`` (the server refuses an empty ACL)."""
    if isinstance(acl, str | bytes | ACL) or not isinstance(acl, Iterable):
        raise InvalidArgument(f"{what} must be a sequence of aiozklock.ACL, not {short_repr(acl)}")
    entries = tuple(acl)
    if not entries:
        raise InvalidArgument(f"{what} must not be empty: the server refuses a node no one can use")
    for entry in entries:
        if not isinstance(entry, ACL):
            raise InvalidArgument(
                f"{what} must hold aiozklock.ACL entries, not {short_repr(entry)}"
            )
    return entries


Credentials = tuple[tuple[str, bytes], ...]


def validate_auth(auth: object) -> Credentials:
    """Return ``auth`` as ``((scheme, credential bytes), ...)``; ``InvalidArgument`` unless it
    is a sequence of (non-empty str scheme, str or bytes credential) pairs, a digest
    credential holding a ``":"``."""
    if isinstance(auth, str | bytes) or not isinstance(auth, Iterable):
        raise InvalidArgument(
            f"auth must be a sequence of (scheme, credential) pairs: {short_repr(auth)}"
        )
    pairs = []
    for pair in auth:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise InvalidArgument(
                f"auth must hold (scheme, credential) pairs, not {short_repr(pair)}"
            )
        scheme, credential = pair
        if not isinstance(scheme, str) or not scheme:
            raise InvalidArgument(
                f"an auth scheme must be a non-empty str, not {short_repr(scheme)}"
            )
        if isinstance(credential, str):
            credential = credential.encode()
        if not isinstance(credential, bytes):
            raise InvalidArgument(f"an auth credential must be str or bytes ({short_repr(scheme)})")
        if scheme == "digest" and b":" not in credential:
            raise InvalidArgument("a digest credential is 'user:password' (it has no ':')")
        pairs.append((scheme, credential))
    return tuple(pairs)


__all__ = (
    "ACL",
    "CREATOR_ALL_ACL",
    "CREATOR_ALL_WORLD_READ_ACL",
    "OPEN_ACL_UNSAFE",
    "READ_ACL_UNSAFE",
    "Credentials",
    "Perms",
    "digest_id",
    "validate_acl",
    "validate_auth",
)
