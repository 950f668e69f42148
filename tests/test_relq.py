"""RELQ (Li et al. eq. 1-4): definitions, vectorized form, parsing."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from limelight.errors import LimelightError
from limelight.exposure.browsing import DCG, RBP, Exhaustive
from limelight.exposure.relq import RELQ, TABLE2, parse_relq, relq, relq_many


def _relq_loops(retrieved, exposing, gqd, gdq, n):
    """Eq. 3 written out with explicit loops (RBP, RBP), 0-based ranks."""
    num = sum(gdq ** i * (gqd ** (exposing[q] - 1) if q in exposing else 0.0)
              for i, q in enumerate(retrieved[:n]))
    ideal = sorted(exposing.values())[:n]
    den = sum(gdq ** j * gqd ** (r - 1) for j, r in enumerate(ideal))
    return num / den


def test_rbp_rbp_matches_equation_3():
    exposing = {"a": 1, "b": 7, "c": 3, "d": 100}
    retrieved = ["x", "c", "a", "y", "d"]
    for g1, g2 in [(0.5, 0.5), (0.5, 0.9), (0.8, 0.3)]:
        got = relq(retrieved, exposing, RELQ(RBP(g1), RBP(g2)))
        assert got == pytest.approx(_relq_loops(retrieved, exposing, g1, g2, 100), rel=1e-12)


def test_exh_ndcg_is_dcg_gain_of_found_queries():
    exposing = {"a": 1, "b": 4, "c": 10}
    m = parse_relq("RELQ(EXH,NDCG)")
    assert isinstance(m.mu_dq, Exhaustive) and isinstance(m.mu_qd, DCG)
    got = relq(["b", "zz", "c"], exposing, m)
    g = {q: 1 / math.log2(r + 1) for q, r in exposing.items()}  # 1/log2(ρ+2), ρ = r-1
    assert got == pytest.approx((g["b"] + g["c"]) / sum(g.values()))


def test_brute_force_list_scores_one_and_order_matters():
    rng = np.random.default_rng(3)
    ranks = rng.integers(1, 101, size=40)
    exposing = {f"q{i}": int(r) for i, r in enumerate(ranks)}
    ideal = sorted(exposing, key=exposing.get)
    for m in TABLE2:
        assert relq(ideal, exposing, m) == pytest.approx(1.0)
    worst = ideal[::-1]
    assert relq(worst, exposing, "RELQ(0.5,0.9)") < relq(ideal, exposing, "RELQ(0.5,0.9)")
    # an exhaustive EQI user and a patient searcher only care about the set
    assert relq(worst, exposing, "RELQ(1,1)") == pytest.approx(1.0)
    assert relq(worst[:20], exposing, "RELQ(1,1)") == pytest.approx(20 / 40)


def test_no_exposing_query_is_nan_and_cut_at_n():
    assert math.isnan(relq(["a"], {}, "RELQ(0.5,0.5)"))
    exposing = {f"q{i}": 1 for i in range(5)}
    m = RELQ(RBP(1.0), RBP(1.0), n_dq=2)
    assert relq(["q0", "q1", "q2"], exposing, m) == pytest.approx(1.0)
    assert str(m) == "RELQ(1,1)@2"


def test_relq_many_equals_one_at_a_time():
    rng = np.random.default_rng(0)
    m, nq, k = 60, 500, 30
    truth = sp.random(m, nq, density=0.05, random_state=1, format="csr")
    truth.data = rng.integers(1, 101, size=truth.nnz).astype(np.float64)
    truth = truth.tolil()
    truth[5] = 0  # a document without exposing queries
    truth = sp.csr_matrix(truth)
    retrieved = np.stack([rng.permutation(nq)[:k] for _ in range(m)]).astype(np.int32)
    retrieved[3, 10:] = -1
    got = relq_many(retrieved, truth, TABLE2)
    for i in range(m):
        row = truth[i]
        exposing = {int(q): int(r) for q, r in zip(row.indices, row.data, strict=True) if r > 0}
        lst = [int(q) for q in retrieved[i] if q >= 0]
        for me in TABLE2:
            want = relq(lst, exposing, me)
            if math.isnan(want):
                assert math.isnan(got[str(me)][i])
            else:
                assert got[str(me)][i] == pytest.approx(want, rel=1e-12)


def test_names_roundtrip_and_errors():
    assert [str(m) for m in TABLE2] == ["RELQ(0.5,0.5)", "RELQ(0.5,0.9)", "RELQ(1,1)", "RELQ(EXH,NDCG)"]
    for m in TABLE2:
        assert parse_relq(str(m)) == m
    assert parse_relq("relq(0.5, 0.9)") == RELQ(RBP(0.5), RBP(0.9))
    for bad in ("RELQ(0.5)", "NDCG@10", "RELQ(2,0.5)", "RELQ(foo,0.5)"):
        with pytest.raises(LimelightError):
            parse_relq(bad)
    with pytest.raises(LimelightError, match="repeats"):
        relq(["a", "a"], {"a": 1}, "RELQ(0.5,0.5)")
    with pytest.raises(LimelightError, match="repeats"):
        relq_many(np.array([[1, 1]]), sp.csr_matrix(np.ones((1, 3))), "RELQ(0.5,0.5)")
