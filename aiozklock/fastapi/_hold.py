"""The lock dependency of ``aiozklock.fastapi``: acquire in the request's task, hold around
the endpoint, release before the response, and turn failures into HTTP errors.

A request does not wait for a disconnected session longer than its ``wait_for_connection``:
while the session is down it cannot be granted a lock, so it answers 503 at once (by
default) instead of waiting out its timeout, whether the session was down when it came or
went down while it waited in the queue.

Nor does its answer wait out an outage for the release's confirmation: the release is
written before the answer (queued for the reconnect, in the same session, when there is no
wire), and the server's confirmation is awaited for at most the lock's ``timeout`` (the
session timeout if it is None). The answer says what was written either way: a release the
server has not confirmed yet changes nothing the request wrote.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi import Depends, HTTPException, Request

from aiozklock._client import ZooKeeperClient
from aiozklock._exceptions import (
    AiozklockError,
    ClientClosed,
    LockLost,
    LockTimeout,
    SessionExpired,
    ZooKeeperUnavailable,
)
from aiozklock._recipes._core import _faces as faces
from aiozklock._recipes._core._handle import AcquireContext
from aiozklock._recipes._core._holding import Holding
from aiozklock._recipes._core._primitive import Primitive
from aiozklock._wire._session import SessionState, StateChange
from aiozklock.fastapi._errors import HTTPErrors, not_acquired, unavailable
from aiozklock.fastapi._outcome import answer, commits_of
from aiozklock.fastapi._routes import TEMPLATES, fields, fill

log = logging.getLogger("aiozklock.fastapi")

#: The least the answer waits for ZooKeeper to confirm the release (a route with a shorter
#: ``timeout``, 0 included): a healthy server answers within it, so such a route still
#: answers only once no other process can see its node; an outage costs it no more.
RELEASE_GRACE = 0.5

# Failures that say "ZooKeeper cannot vouch for this lock now": retrying later may work.
_UNAVAILABLE = (LockLost, ZooKeeperUnavailable, ClientClosed)

Make = Callable[[ZooKeeperClient, list[str]], Primitive]
ClientOf = Callable[[Request], ZooKeeperClient]


def dependency(
    templates: tuple[str, ...],
    make: Make,
    timeout: float | None,
    wait_for_connection: float,
    errors: HTTPErrors,
    client_of: ClientOf,
) -> Any:
    """The yield dependency shared by every recipe: ``make`` builds the recipe object from
    the client and the filled ``templates``. The other arguments are validated by the
    caller; raises ``InvalidArgument`` for a bad template."""
    names = {template: fields(template) for template in templates}

    async def hold(request: Request) -> AsyncIterator[Primitive]:
        paths = [fill(template, names[template], request) for template in templates]
        label = ", ".join(paths)
        zk = client_of(request)
        started = time.monotonic()
        patience = wait_for_connection if timeout is None else min(wait_for_connection, timeout)
        if not await _connected(zk, patience):
            raise unavailable(
                errors, f"{label}: ZooKeeper is unreachable (the session is {zk.state.value})"
            )
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        acquiring = make(zk, paths).acquire(timeout=left)
        outage = _Outage(zk, wait_for_connection)
        # The scope spans the yield, in this task: the body scope that a successful acquire
        # enters (cancelled on a loss) must be left before it.
        with outage.scope:
            try:
                held = await acquiring.__aenter__()
            except LockTimeout as exc:
                raise _not_acquired(zk, errors, label, timeout) from exc
            except _UNAVAILABLE as exc:
                raise unavailable(errors, f"{label} cannot be acquired: {exc}") from exc
            finally:
                outage.stop()
            if outage.scope.cancel_called:
                # Granted just as the session went down for good: give it back at once
                # (its cancellation, or its loss, ends here) and answer 503 below.
                with contextlib.suppress(*_UNAVAILABLE):  # answered below
                    await acquiring.exit(None, None, None, confirm=False)
            else:
                # FastAPI runs the endpoint in this task, inside this yield: a loss cancels
                # the endpoint wherever it awaits (until it commits through Commit).
                commits_of(request).hold(held)
                release = _Release.of(zk, request, errors, label, timeout)
                try:
                    yield held
                except BaseException as exc:
                    await release(acquiring, held, exc)
                    raise
                await release(acquiring, held, None)
        if outage.scope.cancel_called:
            waited = f", and stayed down {wait_for_connection} s" if wait_for_connection else ""
            raise unavailable(
                errors,
                f"{label}: ZooKeeper is unreachable (the session went down while the request "
                f"waited{waited})",
            )

    setattr(hold, TEMPLATES, names)
    return Depends(hold, scope="function")


def _not_acquired(
    zk: ZooKeeperClient, errors: HTTPErrors, label: str, timeout: float | None
) -> HTTPException:
    """The answer to an acquire that timed out: 503 if it was waiting for ZooKeeper, else
    ``errors.not_acquired`` (nothing was written either way)."""
    if zk.state is not SessionState.CONNECTED:
        return unavailable(errors, f"{label}: ZooKeeper is unreachable")
    return not_acquired(
        errors, f"{label} is held by another request; not acquired within {timeout} s"
    )


async def _connected(zk: ZooKeeperClient, within: float) -> bool:
    """Whether the session is connected, waiting up to ``within`` seconds for it."""
    if _up(zk):
        return True
    if within <= 0:
        return False
    settled = anyio.Event()

    def changed(change: StateChange) -> None:
        if change.state in (SessionState.CONNECTED, SessionState.CLOSED):
            settled.set()

    remove = zk.add_listener(changed)
    try:
        with anyio.move_on_after(within):
            await settled.wait()
    finally:
        remove()
    return _up(zk)


def _up(zk: ZooKeeperClient) -> bool:
    return zk.state is SessionState.CONNECTED


class _Outage:
    """Cancels ``scope`` once the session has been down (any state but CONNECTED) for
    ``grace`` seconds on end, through its deadline, which a listener on the client's state
    changes moves; ``stop()`` once the acquire is over. Created while connected."""

    def __init__(self, zk: ZooKeeperClient, grace: float) -> None:
        self.scope = anyio.CancelScope()
        self._grace = grace
        self._remove = zk.add_listener(self._changed)

    def _changed(self, change: StateChange) -> None:
        if change.state is SessionState.CONNECTED:
            self.scope.deadline = math.inf
        elif math.isinf(self.scope.deadline):  # down from now on: its grace starts
            self.scope.deadline = anyio.current_time() + self._grace

    def stop(self) -> None:
        self._remove()
        self.scope.deadline = math.inf


@dataclass(frozen=True, slots=True)
class _Release:
    """The end of a held request: its release, the server's confirmation (awaited for at
    most ``within`` seconds), and the answer that says what the request wrote."""

    zk: ZooKeeperClient
    request: Request
    errors: HTTPErrors
    label: str
    within: float  # the lock's timeout (the session timeout if it has none)

    @classmethod
    def of(
        cls,
        zk: ZooKeeperClient,
        request: Request,
        errors: HTTPErrors,
        label: str,
        timeout: float | None,
    ) -> _Release:
        """The release of a route whose lock has ``timeout``: its confirmation awaited for
        that long (the session timeout if None), and at least ``RELEASE_GRACE``."""
        within = zk.negotiated_timeout if timeout is None else timeout
        return cls(zk, request, errors, label, max(within, RELEASE_GRACE))

    async def __call__(
        self, acquiring: AcquireContext[Primitive], held: Primitive, exc: BaseException | None
    ) -> None:
        """Release: the delete is written now, or queued for the reconnect in the same
        session if there is no wire (never lost), and no task holds the lock any more. Then
        wait for the server to confirm it (a client that has the response finds the lock
        free from every process), but not past ``within``: an outage must not hold back the
        answer of a request that is done. Raises the answer that says what the request
        wrote, if the endpoint's own does not (``_outcome.answer``)."""
        ours = faces.holding(held, anyio.get_current_task().id)  # before the release
        lost: BaseException | None = None
        try:
            await acquiring.exit(
                type(exc) if exc else None, exc, exc.__traceback__ if exc else None
            )
        except _UNAVAILABLE as error:
            if error is not exc:  # else the endpoint's own error, passed through
                lost = error
        else:
            if ours is not None:
                await self._confirmed(ours)
        replaced = answer(self.request, exc, lost, self.errors, self.label)
        if replaced is not None:
            raise replaced from lost or exc

    async def _confirmed(self, ours: Holding) -> None:
        """Wait up to ``within`` seconds for the server to say that our nodes are gone:
        it runs a session's requests in order, so a read sent after the delete finds them
        gone once the delete is applied. Not confirmed in time (the server silent or
        unreachable, or the delete queued for the reconnect): logged, and the answer goes
        out; the release stays with the session, which deletes the nodes once it reaches
        a server, unless the server expires it first (and deletes them with it)."""
        with anyio.move_on_after(self.within):
            try:
                if await _gone(self.zk, ours):
                    return
            except (SessionExpired, ClientClosed):
                return  # the session is gone, or closing: our nodes go with it
            except AiozklockError as error:  # the request is done: say so all the same
                log.warning("%s: the release's confirmation failed: %r", self.label, error)
                return
        log.warning(
            "%s: the release was not confirmed by ZooKeeper within %g s: it is written, or "
            "queued for the reconnect; other processes may see the lock held until the "
            "server applies it or expires the session (at most a session timeout)",
            self.label,
            self.within,
        )


async def _gone(zk: ZooKeeperClient, ours: Holding) -> bool:
    """Whether the server says every node of ``ours`` is gone (a fixed node: or is
    another holder's now, with another czxid). One read per node, in order: the first is
    answered after every delete of the release, written before it."""
    for node in ours.nodes:
        stat = await zk.exists(node)
        if stat is not None and (not ours.guarded or stat.czxid == ours.token):
            return False
    return True


__all__ = ("dependency",)
