"""``limelight fairness`` end to end on the movies catalog judged by its CtrlQGen Click test set
(query → the film it was written for): JSON equal to the library, and every bad input one line,
exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from _inproc import run_cli
from typer.testing import CliRunner

from limelight.cli import app
from limelight.data.formats import read_trec_qrels
from limelight.exposure.fairness import Groups, Merit, group_fairness
from limelight.exposure.store import ExposureStore

REPO = Path(__file__).resolve().parents[1]
CLICK = REPO / "experiments/ctrlqgen/results/{}/weaklabels/click_test.parquet"
runner = CliRunner()


def cli(*args: str, real: bool = False) -> subprocess.CompletedProcess:
    """``limelight ARGS`` in this process (tests/_inproc.py: the console script's entry point,
    exit status and streams), or with ``real`` in a new interpreter."""
    if real:
        return subprocess.run([sys.executable, "-m", "limelight.cli", *args], capture_output=True, text=True)
    return run_cli(*args)


def _click(catalog: str, tmp: Path, n: int | None = None) -> tuple[Path, Path]:
    """The Click test set as a query TSV and binary qrels (``n`` first queries)."""
    df = pd.read_parquet(str(CLICK).format(catalog)).head(n)
    q, r = tmp / f"{catalog}.tsv", tmp / f"{catalog}.qrels"
    q.write_text("".join(f"{a}\t{b}\n" for a, b in zip(df["query_id"], df["text"], strict=True)))
    r.write_text("".join(f"{a} 0 {b} 1\n" for a, b in zip(df["query_id"], df["entity_id"], strict=True)))
    return q, r


@pytest.fixture(scope="module")
def movies(tmp_path_factory):
    root = tmp_path_factory.mktemp("fair-cli")
    idx, store = root / "idx", root / "bm25"
    res = runner.invoke(app, ["index", "--collection", "movies", "--out", str(idx)])
    assert res.exit_code == 0, res.output
    queries, qrels = _click("movies", root, 800)
    res = runner.invoke(app, ["exposure", "compute", "--index", str(idx), "--queries", str(queries),
                              "--out", str(store), "--depth", "50"])
    assert res.exit_code == 0, res.output
    return root, idx, store, qrels


def test_json_equals_the_library(movies):
    root, idx, store, qrels = movies
    res = runner.invoke(app, ["fairness", "--store", str(store), "--group-field", "Major Genre",
                              "--merit", f"qrels:{qrels}", "--target", "merit", "--boot", "50",
                              "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    st = ExposureStore.open(store)
    lib = group_fairness(st, Groups.from_field(st, "Major Genre"),
                         Merit.from_qrels(read_trec_qrels(qrels), st, f"qrels:{qrels}"), "merit",
                         n_boot=50).to_dict()
    assert out == json.loads(json.dumps(lib))
    s = out["summary"]
    assert s["n_queries_used"] == 800 and s["merit"] == f"qrels:{qrels}" and s["assumptions"] == []
    assert {"EE-L", "EE-D", "EE-R"} <= set(s["expected_exposure"]) and s["awrf"]["lo"] <= s["awrf"]["hi"]
    assert sum(g["exposure_share"] for g in out["groups"]) == pytest.approx(1.0)
    # the text output names the largest deficit
    res = runner.invoke(app, ["fairness", "--store", str(store), "--group-field", "Major Genre",
                              "--boot", "0"])
    assert res.exit_code == 0 and "largest deficits" in res.output and "AWRF" in res.output


def test_reference_merit_is_stated_as_an_assumption(movies, tmp_path):
    root, idx, store, qrels = movies
    queries = root / "movies.tsv"
    ref = tmp_path / "ref"
    res = runner.invoke(app, ["exposure", "compute", "--index", str(idx), "--queries", str(queries),
                              "--out", str(ref), "--depth", "50", "--k1", "1.5", "--b", "0.9"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["fairness", "--store", str(store), "--group-field", "Distributor",
                              "--merit", f"reference:{ref}", "--target", "merit", "--boot", "0", "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.output)["summary"]
    assert len(s["assumptions"]) == 1 and "assumed, not judged" in s["assumptions"][0]


def test_bad_input_is_one_line_exit_2(movies, tmp_path):
    root, idx, store, qrels = movies

    def err(*args: str, real: bool = False) -> str:
        p = cli("fairness", "--store", str(store), *args, real=real)
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and p.stderr.startswith("error: "), p.stderr
        return p.stderr

    e = err("--group-field", "genre", real=True)  # the real entry point once
    assert "no document field 'genre' (fields: " in e and "Major Genre" in e and "Distributor" in e
    g = tmp_path / "g.tsv"
    g.write_text("movie00001\tA\nnot-a-film\tB\nmovie00002\tA\nalso-not\tB\n")
    e = err("--groups", str(g))
    assert "2 document(s) not in the collection (first: 'not-a-film', 'also-not')" in e
    _, debian_qrels = _click("debian", tmp_path, 50)
    e = err("--group-field", "Major Genre", "--merit", f"qrels:{debian_qrels}", "--target", "merit")
    assert "judged documents are not in the store's collection" in e and "another collection" in e
    stray = tmp_path / "stray.qrels"
    stray.write_text("no-such-query 0 movie00001 1\n")
    e = err("--group-field", "Major Genre", "--merit", f"qrels:{stray}")
    assert "no overlap" in e
    e = err("--group-field", "Major Genre", "--target", "merit")
    assert "needs a merit source" in e
    e = err("--group-field", "Major Genre", "--target", "fair")
    assert "--target 'fair'" in e
    e = err("--group-field", "Major Genre", "--merit", "judgments.txt")
    assert "expected qrels:FILE or reference:STORE_DIR" in e
