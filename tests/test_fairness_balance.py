"""The deterministic exposure-balancing re-ranker (issue 45, item 5): hand-computed cases,
properties (order within a group, idempotence, λ = 0 is the ranker) and its curve on a real
judged store against the Plackett-Luce curve's figures at T = 0."""

from __future__ import annotations

import numpy as np
import pytest
from _shared import random_log

from limelight.errors import LimelightError
from limelight.exposure.balance import (
    balance_curve,
    balance_ranks,
    pool_policy_figures,
    ranking_figures,
    top_k_target,
)
from limelight.exposure.fairness import (
    Groups,
    Merit,
    fairness_from_pairs,
    policy_curve,
    ranking_effectiveness,
)

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


def _random_log(rng):
    """A random log of 1 to 12 documents of 40 for each of 30 queries."""
    return random_log(rng, n_docs=40, n_queries=30, depth=12, min_k=1)


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


# the deeper pool (issue 45): one query ranking 0, 1, 2, 3 with 0, 1, 2 in A and 3 in B
AB = Groups.from_values(["A", "A", "A", "B"])


def test_a_deeper_pool_lets_an_absent_group_enter_the_top_k():
    # target ½ ½, λ = 1, DCG weights μ = 1, .631, .5, .431, top k = 2 shown.
    # pool 2: the candidates 0, 1 are both A; the target, renormalized over the groups among the
    # candidates, is all A: nothing moves, B gets no exposure in the top 2.
    # pool 4: k = 1: M = 1, each owed ½ < μ = 1 → the ranker's 0 (A). k = 2: M = 1.631, B owed
    # .815 ≥ .631 → B's best, 3. Then (k > 2) the ranker's order of the rest: 1, 2.
    half = np.array([0.5, 0.5])
    small = balance_ranks(Q1, D1, R1, AB, 1.0, half, "dcg", pool=2, k=2)
    assert small.tolist() == [1, 2, 3, 4]
    deep = balance_ranks(Q1, D1, R1, AB, 1.0, half, "dcg", pool=4, k=2)
    assert deep.tolist() == [1, 3, 4, 2]
    # without k the greedy goes on below rank 2: k = 3: M = 2.131, A owed 1.066 − 1 = .066 < .5,
    # B owed 1.066 − .631 = .435 but B has no candidate left → the ranker's 1; k = 4: 2
    assert balance_ranks(Q1, D1, R1, AB, 1.0, half, "dcg", pool=4).tolist() == [1, 3, 4, 2]
    # a pool of 3 still lacks B: the top 2 stays A, A; pairs below the pool keep their rank
    assert balance_ranks(Q1, D1, R1, AB, 1.0, half, "dcg", pool=3, k=2).tolist() == [1, 2, 3, 4]
    # measured on the top 2 against the size target (B: 1 of 4 documents, ¼): B's deficit of ¼
    # turns into a surplus of .631 / 1.631 − ¼ with the deep pool
    for new, gap_b in ((small, -0.25), (deep, 1 / np.log2(3) / (1 + 1 / np.log2(3)) - 0.25)):
        shown = new <= 2
        res = fairness_from_pairs(Q1[shown], D1[shown], new[shown], np.ones(1), AB, None, "size",
                                  "dcg", n_boot=0, top=0)
        assert res.group("B")["gap"] == pytest.approx(gap_b)


def test_k_only_limits_where_the_greedy_rule_acts():
    rng = np.random.default_rng(3)
    q, d, r = _random_log(rng)
    g = Groups.from_values(rng.choice(list("abc"), size=40, p=[0.7, 0.2, 0.1]).tolist())
    full = balance_ranks(q, d, r, g, 1.0)
    for k in (1, 3, 5):
        part = balance_ranks(q, d, r, g, 1.0, k=k)
        assert ((full <= k) == (part <= k)).all() and (full[full <= k] == part[part <= k]).all()
        for i in range(q.max() + 1):  # below k: the ranker's order of what is left
            rows = np.flatnonzero((q == i) & (part > k))
            assert (np.diff(part[rows][np.argsort(r[rows])]) > 0).all()
    with pytest.raises(LimelightError, match="pool"):
        balance_ranks(Q1, D1, R1, XY, 0.5, pool=0)
    with pytest.raises(LimelightError, match="k must be"):
        balance_ranks(Q1, D1, R1, XY, 0.5, k=0)


