"""The nemesis's fault vocabulary: every kind of fault it knows, the ensemble's cuts among
them, and the groups ``nemesis --kinds`` takes by name.

It is the test kit's (``testing/_nemesis_plan.py`` weighs and schedules these kinds, and
``testing/_nemesis_faults.py`` runs them), kept outside the ``aiozklock.testing`` package so
that the command line can offer them (``nemesis --kinds`` and its ``--help``) without
importing the test kit, which parsing a command line never does. It imports nothing.
"""

from __future__ import annotations

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

__all__ = ("FAULT_KINDS", "KIND_GROUPS", "PARTITION_KINDS")
