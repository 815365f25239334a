"""Every recipe's description (``_recipes/_traits.py``): what the demo, the nemesis and the
command line read instead of branching on a recipe's name."""

from __future__ import annotations

import pytest

import aiozklock
from aiozklock._cli._choices import RECIPES
from aiozklock._recipes._core._observe import RECIPE_KINDS
from aiozklock._recipes._traits import TRAITS, Setup, traits_of

pytestmark = [pytest.mark.anyio]


def test_each_telemetry_kind_is_one_recipe_s_and_the_command_line_offers_each() -> None:
    kinds = [kind for traits in TRAITS.values() for kind in traits.kinds]
    assert sorted(kinds) == sorted(RECIPE_KINDS)
    assert tuple(TRAITS) == RECIPES
    assert all(name == traits.name for name, traits in TRAITS.items())
    with pytest.raises(ValueError, match="unknown recipe 'barrier'"):
        traits_of("barrier")


@pytest.mark.parametrize("name", list(TRAITS))
async def test_an_entry_makes_the_objects_it_describes(
    zk_client: aiozklock.ZooKeeperClient, name: str
) -> None:
    traits = TRAITS[name]
    paths = ("/traits/a", "/traits/b") if traits.multi_path else ("/traits/a",)
    setup = Setup(paths, "me", ttl=5.0, holder_id="me", max_leases=2)
    sides = traits.make(zk_client, setup)
    made = [sides.main] if sides.read is None else [sides.main, sides.read]
    assert tuple(type(obj)._kind for obj in made) == traits.kinds  # type: ignore[attr-defined]
    assert traits.make(zk_client, setup) == sides  # the client's objects: one per arguments
    assert traits.reads == (sides.read is not None)
    assert traits.multi_path == isinstance(sides.main, aiozklock.MultiLock)
    assert traits.ttl_lease == isinstance(sides.main, aiozklock.LeaseLock)
    assert traits.shares_resource == isinstance(sides.main, aiozklock.Semaphore)
