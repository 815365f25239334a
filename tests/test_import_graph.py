"""The import-graph check: no circle among the package's modules, type-only and
function-local imports included (``.ci/import_graph.py``; ``.ci/dev.sh test`` also runs it
on its own, to list the circles before pytest starts). Two modules that import each other are
one concern split wrongly: the fix is a module both import, or one module."""

from __future__ import annotations

import importlib.util
import pathlib
from types import ModuleType

REPO = pathlib.Path(__file__).resolve().parent.parent


def _checker() -> ModuleType:
    """``.ci/import_graph.py``, loaded by path (``.ci`` is not a package)."""
    spec = importlib.util.spec_from_file_location("import_graph", REPO / ".ci" / "import_graph.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_import_circle_among_the_package_s_modules() -> None:
    checker = _checker()
    edges = checker.graph()
    assert "aiozklock._client" in edges, "the checker found none of the package's modules"
    found = checker.circles(edges)
    listed = "\n".join(f"circle of {len(c)}: {', '.join(c)}" for c in found)
    assert not found, f"import circles (python3 .ci/import_graph.py lists them):\n{listed}"


def test_the_checker_finds_a_circle_of_type_only_and_function_local_imports(
    tmp_path: pathlib.Path,
) -> None:
    """The negative control: a package whose circle runs through a plain import, a
    type-only one and a relative one inside a function is found, and nothing else is."""
    files = {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg import b\n",
        "pkg/b.py": (
            "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from pkg.sub.c import C\n"
        ),
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "class C:\n    def f(self):\n        from .. import a\n",
        "pkg/d.py": "import pkg.a\nfrom pkg.sub import c\n",  # imports the circle, not in it
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    checker = _checker()
    edges = checker.graph(tmp_path, "pkg")
    assert edges["pkg.d"] == {"pkg.a", "pkg.sub.c"}
    assert checker.circles(edges) == [["pkg.a", "pkg.b", "pkg.sub.c"]]
