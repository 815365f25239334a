"""The read/write lock's pure decision core (``aiozklock._recipes._rwdecision``).

1. node names: ours, Curator's, kazoo's, a mutex's, and children that are not lock nodes;
2. exhaustive: every queue of up to 6 readers/writers from 3 GUIDs (in shuffled listings,
   with noise, below and across the sequence wrap), every choice of "ours", checked against a
   direct model, and the safety of the grants (a writer holds alone) and the no-herd shape of
   the watches (a reader watches the nearest writer ahead);
3. the downgrade node (a read node with its write node's sequence) and equal sequences.
"""

from __future__ import annotations

import itertools
import random

import pytest

from aiozklock._recipes._core._contenders import holds_now
from aiozklock._recipes._core._names import node_prefix, nodes_of
from aiozklock._recipes._core._plan import Decision
from aiozklock._recipes._rwdecision import (
    READ_MARKER,
    WRITE_MARKER,
    decide_read,
    decide_write,
    parse,
    rw_order,
)

pytestmark = pytest.mark.timeout(60)

GUIDS = ("f47ac10b58cc4372a5670e02b2c3d479", "9c1d7e2a1b3f4e5d8a9b0c1d2e3f4a5b", "0a1b2c3d")
NOISE = (
    ".keep",
    "config",
    "lease-0000000004",  # a sequence, no lock marker
    f"{GUIDS[0]}{READ_MARKER}",  # marker, no sequence
    f"{GUIDS[1]}{WRITE_MARKER}123",  # sequence too short
    f"{GUIDS[2]}{READ_MARKER}00000000001",  # sequence too long
    f"{GUIDS[0]}{WRITE_MARKER}00000000x1",
)


def name(guid: str, write: bool, sequence: int) -> str:
    """The name ZooKeeper gives our sequential create (``%010d``)."""
    return f"{node_prefix(guid, WRITE_MARKER if write else READ_MARKER)}{sequence:010d}"


# --------------------------------------------------------------------------------------------
# 1. Names
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("child", "parsed"),
    [
        (f"{GUIDS[0]}-__READ__0000000007", (False, 7)),
        (f"{GUIDS[0]}-__WRIT__0000000007", (True, 7)),
        ("_c_4e6a0d1e-8d5c-4c55-9b5e-6f0d2b0d9a11-__READ__0000000012", (False, 12)),  # Curator
        ("_c_4e6a0d1e-8d5c-4c55-9b5e-6f0d2b0d9a11-__WRIT__0000000013", (True, 13)),
        ("0123456789abcdef0123456789abcdef__rlock__0000000001", (False, 1)),  # kazoo ReadLock
        ("0123456789abcdef0123456789abcdef__lock__0000000002", (True, 2)),  # kazoo (Write)Lock
        (f"{GUIDS[1]}-lock-0000000003", (True, 3)),  # a mutex (ours, Curator's)
        ("x__READ__lock-0000000003", (True, 3)),  # the marker right before the suffix decides
        ("x-__WRIT__+000000005", None),  # not a sequence
        (f"{GUIDS[0]}-__READ__-2147483648", (False, -(2**31))),  # after the wrap
        (f"{GUIDS[0]}-__READ__-000000001", (False, -1)),
        ("-__READ__0000000001", (False, 1)),  # no GUID: still a node to respect
        ("__READ__\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669\u0660", None),
        *[(child, None) for child in NOISE],
    ],
)
def test_parse(child: str, parsed: tuple[bool, int] | None) -> None:
    assert parse(child) == parsed


def test_our_nodes_are_found_by_guid_and_marker() -> None:
    """What the queue engine searches after a lost create reply."""
    children = [
        name(GUIDS[0], False, 3),
        name(GUIDS[0], True, 4),
        name(GUIDS[1], False, 1),
        name(GUIDS[0], False, 2),
        *NOISE,
    ]
    assert nodes_of(children, GUIDS[0], READ_MARKER) == [
        name(GUIDS[0], False, 2),
        name(GUIDS[0], False, 3),
    ]
    assert nodes_of(children, GUIDS[0], WRITE_MARKER) == [name(GUIDS[0], True, 4)]
    assert nodes_of(children, GUIDS[2], READ_MARKER) == []


# --------------------------------------------------------------------------------------------
# 2. Exhaustive against a model
# --------------------------------------------------------------------------------------------


