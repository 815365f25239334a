"""Griffe extension for the docs build: Sphinx roles in docstrings become code spans.

A few docstrings (mostly the test kit's) use ``:meth:`start```, ``:class:`~a.B``` and
friends, which ``help()`` reads fine but Markdown would show verbatim. The site shows the
name as code instead (``start``, ``B``), and an RST ``Usage::`` as ``Usage:``. The source
stays unchanged.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|meth|class|mod|attr|exc|obj|data):`([^`]+)`")


def _name(match: re.Match[str]) -> str:
    target = match.group(1)
    label = re.fullmatch(r"(.+?)\s*<.+>", target)  # :meth:`label <target>`
    if label:
        return f"``{label.group(1)}``"
    if target.startswith("~"):  # Sphinx: show the last component only
        target = target.rsplit(".", 1)[-1]
    return f"``{target.lstrip('.')}``"


class SphinxRolesAsCode(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            text = ROLE.sub(_name, obj.docstring.value)
            obj.docstring.value = re.sub(r"(\w)::$", r"\1:", text, flags=re.MULTILINE)
