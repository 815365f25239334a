"""What a locked request's answer says about its writes: the commit point of
``aiozklock.fastapi.Commit``, and the answer when the lock is lost.

A lost lock cancels the endpoint where it awaits, but it cannot call back what was already
sent: a COMMIT under way, or one that returned before the loss was noticed. So the answer
follows what the endpoint committed, which it tells by committing through ``commit(...)``:

* the endpoint returned: its own answer (it finished; a loss noticed on the way out is
  logged);
* the lock lost, or the fence refusing (``LockLost``), before any commit: ``unavailable``
  (503, ``Retry-After``, ``Aiozklock-Outcome: not-written``): nothing was written, retry;
* a commit that raised or was interrupted, or a loss after a commit: ``outcome_unknown``
  (500, ``Aiozklock-Outcome: unknown``): it may have been written; replay with the same
  idempotency key, or read back.

Once a commit is sent, the loss no longer cancels the endpoint (cancelling it would only
lose the commit's result): a commit that returns makes the endpoint's own answer. An
endpoint that does not commit through ``commit(...)`` may have written anything before it
was cancelled, so a loss that cancels it is ``outcome_unknown``.
"""

from __future__ import annotations

import logging
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Generic, TypeVar

from fastapi import HTTPException, Request

from aiozklock._exceptions import LockLost, UsageError
from aiozklock._recipes._core import _faces as faces
from aiozklock._recipes._core._primitive import Primitive
from aiozklock.fastapi._errors import HTTPErrors, unavailable, unknown
from aiozklock.fastapi._routes import COMMIT_MARK

log = logging.getLogger("aiozklock.fastapi")

_SCOPE_KEY = "aiozklock.commits"  # the request's Commits, in its ASGI scope

T = TypeVar("T")


class Commits:
    """The commit points of one locked request: declare ``commit: aiozklock.fastapi.Commit``
    in the endpoint and commit through it, ``async with commit(session.begin()): ...``.

    Then a lost lock is answered by what was committed: 503 (``Aiozklock-Outcome:
    not-written``) before any commit, the endpoint's own answer once a commit returned,
    500 (``Aiozklock-Outcome: unknown``) if a commit raised. Every write the lock protects
    must be in such a transaction: the 503 promises that nothing was written.
    """

    def __init__(self) -> None:
        self.used = False  # the endpoint asked for it: its writes go through commit()
        self.committed = 0
        self.in_doubt = False  # a commit was sent and did not return
        self._held: list[Primitive] = []

    def hold(self, held: Primitive) -> None:
        """Register a lock that the request holds (its dependency)."""
        self._held.append(held)

    def __call__(
        self, transaction: AbstractAsyncContextManager[T]
    ) -> AbstractAsyncContextManager[T]:
        """``transaction`` (an async context manager that commits on a normal exit and
        rolls back on an exception: SQLAlchemy's ``session.begin()`` or ``engine.begin()``,
        asyncpg's or psycopg's ``conn.transaction()``) with a commit point: right before it
        commits, the request's locks are checked, and from the commit on a loss no longer
        cancels the endpoint.

        Raises ``UsageError`` if the route holds no lock (``locked``, ``locked_all``), and
        ``LockLost`` if a lock is lost, or its validity ran out, when the transaction begins
        or before it commits: the transaction is then rolled back, nothing of it committed.
        What the transaction raises (an error during COMMIT makes the request's outcome
        unknown) passes through.
        """
        return _CommitPoint(self, transaction)

    def check(self, when: str) -> None:
        """``UsageError`` without a lock; ``LockLost`` if one is no longer certainly held."""
        if not self._held:
            raise UsageError(
                "commit(...) needs a lock held by the request: a locked(...) or "
                "locked_all(...) dependency of the same route"
            )
        for held in self._held:
            if not held.is_held:
                raise LockLost(
                    f"{faces.label(held)} was lost (or its validity ran out) {when}; nothing of "
                    "this transaction was committed"
                )

    def commit_sent(self) -> None:
        """From now on a loss does not cancel the endpoint: the commit cannot be called
        back, and cancelling the endpoint would only lose its result."""
        self.in_doubt = True
        for held in self._held:
            faces.commit(held)


class _CommitPoint(Generic[T]):
    """``Commits(transaction)``: the transaction, with its commit point."""

    def __init__(self, commits: Commits, transaction: AbstractAsyncContextManager[T]) -> None:
        self._commits = commits
        self._transaction = transaction

    async def __aenter__(self) -> T:
        self._commits.check("before the transaction began")
        return await self._transaction.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if exc is not None:  # rolled back: nothing of it committed
            return await self._transaction.__aexit__(exc_type, exc, tb)
        try:
            self._commits.check("before the commit")
        except LockLost as lost:
            await self._transaction.__aexit__(type(lost), lost, lost.__traceback__)
            raise
        self._commits.commit_sent()
        # An error here (the connection lost during COMMIT) leaves the request in doubt.
        result = await self._transaction.__aexit__(None, None, None)
        self._commits.in_doubt = False
        self._commits.committed += 1
        return result


def commits_of(request: Request) -> Commits:
    """The request's ``Commits`` (made by whichever of the lock and ``Commit`` asks first)."""
    commits: Commits = request.scope.setdefault(_SCOPE_KEY, Commits())
    return commits


def commit_dependency(request: Request) -> Commits:
    """The ``Commit`` dependency: the request's commit points, and the mark that the
    endpoint commits through them."""
    commits = commits_of(request)
    commits.used = True
    return commits


setattr(commit_dependency, COMMIT_MARK, True)


def answer(
    request: Request,
    exc: BaseException | None,
    lost: BaseException | None,
    errors: HTTPErrors,
    label: str,
) -> HTTPException | None:
    """The answer to a request whose endpoint ended with ``exc`` (None: it returned) and
    whose lock was found lost (``lost``) on release; None keeps the endpoint's own (its
    return value, or ``exc`` unchanged)."""
    commits: Commits | None = request.scope.get(_SCOPE_KEY)
    tracked = commits is not None and commits.used
    if exc is None:
        if lost is not None:
            log.warning("%s was lost after the endpoint returned; its answer stands", label)
        return None
    if commits is not None and commits.in_doubt:
        return unknown(errors, f"{label}: the request's commit may or may not have landed")
    if lost is None and not (tracked and isinstance(exc, LockLost)):
        return None  # the endpoint's own exception
    if not tracked:
        return unknown(
            errors,
            f"{label} was lost during the request, which may have written before it was "
            f"cancelled: {lost}",
        )
    assert commits is not None
    if commits.committed:
        return unknown(errors, f"{label} was lost after a part of the request was committed")
    why = exc if isinstance(exc, LockLost) else lost  # a refusal says more than the loss
    return unavailable(errors, f"{label}: nothing was committed: {why}")


__all__ = ("Commits", "answer", "commit_dependency", "commits_of")
