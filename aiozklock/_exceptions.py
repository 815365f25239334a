"""Every exception aiozklock raises, under one base class.

Like asyncpg's, they also subclass the stdlib exception a caller would naturally catch:
``LockTimeout`` is a ``TimeoutError``, ``NotLockOwner`` a ``RuntimeError``, and so on.
"""

from __future__ import annotations

# A value quoted in a message (a path, a repr) keeps this many characters; a whole message,
# MESSAGE_LIMIT. A 1 MB path must not make a 1 MB log line, nor hide the rest of the message.
VALUE_LIMIT = 200
MESSAGE_LIMIT = 1000


def shorten(text: str, limit: int = VALUE_LIMIT) -> str:
    """``text`` if it has at most ``limit`` characters; else its head and tail (a path's
    leaf is often the telling part) around a note of its full length, in ``limit``
    characters (so shortening twice changes nothing)."""
    if len(text) <= limit:
        return text
    marker = f"…[{len(text)} chars]…"
    room = max(limit - len(marker), 2)
    tail = room // 4
    return f"{text[: room - tail]}{marker}{text[-tail:]}"


def short_repr(value: object, limit: int = VALUE_LIMIT) -> str:
    """``repr(value)``, shortened as by ``shorten``: for a user's value in a message."""
    return shorten(repr(value), limit)


class AiozklockError(Exception):
    """Base class of every aiozklock exception. Long values in messages are shortened, and
    a message is capped at 1000 characters."""

    def __init__(self, *args: object) -> None:
        # The last line of defence: a message is capped, whatever a caller interpolated.
        if len(args) == 1 and isinstance(args[0], str) and len(args[0]) > MESSAGE_LIMIT:
            args = (shorten(args[0], MESSAGE_LIMIT),)
        super().__init__(*args)


class InvalidArgument(AiozklockError, ValueError):
    """An argument was rejected before any request was sent: a bad value, a path longer
    than 32 KiB, or a request longer than the servers' ``jute.maxbuffer``
    (``connect(max_request_bytes=)``), which ZooKeeper would answer by dropping the
    connection. Only the call that made it fails: the session and its other holdings
    are untouched."""


class LockTimeout(AiozklockError, TimeoutError):
    """The lock was not acquired within the timeout; nothing of ours is left in the queue."""


class LockLost(AiozklockError):
    """The lock was held, and then could no longer be trusted to be ours.

    Raised when an ``async with lock:`` block whose body was cancelled because of the loss
    exits, or by ``release()`` after a loss. Another contender may hold the lock now.
    """


class LeadershipLost(LockLost):
    """Leadership was held, and then could no longer be trusted to be ours.

    Raised when an ``async with election:`` block whose body was cancelled because of the
    loss exits, or by ``release()``/``resign()`` after a loss. Another candidate may lead now.
    """


class StaleFencingToken(LockLost):
    """A fenced write was refused because the writer's holding is no longer current.

    Raised by a ZooKeeper write made with ``guard=`` when the guarding holding's node is
    gone (nothing was written), and by the fences of ``aiozklock.fencing`` when the store
    has already accepted a newer token for the resource (the caller's transaction must be
    rolled back). ``resource`` names what was written, ``token`` is the writer's token and
    ``newer`` the newer token the store has seen, or None where the store cannot know it.
    """

    def __init__(self, resource: str, token: int | None, newer: int | None = None) -> None:
        self.resource = resource
        self.token = token
        self.newer = newer
        seen = f"; the store has seen token {newer}" if newer is not None else ""
        super().__init__(
            f"stale fencing token {token} for {short_repr(resource)}{seen}: another holder"
            " may hold it now, and nothing was written"
        )

    def __reduce__(self) -> tuple[type[StaleFencingToken], tuple[str, int | None, int | None]]:
        return (type(self), (self.resource, self.token, self.newer))


class NotLockOwner(AiozklockError, RuntimeError):
    """``release()`` was called by a task that does not hold the lock."""


class UsageError(AiozklockError, RuntimeError):
    """The API was used in a way that cannot work, detected before any request was sent:
    a client used from an event loop or thread other than the one it was opened in, or a
    task acquiring a second lock object on a path it already holds (it would wait for
    itself). The message says what to do instead."""


class LayoutConflict(AiozklockError, RuntimeError):
    """An acquisition was refused: Curator's or kazoo's contender on the path cannot order
    the nodes this recipe writes with its ``compat=`` (its recipe does not see them), so
    both could hold at once. Our node is removed (nothing of ours is left queued); the
    message names the node and the fix: ``compat="kazoo"``, ``compat="curator"``, the
    recipe Curator uses there, or a path of its own."""


class LockOrderViolation(UsageError):
    """With ``connect(check_lock_order="raise")``: a task took locks in an order that
    inverts one taken before in this process (tasks running both orders at once would
    deadlock), or nested two locks of one class. Raised by the acquisition, before any
    request of it: the locks the task holds stay held. The message names both orders'
    paths and call sites."""


