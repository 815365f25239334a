"""Every recipe's description (``_recipes/_traits.py``): what the demo, the nemesis and the
command line read instead of branching on a recipe's name."""

from __future__ import annotations

from typing import Any

import pytest

import aiozklock
from aiozklock._cli._choices import RECIPES
from aiozklock._recipes._traits import RECIPE_KINDS, TRAITS, Setup, traits_of
from aiozklock.otel import Telemetry
from tests.conftest import ClientFactory

pytestmark = [pytest.mark.anyio]


def test_each_telemetry_kind_is_one_recipe_s_and_the_command_line_offers_each() -> None:
    kinds = [kind for traits in TRAITS.values() for kind in traits.kinds]
    assert sorted(kinds) == sorted(RECIPE_KINDS)
    assert len(set(kinds)) == len(kinds)  # no kind is two recipes'
    assert tuple(TRAITS) == RECIPES
    assert all(name == traits.name for name, traits in TRAITS.items())
    with pytest.raises(ValueError, match="unknown recipe 'barrier'"):
        traits_of("barrier")


class _Kinds(Telemetry):
    """Telemetry that also keeps the kind it is told for each recipe object made."""

    def __init__(self) -> None:
        super().__init__()
        self.told: list[str] = []

    def recipe(self, kind: str, paths: tuple[str, ...]) -> Any:
        self.told.append(kind)
        return super().recipe(kind, paths)


@pytest.mark.parametrize("name", list(TRAITS))
async def test_an_entry_makes_the_objects_it_describes(
    open_client: ClientFactory, name: str
) -> None:
    traits = TRAITS[name]
    observer = _Kinds()
    zk_client: aiozklock.ZooKeeperClient = await open_client(telemetry=observer)
    paths = ("/traits/a", "/traits/b") if traits.multi_path else ("/traits/a",)
    setup = Setup(paths, "me", ttl=5.0, holder_id="me", max_leases=2)
    sides = traits.make(zk_client, setup)
    assert tuple(observer.told) == traits.kinds  # told by the client, in Sides order
    assert traits.make(zk_client, setup) == sides  # the client's objects: one per arguments
    assert tuple(observer.told) == traits.kinds  # ... made and told once
    assert traits.reads == (sides.read is not None)
    assert traits.multi_path == isinstance(sides.main, aiozklock.MultiLock)
    assert traits.ttl_lease == isinstance(sides.main, aiozklock.LeaseLock)
    assert traits.shares_resource == isinstance(sides.main, aiozklock.Semaphore)


@pytest.mark.parametrize("command", ["demo", "nemesis"])
def test_the_recipe_help_is_written_from_the_description(command: str) -> None:
    """``--recipe``'s help names every recipe with its summary, in the description's order,
    and says how the command treats each flag that an entry sets."""
    from aiozklock.__main__ import build_parser

    commands = next(a.choices for a in build_parser()._actions if isinstance(a.choices, dict))
    parser = commands[command]
    [action] = [a for a in parser._actions if "--recipe" in a.option_strings]
    text = action.help or ""
    starts = [text.index(f"{t.name} ({t.summary}") for t in TRAITS.values()]
    assert starts == sorted(starts)
    for traits, start, end in zip(TRAITS.values(), starts, [*starts[1:], None], strict=True):
        flagged = traits.multi_path or traits.shares_resource or traits.ttl_lease or traits.reads
        after = "; " if flagged else ")"  # a note for each flag set, none otherwise
        assert text[start:end].startswith(f"{traits.name} ({traits.summary}{after}")
    assert text.endswith("(%(default)s)")


def test_the_docs_list_every_recipe_the_command_line_offers() -> None:
    """Every ``--recipe a|b|...`` list in the README and on the docs site names only known
    recipes, and each the whole description (the default ``lock`` may go unsaid)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    lists = [
        found.split("|")
        for page in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
        for found in re.findall(r"--recipe ([a-z]+(?:\|[a-z]+)+)", page.read_text())
    ]
    assert lists, "no --recipe list found: the pattern is wrong"
    for names in lists:
        assert [n for n in TRAITS if n in names] == names  # known, in --help order
        assert set(TRAITS) - set(names) <= {"lock"}


@pytest.mark.parametrize("command", ["contenders", "holders"])
def test_the_read_only_commands_name_the_kinds_the_description_tells_apart(command: str) -> None:
    """``contenders`` and ``holders`` report as ``kind`` the entry whose reader finds its
    nodes: their help names each such entry with its summary (``contenders``: its JSON
    shape too), and a TTL lease's holder is the only one shown without a session."""
    from aiozklock.__main__ import build_parser

    commands = next(a.choices for a in build_parser()._actions if isinstance(a.choices, dict))
    epilog = " ".join((commands[command].epilog or "").split())
    read = [traits for traits in TRAITS.values() if traits.inspect is not None]
    assert [traits.name for traits in read] == ["lock", "nonfair", "lease"]
    for traits in read:
        assert f'"{traits.name}" ({traits.summary})' in epilog
    if command == "contenders":
        assert '"kind": "lock"|"nonfair"|"lease"|null' in epilog
    assert [traits.name for traits in read if traits.ttl_lease] == ["lease"]
