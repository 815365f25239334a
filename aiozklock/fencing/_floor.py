"""A fencing floor: a zxid read from ZooKeeper now, greater than every token issued before.

A fence that lost its record (a Redis key evicted or flushed) is re-created at such a floor:
every token issued before the loss is below it and stays refused; holders granted after it
have tokens above it.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from aiozklock._exceptions import ConnectionLoss, InvalidArgument
from aiozklock._wire._protocol import CreateMode, MultiCreate, MultiDelete, multi_op
from aiozklock._wire._validation import join, validate_path

if TYPE_CHECKING:
    from aiozklock._client import ZooKeeperClient

__all__ = ["PROBE_PREFIX", "read_floor"]

PROBE_PREFIX = "aiozklock-fence-floor-"


async def read_floor(zk: ZooKeeperClient, under: str = "/") -> int:
    """The zxid of a write made now: one ``multi`` that creates an ephemeral probe node
    under ``under`` and deletes it (all or nothing: it leaves no node; the parent's
    ``cversion`` and ``pzxid`` change, and its children watches fire once).

    Why a write, and why it is above every token already issued: a token is the czxid of a
    lock node whose create was committed. The leader gives zxids to the transactions it
    proposes in increasing order (a new leader's epoch, the high 32 bits, makes its zxids
    larger than every earlier leader's), so a write proposed after that commit gets a
    larger zxid. A read would not do: a ``Stat`` of ``/`` (its ``mzxid``, ``pzxid``) moves
    only when ``/`` itself or its children change, not when a lock node deep in the tree is
    created, and a follower may answer a read before it has applied the latest commits.

    Raises ``InvalidArgument`` (nothing sent) if ``zk`` is not a ``ZooKeeperClient`` or
    ``under`` not a valid path; the server's refusal of the probe's create (``NoNodeError``:
    no such parent, ``NoAuthError``: its ACL) or delete; ``SessionExpired`` or
    ``ClientClosed`` if the session is gone. A lost reply is asked again (a probe that was
    applied left nothing, and a later write has a larger zxid, which is still a floor).
    """
    from aiozklock._client import ZooKeeperClient, session_of

    if not isinstance(zk, ZooKeeperClient):
        kind = type(zk)
        raise InvalidArgument(
            f"the floor is read with an aiozklock ZooKeeperClient (the one that grants the "
            f"tokens), got {kind.__module__}.{kind.__qualname__}"
        )
    session = session_of(zk)
    probe = session.server_path(join(validate_path(under), PROBE_PREFIX + uuid.uuid4().hex))
    op = multi_op(
        [MultiCreate(probe, b"", CreateMode.EPHEMERAL), MultiDelete(probe)], session.client_path
    )
    # A missing chroot makes every path missing: the client's error then says so.
    async with zk._naming_chroot(session):
        while True:
            try:
                result = await session.call(op)
            except ConnectionLoss:
                continue  # applied or not, it left nothing: asking again is safe
            failure = result.failure
            if failure is not None:
                raise failure[1]
            return result.zxid