class LockOrderWarning(UserWarning):
    """With ``connect(check_lock_order="warn")`` (or ``True``): what ``LockOrderViolation``
    says, as a warning (once per pair of lock classes); the acquisition goes on."""


class ClientClosed(AiozklockError, RuntimeError):
    """The client was closed: pending requests and waiters fail with this, and so does any
    later use."""


class ZooKeeperUnavailable(AiozklockError, ConnectionError):
    """No ZooKeeper server could be reached (or the session could not be kept alive)."""


class AuthenticationFailed(ZooKeeperUnavailable, PermissionError):
    """The server refused the credentials of ``connect(auth=...)`` (AuthFailed, code -115).

    Final: the same credentials would be refused again, so the client does not retry.
    Raised by ``async with connect(...)`` on the first connection; on a later reconnect the
    session is closed (state ``CLOSED``, holders lose their locks) and every request and
    waiter fails with it. A ``ZooKeeperUnavailable`` (code catching that still sees the
    client unusable) and a ``PermissionError``."""


class ConnectionLoss(ZooKeeperUnavailable):
    """The connection dropped after the request was sent: the server may or may not have
    executed it. Non-idempotent requests are never resent blindly; the caller resolves the
    outcome (the lock recipe looks its node up by GUID)."""


class SessionExpired(ZooKeeperUnavailable):
    """The session the request was bound to is gone: a server said it expired (our own
    clock never gives a session up); its ephemeral nodes are deleted or about to be."""


class ZooKeeperError(AiozklockError):
    """The server answered with an error code: ``code``, for the node ``path`` (relative to
    the chroot; None if the request had no path)."""

    code: int = 0

    def __init__(self, path: str | None = None, code: int | None = None) -> None:
        if code is not None:
            self.code = code
        self.path = path
        super().__init__(
            f"{type(self).__name__} (code {self.code})" + (f": {shorten(path)}" if path else "")
        )

    def __reduce__(self) -> tuple[type[ZooKeeperError], tuple[str | None, int]]:
        # Rebuilt from path and code, not from the message (pickle, multiprocessing).
        return type(self), (self.path, self.code)


class NoNodeError(ZooKeeperError):
    """The node does not exist (or, for a create, its parent does not). When the cause is a
    chroot that does not exist, the message says so."""

    code = -101


class NoAuthError(ZooKeeperError, PermissionError):
    """The node's ACL does not grant this session the permission (NoAuth, code -102).

    ZooKeeper checks a create's and a delete's permission on the node's *parent*
    (``CREATE``, ``DELETE``), a read's (``READ``) and a data change's (``WRITE``) on the node
    itself. The message names the path."""

    code = -102

    def __init__(self, path: str | None = None, code: int | None = None) -> None:
        super().__init__(path, code)
        where = f": {shorten(path)}" if path else ""
        self.args = (
            f"not authorized (NoAuth, code -102){where}: the ACL does not grant this session "
            "the permission (for a create or a delete, the parent's ACL decides)",
        )


class BadVersionError(ZooKeeperError):
    """The node's version is not the one a conditional write expected (``set_data(...,
    version=)``)."""

    code = -103


class NoChildrenForEphemeralsError(ZooKeeperError):
    code = -108


class NodeExistsError(ZooKeeperError):
    """The node to create already exists."""

    code = -110


class NotEmptyError(ZooKeeperError):
    """The node to delete has children."""

    code = -111


class InvalidACLError(ZooKeeperError):
    """The server refused the ACL of a create (InvalidACL, code -114): e.g. an ``"auth"``
    entry (``CREATOR_ALL_ACL``) from a session that authenticated as no one (pass
    ``connect(auth=...)``), or a malformed id."""

    code = -114


class BadArgumentsError(ZooKeeperError):
    code = -8


class RuntimeInconsistencyError(ZooKeeperError):
    """In a failed multi: this operation came after the one that failed, and was not
    executed."""

    code = -2


class UnimplementedError(ZooKeeperError):
    """The server does not implement the request; e.g. CreateTTL on a server started
    without ``zookeeper.extendedTypesEnabled=true``."""

    code = -6


class RolledBackError(ZooKeeperError):
    """In a failed multi: this operation came before the one that failed; it would have
    succeeded, and was undone with the whole transaction (its result code is 0)."""

    code = 0


# RolledBackError is left out: code 0 in a reply header is success, only a multi's results
# carry it as an error.
_ERRORS_BY_CODE: dict[int, type[ZooKeeperError]] = {
    cls.code: cls
    for cls in (
        NoNodeError,
        NoAuthError,
        BadVersionError,
        NoChildrenForEphemeralsError,
        NodeExistsError,
        NotEmptyError,
        InvalidACLError,
        BadArgumentsError,
        RuntimeInconsistencyError,
        UnimplementedError,
    )
}

SESSION_EXPIRED_CODE = -112
CONNECTION_LOSS_CODE = -4


