"""The client's small znode API: ``exists``, ``get_children``, ``get_data``, ``set_data``,
``create``, ``delete``, ``ensure_path``, ``get_acl`` (a part of ``ZooKeeperClient``). The
writes take ``guard=``: see ``_guarded``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

from aiozklock._acl import ACL
from aiozklock._exceptions import NodeExistsError, NoNodeError
from aiozklock._guarded import guard_of, guarded_write
from aiozklock._recipes._core._handle import Handle
from aiozklock._recipes._core._retry import RETRY
from aiozklock._wire._protocol import (
    CreateMode,
    MultiCreate,
    MultiDelete,
    MultiSetData,
    Stat,
    container_path_ops,
    create_op,
    delete_op,
    encode_acl,
    exists_op,
    get_acl_op,
    get_children_op,
    get_data_op,
    set_data_op,
)
from aiozklock._wire._session import Session
from aiozklock._wire._validation import (
    validate_data,
    validate_flag,
    validate_path,
    validate_version,
)


class Znodes:
    """The znode methods of ``ZooKeeperClient`` (which supplies the session and the ACLs)."""

    if TYPE_CHECKING:  # ZooKeeperClient's

        def _live_session(self) -> Session: ...

        def _acl(self, acl: Sequence[ACL] | None) -> tuple[ACL, ...]: ...

    # Paths are relative to the chroot. Every method validates its arguments before any
    # traffic (``InvalidArgument``) and raises ``ClientClosed`` if the client is not
    # connected. Reads are repeated after a ``ConnectionLoss``; writes are not (their outcome
    # is unknown: the ``ConnectionLoss`` is raised). A ``NoNodeError`` caused by a chroot
    # that does not exist says so. A write with ``guard=`` is one ``multi`` with the checks
    # of the guard's holding (``_guarded``).

    async def exists(self, path: str) -> Stat | None:
        """The node's ``Stat``, or None if it does not exist. Raises ``InvalidArgument`` for
        a bad path, ``ClientClosed`` if the client is not connected, ``UsageError`` outside
        its event loop (connection losses are retried)."""
        session = self._live_session()
        op = exists_op(session.server_path(validate_path(path)))
        return await RETRY.call(session, op)

    async def get_children(self, path: str, *, missing_ok: bool = False) -> list[str]:
        """The names of the node's children (not full paths), in no particular order.

        Raises ``NoNodeError`` if the node does not exist, unless ``missing_ok``: then
        returns ``[]``. Recipes' parent nodes are containers, which the server deletes some
        time after their last child goes: listing one may find it gone.
        """
        session = self._live_session()
        op = get_children_op(session.server_path(validate_path(path)))
        if validate_flag("missing_ok", missing_ok):
            with contextlib.suppress(NoNodeError):
                return await RETRY.call(session, op)
            return []
        async with self._naming_chroot(session):
            return await RETRY.call(session, op)

    async def get_data(self, path: str) -> tuple[bytes, Stat]:
        """The node's data and ``Stat``; raises ``NoNodeError`` if it does not exist."""
        session = self._live_session()
        op = get_data_op(session.server_path(validate_path(path)))
        async with self._naming_chroot(session):
            return await RETRY.call(session, op)

    async def set_data(
        self, path: str, data: bytes, version: int = -1, *, guard: Handle | None = None
    ) -> Stat:
        """Replace the node's data if its version is ``version`` (-1: any); returns its new
        ``Stat``. Raises ``NoNodeError`` if it does not exist, ``BadVersionError`` if its
        version is another, ``NoAuthError`` if its ACL does not let this session write,
        ``InvalidArgument`` (nothing sent) for a bad path, data or version, or a request
        longer than ``max_request_bytes``.

        ``guard``: a recipe object the current task holds (``zk.lock()``,
        ``zk.multi_lock()``, ``zk.election()``, ``zk.semaphore()``, a read or write lock):
        the write is applied only while it is ours (see *Fencing* in the docs). ZooKeeper
        then refuses the whole of it with ``StaleFencingToken`` (nothing written) if the
        holding's node is gone, while the write's own errors (``NoNodeError``,
        ``BadVersionError``) keep their meaning. Before any request: ``StaleFencingToken``
        if the holding is known lost, ``NotLockOwner`` if the current task does not hold
        it, ``UsageError`` for a recipe that cannot guard (the non-fair lock, the TTL lease:
        their fixed node could be another holder's), ``InvalidArgument`` for a guard that is
        not a recipe object of this client. One round trip, guarded or not; a lost reply
        raises ``ConnectionLoss`` (outcome unknown: never sent again, read back to tell).
        """
        session = self._live_session()
        server_path = session.server_path(validate_path(path))
        data, version = validate_data(data), validate_version(version)
        async with self._naming_chroot(session):
            if guard is None:
                return await session.call(set_data_op(server_path, data, version))
            write = MultiSetData(server_path, data, version)
            stat = await guarded_write(session, guard_of(guard, session), path, write)
        assert isinstance(stat, Stat)
        return stat

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        acl: Sequence[ACL] | None = None,
        guard: Handle | None = None,
    ) -> str:
        """Create a node with ``acl`` (``default_acl`` if None); returns its path (with the
        sequence suffix if ``sequential``).

        An ephemeral node goes with the session. Raises ``NodeExistsError`` if it exists,
        ``NoNodeError`` if its parent does not (see ``ensure_path``), ``NoAuthError`` if
        the parent's ACL does not let this session create, ``InvalidACLError`` if the server
        refuses ``acl``, ``InvalidArgument`` (nothing sent) for a bad path or acl, or if the
        request (path, data and acl) is longer than ``max_request_bytes``. ``guard``: as for
        ``set_data`` (the create is applied only while the guard's holding is ours).
        """
        session = self._live_session()
        mode = CreateMode.PERSISTENT
        if ephemeral:
            mode |= CreateMode.EPHEMERAL
        if sequential:
            mode |= CreateMode.SEQUENTIAL
        server_path, data = session.server_path(validate_path(path)), validate_data(data)
        encoded = encode_acl(self._acl(acl))
        async with self._naming_chroot(session):
            if guard is None:
                op = create_op(server_path, data, mode, session.client_path, acl=encoded)
                return (await session.call(op)).path
            write = MultiCreate(server_path, data, mode, encoded)
            created = await guarded_write(session, guard_of(guard, session), path, write)
        assert isinstance(created, str)
        return created

    async def delete(self, path: str, *, guard: Handle | None = None) -> None:
        """Delete a node (any version). Raises ``NoNodeError`` if it does not exist and
        ``NotEmptyError`` (a ``ZooKeeperError``) if it has children, ``NoAuthError`` if the
        parent's ACL does not let this session delete. ``guard``: as for ``set_data`` (the
        delete is applied only while the guard's holding is ours)."""
        session = self._live_session()
        server_path = session.server_path(validate_path(path))
        async with self._naming_chroot(session):
            if guard is None:
                await session.call(delete_op(server_path))
                return
            write = MultiDelete(server_path)
            await guarded_write(session, guard_of(guard, session), path, write)

    async def ensure_path(self, path: str, *, acl: Sequence[ACL] | None = None) -> None:
        """Create ``path`` and its ancestors (chroot included) as containers with ``acl``
        (``default_acl`` if None), in one round trip; existing ones are left alone. Returns
        nothing. Raises ``InvalidArgument`` for a bad path or acl, ``ClientClosed`` if the
        client is not connected, ``UsageError`` outside its event loop, ``NoAuthError`` if
        an ACL refuses a create, ``ConnectionLoss`` or ``SessionExpired`` if the connection
        or the session is lost meanwhile (calling it again is safe)."""
        session = self._live_session()
        ops = container_path_ops(
            session.server_path(validate_path(path)),
            session.client_path,
            acl=encode_acl(self._acl(acl)),
        )
        for result in await session.pipeline(ops):
            if isinstance(result, BaseException) and not isinstance(result, NodeExistsError):
                raise result

    async def get_acl(self, path: str) -> tuple[list[ACL], Stat]:
        """The node's ACL and ``Stat``. Raises ``NoNodeError`` if it does not exist,
        ``NoAuthError`` unless its ACL grants this session ``READ`` or ``ADMIN`` (without
        ``ADMIN``, digest ids come back with ``x`` for the hash)."""
        session = self._live_session()
        op = get_acl_op(session.server_path(validate_path(path)))
        async with self._naming_chroot(session):
            return await RETRY.call(session, op)

    @contextlib.asynccontextmanager
    async def _naming_chroot(self, session: Session) -> AsyncIterator[None]:
        # A missing chroot makes every path missing: say so, rather than blame the path.
        try:
            yield
        except NoNodeError as exc:
            chroot = session.chroot
            if chroot and await RETRY.call(session, exists_op(chroot)) is None:
                exc.args = (
                    f"{exc.args[0]} (in chroot {chroot}, which does not exist: create it with "
                    "ensure_path('/'); recipes create it as a container on first use)",
                )
            raise
