"""The queue engine's combined decision (``plan``) over random multi-lock interleavings.

Pure: no ZooKeeper. Contenders enqueue atomically on their member paths (as one ``multi``
does: the same transaction numbers every node, in one order on every shared path), holders
release, in a random interleaving. After every step: no path has two holders, and whenever
anyone is queued somebody holds (no deadlock); the wait-for graph has no cycle.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aiozklock._recipes._core._names import node_prefix
from aiozklock._recipes._core._plan import Step, plan
from aiozklock._recipes._decision import decide

PATHS = ("/a", "/b", "/c", "/d")


class Model:
    """ZooKeeper's side of the queues: children per path, one sequence counter per path."""

    def __init__(self) -> None:
        self.children: dict[str, list[str]] = {p: [] for p in PATHS}
        self.counter = dict.fromkeys(PATHS, 0)
        self.nodes: dict[str, dict[str, str]] = {}  # contender guid -> path -> node name

    def enqueue(self, guid: str, members: tuple[str, ...]) -> None:
        ours = {}
        for path in members:  # one transaction: applied at once
            name = f"{node_prefix(guid)}{self.counter[path]:010d}"
            self.counter[path] += 1
            self.children[path].append(name)
            ours[path] = name
        self.nodes[guid] = ours

    def release(self, guid: str) -> None:
        for path, name in self.nodes.pop(guid).items():
            self.children[path].remove(name)

    def step(self, guid: str) -> Step:
        ours = self.nodes[guid]
        listings = {path: list(self.children[path]) for path in ours}
        return plan(listings, ours, guid, decide)


def owner_of(model: Model, path: str, name: str) -> str:
    return next(guid for guid, ours in model.nodes.items() if ours.get(path) == name)


def check_invariants(model: Model) -> list[str]:
    steps = {guid: model.step(guid) for guid in model.nodes}
    holders = [guid for guid, step in steps.items() if step.held]
    for path in PATHS:
        assert sum(1 for g in holders if path in model.nodes[g]) <= 1, f"two holders of {path}"
    if model.nodes:
        assert holders, f"deadlock: {model.nodes}"
    # The wait-for graph: an edge from each waiter to the owner of each predecessor.
    edges = {
        guid: {owner_of(model, p, d.predecessor) for p, d in step.waits.items() if d.predecessor}
        for guid, step in steps.items()
    }
    seen: set[str] = set()

    def acyclic(guid: str, path: tuple[str, ...]) -> None:
        assert guid not in path, f"wait-for cycle {(*path, guid)}"
        if guid in seen:
            return
        for successor in edges[guid]:
            acyclic(successor, (*path, guid))
        seen.add(guid)

    for guid in edges:
        acyclic(guid, ())
    for step in steps.values():
        assert not step.stale
        assert not step.requeue
    return holders


member_sets = st.lists(st.sampled_from(PATHS), min_size=1, max_size=4, unique=True).map(tuple)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_random_interleavings_keep_exclusion_and_progress(data: st.DataObject) -> None:
    model = Model()
    contenders = data.draw(st.lists(member_sets, min_size=2, max_size=7), label="contenders")
    pending = {f"{i:032x}": members for i, members in enumerate(contenders)}
    grants = 0
    for _ in range(60):
        holders = check_invariants(model)
        choices = [("enqueue", g) for g in pending] + [("release", g) for g in holders]
        if not choices:
            break
        action, guid = data.draw(st.sampled_from(choices))
        if action == "enqueue":
            model.enqueue(guid, pending.pop(guid))
        else:
            model.release(guid)
            grants += 1
    # Drain: releasing holders one by one always reaches the empty state.
    while model.nodes:
        holders = check_invariants(model)
        model.release(holders[0])
        grants += 1
    assert grants == len(contenders)


def test_permuted_pair_is_not_a_deadlock() -> None:
    """Curator's {A, B} against {B, A}: each would hold its first member and wait forever.
    Atomic enqueue puts one transaction first on both paths."""
    model = Model()
    model.enqueue("1" * 32, ("/a", "/b"))
    model.enqueue("2" * 32, ("/b", "/a"))
    assert check_invariants(model) == ["1" * 32]
    waits = model.step("2" * 32).waits
    assert set(waits) == {"/a", "/b"}


def test_held_only_when_first_on_every_member() -> None:
    model = Model()
    model.enqueue("1" * 32, ("/b",))
    model.enqueue("2" * 32, ("/a", "/b", "/c"))
    step = model.step("2" * 32)
    assert not step.held
    assert list(step.waits) == ["/b"]  # first on /a and /c already
    model.release("1" * 32)
    assert model.step("2" * 32).held


def test_a_missing_member_node_means_requeue_everything() -> None:
    model = Model()
    model.enqueue("1" * 32, ("/a", "/b"))
    name = model.nodes["1" * 32]["/a"]
    model.children["/a"].remove(name)
    assert model.step("1" * 32).requeue
