"""Stages, the service, the report and the CLI ask a system for capabilities, never test its kind
by name: a new kind is one module plus its registration (issue 41)."""

from __future__ import annotations

import ast
from pathlib import Path

from limelight.retrieval.systems import kind_names

SRC = Path(__file__).resolve().parents[1] / "src" / "limelight"  # the source, also under `make test`'s wheel
#: the modules above the kinds that must not branch on a kind's name
CHECKED = [*sorted((SRC / "audit").glob("stage*.py")), *sorted((SRC / "audit" / "stages").glob("*.py")),
           *sorted((SRC / "service").glob("*.py")), *sorted((SRC / "report").glob("*.py")),
           *sorted((SRC / "cli").glob("*.py")), SRC / "audit" / "runner.py"]


def _kind_expr(node: ast.AST) -> bool:
    """``x.kind``, ``kind``, ``system_kind(...)``, ``settings["kind"]`` / ``.get("kind")``."""
    if isinstance(node, ast.Attribute):
        return node.attr == "kind"
    if isinstance(node, ast.Name):
        return node.id == "kind"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "kind"
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "get" and node.args:
            return isinstance(node.args[0], ast.Constant) and node.args[0].value == "kind"
        return isinstance(f, ast.Name) and f.id == "system_kind"
    return False


def _names(node: ast.AST, kinds: set[str]) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in kinds]


def kind_tests(path: Path, kinds: set[str]) -> list[str]:
    """``path:line`` of every comparison of a kind with a kind's name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_kind_expr(s) for s in sides) and any(_names(s, kinds) for s in sides):
                where = path.relative_to(SRC) if path.is_relative_to(SRC) else path.name
                out.append(f"{where}:{node.lineno}")
    return out


def test_no_stage_or_service_module_names_a_kind():
    kinds = set(kind_names())
    found = [hit for p in CHECKED if p.exists() for hit in kind_tests(p, kinds)]
    assert found == []


def test_the_check_finds_a_kind_test(tmp_path):
    p = tmp_path / "probe.py"
    p.write_text('def f(spec, s):\n    if spec.kind == "bm25":\n        return 1\n'
                 '    return s.get("kind") in ("dense", "hybrid")\n')
    assert kind_tests(p, set(kind_names())) == ["probe.py:2", "probe.py:4"]
