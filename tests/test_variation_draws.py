"""Several variant draws per query, query length and truncation (issue 23 item 3), on cranfield."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from limelight.data import load_dataset
from limelight.errors import LimelightError
from limelight.querygen.draws import (
    content_length,
    draw_values,
    stratified_drops,
    summarize_draws,
    truncate_queries,
    truncate_text,
)
from limelight.querygen.robustness import robustness_report
from limelight.querygen.variations import generate_variations
from limelight.retrieval.bm25 import BM25, BM25Index

METHODS = "NeighbCharSwap,RandOrderSwap,RmvStopWords"


@pytest.fixture(scope="module")
def cranfield():
    ds = load_dataset("cranfield")
    return ds, {"BM25": BM25(BM25Index.build(ds.collection)) % 1000}


@pytest.fixture(scope="module")
def draws(cranfield):
    ds, systems = cranfield
    return pd.concat([draw_values(systems, ds.queries, ds.qrels, s, methods=METHODS) for s in (0, 1)],
                     ignore_index=True)


def test_content_length_of_the_collections():
    # the figures quoted in docs/results-variations.md (non-NLTK-stopword words per query)
    assert content_length(load_dataset("cranfield").queries).mean() == pytest.approx(10.0, abs=0.05)
    assert content_length(load_dataset("npl").queries).mean() == pytest.approx(7.3, abs=0.05)
    assert content_length(["what is the", "", "durable medical equipment, consist of?"]).tolist() == [0, 0, 4]


def test_truncation_keeps_the_prefix_up_to_the_nth_content_word(cranfield):
    q = "what similarity laws must be obeyed when constructing aeroelastic models"
    assert truncate_text(q, 1) == "what similarity"
    assert truncate_text(q, 3) == "what similarity laws must"  # "must" is not an NLTK stopword
    assert truncate_text(q, 4) == "what similarity laws must be obeyed"
    assert truncate_text(q, 99) == q
    assert truncate_text("heated, high-speed aircraft .", 2) == "heated, high-speed"
    with pytest.raises(LimelightError):
        truncate_text(q, 0)
    ds, _ = cranfield
    for n in (2, 3, 6):
        t = truncate_queries(ds.queries, n)
        orig, new = content_length(ds.queries), content_length(t)
        assert np.array_equal(new, np.minimum(orig, n))
        assert all(o.startswith(x) for o, x in zip(ds.queries.texts, t.texts, strict=True))
        assert np.array_equal(t.fields["truncated"], orig > n)
        assert list(t.ids.strings) == list(ds.queries.ids.strings)


def test_one_draw_equals_the_robustness_report(cranfield, draws):
    ds, systems = cranfield
    rep = robustness_report(systems, ds.queries, ds.qrels,
                            variations=generate_variations(ds.queries, METHODS, seed=1))
    d1 = draws[draws["seed"] == 1]
    for m in ("NeighbCharSwap", "RmvStopWords"):
        v = d1[d1["method"] == m]
        assert np.allclose(v["value"].to_numpy(), rep.per_query[("BM25", "full", m)])
        assert np.allclose(v["original"].to_numpy(), rep.per_query[("BM25", "full", "original")])
    assert set(d1["qid"]) == set(rep.qids) and len(d1) == 3 * len(rep.qids)
    assert (d1["length"].to_numpy() > 0).all()


def test_summary_over_draws(draws):
    s = summarize_draws(draws).set_index(["level", "method"])
    # word order: BM25 changes no query in any draw
    o = s.loc[("method", "RandOrderSwap")]
    assert o["rel_drop"] == 0 and o["rel_drop_lo"] == 0 and o["rel_drop_hi"] == 0
    assert o["p_pooled"] == 1.0 and o["n_sig"] == 0 and o["n_draws"] == 2
    # stopword removal is deterministic: both draws equal, an interval of width 0
    r = s.loc[("method", "RmvStopWords")]
    assert r["rel_drop_sd"] == 0 and r["rel_drop_lo"] == r["rel_drop_hi"] == pytest.approx(r["rel_drop"])
    # a typo: the draws differ, the summary is the mean of each draw's relative drop
    n = draws[draws["method"] == "NeighbCharSwap"]
    per = n.groupby("seed").apply(lambda g: (g["original"].mean() - g["value"].mean()) / g["original"].mean(),
                                  include_groups=False)
    assert per.nunique() == 2
    t = s.loc[("method", "NeighbCharSwap")]
    assert t["rel_drop"] == pytest.approx(per.mean())
    assert t["rel_drop_lo"] < t["rel_drop"] < t["rel_drop_hi"]
    assert t["rel_drop_hi"] - t["rel_drop"] == pytest.approx(12.706 * per.std(ddof=1) / np.sqrt(2), rel=1e-3)
    # one method per category here: the category rows equal the method rows
    assert s.loc[("category", "misspelling"), "rel_drop"] == pytest.approx(t["rel_drop"])


def test_strata_partition_the_queries(draws):
    st = stratified_drops(draws, [1, 6, 11])
    miss = st[st["category"] == "misspelling"]
    assert miss["n_queries"].sum() == draws["qid"].nunique()
    assert list(miss["bin"]) == ["1-5", "6-10", "11+"]
    g = draws[(draws["method"] == "NeighbCharSwap") & (draws["length"] >= 11)]
    by_seed = g.groupby("seed")[["original", "value"]].mean()
    want = ((by_seed["original"] - by_seed["value"]) / by_seed["original"]).mean()
    assert miss[miss["bin"] == "11+"]["rel_drop"].iloc[0] == pytest.approx(want)
    with pytest.raises(LimelightError):
        stratified_drops(draws, [1, 5], by="query")
