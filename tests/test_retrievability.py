"""Retrievability, Gini, Lorenz, bootstrap and group retrievability (limelight.exposure)."""

from __future__ import annotations

import json

import bm25s
import numpy as np
import pytest
import scipy.sparse as sp

from limelight.data import IdMap, load_catalog, load_query_log
from limelight.errors import FormatError, LimelightError
from limelight.exposure import (
    DCG,
    RBP,
    Cutoff,
    Exhaustive,
    analyse,
    analyse_pairs,
    gini,
    lorenz,
    parse_browsing_model,
    rank_matrix,
    ranks_from_trec_run,
    read_doc_ids,
    retrievability,
    retrievable_fraction,
    to_rho,
)
from limelight.exposure.retrievability import (
    bootstrap_gini,
    group_retrievability,
    paired_bootstrap_gini,
)

# ---- Gini ---------------------------------------------------------------------------------


def mad_gini(r: np.ndarray) -> float:
    """The O(N²) mean-absolute-difference definition: ΣΣ|r_i − r_j| / (2 N² mean)."""
    r = np.asarray(r, dtype=np.float64)
    return float(np.abs(r[:, None] - r[None, :]).sum() / (2 * len(r) ** 2 * r.mean()))


def test_gini_all_equal_is_zero():
    assert gini(np.full(1000, 3.7)) == pytest.approx(0.0, abs=1e-12)
    assert gini(np.zeros(50)) == 0.0


