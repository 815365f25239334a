"""The sync face cannot drift from the async one: its factories are generated from the async
ones, and its recipe objects' pass-through members (their types and docstrings) from the
async classes (``.ci/gen_sync.py``, both regenerated here byte for byte), each factory takes
the async factory's parameters plus ``on_lost`` and checks them in the caller's thread with
the async errors, and every public name of each async object exists on its sync
counterpart, but for names that cannot exist in blocking code. The parameters the sync face
once lacked work on a real server."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import re
import shutil
import textwrap
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

import aiozklock
import aiozklock.sync
from aiozklock import ACL, Perms
from aiozklock._factories import RecipeFactories
from aiozklock.sync import SyncClient
from aiozklock.sync._factories import SyncFactories

ROOT = Path(__file__).resolve().parent.parent
PATH = "/recipes/parity"

# The only names of an async class its sync counterpart lacks, each with why.
CANNOT_BLOCK = {
    "__aenter__": "async with: blocking code enters with `with` (__enter__)",
    "__aexit__": "the exit of `async with`: blocking code leaves with `with` (__exit__)",
}
# The protocol names compared (the other dunders are every object's).
DUNDERS = {"__aenter__", "__aexit__", "__aiter__", "__anext__", "__await__"}
DUNDERS |= {"__enter__", "__exit__", "__iter__", "__next__"}

PAIRS = [
    (aiozklock.Lock, aiozklock.sync.SyncLock),
    (aiozklock.NonFairLock, aiozklock.sync.SyncNonFairLock),
    (aiozklock.MultiLock, aiozklock.sync.SyncMultiLock),
    (aiozklock.Election, aiozklock.sync.SyncElection),
    (aiozklock.ReadWriteLock, aiozklock.sync.SyncReadWriteLock),
    (aiozklock.ReadLock, aiozklock.sync.SyncReadLock),
    (aiozklock.WriteLock, aiozklock.sync.SyncWriteLock),
    (aiozklock.LeaseLock, aiozklock.sync.SyncLeaseLock),
    (aiozklock.Semaphore, aiozklock.sync.SyncSemaphore),
    (aiozklock.ZooKeeperClient, aiozklock.sync.SyncClient),
]
FACTORIES = sorted(
    name
    for name, value in vars(RecipeFactories).items()
    if callable(value) and not name.startswith("_")
)


# ---------------------------------------------------------------- the checkers


def public_names(cls: type) -> set[str]:
    """Every public name of the class: its attributes (inherited ones too), slots,
    annotations, and what its methods assign to ``self`` (instance attributes)."""
    names = set(dir(cls))
    for klass in cls.__mro__:
        if not klass.__module__.startswith(("aiozklock", "tests")):
            continue
        slots = vars(klass).get("__slots__", ())
        names |= {slots} if isinstance(slots, str) else set(slots)
        names |= set(vars(klass).get("__annotations__", {}))
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):  # made at run time: no source
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                names.add(node.attr)
    return {name for name in names if not name.startswith("_") or name in DUNDERS}


def missing_names(async_cls: type, sync_cls: type) -> set[str]:
    """The public names of ``async_cls`` that ``sync_cls`` lacks, beyond ``CANNOT_BLOCK``."""
    return public_names(async_cls) - public_names(sync_cls) - set(CANNOT_BLOCK)


def _described(fn: Callable[..., Any]) -> list[tuple[str, object, object, object]]:
    return [
        (p.name, p.kind, p.default, p.annotation)  # annotations are strings (PEP 563)
        for p in inspect.signature(fn).parameters.values()
    ]


def parameter_drift(async_fn: Callable[..., Any], sync_fn: Callable[..., Any]) -> list[str]:
    """How ``sync_fn``'s parameters differ from ``async_fn``'s plus ``on_lost`` (names,
    kinds, defaults, annotations as strings); empty if they do not."""
    on_lost = inspect.Parameter(
        "on_lost", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="LostCallback | None"
    )
    expected = [
        *_described(async_fn),
        (on_lost.name, on_lost.kind, on_lost.default, on_lost.annotation),
    ]
    found = _described(sync_fn)
    return [f"expected {e}, found {f}" for e, f in zip(expected, found, strict=False) if e != f] + [
        f"only on one side: {extra}" for extra in expected[len(found) :] + found[len(expected) :]
    ]


# ---------------------------------------------------------------- the factories


def generator() -> Any:
    """``.ci/gen_sync.py``, loaded by path."""
    spec = importlib.util.spec_from_file_location("gen_sync", ROOT / ".ci" / "gen_sync.py")
    assert spec is not None
    assert spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def test_the_generated_factories_are_up_to_date() -> None:
    committed = (ROOT / "aiozklock" / "sync" / "_factories.py").read_text()
    assert generator().render() == committed, "run python3 .ci/gen_sync.py"


def test_the_generated_mirrors_are_up_to_date() -> None:
    committed = (ROOT / "aiozklock" / "sync" / "_mirrors.py").read_text()
    assert generator().render_mirrors() == committed, "run python3 .ci/gen_sync.py"


def test_a_changed_async_docstring_makes_the_mirrors_stale(tmp_path: Path) -> None:
    """Negative control: in a copy of the package whose async ``revocable`` (a property of
    the queued recipes) is described otherwise, the regenerated mirrors differ from the
    committed ones, by that description on each sync class that has it."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "aiozklock", tmp_path / "aiozklock", ignore=ignore)
    queued = tmp_path / "aiozklock" / "_recipes" / "_core" / "_queued.py"
    described = "Whether a revoke request ends its holding (``revocable=True``)."
    assert described in queued.read_text()
    queued.write_text(queued.read_text().replace(described, "Described otherwise."))
    committed = (ROOT / "aiozklock" / "sync" / "_mirrors.py").read_text()
    regenerated = generator().render_mirrors(tmp_path)
    assert regenerated != committed
    assert regenerated.count("Described otherwise.") == committed.count(described) > 1
    assert regenerated.replace("Described otherwise.", described) == committed


