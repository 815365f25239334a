"""The package's import graph: every module-to-module import, type-only and function-local ones
included, and the circles in it (strongly connected components of more than one module).

    python .ci/import_graph.py          # exit 1 and list the circles if there are any
    python .ci/import_graph.py --edges  # print every edge too

``tests/test_import_graph.py`` runs it under pytest (0 circles, and a circle found in a
package made for the test): ``graph`` and ``modules`` take the package and the directory
that holds it.

An import of a name from a package (``from aiozklock import X``) runs that package's
``__init__``, so it is an edge to the package unless ``X`` is a submodule.
"""

from __future__ import annotations

import ast
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = "aiozklock"


def modules(root: pathlib.Path = ROOT, package: str = PACKAGE) -> dict[str, pathlib.Path]:
    """Every module of ``package`` (a directory under ``root``) by dotted name."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        found[name] = path
    return found


def imports(name: str, path: pathlib.Path, known: dict[str, pathlib.Path]) -> set[str]:
    """The package's modules that ``name`` imports, anywhere in its text."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    got: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                kept = parts[: len(parts) - node.level + 1]
                base = ".".join(kept + ([base] if base else []))
            for alias in node.names:
                for candidate in (f"{base}.{alias.name}", base):
                    if candidate in known:
                        got.add(candidate)
                        break
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    got.add(alias.name)
    got.discard(name)
    return got


def graph(root: pathlib.Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports."""
    known = modules(root, package)
    return {name: imports(name, path, known) for name, path in known.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def main(argv: list[str]) -> int:
    edges = graph()
    if "--edges" in argv:
        for name in sorted(edges):
            for target in sorted(edges[name]):
                print(f"{name} -> {target}")
    found = circles(edges)
    for component in found:
        print(f"circle of {len(component)}: " + ", ".join(component))
    print(f"{len(edges)} modules, {sum(map(len, edges.values()))} imports, {len(found)} circles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
