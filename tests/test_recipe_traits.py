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
