"""Generate the manual's reference pages from the code, at every ``mkdocs build`` (mkdocs-gen-files).

Nothing here is typed by hand that the code already says: the audit configuration reference
reads the configuration schema (``limelight.audit.config``, each stage's ``StageOptions`` and the
registry of system kinds), the CLI reference walks the Typer app, the API reference lists each
package's exports (the ``TYPE_CHECKING`` block that ``limelight._lazy`` reads) for mkdocstrings,
and the glossary reads ``limelight.report.glossary``. What the code does not say (one line of help
for the keys of the core tables, the formulas of the evaluation measures) is written below and
checked against the code both ways, so that a new key or measure without words fails the build.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import mkdocs_gen_files

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from reference import cli_reference, config_reference, glossary_page  # noqa: E402

#: the packages of the Python API reference, in the order of the layers (docs/architecture.md)
API_PACKAGES = ("data", "retrieval", "evaluation", "exposure", "querygen", "rerank", "scale",
                "audit", "report", "service")


def exports(package: str) -> list[str]:
    """The dotted paths of a package's exports: the imports of its ``if TYPE_CHECKING:`` block
    and its top-level ``from limelight... import`` statements (what ``lazy_exports`` exports)."""
    init = REPO / "src" / "limelight" / package / "__init__.py"
    tree = ast.parse(init.read_text(encoding="utf-8"))
    out: list[str] = []

    def take(stmts: list[ast.stmt]) -> None:
        for s in stmts:
            if isinstance(s, ast.ImportFrom) and s.module and s.module.startswith("limelight"):
                out.extend(f"{s.module}.{a.name}" for a in s.names if not a.name.startswith("_"))

    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            take(node.body)
    take(tree.body)
    return list(dict.fromkeys(out))


def api_pages() -> list[tuple[str, str]]:
    """One page per package: its docstring, then every export rendered by mkdocstrings."""
    pages = []
    for pkg in API_PACKAGES:
        names = exports(pkg)
        lines = [f"# `limelight.{pkg}`", "",
                 f"::: limelight.{pkg}", "    options:", "      members: false",
                 "      show_root_heading: false", ""]
        if not names:
            lines += ["The package exports nothing at its top level; see its modules.", ""]
        for name in names:
            lines += [f"::: {name}", "    options:", "      heading_level: 2",
                      "      show_root_full_path: false", ""]
        pages.append((f"reference/api/{pkg}.md", "\n".join(lines)))
    return pages


def main() -> None:
    pages = [("reference/configuration.md", config_reference()),
             ("reference/cli.md", cli_reference()),
             ("reference/glossary.md", glossary_page()),
             *api_pages()]
    index = ["# Python API", "",
             "Generated from the docstrings of each package's exports (`from limelight.data import "
             "Run`), in the order of the layers: a package imports only those above it.", ""]
    index += [f"- [`limelight.{p}`]({p}.md)" for p in API_PACKAGES]
    pages.append(("reference/api/index.md", "\n".join(index) + "\n"))
    for path, text in pages:
        with mkdocs_gen_files.open(path, "w") as f:
            f.write(text)


main()
