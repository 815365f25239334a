"""The client: ``connect()``, the lock factory, and the loss policy that cancels holders."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Literal, TypeVar

import anyio
import anyio.abc

from aiozklock._exceptions import ClientClosed, ConnectionLoss, InvalidArgument, NodeExistsError
from aiozklock._recipes._janitor import Janitor
from aiozklock._recipes._lock import Holding, Lock
from aiozklock._wire._paths import parse_hosts, validate_data, validate_path
from aiozklock._wire._protocol import (
    CreateMode,
    Stat,
    container_path_ops,
    create_op,
    delete_op,
    exists_op,
    get_children_op,
    get_data_op,
)
from aiozklock._wire._session import Session, SessionState, StateChange, StateListener

log = logging.getLogger(__name__)

T = TypeVar("T")

LossPolicy = Literal["suspended", "expired"]
_POLICIES = ("suspended", "expired")


def _positive_seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{name} must be a number of seconds, not {value!r}")
    if math.isnan(value) or math.isinf(value) or value <= 0:
        raise InvalidArgument(f"{name} must be a positive, finite number of seconds: {value!r}")
    return float(value)


class _LossPolicy:
    """Decides when a held lock can no longer be trusted, and tells its holder.

    ``"suspended"``: as soon as the session is SUSPENDED (connection lost, or nothing heard
    for half the session timeout) — before the server can expire the session and grant the
    lock to someone else. ``"expired"``: only once the session is LOST; the holder keeps the
    lock through short disconnections, at the price of a thin margin before a re-grant.
    """

    def __init__(self, session: Session, mode: LossPolicy, janitor: Janitor) -> None:
        self._session = session
        self._mode = mode
        self._janitor = janitor
        self._holdings: set[Holding] = set()
        session.add_listener(self._on_state)

    def register(self, holding: Holding) -> None:
        self._holdings.add(holding)
        reason = self._unsafe(self._session.state, self._session.generation, holding)
        if reason:
            self._lose(holding, reason)

    def unregister(self, holding: Holding) -> None:
        self._holdings.discard(holding)

    def _unsafe(self, state: SessionState, generation: int, holding: Holding) -> str | None:
        if generation != holding.generation or state in (SessionState.LOST, SessionState.CLOSED):
            return f"session {state.value.lower()}"
        if self._mode == "suspended" and state is not SessionState.CONNECTED:
            return f"session {state.value.lower()} (loss_policy='suspended')"
        return None

    def _on_state(self, change: StateChange) -> None:
        for holding in list(self._holdings):
            reason = self._unsafe(change.state, self._session.generation, holding)
            if reason:
                self._lose(holding, f"{reason}: {change.reason}")

    def _lose(self, holding: Holding, reason: str) -> None:
        if holding.mark_lost(reason):
            log.warning("lock node %s lost: %s", holding.path, reason)
            if self._session.state is not SessionState.CLOSED:
                # If the session comes back, the node must not stay behind, held by nobody.
                self._janitor.delete(holding.path, holding.generation)


class ZooKeeperClient:
    """A connection to a ZooKeeper ensemble. Use ``async with aiozklock.connect(...) as zk:``."""

    def __init__(
        self,
        hosts: str,
        *,
        session_timeout: float = 10.0,
        connect_timeout: float = 10.0,
        loss_policy: LossPolicy = "suspended",
    ) -> None:
        self._hosts, self.chroot = parse_hosts(hosts)
        self.hosts = hosts
        self.session_timeout = _positive_seconds("session_timeout", session_timeout)
        self.connect_timeout = _positive_seconds("connect_timeout", connect_timeout)
        if loss_policy not in _POLICIES:
            raise InvalidArgument(f"loss_policy must be one of {_POLICIES}, not {loss_policy!r}")
        self.loss_policy: LossPolicy = loss_policy
        self._session: Session | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._background_scope: anyio.CancelScope | None = None
        self._janitor: Janitor | None = None
        self._policy: _LossPolicy | None = None
        self._closed = False

    # ---------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> ZooKeeperClient:
        if self._session is not None or self._closed:
            raise RuntimeError("a ZooKeeperClient can be entered only once")
        session = Session(
            self._hosts,
            chroot=self.chroot,
            session_timeout=self.session_timeout,
            connect_timeout=self.connect_timeout,
        )
        await session.connect_first()
        self._session = session
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        try:
            jobs = await task_group.start(self._background, session, name="aiozklock session")
            self._janitor = Janitor(session, jobs.start_soon)
            self._policy = _LossPolicy(session, self.loss_policy, self._janitor)
            await session.wait_connected()
        except BaseException:
            await self._shutdown()
            raise
        return self

    async def _background(
        self, session: Session, *, task_status: anyio.abc.TaskStatus[anyio.abc.TaskGroup]
    ) -> None:
        # The session loop and the janitor's jobs live in a child task with its own cancel
        # scope: close() cancels them, never the task that entered the client.
        with anyio.CancelScope() as self._background_scope:
            async with anyio.create_task_group() as jobs:
                task_status.started(jobs)
                await session.run()
                jobs.cancel_scope.cancel()  # janitor jobs: their session is gone

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        await self.close()
        assert self._task_group is not None
        return await self._task_group.__aexit__(exc_type, exc, tb)

    async def close(self) -> None:
        """Close the session (its ephemeral nodes go at once) and fail everything pending.

        Bounded: returns within about a second even if the server does not answer.
        """
        if self._closed:
            return
        self._closed = True
        if self._session is not None:
            await self._session.close()
        if self._background_scope is not None:
            self._background_scope.cancel()

    async def _shutdown(self) -> None:
        await self.close()
        assert self._task_group is not None
        await self._task_group.__aexit__(None, None, None)

    @property
    def session(self) -> Session:
        if self._session is None:
            raise ClientClosed("the client is not connected: use 'async with aiozklock.connect()'")
        if self._closed:
            raise ClientClosed("the ZooKeeper client is closed")
        return self._session

    @property
    def state(self) -> SessionState:
        return self._session.state if self._session is not None else SessionState.CONNECTING

    @property
    def session_id(self) -> int:
        return self._session.session_id if self._session is not None else 0

    @property
    def session_password(self) -> bytes:
        """With ``session_id``, what re-attaches to the session (e.g. ``expire_session``)."""
        return self._session.password if self._session is not None else b""

    @property
    def negotiated_timeout(self) -> float:
        """The session timeout the server granted, in seconds (it may clamp the request)."""
        return self._session.timeout if self._session is not None else self.session_timeout

    def add_listener(self, listener: StateListener) -> None:
        """Call ``listener(change)`` on every session state change."""
        self.session.add_listener(listener)

    # ---------------------------------------------------------------- recipes

    def lock(self, path: str, *, identifier: str | None = None) -> Lock:
        """A fair, reentrant, loss-aware lock on ``path`` (validated now, before any traffic)."""
        session = self.session
        assert self._policy is not None
        assert self._janitor is not None
        return Lock(
            session, path, identifier=identifier, registry=self._policy, janitor=self._janitor
        )

    # ---------------------------------------------------------------- znodes (small API)

    async def exists(self, path: str) -> Stat | None:
        session = self.session
        op = exists_op(session.server_path(validate_path(path)))
        return await self._read(lambda: session.call(op))

    async def get_children(self, path: str) -> list[str]:
        session = self.session
        op = get_children_op(session.server_path(validate_path(path)))
        return await self._read(lambda: session.call(op))

    async def get_data(self, path: str) -> tuple[bytes, Stat]:
        session = self.session
        op = get_data_op(session.server_path(validate_path(path)))
        return await self._read(lambda: session.call(op))

    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequential: bool = False
    ) -> str:
        """Create a node; returns its path (with the sequence suffix if ``sequential``)."""
        session = self.session
        mode = CreateMode.PERSISTENT
        if ephemeral:
            mode |= CreateMode.EPHEMERAL
        if sequential:
            mode |= CreateMode.SEQUENTIAL
        op = create_op(
            session.server_path(validate_path(path)), validate_data(data), mode, session.client_path
        )
        return (await session.call(op)).path

    async def delete(self, path: str) -> None:
        session = self.session
        await session.call(delete_op(session.server_path(validate_path(path))))

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its ancestors (chroot included) as containers, in one round trip."""
        session = self.session
        ops = container_path_ops(session.server_path(validate_path(path)), session.client_path)
        for result in await session.pipeline(ops):
            if isinstance(result, BaseException) and not isinstance(result, NodeExistsError):
                raise result

    @staticmethod
    async def _read(call: Callable[[], Awaitable[T]]) -> T:
        while True:
            try:
                return await call()
            except ConnectionLoss:
                continue  # reads are idempotent: repeat after the reconnect


def connect(
    hosts: str,
    *,
    session_timeout: float = 10.0,
    connect_timeout: float = 10.0,
    loss_policy: LossPolicy = "suspended",
) -> ZooKeeperClient:
    """Connect to ZooKeeper: ``async with aiozklock.connect("zk1:2181,zk2:2181/app") as zk:``.

    Arguments are validated at once (``ValueError`` subclasses); the connection is made on
    entry, which raises ``ZooKeeperUnavailable`` if no server answers within
    ``connect_timeout``. ``loss_policy`` decides when a holder is told it lost its lock:
    ``"suspended"`` (default, safest) or ``"expired"``.
    """
    return ZooKeeperClient(
        hosts,
        session_timeout=session_timeout,
        connect_timeout=connect_timeout,
        loss_policy=loss_policy,
    )
