"""What ``demo`` and ``nemesis`` offer on their command lines, named here so that parsing
arguments (and ``--help``) never imports the test kit, which runs them."""

from __future__ import annotations

from aiozklock._recipes._traits import TRAITS

#: The recipes a demo or a nemesis run can drive: one entry each in ``_recipes/_traits.py``.
RECIPES = tuple(TRAITS)

#: Every fault the nemesis knows (its schedule weighs each:
#: ``testing._nemesis_plan.FAULT_WEIGHTS``).
FAULT_KINDS = (
    "drop",
    "blackhole-short",
    "blackhole-long",
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
)

__all__ = ("FAULT_KINDS", "RECIPES")
