"""Measures as values, the relevance-position array and the kernels on hand-checked cases."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from limelight.data.qrels import Qrels
from limelight.data.run import Run
from limelight.errors import LimelightError
from limelight.evaluation import (
    AP,
    RBP,
    TSE,
    Evaluator,
    LexiRecall,
    Measure,
    MeasureError,
    nDCG,
    parse_measure,
    parse_measures,
    relevance_positions,
)
from limelight.evaluation.kernels import lexiprecision_metric, lexirecall_metric

CANONICAL = ["AP", "nDCG@10", "RR", "P@10", "R@100", "Rprec", "RBP(p=0.8)", "TSE", "LexiRecall",
             "LexiPrecision", "AP(rel=2)", "AP(rel=2)@100", "TSE(e=ndcg)", "TSE(e=rbp,p=0.5)",
             "RBP(p=0.95,rel=2)@20", "nDCG", "RR(rel=3)@10"]


@pytest.mark.parametrize("text", CANONICAL)
def test_measure_round_trips_through_its_string(text):
    m = parse_measure(text)
    assert str(m) == text
    assert parse_measure(str(m)) == m
    assert hash(parse_measure(text)) == hash(m)
    assert {m: 1}[parse_measure(text)] == 1


def test_ir_measures_style_construction_and_aliases():
    assert AP @ 10 == parse_measure("AP@10")
    assert AP(rel=2) == parse_measure("AP(rel=2)")
    assert nDCG @ 10 == parse_measure("ndcg_cut_10") == parse_measure("nDCG @ 10")
    assert parse_measure("map") == AP and parse_measure("P_5") == parse_measure("P@5")
    assert RBP == parse_measure("RBP") == parse_measure("RBP(p=0.8)")
    assert TSE == parse_measure("TSE(e=rr)") and str(TSE) == "TSE"
    assert AP(rel=1) == AP  # rel=1 is the default: one spelling
    assert parse_measures("AP nDCG@10, R@1000 LexiRecall AP") == [AP, nDCG @ 10, Measure("R", cutoff=1000), LexiRecall]
    assert parse_measures("RBP(p=0.5,rel=2) AP") == [parse_measure("RBP(p=0.5,rel=2)"), AP]


@pytest.mark.parametrize("bad", ["XYZ", "P", "R", "nDCG(rel=2)", "AP(p=0.3)", "Rprec@10",
                                 "RBP(p=1.5)", "TSE(e=foo)", "AP(rel=x)", "AP@0", "AP((", "TSE(p=0.5)"])
def test_bad_measures_raise_one_line_user_errors(bad):
    with pytest.raises(MeasureError) as e:
        parse_measure(bad)
    assert isinstance(e.value, LimelightError) and "\n" not in str(e.value)


def _tiny(n_unjudged: int = 0):
    """Figure 1 style: relevant docs r1..r6; the run retrieves r at ranks 2, 3 and 8 of 10."""
    docs = [f"d{i}" for i in range(10)]
    docs[1], docs[2], docs[7] = "r1", "r2", "r3"
    run = Run.from_arrays(["q"] * 10, docs, np.arange(10, 0, -1, dtype=float), name="tiny")
    qrels = Qrels.from_arrays(["q"] * 7, ["r1", "r2", "r3", "r4", "r5", "r6", "d0"],
                              [1, 2, 1, 3, 1, 1, 0])
    return run, qrels


def test_relevance_positions_impute_pessimistically_at_the_bottom():
    run, qrels = _tiny()
    rp = relevance_positions(run, qrels, n_docs=1000)
    assert rp.pos.tolist() == [[2, 3, 8, 998, 999, 1000]]
    assert rp.m.tolist() == [6] and rp.depth.tolist() == [10]
    assert sorted(rp.grade[0].tolist()) == [1, 1, 1, 1, 2, 3]
    assert rp.grade[0, :3].tolist() == [1, 2, 1]
    rp2 = relevance_positions(run, qrels, threshold=2, n_docs=1000)
    assert rp2.pos.tolist() == [[3, 1000]]


def test_kernels_on_the_figure_1_example():
    run, qrels = _tiny()
    ev = Evaluator(qrels, "AP RR P@5 R@5 Rprec RBP(p=0.5) TSE TSE(e=ndcg) TSE(e=lin) nDCG AP(rel=2) nDCG@5", n_docs=1000)
    v = {str(k): float(x[0]) for k, x in ev.evaluate(run).per_query.items()}
    assert v["AP"] == pytest.approx((1 / 2 + 2 / 3 + 3 / 8) / 6)
    assert v["RR"] == pytest.approx(0.5)
    assert v["P@5"] == pytest.approx(2 / 5)
    assert v["R@5"] == pytest.approx(2 / 6)
    assert v["Rprec"] == pytest.approx(2 / 6)
    assert v["RBP(p=0.5)"] == pytest.approx(0.5 * (0.5 ** 1 + 0.5 ** 2 + 0.5 ** 7))
    assert v["TSE"] == pytest.approx(1 / 1000)
    assert v["TSE(e=ndcg)"] == pytest.approx(1 / math.log2(1001))
    assert v["TSE(e=lin)"] == pytest.approx(0.0)
    dcg = 1 / math.log2(3) + 2 / math.log2(4) + 1 / math.log2(9)
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate([3, 2, 1, 1, 1, 1]))
    assert v["nDCG"] == pytest.approx(dcg / idcg)
    assert v["AP(rel=2)"] == pytest.approx((1 / 3) / 2)
    assert v["nDCG@5"] == pytest.approx((1 / math.log2(3) + 2 / math.log2(4)) / sum(
        g / math.log2(i + 2) for i, g in enumerate([3, 2, 1, 1, 1])))


def test_missing_and_extra_queries_and_queries_without_relevant_documents():
    run = Run.from_arrays(["a", "a", "x"], ["d1", "d2", "d1"], [2.0, 1.0, 1.0])
    qrels = Qrels.from_arrays(["a", "b", "c"], ["d2", "d1", "d3"], [1, 1, 0])
    ev = Evaluator(qrels, "AP P@1 LexiRecall")
    assert ev.qids.strings.tolist() == ["a", "b"]  # c has no relevant document: not a query
    with pytest.warns(UserWarning, match="without a relevant judgment"):
        res = ev.evaluate(run)
    ap = res.per_query[AP]
    assert ap.tolist() == [0.5, 0.0]  # b is missing from the run: 0 (trec_eval -c)
    assert res.aggregate[AP] == pytest.approx(0.25)
    qrels_none = Qrels.from_arrays(["a"], ["d1"], [0])
    with pytest.raises(LimelightError, match="no query has a relevant document"):
        Evaluator(qrels_none, "AP")


def test_corpus_size_too_small_for_imputation_is_a_user_error():
    run, qrels = _tiny()
    with pytest.raises(LimelightError, match="too small"):
        relevance_positions(run, qrels, n_docs=12)
    # default n: distinct documents in run and qrels (10 retrieved + 3 unretrieved relevant)
    assert relevance_positions(run, qrels).n == 13


def test_metric_lexirecall_orders_like_the_preference_and_never_overflows():
    rng = np.random.default_rng(0)
    n = 50
    pos = np.sort(np.stack([rng.choice(np.arange(1, n + 1), 4, replace=False) for _ in range(300)]), axis=1)
    m = np.full(len(pos), 4)
    v = lexirecall_metric(pos, m, n)
    from limelight.evaluation import lexiprecision, lexirecall

    for i in range(0, 300, 3):
        j = i + 1
        pref = lexirecall(pos[i], pos[j])
        assert np.sign(v[i] - v[j]) == pref
        vp = lexiprecision_metric(pos[[i, j]], m[:2], n)
        assert np.sign(vp[0] - vp[1]) == lexiprecision(pos[i], pos[j])
    # the paper's closed-form weights underflow (Δ^(m-1) = 0 for m = 400, n = 1e9); Horner does not
    big = np.arange(1, 401, dtype=np.int64)[None, :] * 1000
    val = lexirecall_metric(big, np.array([400]), 10 ** 9)
    assert np.isfinite(val).all() and 0.0 < val[0] < 1.0
    assert (10 ** 9 + 0.5) ** -399 == 0.0  # what the direct formula would multiply by


def test_padding_and_shared_array_give_each_measure_once(monkeypatch):
    run, qrels = _tiny()
    calls = []
    import importlib

    E = importlib.import_module("limelight.evaluation.evaluate")

    real = E.relevance_positions

    def spy(*a, **k):
        calls.append(a[2])
        return real(*a, **k)

    monkeypatch.setattr(E, "relevance_positions", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Evaluator(qrels, "AP nDCG@10 R@5 P@5 RR LexiRecall TSE AP(rel=2) RR(rel=2)", n_docs=100).evaluate(run)
    assert sorted(calls) == [1, 2]  # one array per threshold, shared by all measures


def test_worst_off_provider_and_tse_exposure_models():
    from limelight.evaluation import tse, worst_off_provider

    run, qrels = _tiny()
    n = 1000
    df = worst_off_provider(run, qrels, {}, n_docs=n)  # every document its own provider
    assert df.to_dict("records") == [{"query_id": "q", "provider": "r6", "exposure": pytest.approx(1 / n)}]
    df = worst_off_provider(run, qrels, {"r4": "C", "r5": "C", "r6": "C", "r1": "A", "r2": "A", "r3": "B"}, n_docs=n)
    assert df.loc[0, "provider"] == "C"
    assert df.loc[0, "exposure"] == pytest.approx(1 / 998 + 1 / 999 + 1 / 1000)
    everyone_but_r3 = {d: "A" for d in ["r1", "r2", "r4", "r5", "r6"]} | {"r3": "B"}
    df = worst_off_provider(run, qrels, everyone_but_r3, n_docs=n, exposure="ndcg")
    assert df.loc[0, "provider"] == "B" and df.loc[0, "exposure"] == pytest.approx(1 / math.log2(9))
    rp = relevance_positions(run, qrels, n_docs=n)
    assert tse(rp.pos, rp.m, n, "rr")[0] == pytest.approx(1 / n)
    assert tse(rp.pos, rp.m, n, "rbp", p=0.5)[0] == pytest.approx(0.5 * 0.5 ** (n - 1))
    # TSE equals the worst-off provider's exposure when each document is its own provider (§4.2)
    assert tse(rp.pos, rp.m, n, "ndcg")[0] == pytest.approx(
        worst_off_provider(run, qrels, {}, n_docs=n, exposure="ndcg").loc[0, "exposure"])
