"""Property-based tests (hypothesis) of the lexirecall paper's claims on random rankings."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from limelight.data.qrels import Qrels
from limelight.data.run import Run
from limelight.evaluation import (
    Evaluator,
    compute,
    lexi_ranks,
    lexiprecision,
    lexirecall,
    pairwise,
    parse_measure,
    preference_matrix,
    relevance_positions,
    stack_positions,
)

N_DOCS = 40


@st.composite
def query_runs(draw, k: int = 2):
    """One query: a relevant set and ``k`` rankings (top-ñ lists) of a corpus of N_DOCS."""
    m = draw(st.integers(1, 8))
    docs = [f"d{i}" for i in range(N_DOCS)]
    rel = draw(st.lists(st.sampled_from(docs), min_size=m, max_size=m, unique=True))
    rankings = []
    for _ in range(k):
        depth = draw(st.integers(0, 20))
        ranking = draw(st.permutations(docs))[:depth]
        rankings.append(ranking)
    return rel, rankings


def _positions(rel, rankings, n=N_DOCS):
    qrels = Qrels.from_arrays(["q"] * len(rel), rel, [1] * len(rel))
    out = []
    for i, r in enumerate(rankings):
        if r:
            run = Run.from_arrays(["q"] * len(r), r, np.arange(len(r), 0, -1, dtype=float), name=f"r{i}")
        else:  # an empty ranking: the query is missing from the run
            run = Run.from_arrays(["other"], ["d0"], [1.0], name=f"r{i}")
        out.append(relevance_positions(run, qrels, n_docs=n))
    return out


def _metric(rp, name):
    """A metric straight from the kernels on the shared relevance-position array."""
    return float(compute(parse_measure(name), rp)[0])


def _prefers_the_better(data, measure: str, prefer) -> None:
    """Where ``measure`` tells the two rankings of ``data`` apart, ``prefer`` picks the better."""
    rel, rankings = data
    a, b = _positions(rel, rankings)
    ra, rb = _metric(a, measure), _metric(b, measure)
    pref = prefer(a.pos[0, :a.m[0]], b.pos[0, :b.m[0]])
    if ra != rb:
        assert pref == (1 if ra > rb else -1)


@settings(max_examples=150, deadline=None)
@given(query_runs(), st.integers(20, 40))
def test_recall_at_k_difference_implies_lexirecall_agrees(data, k):
    _prefers_the_better(data, f"R@{k}", lexirecall)  # every ranking has depth ≤ 20 ≤ k


@settings(max_examples=150, deadline=None)
@given(query_runs())
def test_reciprocal_rank_difference_implies_lexiprecision_agrees(data):
    _prefers_the_better(data, "RR", lexiprecision)


@settings(max_examples=150, deadline=None)
@given(query_runs())
def test_lexirecall_ties_only_on_equal_position_vectors_and_tse_agrees(data):
    rel, rankings = data
    a, b = _positions(rel, rankings)
    pa, pb = a.pos[0, :a.m[0]], b.pos[0, :b.m[0]]
    pref = lexirecall(pa, pb)
    assert (pref == 0) == bool(np.array_equal(pa, pb))
    assert lexirecall(pb, pa) == -pref  # antisymmetric
    ta, tb = _metric(a, "TSE"), _metric(b, "TSE")
    if ta != tb:  # TSE (the worst-off searcher, eq. 5) decides first
        assert pref == (1 if ta > tb else -1)
    # the vectorized forms agree with the scalar definition
    assert pairwise(a.pos, b.pos, "recall")[0] == pref
    assert pairwise(a.pos, b.pos, "precision")[0] == lexiprecision(pa, pb)


@settings(max_examples=100, deadline=None)
@given(query_runs(k=3))
def test_lexirecall_is_transitive_and_the_all_pairs_matrix_matches(data):
    rel, rankings = data
    rps = _positions(rel, rankings)
    vecs = [r.pos[0, :r.m[0]] for r in rps]
    pref = np.array([[lexirecall(x, y) for y in vecs] for x in vecs])
    for i in range(3):
        for j in range(3):
            for k in range(3):
                if pref[i, j] >= 0 and pref[j, k] >= 0:
                    assert pref[i, k] >= 0
                if pref[i, j] > 0 and pref[j, k] >= 0:
                    assert pref[i, k] > 0
    stack = stack_positions(rps)
    assert np.array_equal(preference_matrix(stack, "recall")[:, :, 0], pref)
    precision = np.array([[lexiprecision(x, y) for y in vecs] for x in vecs])
    assert np.array_equal(preference_matrix(stack, "precision")[:, :, 0], precision)
    assert lexi_ranks(stack, "recall").shape == (3, 1)


@settings(max_examples=60, deadline=None)
@given(st.lists(query_runs(k=2), min_size=1, max_size=5))
def test_many_queries_vectorized_preferences_match_per_query_scalar(queries):
    qs, ds, gs = [], [], []
    runs_rows = [([], [], []), ([], [], [])]
    for qi, (rel, rankings) in enumerate(queries):
        for d in rel:
            qs.append(f"q{qi}")
            ds.append(d)
            gs.append(1)
        for r, rows in zip(rankings, runs_rows, strict=True):
            for rank, d in enumerate(r):
                rows[0].append(f"q{qi}")
                rows[1].append(d)
                rows[2].append(float(100 - rank))
    qrels = Qrels.from_arrays(qs, ds, gs)
    ev = Evaluator(qrels, "LexiRecall", n_docs=N_DOCS)
    rps = []
    for i, (q, d, s) in enumerate(runs_rows):
        if not q:
            q, d, s = ["zz"], ["d0"], [1.0]
        rps.append(ev.positions(Run.from_arrays(q, d, s, name=f"r{i}"), 1))
    vec = pairwise(rps[0].pos, rps[1].pos, "recall")
    for row in range(len(vec)):
        pa = rps[0].pos[row, :rps[0].m[row]]
        pb = rps[1].pos[row, :rps[1].m[row]]
        assert vec[row] == lexirecall(pa, pb)
