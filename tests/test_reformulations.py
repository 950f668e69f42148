"""Reformulation pairs and groups found by term overlap in the shared query log (issue 23 item 4)."""

from __future__ import annotations

import itertools

import pytest

from limelight.errors import LimelightError
from limelight.querygen.reformulations import (
    WEB_SOURCES,
    ReformulationRule,
    coverage,
    deduplicate,
    default_log_path,
    describe_pairs,
    find_reformulations,
    normalize,
    read_query_log,
    reformulation_analyzer,
    reformulation_groups,
    term_jaccard,
    variant_profile,
)

# the shared log is test data like the collections: missing, the tests fail (never skip silently)
assert default_log_path().exists(), f"shared query log not found at {default_log_path()} (set LIMELIGHT_DATA)"


@pytest.fixture(scope="module")
def log():
    return read_query_log()


def brute_force(texts, rule):
    keys, _ = deduplicate(texts)
    an = reformulation_analyzer()
    terms = [frozenset(an.tokenize(k)) for k in keys]
    return {(i, j) for i, j in itertools.combinations(range(len(terms)), 2) if rule.holds(terms[i], terms[j])}


def test_read_query_log_keeps_the_web_search_sources(log):
    assert list(log.columns) == ["source", "qid", "query"]
    assert log["source"].str.startswith(WEB_SOURCES).all()
    # 20,000 TREC MQ + 50,000 TREC TB 2005 + 41,539 MS MARCO (passage, doc, v2) + 1,920 TREC DL
    assert len(log) == 114_459
    assert (log["source"] == "trec-tb-2005-efficiency").sum() == 50_000
    everything = read_query_log(sources=None)
    assert len(everything) == 149_104


@pytest.mark.parametrize("rule", [ReformulationRule(), ReformulationRule(min_shared=1, min_jaccard=0.5)])
def test_prefix_filtered_pairs_equal_brute_force_on_real_queries(log, rule):
    texts = log["query"].tolist()[:1200] + log["query"].tolist()[30_000:31_200]
    pairs = find_reformulations(texts, rule)
    assert set(zip(pairs["a"], pairs["b"], strict=True)) == brute_force(texts, rule)
    assert (pairs["a"] < pairs["b"]).all()
    assert (pairs["jaccard"] >= rule.min_jaccard - 1e-12).all() and (pairs["shared"] >= rule.min_shared).all()
    assert len(pairs) > 0


def test_known_reformulations_of_the_log_are_found(log):
    sub = log[log["query"].str.contains("florida|ovarian|people find|dept of labor", case=False)]
    pairs = find_reformulations(sub["query"].tolist())
    found = {frozenset((a, b)) for a, b in zip(pairs["text_a"], pairs["text_b"], strict=True)}
    assert frozenset(("florida map", "map of florida")) in found  # ordering + stopword
    assert frozenset(("ovarian cysts", "ovarian cyst")) in found  # inflection (stemmed terms)
    assert frozenset(("people finders", "people finder")) in found
    # one-letter tokens count: 'u s dept labor' and 'g a dept labor' share 2 of 6 terms
    assert frozenset(("u.s. dept of labor", "g a dept of labor")) not in found
    # repeated log queries (ovarian cysts appears twice in TREC TB 2005) are one query
    keys = pairs.attrs["texts"]
    assert keys.count("ovarian cysts") == 1


def test_normalisation_and_deduplication():
    assert normalize("  Map of FLORIDA?  ") == "map of florida"
    keys, first = deduplicate(["Map of Florida?", "map of florida", "", "florida map"])
    assert keys == ["map of florida", "florida map"] and first == [0, 3]


def test_groups_are_disjoint_stars_of_real_pairs(log):
    texts = log["query"].tolist()[:20_000]
    pairs = find_reformulations(texts)
    groups = reformulation_groups(pairs, max_size=4)
    members = [q for g in groups for q in g]
    assert len(members) == len(set(members))  # disjoint
    linked = set(zip(pairs["a"], pairs["b"], strict=True))
    for g in groups:
        assert 2 <= len(g) <= 4
        for q in g[1:]:  # every partner is a pair with its seed
            assert (min(g[0], q), max(g[0], q)) in linked
    # the first seed has the most partners of all
    degree = pairs["a"].value_counts().add(pairs["b"].value_counts(), fill_value=0)
    assert degree[groups[0][0]] == degree.max()
    d = describe_pairs(pairs)
    assert d["same_terms"] + d["added"] + d["substituted"] == d["pairs"] == len(pairs)
    with pytest.raises(LimelightError):
        reformulation_groups(pairs, max_size=1)


def test_profiles_coverage_and_jaccard():
    prof = variant_profile("cheap flights to new york", ["new york flights", "cheap flight boston", "york"])
    # terms: cheap flight new york (stemmed, 'to' removed)
    assert prof.to_dict("list") == {"terms": [3, 3, 1], "kept": [3, 2, 1], "added": [0, 1, 0],
                                    "removed": [1, 2, 3], "jaccard": [0.75, 0.4, 0.25]}
    assert coverage("cheap flights to new york", ["new york flights", "cheap flight boston"]) == 4 / 5
    assert term_jaccard(["florida map"], ["map of florida"]) == 1.0
    assert term_jaccard(["florida map"], ["florida beaches"]) == pytest.approx(1 / 3)
    with pytest.raises(LimelightError):
        ReformulationRule(min_jaccard=0.0)
