"""The robustness report (Table 4 protocol) on real collections with the real BM25 and MiniLM."""

from __future__ import annotations

import json

import numpy as np
import pytest

from limelight.data import Qrels, Run, load_dataset
from limelight.errors import LimelightError
from limelight.evaluation import evaluate
from limelight.querygen.robustness import judged_fraction, robustness_report
from limelight.querygen.variations import generate_variations
from limelight.retrieval.bm25 import BM25, BM25Index


@pytest.fixture(scope="module")
def cranfield():
    ds = load_dataset("cranfield")
    return ds, BM25(BM25Index.build(ds.collection))


@pytest.fixture(scope="module")
def cran_report(cranfield):
    ds, bm25 = cranfield
    var = generate_variations(ds.queries, "RandOrderSwap,NeighbCharSwap,QWERTYCharSub,RmvStopWords", seed=0)
    return robustness_report({"BM25": bm25 % 1000}, ds.queries, ds.qrels, variations=var, dataset="cranfield")


def test_ordering_leaves_bm25_unchanged_exactly(cranfield, cran_report):
    """BM25 is a bag of words: swapping two words changes no query's nDCG@10, not even by one
    ulp. (Document scores may differ in the last float32 bit because the engine adds the query's
    term weights in query order; the rankings do not.)"""
    ds, bm25 = cranfield
    orig = cran_report.per_query[("BM25", "full", "original")]
    swapped = cran_report.per_query[("BM25", "full", "RandOrderSwap")]
    assert np.array_equal(orig, swapped)
    row = cran_report.row("BM25", "RandOrderSwap")
    assert row["abs_drop"] == 0.0 and row["p_value"] == 1.0 and row["sig"] == ""
    assert row["n_valid"] == len(ds.queries)
    # the runs themselves: scores equal up to float32 rounding
    var = generate_variations(ds.queries, "RandOrderSwap", seed=0)
    a = bm25.retrieve(ds.queries, 1000)
    b = bm25.retrieve(var.queries("RandOrderSwap"), 1000)
    assert np.array_equal(a.offsets, b.offsets)  # the same number of documents per query
    np.testing.assert_allclose(a.score, b.score, rtol=1e-6)  # rank by rank


def test_report_numbers_follow_their_definitions(cranfield, cran_report):
    ds, bm25 = cranfield
    rows = cran_report.rows
    meth = rows[rows.level == "method"]
    from limelight.evaluation.stats import paired_t

    orig = cran_report.per_query[("BM25", "full", "original")]
    assert meth.original.nunique() == 1 and np.isclose(meth.original.iloc[0], orig.mean())
    for _, r in meth.iterrows():
        vals = cran_report.per_query[("BM25", "full", r.method)]
        assert np.isclose(r.value, vals.mean())
        assert np.isclose(r.abs_drop, orig.mean() - vals.mean())
        assert np.isclose(r.rel_drop, r.abs_drop / orig.mean())
        assert np.isclose(r.p_value, paired_t(vals, orig))
        assert np.isclose(r.p_bonferroni, min(1.0, r.p_value * len(meth)))
        assert r.sig == ("" if r.p_bonferroni >= 0.05 else ("↓" if r.value < r.original else "↑"))
    # a category row averages its methods query by query
    cat = rows[(rows.level == "category") & (rows.category == "misspelling")].iloc[0]
    mis = np.mean([cran_report.per_query[("BM25", "full", m)] for m in ("NeighbCharSwap", "QWERTYCharSub")], axis=0)
    assert np.isclose(cat.value, mis.mean())
    # the original run evaluated directly gives the same number
    run = (bm25 % 1000)(ds.queries)
    assert np.isclose(evaluate(run, ds.qrels, "nDCG@10")["nDCG@10"], orig.mean())


def test_outputs(cran_report, tmp_path):
    md = cran_report.to_markdown()
    assert "| Category | Variation | BM25 | #Q |" in md and "original query" in md
    for m in ("RandOrderSwap", "NeighbCharSwap", "QWERTYCharSub", "RmvStopWords"):
        assert f"| {m} |" in md
    d = json.loads(cran_report.to_json(tmp_path / "r.json"))
    assert d["measure"] == "nDCG@10" and len(d["rows"]) == len(cran_report.rows)
    assert json.loads((tmp_path / "r.json").read_text()) == d
    p = cran_report.plot(tmp_path / "r.png")
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_judged_fraction_counts_judged_top_documents():
    qrels = Qrels.from_arrays(["q1", "q1", "q1", "q2"], ["a", "b", "z", "c"], [1, 0, 2, 1])
    run = Run.from_arrays(["q1"] * 4 + ["q2"] * 2, ["a", "x", "b", "y", "y", "c"],
                          np.array([4.0, 3, 2, 1, 2, 1]))
    got = judged_fraction(run, qrels, ["q1", "q2", "q3"], k=3)
    assert got.tolist() == [2 / 3, 1 / 3, 0.0]  # a, b judged; c judged; q3 retrieved nothing


def test_rerank_mode_keeps_the_first_stage_candidates():
    """Only the re-ranker sees the variant: the candidate set (and so recall at the first-stage
    depth) is the original query's, while the full pipeline's recall moves."""
    from limelight.retrieval.dense import DenseIndex, DenseRescorer, DenseRetriever

    ds = load_dataset("adi")
    bm25 = BM25(BM25Index.build(ds.collection))
    dense = DenseRetriever(DenseIndex.build(ds.collection))
    pipe = (bm25 % 20) >> DenseRescorer(dense)
    rep = robustness_report({"BM25>>MiniLM": pipe, "BM25": bm25 % 20}, ds.queries, ds.qrels,
                            methods="RandomCharSub,RmvStopWords", measure="R@20", mode="both")
    r = rep.rows
    rr = r[(r["mode"] == "rerank") & (r.level == "method")]
    assert set(rr.system) == {"BM25>>MiniLM"}  # a single stage has no rerank mode
    assert any("no re-ranker" in n for n in rep.notes)
    assert np.allclose(rr.value, rr.original)  # same candidates → same R@20
    full = r[(r["mode"] == "full") & (r.system == "BM25>>MiniLM") & (r.method == "RandomCharSub")]
    assert not np.isclose(full.value.iloc[0], full.original.iloc[0])
    assert "mode `rerank`" in rep.to_markdown()


def test_bad_arguments(cranfield):
    ds, bm25 = cranfield
    with pytest.raises(LimelightError, match="mode"):
        robustness_report(bm25, ds.queries, ds.qrels, methods="RandOrderSwap", mode="partial")
    other = generate_variations(ds.queries.head(5), "RandOrderSwap")
    with pytest.raises(LimelightError, match="another query set"):
        robustness_report(bm25, ds.queries, ds.qrels, variations=other)
    with pytest.raises(LimelightError, match="neither a Stage"):
        robustness_report({"x": 3}, ds.queries, ds.qrels, methods="RandOrderSwap")
