"""The API reference documents every public name: each name of the public modules'
``__all__`` has its entry (an element with its dotted path as ``id``) on a page of the
built docs site. ``docs/hooks.py`` checks ``aiozklock.__all__`` against docs/api.md at
build time; this covers the other public modules too, and what mkdocstrings leaves out on
its own (a constant without a docstring is not rendered at all)."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PUBLIC_MODULES = (
    "aiozklock",
    "aiozklock.sync",
    "aiozklock.fencing",
    "aiozklock.testing",
    "aiozklock.fastapi",
    "aiozklock.otel",
)


def _public_names() -> set[str]:
    names: set[str] = set()
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        names.update(f"{module_name}.{name}" for name in module.__all__)
    return names


def _documented_ids(site: Path) -> set[str]:
    ids: set[str] = set()
    for page in site.rglob("*.html"):
        ids.update(re.findall(r'\bid="(aiozklock[\w.]*)"', page.read_text()))
    return ids


@pytest.mark.timeout(300)  # a site build: seconds, minutes on a loaded machine
def test_every_public_name_has_an_entry_in_the_api_reference(tmp_path: Path) -> None:
    # .ci/dev.sh builds the site (mkdocs build --strict) before pytest and names it in
    # AIOZKLOCK_DOCS_SITE: read that one rather than build the same tree a second time.
    built = os.environ.get("AIOZKLOCK_DOCS_SITE")
    if built and (Path(built) / "index.html").is_file():
        site = Path(built)
    else:
        site = tmp_path / "site"
        build = subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--site-dir", str(site)],
            cwd=REPO,
            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert build.returncode == 0, build.stderr
    public = _public_names()
    assert len(public) > 100, "too few public names: the module list is wrong"
    missing = sorted(public - _documented_ids(site))
    assert not missing, f"public names with no entry on the docs site: {missing}"
