"""The one check of a fencing token, shared by every fence."""

from __future__ import annotations

from aiozklock._exceptions import InvalidArgument

# A token is a zxid (the lock node's czxid): a non-negative signed 64-bit integer, which
# PostgreSQL's bigint holds and Redis's fence writes as 19 decimal digits.
MAX_TOKEN = (1 << 63) - 1


def check_token(token: object) -> int:
    """``token`` if it is a fencing token (an ``int``, not a ``bool``, in 0..2**63-1);
    else ``InvalidArgument``, before anything is sent."""
    if isinstance(token, bool) or not isinstance(token, int):
        raise InvalidArgument(
            f"a fencing token must be an int (a lock's fencing_token), got {type(token).__name__}"
        )
    if not 0 <= token <= MAX_TOKEN:
        raise InvalidArgument(f"a fencing token must be in 0..2**63-1 (a zxid), got {token}")
    return token
