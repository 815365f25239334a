"""Lock-order checking in this process, after the Linux kernel's lockdep (opt-in:
``connect(check_lock_order="warn")`` or ``"raise"``, or ``AIOZKLOCK_CHECK_LOCK_ORDER``).

Every lock path belongs to a class: the first of the client's ``lock_classes`` templates
that it matches (``/locks/orders/{id}``: a ``{...}`` component matches any one component),
else the path with each per-entity component (all digits, a UUID, 16 or more hex digits)
written ``{}``. When a task that holds locks of this client takes another one, the checker
learns "held class, then taken class", with the call site (the first frame outside
aiozklock). A new order that closes a cycle (the two classes were taken in the other order
before, by any task of this client, or through other classes) is an inversion: tasks or
processes running both orders at once wait for each other forever. Two locks of one class
held by one task cannot be ordered by class either. Each is reported before any request of
the acquisition: a ``LockOrderWarning`` once per pair (the acquisition goes on), or
``LockOrderViolation`` (it does not, and nothing is learned from it).

A multi-lock's members are one acquisition (taken in one sorted, atomic step): no order
among them. A read lock and the write lock of one path are one class. ``try_acquire()``
cannot wait, so it teaches no order (the lock it took does, for what is taken under it).
Only what the client's registry calls (``Recipes.check``, ``_registry.py``) runs here, and
only when the check is on: off, it costs nothing.
"""

from __future__ import annotations

import contextlib
import re
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Literal

from aiozklock._exceptions import (
    InvalidArgument,
    LockOrderViolation,
    LockOrderWarning,
    short_repr,
    shorten,
)
from aiozklock._wire._validation import validate_recipe_path

if TYPE_CHECKING:
    from aiozklock._recipes._core._primitive import Primitive

Mode = Literal["warn", "raise"]

#: The environment variable read by ``connect()`` when ``check_lock_order`` is None.
ENV_VAR = "AIOZKLOCK_CHECK_LOCK_ORDER"
_ENV_VALUES: dict[str, Mode | None] = {
    **dict.fromkeys(("", "0", "off", "false", "no"), None),
    **dict.fromkeys(("1", "on", "true", "yes", "warn"), "warn"),
    "raise": "raise",
}

# A path component naming one entity among many: an id, a UUID, a long hex digest.
_ENTITY = re.compile(
    r"\d+|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|[0-9a-fA-F]{16,}"
)
_PLACEHOLDER = re.compile(r"\{\w*\}")
_CLASS_CACHE = 4096  # paths whose class is remembered (per-entity paths are countless)
# Orders learned at most: per-entity paths that no class names would grow them forever.
MAX_ORDERS = 10_000

# Frames skipped to find the user's call site: ours, and the context-manager plumbing.
_OURS = (str(Path(__file__).resolve().parents[2]) + "/", contextlib.__file__)


def order_mode(value: object, environ: Mapping[str, str]) -> Mode | None:
    """``connect(check_lock_order=value)`` validated: None reads ``environ[ENV_VAR]``;
    False is off, True is ``"warn"``. Raises ``InvalidArgument`` for anything else."""
    if value is None:
        raw = environ.get(ENV_VAR, "")
        if raw.strip().lower() not in _ENV_VALUES:
            raise InvalidArgument(
                f"{ENV_VAR}={short_repr(raw)}: use 'warn', 'raise' or 'off' (or leave it unset)"
            )
        return _ENV_VALUES[raw.strip().lower()]
    if value is False:
        return None
    if value is True or value == "warn":
        return "warn"
    if value == "raise":
        return "raise"
    raise InvalidArgument(
        "check_lock_order must be None (the environment decides), False, True, 'warn' or "
        f"'raise', not {short_repr(value)}"
    )


