"""Issue 25: the study driver's report pieces (experiments/rerank/study.py) — the TK-2 vs KNRM
rows read the all-pairs Holm family of ``evaluate_runs``, pair only matching variants, and the
table carries R@100 beside nDCG@10 and RR@10."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
RERANK = REPO / "experiments" / "rerank"
# experiments/ctrlqgen has a study.py too, and its tests may share this worker: load this one
# under its own name, and let it be "study" (what extend.py imports) only while a test here runs
_spec = importlib.util.spec_from_file_location("rerank_study", RERANK / "study.py")
study = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(study)


@pytest.fixture(autouse=True)
def _rerank_study_is_study(monkeypatch):
    monkeypatch.setitem(sys.modules, "study", study)
    monkeypatch.delitem(sys.modules, "extend", raising=False)
    monkeypatch.syspath_prepend(str(RERANK))


from limelight.data.qrels import Qrels  # noqa: E402
from limelight.data.run import Run  # noqa: E402
from limelight.evaluation import evaluate_runs  # noqa: E402


def _runs(rng: np.random.Generator) -> tuple[list[Run], Qrels]:
    qids = [f"q{i}" for i in range(30)]
    qrels = Qrels.from_dict({q: {f"{q}-rel": 1} for q in qids})

    def run(name: str, p_first: float) -> Run:
        # the relevant document is ranked first with probability p_first, else 5th
        d = {}
        for q in qids:
            docs = [f"{q}-x{k}" for k in range(10)]
            docs.insert(0 if rng.random() < p_first else 4, f"{q}-rel")
            d[q] = {doc: float(20 - k) for k, doc in enumerate(docs)}
        return Run.from_dict(d, name=name)

    return [run("bm25", 0.4), run("tk2 bm25-log lr×0.1 s0", 0.9), run("knrm bm25-log lr×0.1 s0", 0.3),
            run("tk2 scratch s0", 0.5)], qrels


def test_tk_vs_knrm_pairs_matching_variants_with_the_all_pairs_holm_p():
    runs, qrels = _runs(np.random.default_rng(0))
    table = evaluate_runs(runs, qrels, "nDCG@10 RR@10 R@100 AP")
    lines = study._tk_vs_knrm(table)
    rows = [line for line in lines if line.startswith("| bm25-log")]
    assert len(rows) == 1 and not any(line.startswith("| scratch") for line in lines)  # no KNRM scratch row
    agg = table.aggregate()
    tk, kn = agg["tk2 bm25-log lr×0.1 s0"]["nDCG@10"], agg["knrm bm25-log lr×0.1 s0"]["nDCG@10"]
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert float(cells[1]) == round(tk, 4) and float(cells[2]) == round(kn, 4) and tk > kn
    p = table.p_pairs[table.measures[0]][1, 2]
    assert 0 < p < 0.05 and float(cells[4]) == float(f"{p:.3g}")


def test_report_table_has_r100_with_holm_p_against_bm25():
    runs, qrels = _runs(np.random.default_rng(0))
    table = evaluate_runs(runs, qrels, study.REPORT_MEASURES)
    head, _, *rows = study._table_lines(table)
    assert head.split(" | ")[1:7] == ["nDCG@10", "p (Holm)", "RR@10", "p (Holm)", "R@100", "p (Holm)"]
    agg = table.aggregate()
    for i, row in enumerate(rows):
        cells = [c.strip() for c in row.strip("|").split("|")]
        name = table.names[i]
        assert cells[0] == name and float(cells[5]) == round(agg[name]["R@100"], 4)
        assert cells[6] == ("" if i == 0 else f"{table.p_vs_first[table.measures[2]][i]:.3g}")


def test_no_knrm_rows_no_section():
    runs, qrels = _runs(np.random.default_rng(1))
    table = evaluate_runs([runs[0], runs[1], runs[3]], qrels, "nDCG@10")
    assert study._tk_vs_knrm(table) == []


def test_seed_spread_groups_rows_differing_only_in_seed():
    runs, qrels = _runs(np.random.default_rng(2))
    extra, _ = _runs(np.random.default_rng(3))
    runs = [*runs, extra[3].rename("tk2 scratch s1"), extra[1].rename("tk2 scratch s1 +BM25 λ")]
    table = evaluate_runs(runs, qrels, "nDCG@10")
    lines = study._seed_lines(table)
    rows = [line for line in lines if line.startswith("| tk2")]
    assert len(rows) == 1  # "tk2 scratch s*"; the interpolated row has one seed, bm25-log one too
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    agg = table.aggregate()
    vals = [agg["tk2 scratch s0"]["nDCG@10"], agg["tk2 scratch s1"]["nDCG@10"]]
    assert cells[0] == "tk2 scratch s*" and cells[1] == "2" and vals[0] != vals[1]
    mean, sd = cells[2].split(" ± ")
    assert float(mean) == round(float(np.mean(vals)), 4) and float(sd) == round(float(np.std(vals, ddof=1)), 4)
    assert cells[3].startswith(f"s0 {vals[0]:.4f} (p ") and f"; s1 {vals[1]:.4f} (p " in cells[3]


def test_no_seed_spread_for_single_seed_rows():
    runs, qrels = _runs(np.random.default_rng(1))
    assert study._seed_lines(evaluate_runs(runs, qrels, "nDCG@10")) == []


def test_status_of_committed_jobs_without_a_state_file(tmp_path):
    # states are local (gitignored): in a fresh clone a committed checkpoint + log is a done job,
    # anything less is still to do (otherwise `study.py next` would retrain the whole study)
    job = {"out": tmp_path / "tk2-scratch-s0-f0.pt"}
    assert study.status(job) == "todo"
    job["out"].write_bytes(b"model")
    assert study.status(job) == "todo"
    (tmp_path / "tk2-scratch-s0-f0.log.jsonl").write_text('{"step": 0}\n')
    assert study.status(job) == "done"


def test_extend_selects_the_budget_limited_fine_tunings_and_finds_the_first_difference():
    import extend  # experiments/rerank/extend.py

    # selection reads the committed logs: TK-2 fine-tunings that reached the budget with their
    # best validation in its last 100 steps (and nothing that stopped by patience)
    chosen = extend.budget_limited()
    assert chosen and all(j["kind"] == "finetune" and j["model"] == "tk2" for j in chosen)
    for j in chosen:
        recs = extend._log(j["out"].with_suffix(".log.jsonl"))
        assert recs[-1]["step"] == study.FINETUNE_STEPS
        assert extend._best(recs)["step"] >= study.FINETUNE_STEPS - 100
    cmd = extend._extended_cmd(chosen[0], extend.OUT / chosen[0]["out"].name)
    assert cmd[cmd.index("--max-steps") + 1] == str(extend.EXTEND_STEPS)
    assert "extended" in cmd[cmd.index("--out") + 1] and chosen[0]["cmd"][chosen[0]["cmd"].index("--max-steps") + 1] == "600"
    a = [{"step": 0, "val_nDCG@10": 0.1}, {"step": 50, "loss": 0.74340334, "val_nDCG@10": 0.2},
         {"step": 100, "loss": 0.7, "val_nDCG@10": 0.3}]
    b = [dict(r) for r in a]
    assert extend.first_difference(a, b, 600) is None
    b[1]["loss"] = 0.74340265
    assert extend.first_difference(a, b, 600) == 50
    assert extend.first_difference(a, b, 0) is None  # only steps up to `upto` are compared
