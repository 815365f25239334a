"""Lock-delay in the queue engine: a grant that follows a holder whose node vanished without
a release comes no earlier than that holder's delay after it vanished (Chubby's and
Consul's guard for a resource that cannot check a fencing token; docs/fencing.md).

When the decision says we are first, and this acquisition saw a reason (a record, or
another lock-delay contender's node, in a listing it decided on: ``delay_seen``), we read
each member's record (``_delay_record.py``). A record naming a node other than ours names
a holder that is gone (we are first: it was ahead of us) and whose release did not delete
the record: it vanished without a release. We then write it down as gone (a conditional
setData: the reply's mtime is the server's time now), and wait what is left of its delay,
reckoned on the server's clock from the first time anyone recorded it gone (which is after
it vanished: never early), or the full delay from our write if that time was written by
another leader (a leader change came between: two leaders' clocks are never compared).
A lock-delay holder then writes its own record (create, or a conditional setData), and its
clean release deletes it in one transaction with its node;
a contender without lock-delay deletes the record it waited out, so that its own loss
delays nobody.

A record that changed meanwhile (another contender wrote it, a holder's release deleted it)
makes us decide again from a new listing. Nothing here runs for a contender without
lock-delay on a path whose listings show neither a record nor a lock-delay node.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

import anyio

from aiozklock._exceptions import (
    BadVersionError,
    ConnectionLoss,
    LockTimeout,
    NodeExistsError,
    NoNodeError,
    SessionExpired,
)
from aiozklock._recipes._core._delay_record import (
    ABSENT,
    RECORD,
    holder_record,
    parse_record,
)
from aiozklock._recipes._core._place import Listings, Place
from aiozklock._recipes._core._retry import RETRY
from aiozklock._wire._now import uptime
from aiozklock._wire._protocol import (
    CreateMode,
    MultiDelete,
    create_op,
    delete_op,
    get_data_op,
    set_data_op,
)
from aiozklock._wire._validation import join

# A write that lost a race for the record: decide again.
_CHANGED = (BadVersionError, NoNodeError, NodeExistsError, ConnectionLoss)


class _Weighed(NamedTuple):
    """A member's record as we left it: its ``version`` (``ABSENT``: none), whether it named
    a holder that vanished (``honored``: we waited for it), and until when (``uptime()``)."""

    version: int
    honored: bool = False
    until: float = 0.0


class Delay:
    """Lock-delay at ``place`` (see the module docstring): ``seconds`` (None for a
    contender without lock-delay, which honors a record it finds), whether this acquisition
    ``seen`` a reason to read the record, the version of each member's record we wrote when
    granted (``versions``: what our release deletes), the seconds the last acquisition
    ``waited`` for a delay, and until when (``uptime()``) this acquisition already knows it
    owes a vanished holder's delay (``owed``, by member and holder node: reckoned from its
    own earlier write, a bound that a leader change since cannot move)."""

    __slots__ = ("_owed", "_place", "_seen", "_versions", "seconds", "waited")

    def __init__(self, place: Place, seconds: float | None) -> None:
        self._place = place
        self.seconds = seconds
        self._seen = False
        self._versions: dict[str, int] = {}
        self.waited = 0.0
        self._owed: dict[tuple[str, str], float] = {}

    def begin(self) -> None:
        """A new acquisition: what it sees of lock-delay, from scratch."""
        self._seen, self.waited = False, 0.0
        self._owed.clear()

    def see(self) -> None:
        """This acquisition saw a reason to read the record (``delay_seen``)."""
        self._seen = True

    def records(self) -> list[MultiDelete]:
        """The deletes of the records our grant wrote, at the versions we wrote: a release
        deletes them with our nodes, in one transaction, so that the next contender knows
        it was a release."""
        server_path = self._place.session.server_path
        return [MultiDelete(server_path(join(m, RECORD)), v) for m, v in self._versions.items()]

    def forget(self) -> None:
        """Released or lost: our records are deleted with the release, or left."""
        self._versions = {}

    async def honored(self, listings: Listings, deadline: float | None) -> bool:
        """First on every member: wait out any delay a record asks for, then write our
        own record (a lock-delay contender) or delete the one waited out. Returns False
        if a record changed meanwhile (decide again from a new listing). Raises
        ``LockTimeout`` if the delay ends after ``deadline``, ``SessionExpired`` if our
        session ended while we waited."""
        weighed: dict[str, _Weighed] = {}
        for member in self._place.members:
            # A lock-delay contender creates its record if none is listed (a create that
            # finds one makes us decide again, listing it); another reads it if it has seen
            # a reason to (``delay_seen``).
            read = RECORD in listings[member] if self.seconds is not None else self._seen
            found = await self._weigh(member, read, deadline)
            if found is None:
                return False
            weighed[member] = found
        until = max(w.until for w in weighed.values())
        await self._wait_out(until, deadline)
        if self.seconds is None:
            self._drop_records({m: w.version for m, w in weighed.items() if w.honored})
            return True
        return await self._write_records(self.seconds, weighed)

    async def _weigh(self, member: str, read: bool, deadline: float | None) -> _Weighed | None:
        """``member``'s record (if we ``read`` it), and until when it makes us wait; None if
        it changed while we wrote it."""
        if not read:
            return _Weighed(ABSENT)  # as far as we know there is none: created when granted
        place = self._place
        session, generation = place.session, place.generation
        path = session.server_path(join(member, RECORD))
        try:
            data, stat = await RETRY.call(
                session, get_data_op(path), generation=generation, wait_until=deadline
            )
        except NoNodeError:
            return _Weighed(ABSENT)
        record = parse_record(data, path)
        if record is None or record.holder == place.nodes[member]:
            return _Weighed(stat.version)
        # We are first, so the node it names is gone; its release would have deleted it.
        op = set_data_op(path, record.marked_gone(stat.mtime, stat.mzxid), stat.version)
        try:
            written = await session.call(op, generation=generation, wait_until=deadline)
        except _CHANGED:
            return None
        read_at, written_at = (stat.mtime, stat.mzxid), (written.mtime, written.mzxid)
        until = uptime() + record.remaining(read_at, written_at)
        # Each of our reckonings for this vanish is a bound (it is after the vanish by the
        # delay): an earlier one, on our own clock, spares a second full wait across a
        # leader change (our first mark written under the old leader, this one the new).
        owed, key = self._owed, (member, record.holder)
        until = owed[key] = min(until, owed.get(key, until))
        return _Weighed(written.version, honored=True, until=until)

    async def _wait_out(self, until: float, deadline: float | None) -> None:
        """Sleep until ``until``; raise ``LockTimeout`` at once if that is after
        ``deadline`` (nothing can end a delay early), ``SessionExpired`` if our session
        ended meanwhile (our nodes went with it: queue again)."""
        left = until - uptime()
        if left <= 0:
            return
        if deadline is not None and until > deadline:
            raise LockTimeout(
                f"{self._place.late}: a holder vanished without a release, and its lock-delay "
                f"runs {left:.3g} s more"
            )
        await anyio.sleep(left)
        self.waited += left
        if self._place.session.generation != self._place.generation:
            raise SessionExpired("the session ended during a lock-delay")

    async def _write_records(self, seconds: float, weighed: dict[str, _Weighed]) -> bool:
        """Granted, with lock-delay: write our record on every member (what our release
        deletes, and what tells the next contender if we vanish); False if one changed
        meanwhile."""
        place = self._place
        session, generation = place.session, place.generation
        versions = {}
        for member, found in weighed.items():
            path = session.server_path(join(member, RECORD))
            data = holder_record(place.nodes[member], seconds)
            try:
                if found.version == ABSENT:
                    mode, strip = CreateMode.PERSISTENT, session.client_path
                    create = create_op(path, data, mode, strip, acl=place.acl)
                    created = await session.call(create, generation=generation)
                    versions[member] = created.stat.version
                else:
                    update = set_data_op(path, data, found.version)
                    versions[member] = (await session.call(update, generation=generation)).version
            except _CHANGED:
                return False  # a lost reply is read again with the next decision
        self._versions = versions
        return True

    def _drop_records(self, versions: dict[str, int]) -> None:
        """Granted without lock-delay: delete the records we waited out (each at the
        version we wrote), not waiting for the replies; one that fails stays, and only
        makes the next contender read it (its delay is over)."""
        if not versions:
            return
        session = self._place.session
        ops = [delete_op(session.server_path(join(m, RECORD)), v) for m, v in versions.items()]
        with contextlib.suppress(SessionExpired):  # gone with its session: nothing to do
            generation = self._place.generation
            session.send(ops, generation=generation, on_done=lambda result, error: None)


__all__ = ("Delay",)
