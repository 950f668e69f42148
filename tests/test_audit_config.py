"""Audit configuration validation and the stage cache (no models, fast)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from limelight.audit.cache import StageCache, stable_hash
from limelight.audit.config import load_config, parse_config
from limelight.audit.layout import AuditDir, NotAnAuditError
from limelight.errors import FormatError

REPO = Path(__file__).resolve().parents[1]

GOOD = """
[audit]
name = "t"
depth = 50
cutoffs = [10, 50]

[collection]
source = "adi"

[[systems]]
name = "bm25"
kind = "bm25"
k1 = 1.2
"""


def test_shipped_configs_validate():
    for p in sorted((REPO / "configs").glob("*.toml")):
        cfg = load_config(p)
        assert cfg.systems, p
        assert 100 in cfg.cutoffs  # results.json reports gini_c100
        assert all(c <= cfg.depth for c in cfg.cutoffs)


def test_defaults_filled_in():
    cfg = parse_config(GOOD)
    assert cfg.name == "t" and cfg.depth == 50 and cfg.cutoffs == [10, 50]
    assert cfg.query_source == "log"
    assert cfg.systems[0].settings() == {"kind": "bm25", "b": 0.4, "k1": 1.2}
    assert all(cfg.stages.values())


@pytest.mark.parametrize("edit, line, words", [
    (GOOD.replace('k1 = 1.2', 'k1 = 1.2\nk3 = 7'), 14, "unknown key 'k3'"),
    (GOOD.replace('kind = "bm25"', 'kind = "splade"'), 12, "kind must be one of"),
    (GOOD.replace('depth = 50', 'depth = "deep"'), 4, "audit.depth must be a int"),
    (GOOD.replace('cutoffs = [10, 50]', 'cutoffs = [10, 500]'), 5, "cutoffs"),
    (GOOD.replace('[collection]\nsource = "adi"', ''), None, "[collection] needs source"),
    (GOOD + '\n[[systems]]\nname = "bm25"\nkind = "dense"\n', 16, "duplicate system name"),
    (GOOD + '\n[stages]\neqi = "yes"\n', 16, "stages.eqi must be a bool"),
    (GOOD + '\n[queries]\nsource = "/no/such/file.tsv"\n', 16, "queries.source"),
    (GOOD.replace('depth = 50', 'depth = 50\ndepth = 60'), 5, "invalid TOML"),
    (GOOD + '\n[evaluation]\nmeasures = ["nDCG@ten"]\n', 16, "evaluation.measures"),
])
def test_errors_name_file_and_line(tmp_path, edit, line, words):
    p = tmp_path / "bad.toml"
    p.write_text(edit)
    with pytest.raises(FormatError) as e:
        load_config(p)
    msg = str(e.value)
    assert words in msg
    assert msg.startswith(f"{p}:{line}:" if line else f"{p}:")
    assert "\n" not in msg


def test_cli_bad_config_is_one_line_exit_2(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text(GOOD.replace('kind = "bm25"', 'kind = "splade"'))
    r = subprocess.run([sys.executable, "-m", "limelight.cli", "audit", str(p), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and r.stderr.startswith(f"error: {p}:12:")
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


def test_stage_cache_keys(tmp_path):
    audit = AuditDir(tmp_path / "a")
    cache = StageCache(audit)
    k1, k2 = stable_hash("s", {"a": 1, "b": 2}), stable_hash("s", {"b": 2, "a": 1})
    assert k1 == k2 and stable_hash("s", {"a": 2}) != k1
    out = tmp_path / "a" / "thing"
    out.mkdir()
    (out / "x").write_text("partial")
    assert cache.begin("s", k1, [out]) is False and not out.exists()  # unknown origin: removed
    out.mkdir()
    (out / "x").write_text("partial")
    assert cache.lookup("s", k1) is None  # running, not done
    assert cache.begin("s", k1, [out]) is True and out.exists()  # same key: resume over it
    cache.finish("s", k1, {"v": 1.5}, 0.1)
    assert cache.lookup("s", k1)["result"] == {"v": 1.5}
    assert cache.lookup("s", "other") is None
    assert cache.begin("s", "other", [out]) is False and not out.exists()  # changed: removed


def test_audit_dir_errors(tmp_path):
    a = AuditDir(tmp_path / "nothing")
    with pytest.raises(NotAnAuditError, match="not an audit directory"):
        _ = a.manifest
    with pytest.raises(NotAnAuditError, match="has not finished"):
        a.results()
