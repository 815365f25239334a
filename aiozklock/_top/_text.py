"""Text for a terminal cell grid (pure): what a string shows (control characters replaced),
how many columns it takes (East Asian wide characters take two, combining marks none), and
cutting it to a width from either end."""

from __future__ import annotations

import unicodedata

ELLIPSIS = "…"
_REPLACEMENT = "?"


def clean(text: str) -> str:
    """``text`` with every character that is not printable (escape, newline, tab, other
    control and format characters) replaced: names and node data come from other clients,
    and must not move the cursor or change colours."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _REPLACEMENT for ch in text)


def _cells(ch: str) -> int:
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in "WF" else 1


def cells(text: str) -> int:
    """The columns ``text`` takes on a terminal."""
    if text.isascii():
        return len(text)
    return sum(_cells(ch) for ch in text)


def fit(text: str, width: int | None) -> str:
    """``text`` cleaned and, if wider than ``width`` columns, cut at the end with ``…``
    (no cut when ``width`` is None)."""
    text = clean(text)
    if width is None or cells(text) <= width:
        return text
    if width <= 0:
        return ""
    kept, used = [], 0
    for ch in text:
        size = _cells(ch)
        if used + size > width - 1:
            break
        kept.append(ch)
        used += size
    return "".join(kept) + ELLIPSIS


def fit_left(text: str, width: int | None) -> str:
    """``text`` cleaned and, if wider than ``width`` columns, cut at the start with ``…``:
    for paths, whose last part tells them apart."""
    text = clean(text)
    if width is None or cells(text) <= width:
        return text
    if width <= 0:
        return ""
    kept: list[str] = []
    used = 0
    for ch in reversed(text):
        size = _cells(ch)
        if used + size > width - 1:
            break
        kept.append(ch)
        used += size
    return ELLIPSIS + "".join(reversed(kept))


def pad(text: str, width: int, *, right: bool = False) -> str:
    """``text`` (already fitted) padded with spaces to ``width`` columns."""
    gap = " " * max(0, width - cells(text))
    return gap + text if right else text + gap


def age(seconds: float) -> str:
    """A compact age: ``7s``, ``3m05s``, ``2h03m``, ``4d06h`` (never negative)."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


__all__ = ("ELLIPSIS", "age", "cells", "clean", "fit", "fit_left", "pad")
