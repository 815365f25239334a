"""MkDocs hooks: the API reference must document every public name, and the benchmark
charts are published from where the benchmark runner writes them.

``docs/api.md`` lists the names one ``::: aiozklock.NAME`` at a time (grouped for readers);
a name added to ``aiozklock.__all__`` but not to the page fails the build instead of
silently missing from the site. ``__all__`` is read from the source next to ``mkdocs.yml``
(not imported: the installed package may be another checkout).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page


def _public_names(config: MkDocsConfig) -> set[str]:
    init = Path(config.config_file_path).parent / "aiozklock" / "__init__.py"
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            return set(ast.literal_eval(node.value))
    raise PluginError(f"no __all__ in {init}")


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, **kwargs: Any) -> str:
    if page.file.src_uri == "api.md":
        listed = set(re.findall(r"^::: aiozklock\.(\w+)\s*$", markdown, re.MULTILINE))
        missing = sorted(_public_names(config) - listed)
        if missing:
            raise PluginError(f"docs/api.md does not document: {', '.join(missing)}")
    return markdown


def on_files(files: Files, config: MkDocsConfig, **kwargs: Any) -> Files:
    # The runner writes benchmarks/results/latest.png; the site serves that file (no copy in
    # docs/ to fall out of date) as benchmarks/latest.png.
    chart = Path(config.config_file_path).parent / "benchmarks" / "results" / "latest.png"
    files.append(File.generated(config, "benchmarks/latest.png", abs_src_path=str(chart)))
    return files