@pytest.mark.parametrize("n", [1, 2, 10, 63666])
def test_gini_one_hot(n):
    r = np.zeros(n)
    r[n // 3] = 5.0
    assert gini(r) == pytest.approx(1 - 1 / n, abs=1e-12)


def test_gini_equals_mean_absolute_difference_and_order_invariant():
    rng = np.random.default_rng(7)
    for n, dist in [(2, "exp"), (17, "int"), (500, "exp"), (1500, "zipf")]:
        if dist == "exp":
            r = rng.exponential(size=n)
        elif dist == "int":
            r = rng.integers(0, 4, size=n).astype(float)
        else:
            r = rng.zipf(1.7, size=n).astype(float) * (rng.random(n) < 0.6)
        g = gini(r)
        assert g == pytest.approx(mad_gini(r), rel=1e-10, abs=1e-12)
        assert gini(rng.permutation(r)) == pytest.approx(g, rel=1e-12, abs=1e-15)
        assert gini(r * 13.5) == pytest.approx(g, rel=1e-10, abs=1e-15)  # scale invariant


def test_gini_rejects_bad_input():
    with pytest.raises(LimelightError):
        gini(np.array([]))
    with pytest.raises(LimelightError):
        gini(np.array([1.0, -1.0]))


def test_lorenz_curve_and_its_area():
    rng = np.random.default_rng(3)
    r = rng.exponential(size=999) * (rng.random(999) < 0.7)
    x, y = lorenz(r)
    assert x[0] == y[0] == 0 and x[-1] == pytest.approx(1) and y[-1] == pytest.approx(1)
    assert np.all(np.diff(y) >= -1e-15) and np.all(y <= x + 1e-12)  # convex, below equality
    area = np.trapezoid(y, x)
    assert 1 - 2 * area == pytest.approx(gini(r), rel=1e-9)


def test_retrievable_fraction():
    assert retrievable_fraction(np.array([0, 0, 1.0, 2.0])) == 0.5


# ---- browsing models ------------------------------------------------------------------------


def test_browsing_models_use_zero_based_rho():
    ranks = np.array([1, 2, 3, 10, 11])
    assert to_rho(ranks).tolist() == [0, 1, 2, 9, 10]
    np.testing.assert_allclose(RBP(0.5).weights(ranks), [1, 0.5, 0.25, 0.5**9, 0.5**10])
    np.testing.assert_allclose(DCG().weights(ranks), 1 / np.log2(ranks + 1))
    np.testing.assert_allclose(Exhaustive().weights(ranks), 1)
    np.testing.assert_allclose(Cutoff(10).weights(ranks), [1, 1, 1, 1, 0])
    assert Cutoff(3).weights(np.array([0, 3, 4])).tolist() == [0, 1, 0]  # 0 = not retrieved
    assert parse_browsing_model("rbp:0.9") == RBP(0.9)
    assert parse_browsing_model("cutoff:5") == Cutoff(5)
    with pytest.raises(LimelightError):
        to_rho(np.array([0]))
    with pytest.raises(LimelightError):
        RBP(1.5)
    with pytest.raises(LimelightError):
        parse_browsing_model("pareto")


# ---- retrievability on a real run -------------------------------------------------------------


@pytest.fixture(scope="module")
def movies_run():
    """BM25 (bm25s, Lucene variant) top 50 of 4,000 log queries over the movies catalog."""
    coll = load_catalog("movies")
    model = bm25s.BM25(k1=0.9, b=0.4)
    model.index(bm25s.tokenize(coll.texts.tolist(), stopwords="en", show_progress=False),
                show_progress=False)
    qs = load_query_log().head(4000)
    toks = bm25s.tokenize(qs.texts.tolist(), stopwords="en", return_ids=False, show_progress=False)
    docs, scores = model.retrieve(toks, k=50, show_progress=False, n_threads=1)
    docs = np.where(scores > 0, docs, -1).astype(np.int32)
    mask = docs >= 0
    rank = np.cumsum(mask, axis=1)
    q = np.broadcast_to(np.arange(len(qs))[:, None], docs.shape)
    return coll, qs, q[mask], docs[mask], rank[mask]


def naive_r(q, d, rank, w, n_docs, c, beta=None):
    r = np.zeros(n_docs)
    for qi, di, k in zip(q.tolist(), d.tolist(), rank.tolist(), strict=True):
        if k <= c:
            r[di] += w[qi] * (1 / k**beta if beta else 1)
    return r


def test_retrievability_matches_naive_loop(movies_run):
    coll, qs, q, d, rank = movies_run
    m = rank_matrix(q, d, rank, len(coll), len(qs))
    assert m.shape == (len(coll), len(qs)) and m.nnz == len(q)
    for c, beta in [(10, None), (50, None), (20, 0.5), (50, 1.0)]:
        want = naive_r(q, d, rank, qs.weights, len(coll), c, beta)
        np.testing.assert_allclose(retrievability(m, qs.weights, c, beta), want, rtol=1e-12)
        res = analyse_pairs(q, d, rank, coll.ids, qs.weights, c, beta)
        np.testing.assert_allclose(res.r, want, rtol=1e-12)
        assert res.gini == pytest.approx(mad_gini(want), rel=1e-9)


def test_all_documents_count_and_retrieved_only_gini_is_separate(movies_run):
    coll, qs, q, d, rank = movies_run
    res = analyse(rank_matrix(q, d, rank, len(coll), len(qs)), coll.ids, qs.weights, c=10)
    assert res.n_docs == len(coll) == len(res.r)
    retrieved = np.bincount(d, minlength=len(coll)) > 0
    assert not retrieved.all()  # some films are never retrieved: they must count with r = 0
    assert res.gini == pytest.approx(gini(res.r))
    assert res.gini_retrieved_only == pytest.approx(gini(res.r[retrieved]))
    assert res.gini > res.gini_retrieved_only
    assert res.retrievable_fraction == pytest.approx((res.r > 0).mean())
    assert 0 < res.retrievable_fraction < 1


def test_bootstrap_ci_and_paired_test(movies_run):
    coll, qs, q, d, rank = movies_run
    m = rank_matrix(q, d, rank, len(coll), len(qs))
    b1 = bootstrap_gini(m, qs.weights, c=10, n_boot=200, seed=1)
    b2 = bootstrap_gini(m, qs.weights, c=10, n_boot=200, seed=1)
    np.testing.assert_array_equal(b1["samples"], b2["samples"])  # reproducible
    assert b1["low"] < b1["gini"] < b1["high"]
    assert b1["high"] - b1["low"] < 0.05
    same = paired_bootstrap_gini(m, m, qs.weights, c=10, n_boot=100, seed=0)
    assert same["diff"] == 0 and same["p_value"] == 1.0
    # a shallower cutoff is a (much) more unequal system on the same queries
    m5 = sp.csr_matrix((np.where(m.data <= 2, m.data, 0), m.indices.copy(), m.indptr.copy()),
                       shape=m.shape)
    m5.eliminate_zeros()
    t = paired_bootstrap_gini(m5, m, qs.weights, c=10, n_boot=200, seed=0)
    assert t["diff"] > 0 and t["low"] > 0 and t["p_value"] < 0.01
    assert t["gini_a"] == pytest.approx(analyse(m5, coll.ids, qs.weights, c=10).gini)


def test_group_retrievability(movies_run):
    coll, qs, q, d, rank = movies_run
    res = analyse_pairs(q, d, rank, coll.ids, qs.weights, c=10)
    g = group_retrievability(res.r, coll.fields["Major Genre"])
    has = np.array([v is not None for v in coll.fields["Major Genre"]])
    assert g["n_docs"].sum() == has.sum()
    assert g["r_sum"].sum() == pytest.approx(res.r[has].sum())
    drama = g.set_index("group").loc["Drama"]
    sel = coll.fields["Major Genre"] == "Drama"
    assert drama["r_mean"] == pytest.approx(res.r[sel].mean())
    assert list(g["r_mean"]) == sorted(g["r_mean"], reverse=True)
    # list-valued fields (debian tags) count a document in each of its groups; JSON strings too
    r = np.array([1.0, 2.0, 0.0])
    gl = group_retrievability(r, [["a", "b"], json.dumps(["b"]), None]).set_index("group")
    assert gl.loc["b", "r_sum"] == 3.0 and gl.loc["a", "n_docs"] == 1


# ---- from a TREC run file --------------------------------------------------------------------


def test_trec_run_file_ranks_by_score_and_docs_list(tmp_path):
    """One reader, one rule (issue 52): a run's documents are ranked by score, as ``evaluate``
    and ``exposure compute --run`` rank them, whatever its rank column says."""
    run = tmp_path / "run.txt"
    # scores deliberately disagree with the rank column: by score q1 is b, c, a
    run.write_text("q1 Q0 a 1 0.1 t\nq1 Q0 b 2 0.9 t\nq1 Q0 c 3 0.5 t\nq2 Q0 b 1 3 t\n")
    docs = tmp_path / "docs.txt"
    docs.write_text("a\nb\nc\nd\ne\n")
    ranks, dmap, qmap = ranks_from_trec_run(run, read_doc_ids(docs))
    res = analyse(ranks, dmap, None, c=2)
    assert dict(zip(dmap, res.r.tolist(), strict=True)) == {"a": 0, "b": 2, "c": 1, "d": 0, "e": 0}
    assert res.n_docs == 5
    res_g = analyse(ranks, dmap, None, c=3, beta=1.0)
    assert res_g.r[dmap.lookup("a")] == pytest.approx(1 / 3)
    # docs.jsonl works as a docs list too
    jl = tmp_path / "docs.jsonl"
    jl.write_text("".join(json.dumps({"id": x, "text": "t"}) + "\n" for x in "abcdef"))
    assert len(read_doc_ids(jl)) == 6
    # a run document missing from the list, duplicates, a NaN score: one-line errors
    with pytest.raises(LimelightError, match="unknown document id 'c'"):
        ranks_from_trec_run(run, IdMap(["a", "b"], "document"))
    dup = tmp_path / "dup.txt"
    dup.write_text("q1 Q0 a 1 1 t\nq1 Q0 a 2 1 t\n")
    with pytest.raises(LimelightError, match="duplicate"):
        ranks_from_trec_run(dup)
    nan = tmp_path / "nan.txt"
    nan.write_text("q1 Q0 a 1 1 t\nq1 Q0 b 2 nan t\n")
    with pytest.raises(LimelightError, match=f"{nan}:2: .*not a finite number"):
        ranks_from_trec_run(nan)


def test_weights_are_validated():
    m = rank_matrix(np.array([0, 1]), np.array([0, 0]), np.array([1, 2]), 2, 2)
    with pytest.raises(LimelightError):
        retrievability(m, np.array([1.0, -1.0]))
    with pytest.raises(LimelightError):
        retrievability(m, np.array([1.0, np.nan]))
    with pytest.raises(LimelightError):
        retrievability(m, np.array([1.0]))
    with pytest.raises(LimelightError):
        rank_matrix(np.array([0, 0]), np.array([1, 1]), np.array([1, 2]), 2, 1)  # duplicate pair


def test_doc_id_file_not_utf8_names_its_line(tmp_path):
    p = tmp_path / "ids.txt"
    p.write_bytes(b"d1\nd\xe92\n")
    with pytest.raises(FormatError, match=r"ids.txt:2: not UTF-8 text"):
        read_doc_ids(p)