def error_for_code(code: int, path: str | None = None) -> AiozklockError:
    """The exception for an error code in a reply header."""
    where = f": {shorten(path)}" if path else ""
    if code == SESSION_EXPIRED_CODE:
        return SessionExpired(f"session expired (server reply){where}")
    if code == CONNECTION_LOSS_CODE:
        return ConnectionLoss(f"server reported connection loss{where}")
    cls = _ERRORS_BY_CODE.get(code)
    if cls is None:
        return ZooKeeperError(path, code)
    return cls(path)


# ---- TTL lease lock (append-only block) ----
class TTLNotSupported(UnimplementedError):
    """The server refused to create a TTL node (Unimplemented, code -6): it runs without
    extended types. Raised by a lease lock's acquire before any waiting. Fix the servers'
    configuration: ``extendedTypesEnabled=true`` in ``zoo.cfg`` (or the JVM property
    ``-Dzookeeper.extendedTypesEnabled=true``) on every server."""

    def __init__(self, path: str | None = None, code: int | None = None) -> None:
        super().__init__(path, code)
        self.args = (
            f"ZooKeeper refused to create the TTL node {shorten(str(path))} (Unimplemented, "
            "code -6): "
            "TTL nodes need extendedTypesEnabled=true in zoo.cfg "
            "(or -Dzookeeper.extendedTypesEnabled=true) on every server",
        )


# ---- semaphore (append-only block) ----
class MaxLeasesMismatch(AiozklockError, ValueError):
    """A semaphore's ``max_leases`` differs from the one stored in its path's data by the
    clients that use it (or that data is not a lease count at all): two limits on one path
    would let more holders in than either allows. Raised by acquire, with no node of ours
    left behind. ``path``, ``max_leases`` (ours) and ``stored`` (the path's data, decoded;
    None if it is not a number) say which."""

    def __init__(self, path: str, max_leases: int, stored: int | None, data: bytes) -> None:
        self.path = path
        self.max_leases = max_leases
        self.stored = stored
        found = f"max_leases={stored}" if stored is not None else f"data {data[:40]!r}"
        super().__init__(
            f"semaphore {shorten(path)}: this client uses max_leases={max_leases}, but the "
            "path holds "
            f"{found} (written by the clients that use it): every client of one semaphore "
            "must use the same max_leases"
        )


# ---- fences (append-only block) ----
class FenceMissing(StaleFencingToken):
    """A store's fence has lost its record of the newest token (Redis: the fence's key is
    gone, by eviction under ``maxmemory``, ``FLUSHALL``/``FLUSHDB``, a ``DEL``, a restart
    without persistence or a failover to a replica that never had it), so it cannot tell a
    stale token from a current one, and refuses every write (``newer`` is None).

    Nothing was written. What to do: leave the lock (this is a ``LockLost``), re-create
    the fence with ``await fence.recover(key, zk)``, which sets it to a floor read from
    ZooKeeper now, so that every token issued before is refused, then acquire the lock
    again: its new token is above the floor."""

    def __init__(self, resource: str, token: int | None, newer: int | None = None) -> None:
        super().__init__(resource, token, newer)
        self.args = (
            f"the fence of {short_repr(resource)} is missing from the store (evicted under "
            "maxmemory, flushed, deleted, or lost in a restart or a failover), so no token "
            f"can be checked and token {token} was refused: nothing was written. Leave the "
            f"lock, call `await fence.recover({short_repr(resource)}, zk)` (it re-creates "
            "the fence at a floor read from ZooKeeper: tokens issued before it stay "
            "refused), then acquire the lock again",
        )


# ---- revocation (append-only block) ----
class LockRevoked(LockLost):
    """The holder was asked to let go (``zk.revoke(path)``, ``aiozklock revoke PATH``, or
    Curator's ``Revoker.attemptRevoke``), and it had opted in (``revocable=True``): the body
    of ``async with`` was cancelled and the lock released (its node deleted when the block
    exited). A ``LockLost``, so existing handlers catch it. Also raised by ``acquire()``
    when the request reached a contender still waiting: it gave up its place.
    """


class NotRevoked(AiozklockError):
    """``zk.revoke(path)`` could not make every holder let go. ``reason``: ``"no holder"``
    (nothing holds the lock at ``path``), ``"not revocable"`` (a holder did not opt in: it
    was not written to; any other holders were asked, and waited for), ``"timeout"`` (every
    holder was asked, and one did not let go within ``wait`` seconds: it may not be
    revocable). ``nodes``: every holder's node, as paths (several on a read/write path with
    readers; empty without a holder); ``asked``: those a revoke request was written to;
    ``held``: those that still held when ``revoke`` gave up (the holders not revocable, and
    those asked that had not let go); the others let go. The message names them.
    """

    def __init__(
        self,
        path: str,
        reason: str,
        message: str,
        nodes: tuple[str, ...] = (),
        asked: tuple[str, ...] = (),
        held: tuple[str, ...] | None = None,
    ) -> None:
        self.path = path
        self.reason = reason
        self.nodes = nodes
        self.asked = asked
        self.held = nodes if held is None else held
        super().__init__(message)

    def __reduce__(self) -> tuple[type[NotRevoked], tuple[object, ...]]:
        return (type(self), (self.path, self.reason, str(self), self.nodes, self.asked, self.held))
