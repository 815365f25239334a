"""The doctor's pure parts, table by table: who wrote a node (by its name and data), which
mixes of layouts on one path are unsafe and what fixes them (the interoperability table of
the docs' "Mixed fleets" page), holders and waiters of long queues and who waits for whom,
when a transaction happened at the latest, durations."""

from __future__ import annotations

import json

import pytest

from aiozklock import Severity, Stat
from aiozklock._doctor._checks import WriteTimes, duration
from aiozklock._doctor._layout import Member, PathLayout, library_of, marker_of
from aiozklock._doctor._mixes import mix_findings
from aiozklock._doctor._queues import build_views, queue_state, waits
from aiozklock._doctor._waitfor import find_deadlocks

OURS = json.dumps({"identifier": None, "host": "h", "pid": 1, "task": "t"}).encode()
# Fixed, not random: xdist workers must collect the same test ids.
HEX = "0123456789abcdef0123456789abcdef"
CURATOR = "_c_01234567-89ab-cdef-0123-456789abcdef"


def stat(owner: int = 7) -> Stat:
    return Stat(1, 1, 0, 0, 0, 0, 0, owner, 0, 0, 1)


@pytest.mark.parametrize(
    ("name", "data", "library", "marker"),
    [
        (f"{HEX}-lock-0000000001", OURS, "aiozklock", "lock-"),
        (f"{HEX}__lock__0000000001", OURS, "aiozklock", "__lock__"),  # compat="kazoo"
        (f"{HEX}-__READ__0000000002", OURS, "aiozklock", "__READ__"),
        (f"{CURATOR}-lock-0000000003", b"10.0.0.7", "curator", "lock-"),
        (f"{CURATOR}-latch-0000000003", b"", "curator", "latch-"),
        (f"{CURATOR}-__WRIT__0000000003", b"10.0.0.7", "curator", "__WRIT__"),
        (f"{HEX}__lock__0000000004", b"worker-1", "kazoo", "__lock__"),
        (f"{HEX}__rlock__-000000005", b"", "kazoo", "__rlock__"),  # a wrapped counter
        (f"_c_{HEX}-lock-0000000006", b"", "other", "lock-"),  # go-zookeeper's names
    ],
)
def test_who_wrote_a_node(name: str, data: bytes, library: str, marker: str) -> None:
    assert marker_of(name) == marker
    assert library_of(name, data, marker) == library


def member(library: str, marker: str) -> Member:
    guid = {"aiozklock": HEX, "curator": CURATOR, "kazoo": HEX}[library]
    separator = "-" if library != "kazoo" and not marker.startswith("__l") else ""
    name = f"{guid}{separator}{marker}0000000001"
    data = OURS if library == "aiozklock" else b""
    return Member(name, data, stat(), library, marker)  # type: ignore[arg-type]


SAFE = None


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        # Ours read every marker: our own mixes are safe, whatever the compat.
        ([("aiozklock", "lock-"), ("aiozklock", "__lock__"), ("aiozklock", "__READ__")], SAFE),
        ([("curator", "lock-"), ("aiozklock", "lock-")], SAFE),
        ([("kazoo", "__lock__"), ("aiozklock", "__lock__")], SAFE),
        ([("curator", "__WRIT__"), ("aiozklock", "__READ__")], SAFE),
        ([("kazoo", "__rlock__"), ("aiozklock", "__lock__")], SAFE),
        # Curator and kazoo: never.
        ([("curator", "lock-"), ("kazoo", "__lock__")], (Severity.CRITICAL, "never share")),
        # Curator orders our kazoo-style names by the whole name.
        ([("curator", "lock-"), ("aiozklock", "__lock__")], (Severity.CRITICAL, "curator")),
        # Curator's mutex and our election: another recipe.
        ([("curator", "lock-"), ("aiozklock", "latch-")], (Severity.CRITICAL, "zk.election()")),
        ([("curator", "__READ__"), ("aiozklock", "lock-")], (Severity.CRITICAL, "zk.rw_lock()")),
        # kazoo may have been told of our names (extra_lock_patterns): a warning.
        ([("kazoo", "__lock__"), ("aiozklock", "lock-")], (Severity.WARNING, 'compat="kazoo"')),
    ],
)
def test_which_mixes_are_unsafe(
    nodes: list[tuple[str, str]], expected: tuple[Severity, str] | None
) -> None:
    layout = PathLayout("/p", queue=tuple(member(*node) for node in nodes))
    findings = mix_findings(layout)
    if expected is None:
        assert findings == []
        return
    (finding,) = findings
    assert finding.severity is expected[0]
    assert expected[1] in finding.action
    assert finding.paths == ("/p",)


