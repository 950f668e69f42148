"""Simulated query variants (Breuer et al., ECIR 2022) on the real adi and med collections."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

from limelight.errors import LimelightError
from limelight.querygen.simulation import (
    S4_PARAMS,
    STRATEGIES,
    TermModel,
    canonical_strategy,
    jaccard,
    kis_candidates,
    rmse,
    s4_queries,
    simulate_queries,
    strategy_queries,
    system_order_tau,
    topic_terms,
    validate_simulation,
)
from limelight.retrieval.bm25 import BM25, BM25Index


@pytest.fixture(scope="module")
def adi(adi):
    return adi, TermModel.build(adi.collection)  # conftest's adi and its term model


def test_conventional_strategies():
    t = ["a", "b", "c", "d", "e"]
    assert strategy_queries(t, "S1", 3) == [["a"], ["b"], ["c"]]
    assert strategy_queries(t, "S2", 3) == [["a", "b"], ["a", "c"], ["a", "d"]]
    assert strategy_queries(t, "S2'", 3) == [["a", "b", "c"], ["a", "b", "d"], ["a", "b", "e"]]
    assert strategy_queries(t, "S3", 3) == [["a"], ["a", "b"], ["a", "b", "c"]]
    assert strategy_queries(t, "S3p", 2) == [["a", "b", "c"], ["a", "b", "c", "d"]]
    assert canonical_strategy("s4pp") == "S4''"
    with pytest.raises(LimelightError, match="unknown strategy"):
        canonical_strategy("S9")


def test_tts_terms_in_order_without_stopwords():
    assert topic_terms("What is the effect of the effect of salt on plants?") == ["effect", "salt", "plants"]
    assert topic_terms("") == []


def test_kis_language_model_matches_its_formula(adi):
    """P(t|D_rel) = (1-λ) P_topic + λ P_background, counted by hand for one topic."""
    ds, tm = adi
    qid = ds.queries.ids.strings[0]
    rel = [d for d, g in ds.qrels.query(qid).items() if g >= 1]
    an = tm.analyzer
    docs = {d: an.tokenize(t) for d, t in zip(ds.collection.ids.strings, ds.collection.texts.tolist(), strict=True)}
    rel_tokens = [w for d in rel for w in docs[d]]
    all_tokens = [w for toks in docs.values() for w in toks]
    P = tm.relevance_models(ds.qrels, [qid], lam=0.4)[0]
    for term in set(rel_tokens[:20]) | {"computer"}:
        expected = 0.6 * rel_tokens.count(term) / len(rel_tokens) + 0.4 * all_tokens.count(term) / len(all_tokens)
        assert np.isclose(P[tm.vocabulary.lookup(term)], expected)
    assert np.isclose(P.sum(), 1.0)
    top = kis_candidates(P, tm.vocabulary, 5)
    vals = [P[tm.vocabulary.lookup(t)] for t in top]
    assert vals == sorted(vals, reverse=True) and vals[0] == P.max()


def test_s4_picks_the_best_combination_by_equation_1():
    terms = ["t0", "t1", "t2", "t3", "t4", "t5"]
    p = np.array([0.05, 0.04, 0.03, 0.02, 0.01, 0.005])
    title = np.array([1, 1, 0, 0, 0, 0], bool)
    topic = np.array([1, 1, 1, 1, 0, 0], bool)
    idf = np.array([1.0, 2.0, 3.0, 1.5, 4.0, 0.5])
    for name, (a, b, e, d) in S4_PARAMS.items():
        got = s4_queries(terms, p, title, topic, idf, (a, b, e, d), n=4)
        assert len({tuple(q) for q in got}) == 4  # never the same query twice
        prev = set(np.flatnonzero(title))
        issued: set = set()
        for q in got:  # brute force over every 3-5 term combination
            best, best_s = None, -np.inf
            for k in (3, 4, 5):
                for c in combinations(range(6), k):
                    if c in issued:
                        continue
                    s = 0.0
                    for j in c:
                        if title[j]:
                            s += a * (1 - p[j])
                        elif j not in prev:
                            s += (1 - b * p[j]) if topic[j] else e * idf[j]
                    s += sum(-d * p[j] for j in prev if j not in c)
                    s /= len(c)
                    if s > best_s + 1e-12:
                        best, best_s = c, s
            assert q == [terms[j] for j in best], name
            issued.add(best)
            prev = set(best)


def test_simulated_queries_are_a_query_set(adi):
    ds, tm = adi
    for src in ("TTS", "KIS"):
        for s in STRATEGIES:
            sim = simulate_queries(ds.queries, s, src, 5, term_model=tm, qrels=ds.qrels)
            assert len(sim) > 0 and all(t.strip() for t in sim.texts)
            assert set(sim.fields["topic"]) <= set(ds.queries.ids.strings)
            assert sim.fields["position"].max() <= 4
            assert all(i.split("~")[1] == f"{src}{s}" for i in sim.ids.strings)
    sim = simulate_queries(ds.queries, "S1", "TTS", 3)  # TTS S1 needs no qrels
    first = ds.queries.texts[0]
    assert sim.texts[:3].tolist() == topic_terms(first)[:3]
    with pytest.raises(LimelightError, match="needs a term model"):
        simulate_queries(ds.queries, "S2", "KIS", 3)
    with pytest.raises(LimelightError, match="TTS or KIS"):
        simulate_queries(ds.queries, "S2", "XYZ", 3)


def test_validation_measures():
    a = np.array([0.1, 0.5, 0.9])
    assert rmse(a, a) == 0.0 and np.isclose(rmse(a, a + 0.1), 0.1)
    assert jaccard(["salt plants"], ["plants salt"]) == 1.0
    assert jaccard(["salt"], ["pepper"]) == 0.0
    assert np.isclose(jaccard(["salt plants growth"], ["salt water"]), 1 / 4)
    real = np.array([[0.5, 0.6], [0.3, 0.2], [0.1, 0.1]])
    assert system_order_tau(real, real) == 1.0
    assert system_order_tau(real, real[::-1]) == -1.0


def test_validate_real_against_itself_and_kis(adi):
    ds, tm = adi
    idx = BM25Index.build(ds.collection)
    systems = {f"{k1},{b}": BM25(idx, k1=k1, b=b) % 100 for k1 in (0.5, 1.2) for b in (0.3, 0.8)}
    same = validate_simulation(systems, ds.queries, ds.queries, ds.qrels)
    assert same.rmse == 0.0 and same.p_value == 1.0 and same.tau == 1.0 and same.jaccard == 1.0
    kis = simulate_queries(ds.queries, "S2'", "KIS", 5, term_model=tm, qrels=ds.qrels)
    v = validate_simulation(systems, ds.queries, kis, ds.qrels)
    assert v.n_topics == len(set(kis.fields["topic"]))
    assert v.rmse > 0 and 0 <= v.jaccard < 1 and -1 <= v.tau <= 1
