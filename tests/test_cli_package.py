"""The CLI package (issue 19): its layout rule and the configurations shipped inside the package
(``limelight audit debian|quick``)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from limelight.cli import app
from limelight.cli.audit import SHIPPED_CONFIGS, resolve_config, shipped_configs

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "limelight"


def _imports(path: Path) -> set[str]:
    """Every module a file imports (at any depth of the file: in functions too)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def test_nothing_outside_the_cli_package_imports_it():
    """No module outside ``limelight/cli/`` imports the CLI."""
    offenders = []
    for p in sorted(SRC.rglob("*.py")):
        rel = p.relative_to(SRC)
        if rel.parts[0] == "cli":
            continue
        bad = [m for m in _imports(p) if m == "limelight.cli" or m.startswith("limelight.cli.")]
        if bad:
            offenders.append(f"{rel}: {sorted(bad)}")
    assert offenders == []


#: root configurations that name files of the repository (a checkpoint under experiments/), which
#: an installed package does not have: not shipped
REPOSITORY_ONLY = {"quick-rerank.toml"}


def test_shipped_configs_are_the_root_configs():
    """``src/limelight/configs/`` (shipped, read by ``limelight audit NAME``) is the canonical
    copy; ``configs/`` at the repository root (the README's paths) holds identical files, and
    the repository-only ones (``REPOSITORY_ONLY``)."""
    shipped = sorted(p.name for p in SHIPPED_CONFIGS.glob("*.toml"))
    root = sorted(p.name for p in (REPO / "configs").glob("*.toml") if p.name not in REPOSITORY_ONLY)
    assert all((REPO / "configs" / n).is_file() and n not in shipped for n in REPOSITORY_ONLY)
    assert shipped == root and "debian.toml" in shipped and "quick.toml" in shipped
    for name in shipped:
        assert (SHIPPED_CONFIGS / name).read_bytes() == (REPO / "configs" / name).read_bytes(), name
    assert shipped_configs() == [Path(n).stem for n in shipped]


def test_audit_takes_a_shipped_config_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_config(Path("quick")) == SHIPPED_CONFIGS / "quick.toml"
    assert resolve_config(Path("nope")) == Path("nope")  # load_config names the missing file
    assert resolve_config(Path("configs/quick.toml")) == Path("configs/quick.toml")
    by_name = CliRunner().invoke(app, ["audit", "quick", "--out", "o", "--check"])
    by_path = CliRunner().invoke(app, ["audit", str(REPO / "configs" / "quick.toml"), "--out", "o",
                                       "--check"])
    assert by_name.exit_code == 0 and by_path.exit_code == 0, by_name.output + by_path.output
    a, b = json.loads(by_name.stdout), json.loads(by_path.stdout)
    assert a.pop("path") == str(SHIPPED_CONFIGS / "quick.toml")
    assert a["name"] == "med-quick" and b.pop("path") == str(REPO / "configs" / "quick.toml")
    assert a == b
    (tmp_path / "quick").write_text("not toml [")  # a file in the working directory comes first
    assert resolve_config(Path("quick")) == Path("quick")
    missing = CliRunner().invoke(app, ["audit", "nope", "--out", "o", "--check"])
    assert missing.exit_code != 0 and not (tmp_path / "o").exists()


def test_python_m_limelight_cli():
    p = subprocess.run([sys.executable, "-m", "limelight.cli", "--version"], capture_output=True,
                       text=True)
    assert p.returncode == 0 and p.stdout.startswith("limelight ")
