"""Test-kit accessors for what the public API keeps private (wire-level assertions)."""

from __future__ import annotations

from aiozklock._client import session_of

__all__ = ("session_of",)
