"""The deterministic exposure-balancing re-ranker (issue 45, item 5): hand-computed cases,
properties (order within a group, idempotence, λ = 0 is the ranker) and its curve on a real
judged store against the Plackett-Luce curve's figures at T = 0."""

from __future__ import annotations

import numpy as np
import pytest

from limelight.data import load_dataset
from limelight.errors import LimelightError
from limelight.exposure.balance import balance_curve, balance_ranks
from limelight.exposure.fairness import Groups, Merit, fairness_from_pairs, policy_curve

# four documents: 0, 1 in X; 2, 3 in Y; one query ranking 0, 1, 2, 3
XY = Groups.from_values(["X", "X", "Y", "Y"])
Q1 = np.zeros(4, dtype=np.int64)
D1 = np.array([0, 1, 2, 3])
R1 = np.array([1, 2, 3, 4])


def test_strength_zero_is_the_ranker():
    assert balance_ranks(Q1, D1, R1, XY, 0.0).tolist() == [1, 2, 3, 4]


def test_reaches_the_target_on_a_tiny_case():
    # only ranks 1-2 count (cutoff:2), target ½ ½, λ = 1. k = 1: M = 1, each group owed ½ < μ = 1:
    # the ranker's 0. k = 2: M = 2, Y owed 1 ≥ μ = 1: Y's best, 2. k = 3, 4: μ = 0, nobody owed
    # more than 0: the ranker's order, 1 then 3.
    new = balance_ranks(Q1, D1, R1, XY, 1.0, np.array([0.5, 0.5]), "cutoff:2")
    assert new.tolist() == [1, 3, 2, 4]
    before = fairness_from_pairs(Q1, D1, R1, np.ones(1), XY, None, "size", "cutoff:2", n_boot=0, top=0)
    after = fairness_from_pairs(Q1, D1, new, np.ones(1), XY, None, "size", "cutoff:2", n_boot=0, top=0)
    assert before.summary["tvd"]["value"] == pytest.approx(0.5)
    assert after.summary["tvd"]["value"] == 0.0
    assert after.groups["gap"].abs().max() == 0.0


def test_half_strength_by_hand():
    # X X X Y Y Y with DCG weights μ = 1, .631, .5, .431, .387, .356, target ½ ½, λ = ½:
    # k = 1: owed ¼ each < 1 → 0 (X). k = 2: M = 1.631, Y owed .408 < .631 → 1 (X).
    # k = 3: M = 2.131, Y owed .533 ≥ .5 → 3 (Y). k = 4: M = 2.562, Y owed .640 − .5 = .140,
    # X owed < 0 → 2 (X). k = 5: M = 2.949, Y owed .737 − .5 = .237 < .387 → 4 (Y, the ranker's
    # next). k = 6: 5.
    g = Groups.from_values(list("XXXYYY"))
    new = balance_ranks(np.zeros(6, np.int64), np.arange(6), np.arange(1, 7), g, 0.5,
                        np.array([0.5, 0.5]), "dcg")
    assert new.tolist() == [1, 2, 4, 3, 5, 6]


def test_no_op_when_the_target_is_met():
    # target: everything to X. X holds every prefix's exposure while it has candidates; then
    # only Y is left: the ranking does not change
    assert balance_ranks(Q1, D1, R1, XY, 1.0, np.array([1.0, 0.0])).tolist() == [1, 2, 3, 4]


def _random_log(rng, n_docs=40, n_queries=30, depth=12):
    q, d, r = [], [], []
    for i in range(n_queries):
        k = int(rng.integers(1, depth + 1))
        docs = rng.choice(n_docs, size=k, replace=False)
        q += [i] * k
        d += docs.tolist()
        r += list(range(1, k + 1))
    return np.array(q), np.array(d), np.array(r)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_order_within_a_group_is_kept_and_reranking_is_idempotent(seed):
    rng = np.random.default_rng(seed)
    q, d, r = _random_log(rng)
    g = Groups.from_values(rng.choice(list("abcd"), size=40, p=[0.55, 0.25, 0.15, 0.05]).tolist())
    code = g.matrix.indices
    for lam in (0.3, 0.7, 1.0):
        new = balance_ranks(q, d, r, g, lam)
        moved = 0
        for i in range(q.max() + 1):
            rows = np.flatnonzero(q == i)
            assert sorted(new[rows].tolist()) == list(range(1, len(rows) + 1))  # a permutation
            for grp in np.unique(code[d[rows]]):
                mine = rows[code[d[rows]] == grp]
                assert (np.diff(new[mine]) > 0).all()  # the group's order is the ranker's
            moved += int((new[rows] != r[rows]).sum())
        # re-ranking the re-ranked lists changes nothing (their pairs given in the new order)
        order = np.lexsort((new, q))
        again = balance_ranks(q[order], d[order], new[order], g, lam)
        assert (again == new[order]).all()
        if lam == 1.0:
            assert moved > 0


def test_bad_settings_are_one_line_errors():
    with pytest.raises(LimelightError, match="strength must lie in"):
        balance_ranks(Q1, D1, R1, XY, 1.5)
    with pytest.raises(LimelightError, match="one group per document"):
        balance_ranks(Q1, D1, R1, Groups.from_labels([["X"], ["X", "Y"], ["Y"], ["Y"]], "multi"), 0.5)
    with pytest.raises(LimelightError, match="one share"):
        balance_ranks(Q1, D1, R1, XY, 0.5, np.array([1.0]))


@pytest.fixture(scope="module")
def cranfield_store(tmp_path_factory):
    from limelight.exposure import compute_exposure
    from limelight.retrieval.bm25 import BM25, BM25Index

    ds = load_dataset("cranfield")
    root = tmp_path_factory.mktemp("balance")
    store = compute_exposure(BM25(BM25Index.build(ds.collection)), ds.queries, root / "bm25", depth=50)
    return ds, store


def test_curve_starts_at_the_ranker_and_moves_exposure(cranfield_store):
    ds, store = cranfield_store
    g = Groups.from_values([f"d{int(x) % 3}" for x in ds.collection.ids.strings], "id mod 3")
    merit = Merit.from_qrels(ds.qrels, store, "cranfield qrels")
    curve = balance_curve(store, g, merit, [0.0, 0.5, 1.0])
    pl = policy_curve(store, g, merit, [0.0], n_samples=4, seed=0).iloc[0]
    c0 = curve.iloc[0]
    for k in ("tvd", "largest_deficit", "ndcg@10", "r@100"):
        assert c0[k] == pytest.approx(pl[k], abs=1e-12)
    assert c0["moved"] == 0.0
    assert curve.iloc[2]["moved"] > 0.0
    # the depth is 50: every re-ranking keeps the top 50, and R@100 with it
    assert np.allclose(curve["r@100"].to_numpy(), c0["r@100"], rtol=0, atol=1e-12)
    assert curve.iloc[2]["ndcg@10"] < c0["ndcg@10"]
    assert balance_curve(store, g, merit, [0.5]).iloc[0].equals(curve.iloc[1])