def model(queue: list[tuple[str, bool]], ours: str, write: bool) -> tuple[bool, str | None]:
    """(held, predecessor) straight from the recipe's definition, on a queue in order."""
    index = [n for n, _ in queue].index(ours)
    if write:
        return index == 0, (queue[index - 1][0] if index else None)
    writers = [n for n, w in queue[:index] if w]
    return not writers, (writers[-1] if writers else None)


def queues(max_size: int, base: int) -> list[list[tuple[str, bool, int]]]:
    """Every queue of up to ``max_size`` nodes (reader or writer, from 3 GUIDs), numbered
    from ``base`` with gaps (deletes and other recipes bump the counter too)."""
    found = []
    for size in range(max_size + 1):
        for kinds in itertools.product((False, True), repeat=size):
            for guids in itertools.product(range(3), repeat=size) if size <= 4 else [None]:
                owners = guids if guids is not None else [i % 3 for i in range(size)]
                nodes = []
                for i, (write, owner) in enumerate(zip(kinds, owners, strict=True)):
                    sequence = (base + 3 * i + (i % 2) + 2**31) % 2**32 - 2**31  # signed
                    nodes.append((GUIDS[owner], write, sequence))
                found.append(nodes)
    return found


def zk_name(guid: str, write: bool, sequence: int) -> str:
    """As ZooKeeper formats it (``%010d``: a negative one is a sign and nine digits)."""
    return f"{node_prefix(guid, WRITE_MARKER if write else READ_MARKER)}{sequence:010d}"


@pytest.mark.parametrize("base", [0, 2**31 - 7], ids=["low", "across-the-wrap"])
def test_every_queue_every_contender(base: int) -> None:
    shuffle = random.Random(base)
    checked = 0
    for nodes in queues(6, base):
        queue = [(zk_name(g, w, s), w) for g, w, s in nodes]
        listing = [n for n, _ in queue] + list(NOISE)
        shuffle.shuffle(listing)
        assert [(n, w) for n, w, _ in rw_order(listing)] == queue
        decisions = {}
        for ours, write in queue:
            guid = ours.partition("-")[0]
            decide = decide_write if write else decide_read
            decision = decide(listing, ours, guid)
            held, predecessor = model(queue, ours, write)
            stale = tuple(n for n, _ in queue if n != ours and n.startswith(f"{guid}-"))
            assert decision == Decision(
                held=held, predecessor=predecessor, missing=False, stale=stale
            ), (queue, ours)
            decisions[ours] = (write, decision)
            checked += 1
        check_grants(queue, decisions)
        for write in (False, True):  # ours missing: re-create, whatever the queue
            decide = decide_write if write else decide_read
            missing = decide(listing, zk_name(GUIDS[0], write, 999), GUIDS[0])
            assert missing.missing
            assert not missing.held
            assert missing.predecessor is None
    assert checked > 6_000


def check_grants(
    queue: list[tuple[str, bool]], decisions: dict[str, tuple[bool, Decision]]
) -> None:
    """Safety, liveness and the shape of the watches for one queue."""
    holders = [n for n, (_, d) in decisions.items() if d.held]
    writers = [n for n in holders if decisions[n][0]]
    assert not writers or holders == writers == [queue[0][0]]  # a writer holds alone
    if queue:
        assert queue[0][0] in holders  # the head always holds: no deadlock
    order = [n for n, _ in queue]
    for ours, (write, decision) in decisions.items():
        if decision.held:
            continue
        predecessor = decision.predecessor
        assert predecessor is not None
        assert order.index(predecessor) < order.index(ours)
        if not write:  # no herd: a reader watches the nearest writer ahead, nothing else
            between = order[order.index(predecessor) + 1 : order.index(ours)]
            assert decisions[predecessor][0]
            assert not any(decisions[n][0] for n in between)
        # ``ahead == 1`` lets the engine conclude "first" from the predecessor's deletion
        # alone: only when the predecessor is the last node that can block us, and it is
        # not a write node (whose holder may still add a read node at its place).
        if decision.ahead == 1:
            assert not decisions[predecessor][0] or not write
            if write:
                assert order.index(ours) == 1


# --------------------------------------------------------------------------------------------
# 3. Downgrade nodes and equal sequences
# --------------------------------------------------------------------------------------------


