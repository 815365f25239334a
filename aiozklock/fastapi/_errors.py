"""How ``aiozklock.fastapi`` answers a failed locked request: ``HTTPErrors`` (the statuses,
configurable) and the answers every failure ends in, ``not_acquired`` and ``unavailable``
(nothing was written: retry) and ``unknown`` (it may have been written), each saying so in
its ``OUTCOME_HEADER``."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import HTTPException

from aiozklock._exceptions import InvalidArgument

OUTCOME_HEADER = "Aiozklock-Outcome"
"""The response header that says what a failed locked request wrote: ``not-written``
(nothing: retry) or ``unknown`` (it may have been written: replay with the same idempotency
key, or read back)."""


@dataclass(frozen=True, slots=True)
class HTTPErrors:
    """How lock failures become HTTP errors (``HTTPException``).

    ``not_acquired``: the status when the lock is not acquired within the timeout (409
    Conflict by default; 423 Locked is the other usual choice). ``unavailable``: the status
    when ZooKeeper cannot be reached (the session not connected: see ``locked``'s
    ``wait_for_connection``), the client is closed, or the lock was lost (or the fence
    refused) before the endpoint committed anything through ``Commit`` (503 by default),
    sent with ``Retry-After: retry_after`` seconds (no header if ``None``). Both say that
    nothing was written (``Aiozklock-Outcome: not-written``): the caller may retry.
    ``outcome_unknown``: the status when the request may have written (500 by default,
    with ``Aiozklock-Outcome: unknown`` and no ``Retry-After``): a commit raised (the
    connection lost during COMMIT), the lock was lost after a commit, or it was lost during
    an endpoint that does not commit through ``Commit``. Raises ``InvalidArgument`` for a
    status outside 400-599 or a negative ``retry_after``.
    """

    not_acquired: int = 409
    unavailable: int = 503
    retry_after: int | None = 1
    outcome_unknown: int = 500

    def __post_init__(self) -> None:
        for name in ("not_acquired", "unavailable", "outcome_unknown"):
            status = getattr(self, name)
            if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status < 600:
                raise InvalidArgument(f"{name} must be an HTTP error status (400-599): {status!r}")
        retry = self.retry_after
        if retry is not None and (
            isinstance(retry, bool) or not isinstance(retry, int) or retry < 0
        ):
            raise InvalidArgument(f"retry_after must be whole seconds >= 0 or None: {retry!r}")


def not_acquired(errors: HTTPErrors, detail: str) -> HTTPException:
    """``errors.not_acquired``: another request holds the lock; nothing was written."""
    return HTTPException(errors.not_acquired, detail, headers={OUTCOME_HEADER: "not-written"})


def unavailable(errors: HTTPErrors, detail: str) -> HTTPException:
    """``errors.unavailable``: nothing was written, with its ``Retry-After``."""
    headers = {OUTCOME_HEADER: "not-written"}
    if errors.retry_after is not None:
        headers["Retry-After"] = str(errors.retry_after)
    return HTTPException(errors.unavailable, detail, headers=headers)


def unknown(errors: HTTPErrors, detail: str) -> HTTPException:
    """``errors.outcome_unknown``: the request may have written."""
    return HTTPException(errors.outcome_unknown, detail, headers={OUTCOME_HEADER: "unknown"})


__all__ = ("OUTCOME_HEADER", "HTTPErrors", "not_acquired", "unavailable", "unknown")