def test_every_factory_is_on_both_faces() -> None:
    assert FACTORIES == ["election", "lease_lock", "lock", "multi_lock", "rw_lock", "semaphore"]
    synced = {n for n, v in vars(SyncFactories).items() if callable(v) and n[:1] != "_"}
    assert synced == set(FACTORIES)


@pytest.mark.parametrize("name", FACTORIES)
def test_factory_parameters_are_the_async_ones_plus_on_lost(name: str) -> None:
    async_fn, sync_fn = getattr(RecipeFactories, name), getattr(SyncFactories, name)
    assert parameter_drift(async_fn, sync_fn) == []
    async_overloads = typing.get_overloads(async_fn)
    sync_overloads = typing.get_overloads(sync_fn)
    assert len(sync_overloads) == len(async_overloads)
    for one, other in zip(async_overloads, sync_overloads, strict=True):
        assert parameter_drift(one, other) == []


def test_the_parameter_check_reports_a_drift() -> None:
    """Negative control: a sync factory that lacks a parameter, or types one otherwise."""

    def lacking(self: Any, path: str, *, on_lost: Any = None) -> None: ...

    def retyped(
        self: Any, path: bytes, *, identifier: str | None = None, on_lost: Any = None
    ) -> None: ...

    def election(self: Any, path: str, *, identifier: str | None = None) -> None: ...

    assert parameter_drift(election, lacking)
    assert parameter_drift(election, retyped)


# Values each factory parameter refuses (InvalidArgument), and valid ones for the others.
BAD: dict[str, object] = {
    "path": "relative/path",
    "paths": [],
    "identifier": 42,
    "fair": "no",
    "acl": "world:anyone",
    "compat": "zookeeper",
    "lock_delay": -1.0,
    "revocable": "yes",
    "ttl": -5.0,
    "holder_id": 7,
    "renew": "yes",
    "max_leases": 0,
}
GOOD: dict[str, object] = {"path": PATH, "paths": [PATH], "ttl": 5.0, "max_leases": 2}
CASES = [
    (name, param)
    for name in FACTORIES
    for param in inspect.signature(getattr(SyncFactories, name)).parameters
    if param not in {"self", "on_lost"}
]


def _call(face: Any, name: str, bad: str) -> str:
    """The message of the ``InvalidArgument`` that ``face.name(...)`` raises with ``bad``
    set to its refused value."""
    params = inspect.signature(getattr(SyncFactories, name)).parameters
    required = [p for p in params if p != "self" and params[p].default is inspect.Parameter.empty]
    args = [BAD[p] if p == bad else GOOD[p] for p in required]  # positional, all of them
    kwargs = {bad: BAD[bad]} if bad not in required else {}
    with pytest.raises(aiozklock.InvalidArgument) as raised:
        getattr(face, name)(*args, **kwargs)
    return str(raised.value)


@pytest.mark.parametrize(("name", "param"), CASES)
def test_a_bad_argument_is_refused_in_the_callers_thread_as_the_async_factory_does(
    name: str, param: str, hosts: str
) -> None:
    """Every parameter of every sync factory is checked before the session is opened
    (nothing sent), with the async factory's message (a parameter without a refused value
    in ``BAD`` fails here: a new one must be covered)."""
    assert param in BAD, f"{name}({param}=...): add a refused value to BAD"
    zk = aiozklock.sync.connect(hosts)
    try:
        message = _call(zk, name, param)
        assert zk.state is aiozklock.SessionState.CONNECTING  # nothing opened, nothing sent
    finally:
        zk.close()

    async def by_the_async_factory() -> str:
        async with aiozklock.connect(hosts) as azk:
            return _call(azk, name, param)

    assert anyio.run(by_the_async_factory) == message