def test_a_downgrade_node_keeps_the_writers_place() -> None:
    """The write holder's read node has its write node's sequence: once the write node is
    deleted, a writer queued behind still waits, on the read node."""
    holder_w, holder_r = name(GUIDS[0], True, 5), name(GUIDS[1], False, 5)
    waiting_w, late_r = name(GUIDS[2], True, 6), name("5eed", False, 7)
    both = [waiting_w, holder_r, holder_w, late_r]
    assert decide_write(both, waiting_w, GUIDS[2]).predecessor in (holder_r, holder_w)
    assert decide_read(both, late_r, "5eed").predecessor == waiting_w
    # The write lock released: the read node still holds its place.
    after = [waiting_w, holder_r, late_r]
    assert decide_write(after, waiting_w, GUIDS[2]) == Decision(
        held=False, predecessor=holder_r, missing=False, stale=()
    )
    assert decide_read(after, holder_r, GUIDS[1]).held
    assert not decide_read(after, late_r, "5eed").held


def test_while_the_write_node_is_there_the_engine_never_shortcuts() -> None:
    """A writer right behind a write node is told ``ahead`` 2: the deletion of that node
    alone must not grant it (a downgrade node may have appeared at the same place)."""
    queue = [name(GUIDS[0], True, 5), name(GUIDS[2], True, 6)]
    assert decide_write(queue, queue[1], GUIDS[2]).ahead == 2
    readers_ahead = [name(GUIDS[0], False, 5), name(GUIDS[2], True, 6)]
    assert decide_write(readers_ahead, readers_ahead[1], GUIDS[2]).ahead == 1


def test_an_equal_sequence_that_is_not_ours_is_ahead() -> None:
    """Curator's downgrade node shares its writer's key; whichever of a pair we are, the
    other counts as ahead (never both granted as first writer)."""
    w, r = name(GUIDS[0], True, 5), name(GUIDS[1], True, 5)
    for listing in ([w, r], [r, w]):
        assert not decide_write(listing, w, GUIDS[0]).held
        assert not decide_write(listing, r, GUIDS[1]).held


def test_unknown_children_never_block() -> None:
    """A ``.keep`` child (Curator would wait on it) and other noise are ignored."""
    ours = name(GUIDS[0], True, 3)
    assert decide_write([*NOISE, ours], ours, GUIDS[0]).held
    reader = name(GUIDS[0], False, 3)
    assert decide_read([*NOISE, reader], reader, GUIDS[0]).held


def test_foreign_lock_nodes_are_ordered_by_their_sequence() -> None:
    """kazoo's ``__rlock__`` is a reader, ``__lock__`` and a mutex's ``lock-`` writers."""
    kazoo_r = "0123456789abcdef0123456789abcdef__rlock__0000000001"
    kazoo_w = "0123456789abcdef0123456789abcdef__lock__0000000002"
    mutex = f"{GUIDS[2]}-lock-0000000004"
    reader, writer = name(GUIDS[0], False, 3), name(GUIDS[1], True, 5)
    listing = [mutex, writer, reader, kazoo_w, kazoo_r]
    assert decide_read(listing, reader, GUIDS[0]).predecessor == kazoo_w
    assert decide_write(listing, writer, GUIDS[1]).predecessor == mutex
    assert decide_read([kazoo_r, reader], reader, GUIDS[0]).held
    assert not decide_write([kazoo_r, writer], writer, GUIDS[1]).held


# --------------------------------------------------------------------------------------------
# 4. Who holds now, as the read-only commands and revoke read it (issue 37, item 7)
# --------------------------------------------------------------------------------------------


def test_holds_now_agrees_with_every_contenders_own_decision() -> None:
    """``holds_now`` (``contenders()``, ``revoke``) marks exactly the nodes that the
    decision each of them runs would grant: every queue of up to 8 readers and writers.
    (A downgrade's node is granted without a decision: see the next test.)"""
    checked = 0
    for size in range(1, 9):
        for kinds in itertools.product((False, True), repeat=size):
            children = [name(f"{i:032x}", write, i) for i, write in enumerate(kinds)]
            order = rw_order(children)
            held = holds_now([(not write, seq) for _, write, seq in order])
            for (node, write, _), holds in zip(order, held, strict=True):
                decision = (decide_write if write else decide_read)(children, node, node[:32])
                assert decision.held is holds, (children, node)
                checked += 1
    assert checked == sum(size * 2**size for size in range(1, 9))


def test_holds_now_with_readers_ahead_of_the_first_writer() -> None:
    assert holds_now([(True, 1), (True, 2), (False, 3), (True, 4)]) == [True, True, False, False]
    assert holds_now([(False, 1), (True, 2)]) == [True, False]
    assert holds_now([(False, 5), (True, 5), (True, 6)]) == [True, True, False]  # downgrade
    assert holds_now([(False, 1), (False, 2)]) == [True, False]  # a mutex's queue
    assert holds_now([]) == []
