"""What ``demo`` and ``nemesis`` offer on their command lines, named here so that parsing
arguments (and ``--help``) never imports the test kit, which runs them. The nemesis's fault
kinds are the test kit's vocabulary (``aiozklock/_nemesis_kinds.py``)."""

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
    "RECIPES",
    "STORES",
    "STORE_HELP",
    "STORE_URL_HELP",
    "recipe_help",
)
