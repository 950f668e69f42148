"""Section 5.3's closed forms and simulator (Tables 2-4) and section 6's robustness analyses."""

from __future__ import annotations

import numpy as np
import pytest

from limelight.data.formats import read_trec_qrels
from limelight.evaluation.robustness import (
    degrade_qrels,
    label_degradation,
    measure_agreement,
    per_query_preferences,
    tied_fraction,
)
from limelight.evaluation.simulate import (
    TABLE2_PAPER,
    TABLE3_PAPER,
    TABLE4_PAPER,
    random_positions,
    simulate_ties,
    simulate_worst_case_agreement,
    table_ties,
    tie_probability,
)
from limelight.evaluation.synthetic import bm25_like_run, perturb_run

COLS = ("TSE", "R1000", "RP", "AP", "LR")


@pytest.mark.parametrize("n", sorted(TABLE3_PAPER))
def test_table3_closed_forms_and_simulation(n):
    row = table_ties(n, 10, pairs=8000, seed=1)
    for col, paper in zip(COLS, TABLE3_PAPER[n], strict=True):
        closed, sim = row[col]
        if closed is not None:
            assert abs(closed - paper) <= 0.0011, (n, col, closed, paper)  # paper rounds to 3 places
            assert abs(sim - closed) <= 0.01, (n, col, sim, closed)
        assert abs(sim - paper) <= 0.011, (n, col, sim, paper)


@pytest.mark.parametrize("m", sorted(TABLE4_PAPER))
def test_table4_closed_forms_and_simulation(m):
    row = table_ties(10 ** 6, m, pairs=8000, seed=2)
    for col, paper in zip(COLS, TABLE4_PAPER[m], strict=True):
        closed, sim = row[col]
        if closed is not None:
            assert abs(closed - paper) <= 0.0011, (m, col, closed, paper)
            assert abs(sim - closed) <= 0.01
        assert abs(sim - paper) <= 0.011


def test_closed_forms_against_exact_enumeration_on_a_tiny_corpus():
    from itertools import combinations

    n, m = 9, 3
    subsets = [np.array(c) for c in combinations(range(1, n + 1), m)]
    tot = len(subsets) ** 2
    tse = sum(a[-1] == b[-1] for a in subsets for b in subsets) / tot
    r4 = sum((a <= 4).sum() == (b <= 4).sum() for a in subsets for b in subsets) / tot
    rp = sum((a <= m).sum() == (b <= m).sum() for a in subsets for b in subsets) / tot
    assert tie_probability("TSE", n, m) == pytest.approx(tse)
    assert tie_probability("R", n, m, k=4) == pytest.approx(r4)
    assert tie_probability("RP", n, m) == pytest.approx(rp)
    assert tie_probability("LR", n, m) == pytest.approx(1 / len(subsets))


@pytest.mark.parametrize("n", sorted(TABLE2_PAPER))
def test_table2_sign_agreement_with_the_worst_off_searcher(n):
    got = simulate_worst_case_agreement(n, pairs=10000, seed=5)
    paper = dict(zip(("tied", "TSE", "R@1000", "Rprec", "AP", "nDCG", "random"), TABLE2_PAPER[n], strict=True))
    assert got["TSE"] == 1.0
    for k in ("R@1000", "Rprec", "AP", "nDCG"):
        assert abs(got[k] - paper[k]) <= 0.03, (n, k, got[k], paper[k])
    assert abs(got["tied"] - paper["tied"]) <= 0.01
    assert abs(got["random"] - 0.5) <= 0.03


def test_random_positions_are_uniform_subsets_and_depth_imputes():
    rng = np.random.default_rng(0)
    pos, m = random_positions(20, 19, 500, rng)  # forces many rejection rounds
    assert all(len(set(r)) == 19 and r.min() >= 1 and r.max() <= 20 for r in pos)
    pos, m = random_positions(100, np.array([3, 5]), 2, rng, depth=10)
    for row, mm in zip(pos, m, strict=True):
        kept = row[:mm][row[:mm] <= 10]
        u = mm - len(kept)
        assert row[len(kept):mm].tolist() == list(range(100 - u + 1, 101))
    ties = simulate_ties(["LexiRecall", "TSE", "R@100"], 1000, (5, 50), pairs=3000, depth=100)
    assert ties["LexiRecall"] <= ties["TSE"] <= 1.0 and ties["TSE"] > 0.1  # Figure 6's shape


