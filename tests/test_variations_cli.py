"""`limelight variations | robustness | simulate` end to end on adi; bad input exits 2 with one line."""

from __future__ import annotations

import json
import subprocess

from _inproc import run_cli
from typer.testing import CliRunner

from limelight.cli import app
from limelight.data import read_queries_tsv
from limelight.querygen.variations import read_variations_tsv

runner = CliRunner()


def cli(*args: str) -> subprocess.CompletedProcess:
    """``limelight ARGS`` in this process (tests/_inproc.py: the console script's entry point)."""
    return run_cli(*args)


def test_variations_command(tmp_path, data_dir):
    qfile = data_dir / "collections" / "adi" / "queries.tsv"
    out = tmp_path / "v.tsv"
    res = runner.invoke(app, ["variations", "--queries", str(qfile), "--methods", "all", "--out", str(out),
                              "--n", "2", "--seed", "3"])
    assert res.exit_code == 0, res.output
    assert "skipped T5QQP" in res.output and "checkpoint" in res.output
    v = read_variations_tsv(out, read_queries_tsv(qfile))
    assert {"NeighbCharSwap", "RandOrderSwap", "RmvStopWords", "WEmbedSynSwap"} <= set(v.frame.method)
    assert (v.frame.text != v.frame.original).all()
    assert v.frame.groupby(["qid", "method"]).size().max() == 2


def test_robustness_and_simulate_commands(tmp_path):
    md, js = tmp_path / "r.md", tmp_path / "r.json"
    res = runner.invoke(app, ["robustness", "-c", "adi", "--systems", "bm25", "--methods",
                              "RandOrderSwap,QWERTYCharSub", "--out-md", str(md), "--out-json", str(js),
                              "--plot", str(tmp_path / "r.png")])
    assert res.exit_code == 0, res.output
    assert "| Ordering | RandOrderSwap |" in md.read_text()
    rows = json.loads(js.read_text())["rows"]
    assert {r["method"] for r in rows if r["level"] == "method"} == {"RandOrderSwap", "QWERTYCharSub"}
    assert (tmp_path / "r.png").stat().st_size > 0
    out = tmp_path / "sim.tsv"
    res = runner.invoke(app, ["simulate", "-c", "adi", "--source", "KIS", "--strategy", "S4pp", "--n", "3",
                              "--out", str(out), "--validate"])
    assert res.exit_code == 0, res.output
    sim = read_queries_tsv(out)
    assert len(sim) > 30 and "Kendall tau" in res.output


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    empty = tmp_path / "q.tsv"
    empty.write_text("1\tfine query\n2\t   \n")
    r = cli("variations", "--queries", str(empty), "--out", str(tmp_path / "o.tsv"))
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "q.tsv:2" in r.stderr and "empty" in r.stderr
    ok = tmp_path / "ok.tsv"
    ok.write_text("1\tfine query\n")
    r = cli("variations", "--queries", str(ok), "--methods", "Nope", "--out", str(tmp_path / "o.tsv"))
    assert r.returncode == 2 and "unknown variation method 'Nope'" in r.stderr
    r = cli("simulate", "-c", "adi", "--strategy", "S7", "--out", str(tmp_path / "s.tsv"))
    assert r.returncode == 2 and "unknown strategy" in r.stderr
    r = cli("robustness", "-c", "adi", "--systems", "bm25", "--mode", "sideways")
    assert r.returncode == 2 and r.stderr.startswith("error:")
    assert not (tmp_path / "o.tsv").exists() and not (tmp_path / "s.tsv").exists()
