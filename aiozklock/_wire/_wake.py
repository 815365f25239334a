"""How many unread bytes are worth waking the reader for (the socket's ``SO_RCVLOWAT``):
pure, from the requests in flight.

A lock taken in a loop writes its release's delete (nobody awaits its reply) and, at once,
the next create (awaited). The server commits them one after the other, so the delete's
reply comes alone, one commit before the create's: read at once, it costs a wake-up (a
``epoll_wait``, a ``recv`` and a turn of the event loop) that changes nothing anyone waits
for. Asked to wake only once ``k`` answers' worth of bytes are unread, the kernel wakes the
reader once per cycle: the create's reply, the delete's before it, read together.

**Why no reply is read later than it is needed.** Let the first request in flight that
somebody awaits be the ``k``-th in wire order (``k`` at most ``SCANNED``); the ``k - 1``
before it are requests nobody awaits (``on_done`` told instead). ZooKeeper answers a
session's requests in order, and every frame it sends is at least ``LEAST_ANSWER`` bytes (a
length and a reply header). Nothing is left unread between frames when the mark is set (no
incomplete frame is buffered), so once the awaited reply is in, at least ``k`` frames are
unread: ``k * LEAST_ANSWER`` bytes, and the kernel wakes the reader. The end of the stream
and a socket error wake it whatever the mark.

**Nothing else needs an early read.** The mark is raised only when:

* no holding needs the session proven (``demand`` 0): a reply nobody awaits still proves
  the session (``_clock``), and a holding's deadline must not wait for a later commit;
* no watch is set: a notification must reach its watcher when it comes, and one may be
  shorter than the mark;
* no incomplete frame is buffered (the count above starts at a frame's boundary).

What waits is only the callbacks of the requests nobody awaits (a release's delete), each
still told before the awaited reply, in order. A server that drops the reply to a request
and goes on (ZooKeeper closes the connection after it) can leave the awaited reply unread
until the liveness clock drops the silent connection; its callers then see
``ConnectionLoss``, an unknown outcome.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from aiozklock._wire._framing import REPLY_HEADER_SIZE
from aiozklock._wire._requests import Pending

# The least any frame from the server takes on the wire: its length and a reply header.
LEAST_ANSWER = 4 + REPLY_HEADER_SIZE
# The requests looked at: a lock's cycle needs two; a long run of replies nobody awaits
# (a release of many locks) is read as it comes, at no cost per request in flight.
SCANNED = 4


def wake_bytes(written: Iterable[Pending], *, urgent: bool) -> int:
    """The unread bytes worth a wake-up: 1 (any) if ``urgent`` (a holding needs proof, a
    watch is set, or a frame is incomplete) or if the first request in flight is awaited,
    none is, or none of the first ``SCANNED`` is; else ``LEAST_ANSWER`` per request up to
    and including the first one awaited (``written``: the requests in wire order)."""
    if urgent:
        return 1
    for position, pending in enumerate(itertools.islice(written, SCANNED)):
        if pending.on_done is None:  # awaited: a pipeline's caller awaits the whole batch
            return (position + 1) * LEAST_ANSWER if position else 1
    return 1
