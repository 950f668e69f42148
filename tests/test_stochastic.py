"""Plackett-Luce policies over a ranker (limelight.exposure.stochastic): Monte-Carlo against the
exact enumeration, T → 0 and T = inf, seeding and block invariance, a real store (adi × the log)
and the expected EE/nDCG of a policy against the deterministic evaluation at T = 0."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from limelight.data import load_query_log
from limelight.errors import LimelightError
from limelight.evaluation import evaluate
from limelight.evaluation.expected_exposure import evaluate_exposure, expected_ndcg
from limelight.exposure import compute_exposure
from limelight.exposure.stochastic import (
    cutoff_weights,
    expected_weights,
    padded_from_run,
    policy_expectations,
    rbp_weights,
    sample_rankings,
    score_scale,
    stochastic_pairs_exposure,
    stochastic_store_exposure,
)


@pytest.fixture(scope="module")
def adi(adi, adi_bm25):
    return adi, adi_bm25, adi_bm25.retrieve(adi.queries, 30)  # conftest's adi, BM25, its top 30


def _exact_pl(docs, scores, t, w):
    """Expectations by enumerating every ranking with its Plackett-Luce probability."""
    sig = score_scale(docs, scores)
    out = np.zeros((w.shape[0], *docs.shape))
    for i in range(len(docs)):
        nv = int((docs[i] >= 0).sum())
        x = scores[i, :nv] / (t * sig[i])
        for perm in itertools.permutations(range(nv)):
            p, rem = 1.0, list(range(nv))
            for j in perm:
                p *= np.exp(x[j]) / np.exp(x[rem]).sum()
                rem.remove(j)
            for r, j in enumerate(perm):
                out[:, i, j] += p * w[:, r]
    return out


def test_monte_carlo_matches_exact_plackett_luce(adi):
    _, _, run = adi
    docs, scores = padded_from_run(run, 4)
    docs, scores = docs[:6], scores[:6]
    w = np.stack([rbp_weights(4, 0.5), cutoff_weights(4, 2)])
    for t in (0.5, 2.0):
        exact = _exact_pl(docs, scores, t, w)
        mc = expected_weights(docs, scores, t, w, 40_000, seed=5)
        assert np.abs(mc - exact).max() < 0.01
        # expectations of a probability: each row's P(rank ≤ 2) sums to 2 (rows of ≥ 2 docs)
        assert mc[1].sum(axis=1) == pytest.approx(np.minimum((docs >= 0).sum(axis=1), 2))


def test_temperature_limits(adi):
    _, _, run = adi
    docs, scores = padded_from_run(run, 20)
    w = np.stack([rbp_weights(20, 0.5)])
    det = expected_weights(docs, scores, 0, w)
    # T = 0 is the ranking itself
    assert np.array_equal(det[0], np.where(docs >= 0, w[0][None, :], 0.0))
    # T → 0 converges to it on rows without tied scores (ties are shuffled in the PL limit)
    valid = docs >= 0
    untied = ~((np.diff(np.where(valid, scores, -1e300), axis=1) == 0) & valid[:, 1:]).any(axis=1)
    assert untied.sum() >= 5
    cold = expected_weights(docs[untied], scores[untied], 1e-6, w, 50, seed=1)
    np.testing.assert_allclose(cold, det[:, untied], atol=1e-12)
    # every sampled ranking at T → 0 is the deterministic one
    s = sample_rankings(docs[untied], scores[untied], 1e-6, 10, seed=2)
    assert (s == docs[untied][:, None, :]).all()
    # T = inf: every document gets the mean weight of its row's positions
    hot = expected_weights(docs, scores, np.inf, w)
    nv = valid.sum(axis=1)
    mean = np.array([w[0][:n].mean() for n in nv])
    np.testing.assert_allclose(hot[0], np.where(valid, mean[:, None], 0.0))
    with pytest.raises(LimelightError, match="temperature"):
        expected_weights(docs, scores, -1, w)


def test_seeded_and_equal_to_the_sampled_rankings(adi):
    _, _, run = adi
    docs, scores = padded_from_run(run, 10)
    w = np.stack([rbp_weights(10, 0.8)])
    a = expected_weights(docs, scores, 1.0, w, 64, seed=3)
    b = expected_weights(docs, scores, 1.0, w, 64, seed=3)
    c = expected_weights(docs, scores, 1.0, w, 64, seed=4)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    # the kernel's expectations are the means over exactly the rankings sample_rankings draws
    rk = sample_rankings(docs, scores, 1.0, 64, seed=3)
    pos = (rk[:, :, :, None] == docs[:, None, None, :])  # (q, s, rank, column)
    manual = (pos * w[0][None, None, :, None]).sum(axis=2).mean(axis=1)
    np.testing.assert_allclose(a[0], np.where(docs >= 0, manual, 0.0), atol=1e-12)


def test_weights_on_the_top_ranks_only_sort_those_alone(adi):
    """Position weights that end before a row's length (a policy over a deep pool of which only
    the top few are shown) take the kernel's partial sort: the same expectations as the means
    over the full rankings ``sample_rankings`` draws."""
    _, _, run = adi
    docs, scores = padded_from_run(run, 30)
    w = np.stack([np.where(np.arange(30) < 4, rbp_weights(30, 0.8), 0.0), cutoff_weights(30, 6)])
    a = expected_weights(docs, scores, 1.0, w, 64, seed=3)
    rk = sample_rankings(docs, scores, 1.0, 64, seed=3)
    pos = (rk[:, :, :, None] == docs[:, None, None, :])  # (q, s, rank, column)
    for i in range(2):
        manual = (pos * w[i][None, None, :, None]).sum(axis=2).mean(axis=1)
        np.testing.assert_allclose(a[i], np.where(docs >= 0, manual, 0.0), atol=1e-12)
    assert (a[1] > 0).sum() > 6 * len(docs)  # documents below rank 6 do come up


@pytest.fixture(scope="module")
def adi_store(adi, tmp_path_factory):
    _, bm25, _ = adi
    log = load_query_log().head(3000)
    return compute_exposure(bm25, log, tmp_path_factory.mktemp("st") / "adi", depth=20,
                            shard_size=1024)


def test_store_at_zero_temperature_is_retrievability(adi_store):
    st = adi_store
    res = stochastic_store_exposure(st, 0, c=5, gamma=0.5)
    np.testing.assert_allclose(res.r, st.retrievability(c=5).r, rtol=1e-12)
    # deterministic expected exposure: Σ_q o_q γ^(rank−1), recomputed per pair
    q, d, rank, _ = st.pair_arrays()
    ex = np.bincount(d, weights=st.queries.weights[q] * 0.5 ** (rank - 1.0), minlength=len(st.doc_ids))
    np.testing.assert_allclose(res.exposure, ex, rtol=1e-12)
    assert res.gini == pytest.approx(st.retrievability(c=5).gini)
    with pytest.raises(LimelightError, match="depth"):
        stochastic_store_exposure(st, 1.0, c=50)


def test_store_stochastic_block_invariant_and_flattening(adi_store):
    st = adi_store
    q, d, rank, score = st.pair_arrays()
    w = st.queries.weights
    a = stochastic_pairs_exposure(q, d, rank, score, w, len(st.doc_ids), 1.0, c=5, n_samples=16,
                                  seed=9, block=4096)
    b = stochastic_pairs_exposure(q, d, rank, score, w, len(st.doc_ids), 1.0, c=5, n_samples=16,
                                  seed=9, block=37)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    # the expected number of top-5 places is conserved; warmer policies spread it more evenly
    det = stochastic_store_exposure(st, 0, c=5)
    warm = stochastic_store_exposure(st, 5.0, c=5, n_samples=16)
    assert warm.r.sum() == pytest.approx(det.r.sum(), rel=1e-9)
    assert warm.gini < det.gini


def test_policy_at_zero_temperature_matches_evaluation(adi):
    ds, _, run = adi
    n = len(ds.collection)
    pol = policy_expectations(run, 0, k=30, gamma=0.5, c=10)
    det = evaluate(run, ds.qrels, "EE-L EE-D EE-R nDCG@10", n_docs=n)
    sto = evaluate_exposure(pol.exposure, ds.qrels, "EE-L EE-D EE-R", n_docs=n)
    for m in sto.per_query:
        np.testing.assert_allclose(sto.per_query[m], det.per_query[m], atol=1e-12)
    _, nd = expected_ndcg(pol.dcg, ds.qrels, 10, n_docs=n)
    np.testing.assert_allclose(nd, det.to_pandas()["nDCG@10"].to_numpy(), atol=1e-12)
    # a warm policy costs nDCG@10 on average and lowers the disparity EE-D
    warm = policy_expectations(run, 2.0, k=30, n_samples=200, seed=1)
    _, nd_w = expected_ndcg(warm.dcg, ds.qrels, 10, n_docs=n)
    ee_w = evaluate_exposure(warm.exposure, ds.qrels, "EE-D", n_docs=n)
    assert nd_w.mean() < nd.mean()
    assert ee_w["EE-D"] < det["EE-D"]


def test_topk_arrays_equal_store_pairs(adi_store):
    from limelight.exposure.stochastic import stochastic_topk_exposure

    st = adi_store
    q, d, rank, score = st.pair_arrays()
    k = st.depth
    docs = np.full((len(st.queries), k), -1, dtype=np.int32)
    sc = np.full((len(st.queries), k), -np.inf)
    docs[q, rank - 1] = d
    sc[q, rank - 1] = score
    w = st.queries.weights
    a = stochastic_pairs_exposure(q, d, rank, score, w, len(st.doc_ids), 0.7, c=5, n_samples=8, seed=2)
    b = stochastic_topk_exposure(docs, sc, w, len(st.doc_ids), 0.7, c=5, n_samples=8, seed=2, block=100)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