def lock_templates(templates: object) -> tuple[tuple[re.Pattern[str], str], ...]:
    """``connect(lock_classes=templates)`` validated: each a lock path whose ``{name}``
    components match any one component; (its pattern, itself) each. Raises
    ``InvalidArgument`` for a str (one template is a list of one), a bad path, or braces
    that are not a whole component."""
    if isinstance(templates, str) or not isinstance(templates, Sequence):
        raise InvalidArgument(
            f"lock_classes must be a list of path templates, not {short_repr(templates)}"
        )
    compiled = []
    for template in templates:
        path = validate_recipe_path(template, what="lock class template")
        parts = path[1:].split("/")
        if any(("{" in p or "}" in p) and not _PLACEHOLDER.fullmatch(p) for p in parts):
            raise InvalidArgument(
                "a lock class template's placeholder is a whole component, e.g. "
                f"'/locks/orders/{{id}}': {short_repr(path)}"
            )
        pattern = "".join(
            "/[^/]+" if _PLACEHOLDER.fullmatch(p) else "/" + re.escape(p) for p in parts
        )
        compiled.append((re.compile(pattern), path))
    return tuple(compiled)


@dataclass(frozen=True, slots=True)
class _Order:
    """One learned order: ``taken`` was taken while ``held`` was held, at ``site``."""

    held: str
    taken: str
    site: str
    task: str | None

    def line(self) -> str:
        return f"{_short(self.held)}, then {_short(self.taken)}, at {self.site}{_task(self.task)}"


def _short(path: str) -> str:
    return shorten(path, 120)


def _task(name: str | None) -> str:
    return "" if name is None else f" (task {name!r})"


