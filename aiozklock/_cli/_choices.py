"""What ``demo`` and ``nemesis`` offer on their command lines, named here so that parsing
arguments (and ``--help``) never imports the test kit, which runs them."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from aiozklock._recipes._traits import TRAITS, RecipeTraits

#: The recipes a demo or a nemesis run can drive: one entry each in ``_recipes/_traits.py``.
RECIPES = tuple(TRAITS)


def recipe_help(lead: str, notes: Callable[[RecipeTraits], Iterable[str]]) -> str:
    """``--recipe``'s help, written from the description: ``lead``, then each recipe's name
    and summary, with the ``notes`` of the command on how it treats that recipe (which a
    command derives from the entry's flags), then the default."""
    listed = ", ".join(
        f"{traits.name} ({'; '.join([traits.summary, *notes(traits)])})"
        for traits in TRAITS.values()
    )
    return f"{lead}{listed} (%(default)s)"


FAULT_KINDS = (
    "drop",
    "blackhole-short",
    "blackhole-long",
    "one-way-cut",
    "lost-create-reply",
    "lost-delete-reply",
    "expire",
    "pause-short",
    "pause-long",
    "pause-before-write",
    "server-pause",
    "server-kill",
    "leader-kill",
    "server-restart",
    "isolate-follower",
    "isolate-leader",
    "split",
    "flap",
)
"""Every fault the nemesis knows (``nemesis --kinds``); its schedule weighs each
(``testing._nemesis_plan.FAULT_WEIGHTS``). The last four cut links between ensemble members:
they need a partitionable ensemble (``--servers``), and run only when asked for."""

#: The faults that cut the ensemble's own links (a partitionable cluster's per-pair proxies).
PARTITION_KINDS = ("isolate-follower", "isolate-leader", "split", "flap")
#: ``--kinds ensemble``: every fault of the ensemble's members: the cuts, and kill -9 +
#: restart of a member (or of the leader) with its data.
KIND_GROUPS = {
    "ensemble": (*PARTITION_KINDS, "server-kill", "leader-kill", "server-restart"),
    "partition": PARTITION_KINDS,
}

#: Where ``demo`` and ``nemesis`` keep their fenced counter (``--store``): the in-process
#: ``FencedStore``, or a real server that decides each write (``testing._nemesis_store``).
STORES = ("memory", "postgres", "redis")
STORE_HELP = (
    "where the fenced counter lives: memory (an in-process FencedStore), postgres "
    "(PostgresFence in asyncpg transactions) or redis (RedisFence): then the server refuses "
    "stale writes; asyncio only (%(default)s)"
)
STORE_URL_HELP = (
    "a running server for --store (postgresql://... or redis://...); default: a throwaway "
    "one from the local install, stopped at the end"
)

__all__ = (
    "FAULT_KINDS",
    "KIND_GROUPS",
    "PARTITION_KINDS",
    "RECIPES",
    "STORES",
    "STORE_HELP",
    "STORE_URL_HELP",
    "recipe_help",
)