@pytest.fixture(scope="module")
def cranfield(data_dir):
    folder = data_dir / "collections" / "cranfield"
    qrels = read_trec_qrels(folder / "qrels.txt")
    base = bm25_like_run(folder, depth=1000)
    runs = [base] + [perturb_run(base, s, i, depth=d) for i, (s, d) in
                     enumerate([(0.1, 1000), (0.3, 1000), (0.5, 100), (1.0, 1000)])]
    return qrels, runs


def test_measure_agreement_on_real_runs(cranfield):
    qrels, runs = cranfield
    df = measure_agreement(runs, qrels, "R@1000 Rprec AP nDCG RR LexiRecall").set_index("measure")
    col = "agreement_with_LexiRecall"
    assert df.loc["R@1000", col] == 1.0  # depth ≤ 1000: R@1000 differences imply lexirecall's
    assert df.loc["LexiRecall", col] == 1.0
    assert df.loc["LexiRecall", "tied"] < df.loc["Rprec", "tied"] < df.loc["R@1000", "tied"]
    assert 0.5 < df.loc["AP", col] < 1.0 and df.loc["RR", col] < df.loc["nDCG", col]


def test_degrade_qrels_uniform_and_by_frequency(cranfield):
    qrels, runs = cranfield
    m = qrels.n_relevant(1)
    for mode in ("uniform", "frequency"):
        d = degrade_qrels(qrels, 0.5, mode, runs, seed=1)
        md = d.n_relevant(1)
        assert np.all(md[m > 0] >= 1)
        assert np.array_equal(md, m - np.minimum(np.floor(0.5 * m).astype(int), np.maximum(m - 1, 0)))
        assert len(d) == len(qrels) - int((m - md).sum())
    assert degrade_qrels(qrels, 0.5, "uniform", seed=1).q.tolist() == degrade_qrels(qrels, 0.5, "uniform", seed=1).q.tolist()


def test_frequency_degradation_removes_frequently_retrieved_labels_first():
    from limelight.data.qrels import Qrels
    from limelight.data.run import Run

    rel = [f"r{i}" for i in range(10)]
    qrels = Qrels.from_arrays(["q"] * 10, rel, [1] * 10)
    popular = rel[:5]  # retrieved by every run; the others by none
    runs = [Run.from_arrays(["q"] * 6, popular + [f"x{i}"], np.arange(6, 0, -1.0), name=f"r{i}") for i in range(3)]
    for seed in range(5):
        d = degrade_qrels(qrels, 0.5, "frequency", runs, seed=seed)
        assert sorted(d.docids.decode(d.d).tolist()) == rel[5:]
        u = degrade_qrels(qrels, 0.5, "uniform", runs, seed=seed)
        assert len(u) == 5
    assert any(sorted(degrade_qrels(qrels, 0.5, "uniform", seed=s).docids.decode(
        degrade_qrels(qrels, 0.5, "uniform", seed=s).d).tolist()) != rel[5:] for s in range(5))


def test_label_degradation_curves(cranfield):
    qrels, runs = cranfield
    df = label_degradation(runs, qrels, "R@1000 Rprec LexiRecall", fractions=(0.0, 0.5, 0.9), samples=2)
    full = df[df.fraction == 0.0].set_index("measure")
    assert (full["agreement"] == 1.0).all()
    worst = df[df.fraction == 0.9].set_index("measure")
    assert (worst["tied"] >= full["tied"]).all()
    assert worst.loc["LexiRecall", "agreement"] > worst.loc["Rprec", "agreement"]
    prefs = per_query_preferences(runs, qrels, "LexiRecall AP")
    assert all(p.shape == (5, 5, len(prefs[next(iter(prefs))][0, 0])) for p in prefs.values())
    assert tied_fraction(next(iter(prefs.values()))) < 0.05
