"""limelight.evaluation reproduces trec_eval's own test outputs and agrees with ir_measures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from limelight.data.formats import read_trec_qrels, read_trec_run
from limelight.data.run import Run
from limelight.evaluation import Evaluator, parse_measure
from limelight.evaluation.synthetic import bm25_like_run, perturb_run

TE_TO_OURS = {"map": "AP", "ndcg": "nDCG", "recip_rank": "RR", "Rprec": "Rprec"}
CUT = {"P": "P", "recall": "R", "ndcg_cut": "nDCG", "map_cut": "AP"}


def _our_name(te: str, rel: int) -> str | None:
    suffix = f"(rel={rel})" if rel != 1 else ""
    if te in TE_TO_OURS:
        name = TE_TO_OURS[te]
        return name if name == "nDCG" else name + suffix
    for prefix, name in CUT.items():
        if te.startswith(prefix + "_") and te[len(prefix) + 1:].isdigit():
            k = te[len(prefix) + 1:]
            return f"{name}@{k}" if name == "nDCG" else f"{name}{suffix}@{k}"
    return None


def _parse_out(path: Path) -> dict[tuple[str, str], float]:
    out = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            try:
                out[(parts[0], parts[1])] = float(parts[2])
            except ValueError:
                pass
    return out


CASES = [  # (qrels, results, expected output, relevance level)
    ("qrels.test", "results.test", "out.test", 1),
    ("qrels.test", "results.test", "out.test.a", 1),
    ("qrels.test", "results.test", "out.test.aq", 1),
    ("qrels.test", "results.trunc", "out.test.aqc", 1),
    ("qrels.rel_level", "results.test", "out.test.aql", 2),
    ("qrels.test", "results.test", "out.test.meas_params", 1),
]


@pytest.mark.parametrize(("qrels_name", "run_name", "out_name", "rel"), CASES)
def test_reproduces_trec_eval_outputs(trec_eval_dir, tmp_path, qrels_name, run_name, out_name, rel):
    expected = _parse_out(trec_eval_dir / out_name)
    qrels = read_trec_qrels(trec_eval_dir / qrels_name)
    run = read_trec_run(trec_eval_dir / run_name)  # results.trunc has junk after column 6
    wanted = {}
    for (te, _qid) in expected:
        ours = _our_name(te, rel)
        if ours is not None:
            wanted.setdefault(ours, set()).add(te)
    assert len(wanted) >= 4, wanted
    ev = Evaluator(qrels, list(wanted))
    res = ev.evaluate(run)
    checked = 0
    for ours, tes in wanted.items():
        m = parse_measure(ours)
        per_q = dict(zip(res.qids.strings.tolist(), res.per_query[m].tolist(), strict=True))
        for te in tes:
            for (name, qid), val in expected.items():
                if name != te:
                    continue
                got = res.aggregate[m] if qid == "all" else per_q[qid]
                assert abs(got - val) <= 5e-5 + 1e-12, (out_name, te, qid, got, val)
                checked += 1
    assert checked >= 8


def _float32_scores(run: Run) -> Run:
    """pytrec_eval breaks score ties at single precision; make scores float32-exact so that both
    tools see the same ties (trec_eval itself, and limelight, compare doubles)."""
    return Run.from_codes(run.qids, run.docids, run.q, run.d,
                          run.score.astype(np.float32).astype(np.float64), run.name)


def _agree_with_ir_measures(run: Run, qrels, measures: list[str]) -> int:
    import ir_measures

    ev = Evaluator(qrels, measures)
    res = ev.evaluate(run)
    ims = [ir_measures.parse_measure(m) for m in measures]
    ref = {(str(x.measure), x.query_id): x.value
           for x in ir_measures.iter_calc(ims, qrels.to_ir_measures(), run.to_ir_measures())}
    n = 0
    for m in ev.measures:
        for qid, v in zip(res.qids.strings.tolist(), res.per_query[m].tolist(), strict=True):
            r = ref.get((str(m), qid))
            if r is None:  # query absent from the run: 0 under trec_eval -c
                assert v == 0.0, (m, qid, v)
                continue
            assert abs(v - r) <= 1e-9, (m, qid, v, r)
            n += 1
    return n


MEASURES = ["AP", "nDCG", "nDCG@10", "RR", "P@10", "R@100", "R@1000", "Rprec", "AP@100",
            "AP(rel=2)", "RR(rel=2)", "P(rel=2)@5", "Rprec(rel=2)", "R(rel=2)@50"]


def test_agrees_with_ir_measures_on_trec_eval_runs(trec_eval_dir):
    qrels = read_trec_qrels(trec_eval_dir / "qrels.rel_level")
    run = read_trec_run(trec_eval_dir / "results.test")
    assert _agree_with_ir_measures(run, qrels, MEASURES) >= 3 * len(MEASURES)


@pytest.mark.parametrize("collection", ["cranfield", "scifact"])
def test_agrees_with_ir_measures_on_real_bm25_runs(data_dir, collection):
    folder = data_dir / "collections" / collection
    qrels = read_trec_qrels(folder / "qrels.txt")
    base = bm25_like_run(folder, depth=1000)
    for run in (base, perturb_run(base, 0.2, seed=3, depth=300)):
        assert _agree_with_ir_measures(_float32_scores(run), qrels, MEASURES) > 100