def _user_frame() -> FrameType | None:
    """The innermost frame outside aiozklock (and contextlib): the user's call."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_OURS):
        frame = frame.f_back
    return frame


class LockOrder:
    """The order checker of one client (see the module docstring): ``mode`` says what a
    violation does, ``templates`` (from ``lock_templates``) name explicit classes."""

    def __init__(self, mode: Mode, templates: tuple[tuple[re.Pattern[str], str], ...]) -> None:
        self.mode = mode
        self._templates = templates
        self._after: dict[str, dict[str, _Order]] = {}  # class -> classes taken under it
        self._classes: dict[str, str] = {}  # path -> class, a bounded cache
        self._told: set[str] = set()  # classes already reported as nested in themselves
        self._learned = 0  # orders in _after
        self._full = False  # MAX_ORDERS reached (and said once)

    def class_of(self, path: str) -> str:
        """The class of a lock path (see the module docstring)."""
        found = self._classes.get(path)
        if found is None:
            found = next((t for p, t in self._templates if p.fullmatch(path)), None)
            if found is None:
                parts = path[1:].split("/")
                found = "".join("/{}" if _ENTITY.fullmatch(p) else "/" + p for p in parts)
            if len(self._classes) >= _CLASS_CACHE:
                self._classes.clear()
            self._classes[path] = found
        return found

    def check(self, taken: Primitive, held: Sequence[Primitive], task: str | None) -> None:
        """The task ``task`` holds ``held`` (in the order it took them) and takes ``taken``:
        learn the new orders; warn about, or raise for, those that close a cycle and the
        nested locks of one class. Raises ``LockOrderViolation`` in ``"raise"`` mode."""
        new = self._new_orders(taken, held)
        if not new:
            return
        frame = _user_frame()
        site = "<unknown>" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"
        problems = [p for p in (self._problem(o, site, task) for o in new) if p is not None]
        if problems and self.mode == "raise":
            raise LockOrderViolation("\n".join(problems))
        for problem in problems:  # first: a warning made an error learns nothing, as "raise"
            _warn(problem, frame)
        self._learn(new, site, task)

    def _learn(self, new: list[tuple[str, str]], site: str, task: str | None) -> None:
        """Remember each (held path, taken path), or that its class was told nested."""
        for held, taken in new:
            held_class, taken_class = self.class_of(held), self.class_of(taken)
            if held_class == taken_class:
                self._told.add(held_class)
            elif self._learned < MAX_ORDERS:
                order = _Order(held, taken, site, task)
                self._after.setdefault(held_class, {})[taken_class] = order
                self._learned += 1
            elif not self._full:
                self._full = True
                _warn(
                    f"the lock-order check learned {MAX_ORDERS} orders and learns no more: are "
                    f"per-entity paths (e.g. {_short(taken)!r}) classes of their own? Name "
                    "their classes with connect(lock_classes=['/locks/orders/{id}', ...])",
                    _user_frame(),
                )

    def _new_orders(self, taken: Primitive, held: Sequence[Primitive]) -> list[tuple[str, str]]:
        """(held path, taken path) of each order not learned (or told) yet, one per pair
        of classes."""
        new: dict[tuple[str, str], tuple[str, str]] = {}
        for other in held:
            for held_path in other._paths:
                held_class = self.class_of(held_path)
                for path in taken._paths:
                    cls = self.class_of(path)
                    if path == held_path or (held_class, cls) in new:
                        continue  # one path: a read and a write side, or a self-deadlock
                    if cls == held_class:
                        if cls not in self._told:
                            new[cls, cls] = (held_path, path)
                    elif cls not in self._after.get(held_class, ()):
                        new[held_class, cls] = (held_path, path)
        return list(new.values())

    def _problem(self, order: tuple[str, str], site: str, task: str | None) -> str | None:
        """What is wrong with taking ``order[1]`` while holding ``order[0]``, if anything."""
        held, taken = order
        held_class, taken_class = self.class_of(held), self.class_of(taken)
        now = _Order(held, taken, site, task)
        if held_class == taken_class:
            return (
                f"two locks of one class ({_short(held_class)}) held by one task: "
                f"{now.line()}. Their order cannot be learned by class, and another task "
                "taking them the other way round would deadlock with this one. Take them "
                f"together: zk.multi_lock([{_short(held)!r}, {_short(taken)!r}]) takes them "
                "in one sorted, atomic step (or give them distinct classes with "
                "connect(lock_classes=[...]))"
            )
        before = self._route(taken_class, held_class)
        if before is None:
            return None
        earlier = "\n".join(f"  before: {order.line()}" for order in before)
        return (
            f"lock order inversion: {_short(held_class)} and {_short(taken_class)} are "
            f"taken in both orders\n  now:    {now.line()}\n{earlier}\n"
            "Two tasks (or processes) running these at the same time wait for each other "
            "forever. Take them in one order everywhere, or together with zk.multi_lock()"
        )

    def _route(self, start: str, goal: str) -> list[_Order] | None:
        """The shortest chain of learned orders from class ``start`` to class ``goal``."""
        came: dict[str, tuple[str, _Order] | None] = {start: None}  # class -> how reached
        frontier = [start]
        while frontier and goal not in came:
            following: list[str] = []
            for cls in frontier:
                for after, order in self._after.get(cls, {}).items():
                    if after not in came:
                        came[after] = (cls, order)
                        following.append(after)
            frontier = following
        if goal not in came:
            return None
        chain: list[_Order] = []
        step = came[goal]
        while step is not None:
            chain.append(step[1])
            step = came[step[0]]
        return chain[::-1]


def _warn(message: str, frame: FrameType | None) -> None:
    """Warn at the user's line (``frame``), as ``warnings.warn`` would there."""
    if frame is None:
        warnings.warn(message, LockOrderWarning, stacklevel=2)
        return
    globals_ = frame.f_globals
    warnings.warn_explicit(
        message,
        LockOrderWarning,
        frame.f_code.co_filename,
        frame.f_lineno,
        module=globals_.get("__name__"),
        registry=globals_.setdefault("__warningregistry__", {}),
        module_globals=globals_,
    )


__all__ = ("ENV_VAR", "LockOrder", "Mode", "lock_templates", "order_mode")