# What the async lock() refuses with fair=False, beyond each argument's own check.
NONFAIR = [{"lock_delay": 5.0}, {"revocable": True}, {"compat": "kazoo"}]


@pytest.mark.parametrize("extra", NONFAIR, ids=lambda extra: next(iter(extra)))
def test_what_the_non_fair_lock_refuses_is_refused_before_the_session_opens(
    extra: dict[str, object], hosts: str
) -> None:
    def refused(face: Any) -> str:
        with pytest.raises(aiozklock.InvalidArgument) as raised:
            face.lock(PATH, fair=False, **extra)
        return str(raised.value)

    zk = aiozklock.sync.connect(hosts)
    try:
        message = refused(zk)
        assert zk.state is aiozklock.SessionState.CONNECTING  # nothing opened, nothing sent
    finally:
        zk.close()

    async def by_the_async_factory() -> str:
        async with aiozklock.connect(hosts) as azk:
            return refused(azk)

    assert anyio.run(by_the_async_factory) == message


# ---------------------------------------------------------------- the objects


@pytest.mark.parametrize(("async_cls", "sync_cls"), PAIRS, ids=lambda cls: cls.__name__)
def test_every_public_name_of_the_async_object_is_on_the_sync_one(
    async_cls: type, sync_cls: type
) -> None:
    assert missing_names(async_cls, sync_cls) == set()


def test_the_name_check_reports_a_missing_name() -> None:
    """Negative control: a sync lock class without ``fencing_token`` (nor ``acl``, an
    instance attribute of the async lock) is reported."""
    names = public_names(aiozklock.sync.SyncLock) - {"fencing_token", "acl"}
    lacking = type("Lacking", (), dict.fromkeys(names))
    assert missing_names(aiozklock.Lock, lacking) == {"fencing_token", "acl"}
    assert "acl" in public_names(aiozklock.Lock)  # found as an assignment to self


def test_only_names_that_cannot_block_are_excepted() -> None:
    assert set(CANNOT_BLOCK) <= public_names(aiozklock.Lock) - public_names(aiozklock.sync.SyncLock)
    assert all(re.fullmatch(r"__a\w+__", name) for name in CANNOT_BLOCK)


# ---------------------------------------------------------------- on a real server

NO_ADMIN = [ACL(Perms.READ | Perms.WRITE | Perms.CREATE | Perms.DELETE, "world", "anyone")]


def test_sync_election_takes_acl(szk: SyncClient) -> None:
    election = szk.election(PATH, identifier="one", acl=NO_ADMIN)
    assert election.acl == tuple(NO_ADMIN)
    assert election.identifier == "one"
    assert not election.revocable
    with election:
        (candidate,) = szk.get_children(PATH)
        assert szk.get_acl(f"{PATH}/{candidate}")[0] == NO_ADMIN
        assert election.leader() == "one"


def test_sync_semaphore_takes_compat(szk: SyncClient, szk2: SyncClient) -> None:
    sem = szk.semaphore(PATH, 1, compat="kazoo")
    assert sem.compat == "kazoo"
    with sem:
        (lease,) = szk.get_children(PATH)
        assert re.fullmatch(r"[0-9a-f]{32}", lease)  # kazoo's lease layout
        assert not szk2.semaphore(PATH, 1, compat="kazoo").try_acquire()
    assert szk.semaphore(PATH + "/ours", 1).compat is None


def test_sync_objects_tell_their_settings(szk: SyncClient) -> None:
    lock = szk.lock(PATH, identifier="me", revocable=True, lock_delay=5.0)
    assert (lock.identifier, lock.revocable, lock.lock_delay) == ("me", True, 5.0)
    rw = szk.rw_lock(PATH + "/rw", compat="kazoo", revocable=True)
    assert rw.write_lock.compat == "kazoo"
    assert rw.write_lock.revocable
    assert not rw.read_lock.revocable
    lease = szk.lease_lock(PATH + "/lease", 30.0, holder_id="h1", renew=False)
    assert (lease.ttl, lease.holder_id, lease.renew_automatically) == (30.0, "h1", False)
    assert lease.node == PATH + "/lease/lease"
    assert szk.multi_lock([PATH + "/b", PATH + "/a"]).paths == (PATH + "/b", PATH + "/a")
    assert szk.lock(PATH + "/nf", fair=False).node == PATH + "/nf/lock"
    settings = (szk.session_timeout, szk.connect_timeout, szk.loss_policy, szk.default_acl)
    assert settings == (4.0, 5.0, "suspended", tuple(aiozklock.OPEN_ACL_UNSAFE))
    assert szk.check_lock_order in (None, "warn", "raise")
    assert szk.max_request_bytes > 0
