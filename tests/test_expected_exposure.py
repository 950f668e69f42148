"""Expected exposure (EE-D, EE-R, EE-L; Diaz et al. 2020): hand cases, the ideal policy,
properties, the two code paths (deterministic Run vs stochastic exposures) and real runs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from limelight.data import IdMap, Qrels, Run, load_dataset
from limelight.errors import LimelightError
from limelight.evaluation import evaluate, parse_measure, parse_measures
from limelight.evaluation.expected_exposure import (
    evaluate_exposure,
    expected_exposure_run,
    stochastic_ee,
    target_exposure,
)
from limelight.evaluation.measures import MeasureError

DOCS = IdMap(["a", "b", "c", "d"], kind="document")


def _run(ranking: list[str], qid: str = "q1", name: str = "run") -> Run:
    return Run.from_arrays([qid] * len(ranking), ranking, np.arange(len(ranking), 0, -1.0), name,
                           doc_map=DOCS)


def _qrels(grades: dict[str, int], qid: str = "q1") -> Qrels:
    return Qrels.from_dict({qid: grades})


# ---- parsing ---------------------------------------------------------------------------------


def test_measure_names_parse_and_print():
    for s in ("EE-L(gamma=0.5)", "EE-D(gamma=0.8)", "EE-R(gamma=0.5)"):
        m = parse_measure(s)
        assert str(m) == s and parse_measure(str(m)) == m and m.is_expected_exposure
    assert parse_measure("EE-L") == parse_measure("ee-l(gamma=0.5)")  # default γ = 0.5
    assert [str(m) for m in parse_measures("EE-L(gamma=0.5),EE-D nDCG@10")] == [
        "EE-L(gamma=0.5)", "EE-D(gamma=0.5)", "nDCG@10"]
    for bad in ("EE-L(gamma=1)", "EE-L(gamma=0)", "EE-L@10", "EE-D(p=0.5)", "EE-X"):
        with pytest.raises(MeasureError):
            parse_measure(bad)


# ---- hand-checkable cases -----------------------------------------------------------------------


def test_deterministic_hand_case():
    # n = 4 documents, a and b relevant (grade 1); the run ranks a, c, b (d not retrieved).
    # ε = (a 1, b .25, c .5, d 0); target: relevant share positions 0-1 → (1 − .25)/(2·.5) = .75,
    # non-relevant positions 2-3 → (.25 − .0625)/(2·.5) = .1875.
    res = evaluate(_run(["a", "c", "b"]), _qrels({"a": 1, "b": 1, "c": 0}),
                   "EE-D(gamma=0.5) EE-R(gamma=0.5) EE-L(gamma=0.5)", n_docs=4)
    eed, eer, eel = (res[f"EE-{x}(gamma=0.5)"] for x in "DRL")
    assert eed == pytest.approx(1 + 0.25 + 0.0625)
    assert eer == pytest.approx(1 * 0.75 + 0.25 * 0.75 + 0.5 * 0.1875)
    assert eel == pytest.approx(0.25 ** 2 + 0.5 ** 2 + 0.3125 ** 2 + 0.1875 ** 2)
    ideal2 = 2 * 0.75 ** 2 + 2 * 0.1875 ** 2
    assert eel == pytest.approx(eed - 2 * eer + ideal2)


def test_target_binary_closed_form_and_grades():
    # the paper's binary case: m relevant share (1 − γ^m)/(m(1 − γ)) each
    g, n = 0.8, 50
    for m in (1, 3, 7):
        t, t0, norm2 = target_exposure(np.ones((1, m), int), np.ones((1, m), bool), n, g)
        assert t[0] == pytest.approx(np.full(m, (1 - g ** m) / (m * (1 - g))))
        assert t0[0] == pytest.approx((g ** m - g ** n) / ((n - m) * (1 - g)))
        # the target spends the exposure of all n positions
        assert t.sum() + (n - m) * t0[0] == pytest.approx((1 - g ** n) / (1 - g))
        assert norm2[0] == pytest.approx((t ** 2).sum() + (n - m) * t0[0] ** 2)
    # grades in any order: grade 3 alone at position 0, the two 2s share 1-2, the 1 at 3
    t, _, _ = target_exposure(np.array([[2, 1, 3, 2]]), np.ones((1, 4), bool), 10, 0.5)
    assert t[0] == pytest.approx([(0.5 + 0.25) / 2, 0.125, 1.0, (0.5 + 0.25) / 2])


def _ideal_rankings(grades: dict[str, int], docs: list[str]) -> list[list[str]]:
    """Every ranking of ``docs`` by grade descending (absent = 0), any order within a grade."""
    levels = sorted({grades.get(d, 0) for d in docs}, reverse=True)
    groups = [[d for d in docs if grades.get(d, 0) == lv] for lv in levels]
    return [sum(map(list, combo), []) for combo in
            itertools.product(*(itertools.permutations(gr) for gr in groups))]


@pytest.mark.parametrize("gamma", [0.5, 0.8])
def test_ideal_policy_has_zero_loss(gamma):
    # the uniform shuffle within relevance grades over the whole collection is the target
    docs = ["a", "b", "c", "d"]
    grades = {"a": 2, "b": 1, "c": 1}
    runs = [_run(r) for r in _ideal_rankings(grades, docs)]
    assert len(runs) == 2  # a, then b and c in either order, then d
    eps = expected_exposure_run(runs, gamma)
    res = evaluate_exposure(eps, _qrels(grades), f"EE-L(gamma={gamma}) EE-D(gamma={gamma})", n_docs=4)
    assert res[f"EE-L(gamma={gamma:g})"] == pytest.approx(0.0, abs=1e-12)
    # and EE-D of the ideal policy is ||ε*||²: b and c share positions 1-2
    t = [1.0, (gamma + gamma ** 2) / 2, (gamma + gamma ** 2) / 2, gamma ** 3]
    assert res[f"EE-D(gamma={gamma:g})"] == pytest.approx(sum(x * x for x in t))


def _random_grades(seed: int, n: int, draws: int, levels: int):
    """``draws`` times ``(rng, names, docmap, grades)``: documents d0 … d{n-1} with random grades
    0 … levels - 1, drawn from one generator seeded ``seed`` (which the caller may draw from too)."""
    rng = np.random.default_rng(seed)
    names = [f"d{i}" for i in range(n)]
    docmap = IdMap(names, kind="document")
    for _ in range(draws):
        yield rng, names, docmap, rng.integers(0, levels, size=n)


def test_ideal_policy_zero_loss_random_collections():
    for _, names, docmap, g in _random_grades(seed=3, n=7, draws=20, levels=3):
        if g.max() == 0:
            g[0] = 1
        grades = {n: int(x) for n, x in zip(names, g, strict=True) if x > 0}
        rankings = _ideal_rankings(grades, names)
        runs = [Run.from_arrays(["q"] * 7, r, np.arange(7, 0, -1.0), doc_map=docmap) for r in rankings]
        eps = expected_exposure_run(runs, 0.5)
        _, v = stochastic_ee(eps, Qrels.from_dict({"q": grades}), 0.5, n_docs=7)
        assert v["EE-L"][0] == pytest.approx(0.0, abs=1e-12)


def test_property_deterministic_rankings_are_never_ideal():
    # any deterministic ranking of a query with ≥ 2 equally relevant documents has EE-D > 0
    # and, stronger, EE-L > 0: one of the tied documents always gets more than its share
    for rng, names, docmap, g in _random_grades(seed=11, n=12, draws=200, levels=4):
        lv = int(rng.integers(1, 4))
        g[rng.choice(12, size=2, replace=False)] = lv  # at least two documents tie at grade lv
        grades = {n: int(x) for n, x in zip(names, g, strict=True)}
        depth = int(rng.integers(1, 13))
        ranking = [names[i] for i in rng.permutation(12)[:depth]]
        run = Run.from_arrays(["q"] * depth, ranking, np.arange(depth, 0, -1.0), doc_map=docmap)
        res = evaluate(run, Qrels.from_dict({"q": grades}), "EE-D EE-L EE-R", n_docs=12)
        assert res["EE-D"] > 0 and res["EE-L"] > 1e-9
        assert res["EE-L"] == pytest.approx(
            res["EE-D"] - 2 * res["EE-R"] + target_exposure(
                np.array([[x for x in g if x > 0]]), np.ones((1, int((g > 0).sum())), bool),
                12, 0.5)[2][0])


def test_missing_query_and_bad_input():
    qrels = Qrels.from_dict({"q1": {"a": 1}, "q2": {"b": 1}})
    res = evaluate(_run(["a", "b"]), qrels, "EE-L EE-D", n_docs=4)
    per_q = res.to_pandas()
    # q2 was not answered: no exposure, the loss is ||ε*||² of q2 (b alone first, 3 share the rest)
    t0 = (0.5 - 0.5 ** 4) / (3 * 0.5)
    assert per_q.loc["q2", "EE-L(gamma=0.5)"] == pytest.approx(1.0 + 3 * t0 ** 2)
    assert per_q.loc["q2", "EE-D(gamma=0.5)"] == 0.0
    bad = Run.from_arrays(["q1"], ["a"], [-1.0], doc_map=DOCS)
    with pytest.raises(LimelightError, match="≥ 0"):
        evaluate_exposure(bad, qrels)
    with pytest.raises(LimelightError, match="not an expected-exposure measure"):
        evaluate_exposure(_run(["a"]), qrels, "nDCG@10")
    with pytest.raises(LimelightError, match="one gamma"):
        evaluate_exposure(_run(["a"]), qrels, "EE-L(gamma=0.5) EE-D(gamma=0.8)")


# ---- the two code paths agree on real runs ---------------------------------------------------------


@pytest.fixture(scope="module")
def adi_bm25():
    from limelight.retrieval.bm25 import BM25, BM25Index

    ds = load_dataset("adi")
    run = BM25(BM25Index.build(ds.collection)).retrieve(ds.queries, 50)
    return ds, run


@pytest.mark.parametrize("gamma", [0.5, 0.9])
def test_deterministic_equals_stochastic_path_on_adi(adi_bm25, gamma):
    ds, run = adi_bm25
    n = len(ds.collection)
    ms = f"EE-L(gamma={gamma}) EE-D(gamma={gamma}) EE-R(gamma={gamma})"
    det = evaluate(run, ds.qrels, ms, n_docs=n)
    sto = evaluate_exposure(expected_exposure_run([run], gamma), ds.qrels, ms, n_docs=n)
    for m in det.per_query:
        np.testing.assert_allclose(det.per_query[m], sto.per_query[m], rtol=1e-12, atol=1e-14)
    # a direct per-document computation (the paper's vectors over all n documents)
    q = 0
    qid = det.qids[q]
    grades = ds.qrels.query(qid)
    eps = np.zeros(n)
    rows = slice(run.offsets[run.qids.lookup(qid)], run.offsets[run.qids.lookup(qid) + 1])
    eps[run.d[rows]] = gamma ** (run.ranks()[rows] - 1.0)
    rel = np.array([grades.get(d, 0) for d in ds.collection.ids.strings.tolist()])
    target = np.zeros(n)
    b = 0
    for lv in sorted(set(rel.tolist()), reverse=True):
        idx = np.flatnonzero(rel == lv)
        target[idx] = (gamma ** b - gamma ** (b + len(idx))) / (len(idx) * (1 - gamma))
        b += len(idx)
    m_l = parse_measure(f"EE-L(gamma={gamma})")
    assert det.per_query[m_l][q] == pytest.approx(((eps - target) ** 2).sum(), rel=1e-10)
