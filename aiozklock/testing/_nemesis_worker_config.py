"""A nemesis worker's configuration, its records (a critical section's: ``Section``), and the
sink they go to.

See :mod:`._nemesis_worker` for the loop that emits the records, and
:mod:`._nemesis_worker_child` for a worker in a child process.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from aiozklock._recipes._core._handle import Handle

__all__ = ["Held", "Record", "Section", "WorkerConfig", "WorkerSink"]

#: What a worker acquires (a semaphore holds its node through the current task's lease).
Held = Handle

#: One record of a worker (a JSON object: ``type`` and its fields).
Record = dict[str, Any]


@dataclass(frozen=True)
class WorkerConfig:
    """What one client does; JSON-serialisable (it is a child's command line)."""

    name: str
    hosts: str  # the client's connection string: its own fault proxies
    path: str  # the lock path
    seed: int
    session_timeout: float
    loss_policy: str = "suspended"
    acquire_timeout: tuple[float, float] = (1.0, 4.0)  # uniform range, s
    attempt_grace: float = 6.0  # an attempt may take acquire_timeout + this
    max_writes: int = 3  # 1..max_writes fenced writes per critical section
    work: tuple[float, float] = (0.002, 0.03)  # s of "work" before each write
    #: some sections hold much longer (spread over their writes): long enough for a fault to
    #: be noticed while the holder still acts
    long_hold: tuple[float, float] = (0.0, 0.0)
    long_hold_probability: float = 0.0
    think: tuple[float, float] = (0.0, 0.03)  # s between release and the next attempt
    backend: str = "asyncio"
    control: str = ""  # host:port of the nemesis's control listener (children only)
    recipe: str = "lock"  # one of RECIPES
    paths: tuple[str, ...] = ()  # multilock: the shared paths (each acquisition takes 2-3)
    lease_ttl: float = 0.0  # lease: the TTL, s
    max_leases: int = 0  # semaphore: its max_leases
    #: the negative control: the section ignores the loss of its lock (shielded from the
    #: loss policy's cancellation, no pre-write check) and keeps writing with its token
    #: for ``linger`` s after it saw the loss
    unprotected: bool = False
    linger: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerConfig:
        data = json.loads(text)
        for key in ("acquire_timeout", "work", "think", "long_hold", "paths"):
            data[key] = tuple(data[key])
        return cls(**data)


class WorkerSink(Protocol):
    """Where a worker's records go, and its access to the fenced store."""

    def emit(self, record: Record) -> None: ...

    async def read(self, resource: str, token: int) -> tuple[bool, int]: ...

    async def write(self, resource: str, token: int, value: int) -> bool: ...

    async def before_write(self) -> None:
        """Called after a pre-write check passed, right before the write is sent."""


@dataclass
class Section:
    """What a critical section reports when it ends (its ``section`` record)."""

    token: int
    shared: bool  # a read lock: it shares its grant, and writes nothing
    shares_resource: bool  # a semaphore: it records its acts, and writes nothing
    ttl_lease: bool  # a lease: it records its expiry
    node: str | None
    session_id: int
    expires_at: float | None
    requested: float
    resources: tuple[str, ...]
    enter: float = 0.0
    outcome: str = "error"
    acts: list[float] = field(default_factory=list)

    def record(self) -> Record:
        return {
            "type": "section",
            "token": self.token,
            "node": self.node,
            "session_id": self.session_id,
            "requested": self.requested,
            "enter": self.enter,
            "exit": time.monotonic(),
            "outcome": self.outcome,
            "resources": list(self.resources),
            "expires_at": self.expires_at,
            "shared": self.shared,
            "acts": self.acts,
        }