def test_top_k_figures_agree_with_the_fairness_module(cranfield_store):
    """The intervention's fast figures over a candidate pool shown down to rank k are the
    fairness module's: at k = the store's depth ``policy_curve``'s, at k = 10 those of
    ``fairness_from_pairs`` and ``ranking_effectiveness`` over the pairs shown."""
    ds, store = cranfield_store
    g = Groups.from_values([f"d{int(x) % 3}" for x in ds.collection.ids.strings], "id mod 3")
    gs = {"g": g}
    merit = Merit.from_qrels(ds.qrels, store, "cranfield qrels")
    q, d, rank, score = store.pair_arrays()
    w = store.queries.weights
    tk = top_k_target(q, w, merit, gs, store.depth)
    pl = policy_curve(store, g, merit, [0.0, 1.0], n_samples=4, seed=0)
    for i, t in enumerate((0.0, 1.0)):
        f = pool_policy_figures(tk, gs, q, d, rank, score, t, n_samples=4, seed=0)
        for key in ("tvd", "largest_deficit"):
            assert f["g"][key] == pytest.approx(pl.iloc[i][key], abs=1e-12)
        for key in ("ndcg@10", "r@100"):
            assert f[key] == pytest.approx(pl.iloc[i][key], abs=1e-12)
    tk10 = top_k_target(q, w, merit, gs, 10)
    top = rank <= 10
    res = fairness_from_pairs(q[top], d[top], rank[top], w, g, merit, "merit", "dcg", n_boot=0, top=0)
    eff = ranking_effectiveness(q[top], d[top], rank[top], w, merit)
    for f in (ranking_figures(tk10, gs, q, d, rank),
              pool_policy_figures(tk10, gs, q, d, rank, score, 0.0)):
        assert f["g"]["tvd"] == pytest.approx(res.summary["tvd"]["value"], abs=1e-12)
        assert np.allclose(list(f["g"]["gap"].values()), res.groups["gap"].to_numpy(), atol=1e-12)
        assert f["ndcg@10"] == pytest.approx(eff["ndcg@10"], abs=1e-12)
        assert f["r@100"] == pytest.approx(eff["r@100"], abs=1e-12)
    # the re-ranker over the top 50 shown down to 10: its curve and the fast figures agree
    curve = balance_curve(store, g, merit, [0.0, 1.0], pool=50, k=10)
    for i, lam in enumerate((0.0, 1.0)):
        f = ranking_figures(tk10, gs, q, d, balance_ranks(q, d, rank, g, lam, pool=50, k=10))
        assert curve.iloc[i]["tvd"] == pytest.approx(f["g"]["tvd"], abs=1e-12)
        assert curve.iloc[i]["largest_deficit"] == pytest.approx(f["g"]["largest_deficit"], abs=1e-12)
        assert curve.iloc[i]["r@100"] == pytest.approx(f["r@100"], abs=1e-12)
    assert curve.iloc[1]["moved"] > 0.0 == curve.iloc[0]["moved"]


def test_policy_figures_resampled_per_query(cranfield_store):
    """Issue 56 item 3: the per-query figures of a Plackett-Luce policy, resampled, are the
    figures of the same policy with the queries' weights multiplied by their counts (a query
    taken twice, one left out), and the bootstrap's estimate is the policy's own figures."""
    from limelight.exposure.balance import bootstrap_top_k, top_k_resamples

    ds, store = cranfield_store
    g = Groups.from_values([f"d{int(x) % 3}" for x in ds.collection.ids.strings], "id mod 3")
    gs = {"g": g}
    merit = Merit.from_qrels(ds.qrels, store, "cranfield qrels")
    q, d, rank, score = store.pair_arrays()
    w = np.asarray(store.queries.weights, dtype=np.float64)
    tk = top_k_target(q, w, merit, gs, 10)
    f = pool_policy_figures(tk, gs, q, d, rank, score, 1.0, n_samples=4, seed=0, per_query=True)
    counts = np.random.default_rng(1).integers(0, 3, len(w)).astype(float)
    tk2 = top_k_target(q, w * counts, merit, gs, 10)
    f2 = pool_policy_figures(tk2, gs, q, d, rank, score, 1.0, n_samples=4, seed=0)
    got = top_k_resamples(tk, f["per_query"], gs, np.stack([np.ones(len(w)), counts]))
    for key, want in (("ndcg@10", (f["ndcg@10"], f2["ndcg@10"])), ("r@100", (f["r@100"], f2["r@100"])),
                      ("g.largest_deficit", (f["g"]["largest_deficit"], f2["g"]["largest_deficit"])),
                      ("g.tvd", (f["g"]["tvd"], f2["g"]["tvd"]))):
        assert got[key] == pytest.approx(want, abs=1e-12), key
    b = bootstrap_top_k(tk, f["per_query"], gs, n_boot=50, seed=0)
    assert b["ndcg@10"]["value"] == pytest.approx(f["ndcg@10"], abs=1e-12)
    assert b["g.largest_deficit"]["lo"] < b["g.largest_deficit"]["hi"]
    assert b["r@100"]["lo"] <= b["r@100"]["value"] <= b["r@100"]["hi"]
