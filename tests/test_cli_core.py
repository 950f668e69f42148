"""The core CLI (index, search, retrieve, info) end to end on a shared collection."""

from __future__ import annotations

import json
import subprocess
import sys

import ir_measures
import pytest
from ir_measures import nDCG
from typer.testing import CliRunner

from limelight.cli import app
from limelight.data import load_dataset, read_trec_run

runner = CliRunner()


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "limelight.cli", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def adi_index(tmp_path_factory):
    out = tmp_path_factory.mktemp("idx") / "adi"
    res = runner.invoke(app, ["index", "--collection", "adi", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


def test_index_search_retrieve(adi_index, tmp_path, data_dir):
    res = runner.invoke(app, ["search", "--index", str(adi_index), "--json", "--k", "5",
                              "information retrieval systems"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert [r["rank"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[0]["score"] >= rows[-1]["score"]
    run_path = tmp_path / "adi.run"
    qfile = data_dir / "collections" / "adi" / "queries.tsv"
    res = runner.invoke(app, ["retrieve", "--index", str(adi_index), "--queries", str(qfile),
                              "--k", "1000", "--out", str(run_path)])
    assert res.exit_code == 0, res.output
    run = read_trec_run(run_path)
    assert run.n_queries == 35
    ds = load_dataset("adi")
    score = ir_measures.calc_aggregate([nDCG @ 10], ds.qrels.to_ir_measures(), run.to_ir_measures())[nDCG @ 10]
    assert abs(score - 0.422) <= 0.01  # the README's bm25s reference point
    info = runner.invoke(app, ["info", "--index", str(adi_index)])
    assert json.loads(info.output)["n_docs"] == 82


def test_cli_errors_are_one_line(adi_index, tmp_path):
    p = cli("search", "--index", str(adi_index), "   ")
    assert p.returncode == 2 and p.stderr.strip() == "error: empty query"
    p = cli("search", "--index", str(tmp_path / "nowhere"), "x")
    assert p.returncode == 2 and "not a limelight index" in p.stderr and p.stderr.count("\n") == 1
    p = cli("retrieve", "--index", str(adi_index), "--queries", str(tmp_path / "none.tsv"),
            "--out", str(tmp_path / "r.run"))
    assert p.returncode == 2 and "no such file" in p.stderr
    assert not (tmp_path / "r.run").exists()
    p = cli("search", "--index", str(adi_index), "--model", "dense", "x")
    assert p.returncode == 2 and "no dense index" in p.stderr


def test_corrupt_index_is_named(adi_index, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(adi_index, broken)
    arrays = sorted((broken / "bm25").glob("*.npy"))
    arrays[0].write_bytes(b"garbage")
    p = cli("search", "--index", str(broken), "x")
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and str(broken / "bm25") in p.stderr


def test_index_is_atomic(tmp_path):
    # a collection that fails to load leaves no half-written index behind
    bad = tmp_path / "docs.jsonl"
    bad.write_text('{"id": "1", "text": "a"}\n{oops\n')
    out = tmp_path / "idx"
    p = cli("index", "--collection", str(bad), "--out", str(out))
    assert p.returncode == 2 and f"{bad}:2" in p.stderr
    assert not out.exists()
    assert not any(x.name.startswith(".idx") for x in tmp_path.iterdir())