def test_semaphore_layouts_do_not_mix() -> None:
    ours = (member("aiozklock", "lock-"),)
    kazoo_lease = (Member(HEX, b"k", stat(), "kazoo", None),)
    cases = {
        PathLayout("/s", queue=ours, max_leases=2, kazoo_leases=kazoo_lease): 'compat="kazoo"',
        PathLayout("/s", queue=ours, max_leases=2, kazoo_lock="/s-__lock__"): 'compat="kazoo"',
        PathLayout("/s", queue=ours, max_leases=2, curator_semaphore=True): 'compat="curator"',
        PathLayout("/s", kazoo_leases=kazoo_lease, curator_semaphore=True): "never share",
    }
    for layout, action in cases.items():
        (finding,) = mix_findings(layout)
        assert finding.severity is Severity.CRITICAL
        assert action in finding.action
    assert mix_findings(PathLayout("/s", kazoo_leases=kazoo_lease, max_leases=2)) == []


def test_a_transaction_happened_no_later_than_any_later_write_seen() -> None:
    times = WriteTimes([(10, 100.0), (20, 90.0), (30, 300.0)])  # a clock stepped back once
    assert times.not_after(5) == 90.0
    assert times.not_after(10) == 90.0
    assert times.not_after(21) == 300.0
    assert times.not_after(31) is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.61, "0.6 s"), (42, "42 s"), (182, "3 min 2 s"), (7500, "2 h 5 min"), (86400, "1 d")],
)
def test_durations_read_as_a_person_would(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def queued(sequence: int, session: int, marker: str = "lock-") -> Member:
    """Our node at ``sequence`` of session ``session`` (one task per session)."""
    separator = "" if marker.startswith("__l") else "-"
    name = f"{sequence:032x}{separator}{marker}{sequence:010d}"
    return Member(name, OURS, stat(session), "aiozklock", marker)


LONG = 3000  # a long queue: the reduction reads heads of queues, never a queue's square


def test_a_long_queue_that_moves_is_no_deadlock() -> None:
    views = build_views([PathLayout("/a", queue=tuple(queued(i, i + 1) for i in range(LONG)))])
    assert find_deadlocks(views) == []
    (state,) = [queue_state(view) for view in views]
    assert (len(state.holders), len(state.waiters)) == (1, LONG - 1)


def test_a_long_queue_behind_a_deadlock_is_stuck_with_it() -> None:
    # Session 1 holds /a and waits at /b behind session 2, which waits at /a behind 1 and
    # in front of LONG - 2 others.
    a = PathLayout("/a", queue=tuple(queued(i, i + 1) for i in range(LONG)))
    b = PathLayout("/b", queue=(queued(0, 2), queued(1, 1)))
    (deadlock,) = find_deadlocks(build_views([a, b]))
    assert sorted((e.party[0], e.path) for e in deadlock.cycle) == [(1, "/b"), (2, "/a")]
    assert len(deadlock.stuck) == LONG - 2


def test_readers_hold_together_and_a_writer_waits_for_each() -> None:
    rw = PathLayout(
        "/rw",
        queue=(queued(0, 1, "__READ__"), queued(1, 2, "__READ__"), queued(2, 3, "__WRIT__")),
    )
    (view,) = build_views([rw])
    state = queue_state(view)
    assert [c.session_id for c in state.holders] == [1, 2]
    assert [c.session_id for c in state.waiters] == [3]
    holding = {e.key for e in view.entries[:2]}
    assert sorted(b.party[0] for _, b in waits(view, {e.key for e in view.entries}, holding)) == [
        1,
        2,
    ]


def kazoo_node(sequence: int, session: int, marker: str = "__lock__") -> Member:
    return Member(f"{HEX}{marker}{sequence:010d}", b"kazoo", stat(session), "kazoo", marker)


@pytest.mark.parametrize(
    ("queue", "severity"),
    [
        # Ours first, kazoo's behind it: kazoo's is the first node kazoo sees, so both hold.
        ((queued(1, 1), kazoo_node(2, 2)), Severity.CRITICAL),
        ((queued(1, 1, "__WRIT__"), kazoo_node(2, 2, "__rlock__")), Severity.CRITICAL),
        ((queued(1, 1, "__READ__"), kazoo_node(2, 2)), Severity.CRITICAL),
        # Two readers hold together: no double hold.
        ((queued(1, 1, "__READ__"), kazoo_node(2, 2, "__rlock__")), Severity.WARNING),
        # kazoo's first: ours waits behind it (an older aiozklock), nobody holds twice yet.
        ((kazoo_node(1, 2), queued(2, 1)), Severity.WARNING),
        # kazoo's waits behind another kazoo node that waits behind ours: one holder each.
        ((queued(1, 1), kazoo_node(2, 2), kazoo_node(3, 3)), Severity.CRITICAL),
    ],
)
def test_kazoo_beside_our_default_layout_is_critical_when_both_hold_now(
    queue: tuple[Member, ...], severity: Severity
) -> None:
    (finding,) = mix_findings(PathLayout("/p", queue=queue))
    assert finding.severity is severity
    assert ("both hold now" in finding.message) is (severity is Severity.CRITICAL)
    assert 'compat="kazoo"' in finding.action
