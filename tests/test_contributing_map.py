"""CONTRIBUTING.md's map (its "Architecture" section) names every module of the package, and
only modules that exist: one line per module, ``- `aiozklock.dotted.name`: its one job``.

Modules move and merge; the failure says exactly which lines to add and which to remove."""

from __future__ import annotations

import collections
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
# A line of the map: a list item that starts with a module's dotted name, then its job.
ENTRY = re.compile(r"^- `(?P<name>aiozklock(?:\.\w+)*)`:(?P<job>.*)$", re.MULTILINE)


def package_modules() -> set[str]:
    """Every module of the package by dotted name, a package by its own (its ``__init__``):
    as ``.ci/import_graph.py`` names them, so that a module it lists in a circle is found
    in the map under the same name."""
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / ".ci" / "import_graph.py")
    assert spec is not None
    assert spec.loader is not None
    graph = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(graph)
    return set(graph.modules())


def architecture_section() -> str:
    """The text of CONTRIBUTING.md's "## Architecture" section, up to the next section."""
    text = CONTRIBUTING.read_text(encoding="utf-8")
    marker = "\n## Architecture\n"
    assert marker in text, 'CONTRIBUTING.md has no "## Architecture" section'
    return text.split(marker, 1)[1].split("\n## ", 1)[0]


def test_the_map_names_every_module_of_the_package_and_no_other() -> None:
    entries = ENTRY.findall(architecture_section())
    mapped = [name for name, _ in entries]
    modules = package_modules()
    missing = sorted(modules - set(mapped))
    unknown = sorted(set(mapped) - modules)
    twice = sorted(name for name, count in collections.Counter(mapped).items() if count > 1)
    jobless = sorted(name for name, job in entries if not job.strip())
    problems = []
    if missing:
        problems.append(
            "Add a line for each module missing from the map, under its layer:\n"
            + "\n".join(f"- `{name}`: <its one job>" for name in missing)
        )
    if unknown:
        problems.append(
            "Remove (or rename) the lines of modules that do not exist:\n"
            + "\n".join(f"- `{name}`" for name in unknown)
        )
    if twice:
        problems.append("Keep one line for each of:\n" + "\n".join(f"- `{n}`" for n in twice))
    if jobless:
        problems.append("Say the job of:\n" + "\n".join(f"- `{n}`" for n in jobless))
    if problems:
        pytest.fail("CONTRIBUTING.md's map is out of date.\n\n" + "\n\n".join(problems), False)
