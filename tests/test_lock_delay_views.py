"""A running lock-delay in view (issue 41 item 3), and the revocable holder in view (item 5).

A lock-delay holder's session is expired (in-process, through a proxy, as
tests/test_lock_delay.py does) while a second contender waits behind it: that contender
records the vanish in the path's ``lockdelay`` record (a third session's data watch sees the
write) and waits the delay out. During the delay every view says so and none calls it the
holder: ``contenders()``, ``aiozklock contenders``/``holders``/``leader`` (JSON and tables),
the doctor (an information finding) and ``top``'s screen. After the delay the waiter holds
and no view shows a delay.

The real-server tests import only names that existed before the change, so that they fail
on an assertion there, not on an import.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

import aiozklock
from aiozklock import FindingKind, Severity
from aiozklock._doctor._render import to_text
from aiozklock._recipes._core._delay_record import RECORD, holder_record, parse_record
from aiozklock._top._live import next_due
from aiozklock._top._screen import Snapshot, frame, plain
from aiozklock._top._watch import TreeWatch
from aiozklock.testing import FaultProxy, RawZooKeeperConnection, WatchEventType, session_of
from tests.conftest import ClientFactory, wait_for_queue
from tests.test_cli import _cli
from tests.test_faults import observer
from tests.test_lock_delay import expire
from tests.test_top import row_of

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

__all__ = ["observer"]  # a fixture, imported to be used here

PREFIX = "/views"
PATH = "/views/delay/payout"
LONG = 60.0  # a delay no test waits out: every check during it has a minute
SHORT = 1.0  # a delay the "after" test waits out (and the holder's session timeout)
MEDIUM = 5.0  # a delay a test waits out, with time to start watching within it
CLOCK_SLACK_MS = 50  # the server's mtime (its clock) and ours are one machine's, rounded
HANG = 120.0  # a hang bound: each command is a Python process (seconds when loaded)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the commands run in processes of their own


async def _json(*args: str) -> Any:
    done = await _cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def _table(*args: str) -> str:
    done = await _cli(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode()


Recipe = Callable[..., Any]  # (client, identifier=, lock_delay=) -> a lock or an election
RECIPES: dict[str, Recipe] = {
    "lock": lambda zk, **kw: zk.lock(PATH, **kw),
    "election": lambda zk, **kw: zk.election(PATH, **kw),
}


@dataclass
class Vanished:
    """A holder that vanished without a release (``node``), the waiter behind it, and the
    record as the waiter marked it (its ``mtime``, ms)."""

    node: str
    waiter: aiozklock.ZooKeeperClient
    marked_at: int


@asynccontextmanager
async def vanished(
    recipe: Recipe,
    delay: float,
    zk_hosts: str,
    chroot: str,
    proxy: FaultProxy,
    open_client: ClientFactory,
    observer: RawZooKeeperConnection,
    *,
    granted: anyio.Event | None = None,
) -> AsyncIterator[Vanished]:
    """A holder with ``lock_delay=delay`` whose session is expired while a waiter (without
    lock_delay of its own: it honors the record all the same) is queued behind it; the body
    runs once the waiter has recorded the vanish. The waiter sets ``granted`` when it holds,
    and holds until the body ends."""
    holder_client = await open_client(proxy, session_timeout=SHORT)
    holder = recipe(holder_client, identifier="vanishing", lock_delay=delay)
    await holder.acquire()
    (node,) = [c for c in await holder_client.get_children(PATH) if c != RECORD]
    record = f"{chroot}{PATH}/{RECORD}"
    assert await observer.exists(f"{chroot}{PATH}/{node}", watch=True) is not None
    await observer.get_data(record, watch=True)  # the holder's record: the next write marks
    waiter_client = await open_client()

    async def wait() -> None:
        async with recipe(waiter_client, identifier="patient"):
            if granted is not None:
                granted.set()
            await anyio.sleep_forever()

    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await wait_for_queue(waiter_client, PATH, 3)  # the record, the holder, the waiter
            await expire(holder_client, proxy, zk_hosts)
            await observer.wait_for_event(type=WatchEventType.NODE_DELETED)
            await observer.wait_for_event(type=WatchEventType.NODE_DATA_CHANGED)
            _, stat = await waiter_client.get_data(f"{PATH}/{RECORD}")  # the mark's
            yield Vanished(node, waiter_client, stat.mtime)
            tg.cancel_scope.cancel()


@pytest.mark.parametrize("kind", ["lock", "election"])
async def test_a_running_lock_delay_is_shown_wherever_holders_are(
    kind: str,
    zk_hosts: str,
    chroot: str,
    hosts: str,
    proxy: FaultProxy,
    open_client: ClientFactory,
    observer: RawZooKeeperConnection,
    zk: aiozklock.ZooKeeperClient,
) -> None:
    recipe = RECIPES[kind]
    async with vanished(recipe, LONG, zk_hosts, chroot, proxy, open_client, observer) as gone:
        # The waiter was the first to record the vanish: it waits the whole delay from then.
        expected = {"until_ms": gone.marked_at + 60_000, "after": gone.node, "delay_ms": 60_000}
        (waiter,) = await recipe(zk).contenders()
        contenders = await _json("contenders", "--hosts", hosts, PATH)
        holders = await _json("holders", "--hosts", hosts, PREFIX)
        leader = await _json("leader", "--hosts", hosts, PATH)
        contenders_table = await _table("contenders", "--hosts", hosts, PATH)
        holders_table = await _table("holders", "--hosts", hosts, PREFIX)
        run = await _cli("run", "--hosts", hosts, "--nonblock", PATH, "--", "true")
        diagnosis = await zk.diagnose(PREFIX)

    # The library's own view: the waiter does not hold, and says what it waits for.
    assert (waiter.identifier, waiter.is_holder) == ("patient", False)
    assert waiter.lock_delay is not None
    assert (waiter.lock_delay.after, waiter.lock_delay.until_ms) == (
        gone.node,
        gone.marked_at + 60_000,
    )

    assert contenders["lock_delay"] == expected
    (entry,) = contenders["contenders"]
    assert (entry["identifier"], entry["is_holder"], entry["waits_for_lock_delay"]) == (
        "patient",
        False,
        True,
    )
    (lock,) = holders["locks"]
    assert (lock["path"], lock["holder"], lock["waiting"]) == (PATH, None, 1)
    assert lock["lock_delay"] == expected
    assert (leader["leader"], leader["lock_delay"]) == (None, expected)
    assert leader["contenders"][0]["waits_for_lock_delay"] is True

    sentence = f"lock-delay running on {PATH} until "
    lines = contenders_table.splitlines()
    assert lines[0].startswith(sentence), contenders_table
    assert lines[0].endswith(f"after {gone.node} vanished")
    assert lines[2].split()[:2] == ["lock-delay", "patient"]
    assert any(line.startswith(sentence) for line in holders_table.splitlines()), holders_table
    assert run.returncode == 75  # not acquired: nobody holds, but the delay runs
    assert f"not acquired: {sentence}".encode() in run.stderr, run.stderr

    # The doctor: healthy, and an information finding says until when, after whose vanish.
    assert diagnosis.healthy
    (finding,) = diagnosis.of_kind(FindingKind("lock_delay"))
    assert finding.severity is Severity.INFO
    assert finding.message.startswith(sentence)
    assert f"after {gone.node} vanished" in finding.message
    assert finding.paths == (PATH,)
    assert finding.sessions == (gone.waiter.session_id,)
    (queue,) = diagnosis.queues
    assert queue.holders == ()
    assert queue.waiters[0].identifier == "patient"
    assert queue.waiters[0].lock_delay == waiter.lock_delay
    assert f"INFO lock-delay: {sentence}" in to_text(diagnosis)
    assert not diagnosis.of_kind(FindingKind.LONG_HOLDER)

    # top: the row says the delay holds the path, the finding is listed, and a reading is
    # due when the delay ends (no watch fires then if the waiter's record write is lost).
    screen = plain(frame(Snapshot(PREFIX, "CONNECTED", diagnosis, live=False)))
    row = row_of(screen, PATH)
    assert row[4] == "-"  # HELD: nobody holds
    assert row[6] == "lock-delay"
    assert row[8:] == ["more,", "after", gone.node, "vanished"]
    assert f"INFO lock delay: {sentence}" in screen
    due = next_due(diagnosis)
    assert due is not None
    assert due <= LONG + 1


async def test_after_the_delay_the_waiter_holds_and_no_delay_is_shown(
    zk_hosts: str,
    chroot: str,
    hosts: str,
    proxy: FaultProxy,
    open_client: ClientFactory,
    observer: RawZooKeeperConnection,
    zk: aiozklock.ZooKeeperClient,
) -> None:
    granted = anyio.Event()
    recipe = RECIPES["lock"]
    async with vanished(
        recipe, SHORT, zk_hosts, chroot, proxy, open_client, observer, granted=granted
    ):
        await granted.wait()  # the delay is over: the waiter deleted the record it waited out
        (waiter,) = await recipe(zk).contenders()
        contenders = await _json("contenders", "--hosts", hosts, PATH)
        holders = await _json("holders", "--hosts", hosts, PREFIX)
        diagnosis = await zk.diagnose(PREFIX)
    assert (waiter.identifier, waiter.is_holder, waiter.lock_delay) == ("patient", True, None)
    assert contenders["lock_delay"] is None
    (entry,) = contenders["contenders"]
    assert (entry["is_holder"], entry["waits_for_lock_delay"]) == (True, False)
    (lock,) = holders["locks"]
    assert (lock["holder"]["identifier"], lock["lock_delay"]) == ("patient", None)
    assert not diagnosis.of_kind(FindingKind("lock_delay"))
    (queue,) = diagnosis.queues
    assert [c.identifier for c in queue.holders] == ["patient"]
    assert queue.lock_delay is None
    assert "lock-delay" not in plain(frame(Snapshot(PREFIX, "CONNECTED", diagnosis, live=False)))


async def test_top_hears_the_record_change(zk: aiozklock.ZooKeeperClient) -> None:
    """A waiter's "gone" mark changes only the record's data: top's watches hear it (the
    view then says until when the delay runs)."""
    record = f"{PATH}/{RECORD}"
    await zk.ensure_path(PATH)
    await zk.create(record, holder_record("lockdelay-lock-0000000001", LONG))
    changes: list[None] = []
    changed = anyio.Event()

    def on_change() -> None:
        changes.append(None)
        changed.set()

    tree = TreeWatch(session_of(zk), PREFIX, on_change)
    marked = b'{"holder":"lockdelay-lock-0000000001","delay":60.0,"gone_by":null}'
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(tree.run)
            await changed.wait()  # the first listing
            assert tree.watched == 4  # /views, /views/delay, the lock path, the record
            changed = anyio.Event()
            await zk.set_data(record, marked)
            await changed.wait()
            tg.cancel_scope.cancel()
    assert len(changes) == 2


async def test_the_holders_table_says_who_is_revocable(
    zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    """Item 5: the holders table has a REVOCABLE column (its JSON has ``revocable``)."""
    with anyio.fail_after(HANG):
        async with (
            zk.lock("/views/r", identifier="r", revocable=True),
            zk.lock("/views/n", identifier="n"),
        ):
            table = await _table("holders", "--hosts", hosts, PREFIX)
    header, *rows = (line.split() for line in table.splitlines())
    column = header.index("REVOCABLE")
    assert {row[0]: row[column] for row in rows} == {"/views/n": "no", "/views/r": "yes"}


async def test_the_long_holder_advice_names_revoke_for_a_revocable_holder(
    zk: aiozklock.ZooKeeperClient, hosts: str
) -> None:
    """Item 5: the doctor's long-holder finding names ``aiozklock revoke PATH`` when the
    holder is revocable, and says it cannot be revoked when not."""
    with anyio.fail_after(HANG):
        async with (
            zk.lock("/views/r", identifier="r", revocable=True),
            zk.lock("/views/n", identifier="n"),
        ):
            # Held for the command's start at least (a Python process): older than 0.1 s.
            done = await _cli("doctor", "--json", "--hold-warning", "0.1", "--hosts", hosts, PREFIX)
    assert done.returncode == 1, done.stderr  # problems found: the long holders
    report = json.loads(done.stdout)
    advice = {f["paths"][0]: f["action"] for f in report["findings"] if f["kind"] == "long_holder"}
    assert "`aiozklock revoke /views/r` asks it to let go" in advice["/views/r"]
    assert "cannot be revoked" in advice["/views/n"]
    assert "aiozklock revoke" not in advice["/views/n"]


def test_which_records_hold_a_queue_back() -> None:
    """The arithmetic every view shares (pure): a record holds the queue's head back while
    the node it names is not queued and its delay, as the contender that last wrote it
    reckoned it (server time against the same leader's server time), has not ended."""
    from aiozklock._recipes._core._delay_record import (  # new: keeps this module importable
        RunningLockDelay,
        running_delay,
    )

    e1, e2 = 7 << 32, 8 << 32  # zxids of two leader epochs
    held = holder_record("h", 2.0)
    assert running_delay(held, 1_000, e1, "/r", ["h", "w"], 0) is None  # h still holds
    starting = running_delay(held, 1_000, e1, "/r", ["w"], 5_000)
    assert starting == RunningLockDelay("h", 2_000, None)  # vanished, not recorded yet
    first = parse_record(held, "/r")
    assert first is not None
    marked = first.marked_gone(1_000, e1)  # "gone by this version's mtime"
    assert running_delay(marked, 10_000, e1 + 5, "/r", ["w"], 11_999) == RunningLockDelay(
        "h", 2_000, 12_000
    )
    # Over: a record that a contender granted after it failed to delete.
    assert running_delay(marked, 10_000, e1 + 5, "/r", ["w"], 12_000) is None
    again = parse_record(marked, "/r")
    assert again is not None
    carried = again.marked_gone(10_000, e1 + 5)  # a later contender's mark: gone_by kept
    late = running_delay(carried, 11_000, e1 + 6, "/r", [], 0)
    assert late == RunningLockDelay("h", 2_000, 12_000)  # one leader: gone_by + delay
    other = running_delay(carried, 11_000, e2 + 1, "/r", [], 0)
    assert other == RunningLockDelay("h", 2_000, 13_000)  # another leader: all of it
    assert running_delay(b"not json", 1, e1, "/r", [], 0) is None


async def test_election_observers_name_no_leader_while_the_delay_runs(
    zk_hosts: str,
    chroot: str,
    proxy: FaultProxy,
    open_client: ClientFactory,
    observer: RawZooKeeperConnection,
    zk: aiozklock.ZooKeeperClient,
) -> None:
    """``leader()`` and ``watch_leader()`` say None while the head waits out the delay,
    as the CLI's ``leader`` does (the head would lead, but nobody may yet)."""
    recipe = RECIPES["election"]
    async with vanished(recipe, LONG, zk_hosts, chroot, proxy, open_client, observer):
        leader = await zk.election(PATH).leader()
        with anyio.fail_after(HANG):
            async with contextlib.aclosing(zk.election(PATH).watch_leader()) as leaders:
                first = await leaders.__anext__()
    assert (leader, first) == (None, None)


async def test_watch_leader_names_the_head_once_the_delay_ends(
    zk_hosts: str,
    chroot: str,
    proxy: FaultProxy,
    open_client: ClientFactory,
    observer: RawZooKeeperConnection,
    zk: aiozklock.ZooKeeperClient,
) -> None:
    """No ZooKeeper event marks the end of a delay: ``watch_leader()`` looks again then."""
    recipe = RECIPES["election"]
    seen: list[tuple[str | None, int]] = []  # each value, with the time it came (Unix ms)
    async with vanished(recipe, MEDIUM, zk_hosts, chroot, proxy, open_client, observer) as gone:
        with anyio.fail_after(HANG):
            async with contextlib.aclosing(zk.election(PATH).watch_leader()) as leaders:
                async for leader in leaders:
                    seen.append((leader, round(time.time() * 1000)))
                    if leader is not None:
                        break
    ends = gone.marked_at + round(MEDIUM * 1000)
    # None while the delay ran (if watching started within it: almost always), then the
    # head, not before the delay's end (both clocks are this machine's: the server is local).
    assert [leader for leader, _ in seen] in ([None, "patient"], ["patient"])
    assert seen[-1][1] >= ends - CLOCK_SLACK_MS
