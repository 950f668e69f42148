"""Significance tests, multiple-comparison corrections, MC4 and Kendall's τ."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as st

from limelight.evaluation.stats import (
    discriminative_power,
    holm,
    kendall_tau,
    mc4,
    paired_t,
    sign_test,
    tukey_hsd,
    wilcoxon,
    win_tie_loss,
)


def test_sign_test_is_the_exact_two_sided_binomial():
    assert sign_test(0, 0) == 1.0
    assert sign_test(9, 1) == pytest.approx(2 * sum(st.binom.pmf(k, 10, 0.5) for k in (0, 1, 9, 10)) / 2)
    assert sign_test(10, 0) == pytest.approx(2 * 0.5 ** 10)
    assert sign_test(5, 5) == 1.0


def test_holm_bonferroni_adjustment():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted: .005*4=.02, .01*3=.03, .03*2=.06, .04*1=.04 -> monotone: .02 .03 .06 .06
    assert holm(p).tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.9, 0.8]).tolist() == pytest.approx([1.0, 1.0])


def test_paired_tests_match_scipy_and_handle_identical_inputs():
    rng = np.random.default_rng(1)
    x = rng.random(30)
    y = x + rng.normal(0.05, 0.1, 30)
    assert paired_t(x, y) == pytest.approx(st.ttest_rel(x, y).pvalue)
    assert wilcoxon(x, y) == pytest.approx(st.wilcoxon(x - y).pvalue)
    assert paired_t(x, x) == 1.0 and wilcoxon(x, x) == 1.0


def test_tukey_hsd_two_way_anova_separates_a_clearly_better_system():
    rng = np.random.default_rng(0)
    topic = rng.random(50)
    scores = np.stack([topic + rng.normal(0, 0.05, 50), topic + rng.normal(0, 0.05, 50),
                       topic + 0.2 + rng.normal(0, 0.05, 50)])
    p = tukey_hsd(scores)
    assert p.shape == (3, 3) and np.allclose(p, p.T) and np.all(np.diag(p) == 1)
    assert p[0, 2] < 1e-6 and p[1, 2] < 1e-6 and p[0, 1] > 0.05
    # with one topic effect only, the HSD equals scipy's one-way HSD on topic-centred scores
    k, n = scores.shape
    resid_df = (k - 1) * (n - 1)
    centred = scores - scores.mean(axis=0, keepdims=True)
    q = abs(centred[0].mean() - centred[2].mean()) / np.sqrt(
        ((centred - centred.mean(axis=1, keepdims=True)) ** 2).sum() / resid_df / n)
    assert p[0, 2] == pytest.approx(st.studentized_range.sf(q, k, resid_df), rel=1e-6, abs=1e-12)
    assert discriminative_power(p) == pytest.approx(2 / 3)


def _prefs_from_order(order_scores: np.ndarray) -> np.ndarray:
    """(k, k, nq) preferences from per-query scores."""
    return np.sign(order_scores[:, None, :] - order_scores[None, :, :]).astype(np.int8)


def test_mc4_recovers_a_majority_order_and_kendall_tau():
    rng = np.random.default_rng(3)
    strength = np.array([0.0, 3.0, 1.0, 2.0])
    scores = strength[:, None] + rng.normal(0, 1.0, (4, 200))
    order, pi = mc4(_prefs_from_order(scores))
    assert order == [1, 3, 2, 0]
    assert pi.sum() == pytest.approx(1.0)
    assert kendall_tau(order, [1, 3, 2, 0]) == pytest.approx(1.0)
    assert kendall_tau(order, [0, 2, 3, 1]) == pytest.approx(-1.0)
    assert kendall_tau(["a", "b", "c"], ["a", "c", "b"]) == pytest.approx(1 / 3)
    # a Condorcet cycle: no strict order, MC4's stationary distribution is uniform
    cyc = np.zeros((3, 3, 3), dtype=np.int8)
    for q, (a, b, c) in enumerate([(0, 1, 2), (1, 2, 0), (2, 0, 1)]):
        for hi, lo in ((a, b), (a, c), (b, c)):
            cyc[hi, lo, q], cyc[lo, hi, q] = 1, -1
    _, pi = mc4(cyc)
    assert np.allclose(pi, 1 / 3)


def test_win_tie_loss_counts():
    scores = np.array([[1.0, 2.0, 3.0, 1.0], [0.0, 2.0, 4.0, 0.0]])
    out = win_tie_loss(_prefs_from_order(scores))
    ab = next(o for o in out if (o.a, o.b) == (0, 1))
    ba = next(o for o in out if (o.a, o.b) == (1, 0))
    assert (ab.wins, ab.ties, ab.losses) == (2, 1, 1)
    assert (ba.wins, ba.ties, ba.losses) == (1, 1, 2)
    assert ab.p_value == pytest.approx(sign_test(2, 1))


def test_vectorized_paired_t_matrix_equals_scipy_pair_by_pair():
    from scipy.special import stdtr

    from limelight.evaluation.stats import paired_t_matrix, t_two_sided

    rng = np.random.default_rng(3)
    for df in (1, 2, 5, 29, 92, 299, 1000):
        t = np.concatenate([rng.standard_normal(100) * s for s in (0.01, 1, 5, 50)] + [np.array([0.0, 1e6, np.inf])])
        np.testing.assert_allclose(t_two_sided(t, df), 2 * stdtr(df, -np.abs(t)), rtol=1e-11, atol=1e-14)
    for n in (2, 3, 10, 93, 300):
        x = rng.random((5, n))
        x[3] = x[2]  # identical runs: p = 1
        x[4] = x[2] + 0.25  # a constant difference: p = 0 (as paired_t)
        ref = np.array([[paired_t(x[i], x[j]) if i != j else 1.0 for j in range(5)] for i in range(5)])
        np.testing.assert_allclose(paired_t_matrix(x), ref, rtol=1e-11, atol=1e-13)
