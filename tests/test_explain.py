"""Why a query exposes a document (limelight.retrieval.explain) and what can be done about it
(limelight.exposure.nearmiss), on real indexes: scifact, adi (stemmed), and the demo audit of
the Debian catalog (read only)."""

from __future__ import annotations

import html
import json
import re

import numpy as np
import pytest

from limelight.analysis import Analyzer
from limelight.data import load_dataset, load_query_log
from limelight.errors import LimelightError
from limelight.exposure import compute_exposure
from limelight.exposure.nearmiss import NearMisses, group_exposure_shares, near_misses
from limelight.retrieval.bm25 import BM25, BM25Index
from limelight.retrieval.dense import Encoder
from limelight.retrieval.explain import (
    bm25_contributions,
    explain,
    explain_bm25,
    explain_dense,
    highlight_html,
    no_explanation,
    split_sentences,
    term_spans,
)
from limelight.retrieval.systems import get_kind, kind_names, load_kinds


@pytest.fixture(scope="module")
def sci_bm25(scifact) -> BM25:
    return BM25(BM25Index.build(scifact.collection), threads=2)


@pytest.fixture(scope="module")
def adi_stemmed():
    ds = load_dataset("adi")
    return ds, BM25(BM25Index.build(ds.collection, Analyzer(stemmer="english")), k1=1.2, b=0.75)


@pytest.fixture(scope="module")
def log():
    return load_query_log()


@pytest.fixture(scope="module")
def debian(log, tmp_path_factory):
    """BM25 over the shared Debian catalog (the audit's defaults), a store of 4,000 log queries
    plus every log query naming vim or editors, and the catalog's texts (built here: a fresh
    clone has no demo audit)."""
    from limelight.data.loaders import load_collection

    coll = load_collection("debian")
    ret = BM25(BM25Index.build(coll), threads=2)
    texts = log.texts.tolist()
    pick = sorted(set(range(4000)) | {i for i, t in enumerate(texts) if re.search(r"\b(vim|editors?)\b", t)})
    qs = log.take(np.asarray(pick))
    store = compute_exposure(ret, qs, tmp_path_factory.mktemp("debian") / "store", depth=100)
    return ret, store, coll.texts.tolist()


def _check_decomposition(ret: BM25, queries: list[str], k: int, texts=None) -> int:
    """Σ contributions == the score search_batch gives (1e-6), shares sum to 1; pairs checked."""
    docs, scores = ret.search_batch(queries, k)
    n = 0
    for i, q in enumerate(queries):
        for d, s in zip(docs[i].tolist(), scores[i].tolist(), strict=True):
            if d < 0:
                continue
            e = bm25_contributions(ret, q, d)
            total = sum(t["contribution"] for t in e["terms"])
            assert abs(total - s) <= 1e-6, (q, d, total, s)
            assert e["score"] == pytest.approx(s, abs=1e-6)
            assert sum(t["share"] for t in e["terms"]) == pytest.approx(1.0, abs=1e-6)
            for t in e["terms"]:  # each contribution is qtf · w(t, d) up to float32 rounding
                assert t["contribution"] == pytest.approx(t["qtf"] * t["weight"], rel=1e-5)
            n += 1
    return n


def test_bm25_decomposition_scifact(scifact, sci_bm25):
    queries = scifact.queries.texts.tolist() + ["protein protein binding binding binding cells"]
    assert _check_decomposition(sci_bm25, queries, 10) > 3000


def test_bm25_decomposition_stemmed(adi_stemmed, log):
    ds, ret = adi_stemmed
    queries = ds.queries.texts.tolist() + log.texts[:300].tolist()
    assert _check_decomposition(ret, queries, 20) > 1000


def test_bm25_decomposition_debian(debian, log):
    ret, store, _ = debian
    rng = np.random.default_rng(0)
    queries = store.queries.texts[rng.choice(len(store.queries), 400, replace=False)].tolist()
    assert _check_decomposition(ret, queries, 10) > 2000


def test_decomposition_of_a_stored_exposure(debian):
    """The contributions sum to the score the audit stored for (query, vim)."""
    ret, store, texts = debian
    rows = store.exposing_queries("vim")[:50]
    assert rows
    for row in rows:
        e = explain_bm25(ret, row["query"], "vim", texts[ret.doc_ids.lookup("vim")])
        assert abs(sum(t["contribution"] for t in e["terms"]) - row["score"]) <= 1e-6
        assert e["doc_spans"] and e["query_spans"]
        json.dumps(e)


def test_spans_stemmed_and_case(adi_stemmed):
    _, ret = adi_stemmed
    an = ret.index.analyzer
    text = "Retrieving INDEXED Documents: the Indexing of documents & <retrieval>."
    spans = term_spans(an, text, {"index", "retriev"})
    assert [text[s:e] for s, e, _ in spans] == ["Retrieving", "INDEXED", "Indexing", "retrieval"]
    assert [t for _, _, t in spans] == ["retriev", "index", "index", "retriev"]
    # every kept token: its analyzed form is what the analyzer gives, in order
    everything = term_spans(an, text)
    assert [t for _, _, t in everything] == an.tokenize(text)
    # a query and a document matched through their stems
    q = "Indexes for RETRIEVAL"
    docs, _ = ret.search_batch([q], 3)
    d = int(docs[0, 0])
    doc_text = load_dataset("adi").collection.texts[d]
    e = explain_bm25(ret, q, d, doc_text)
    matched = {t["term"] for t in e["terms"]}
    assert {t for _, _, t in e["query_spans"]} == matched
    for s, e_, t in e["doc_spans"]:
        assert an.tokenize(doc_text[s:e_]) == [t]
    assert {t for _, _, t in e["doc_spans"]} == matched


def test_highlight_html_escaped():
    text = 'a <script>alert("x")</script> & Garlic > kidneys'
    an = Analyzer()
    spans = term_spans(an, text, {"garlic", "script"})
    out = highlight_html(text, spans)
    assert "<script" not in out and "</script" not in out and "&lt;" in out and "&amp;" in out
    assert "alert(&quot;x&quot;)" in out
    assert '<mark data-term="garlic">Garlic</mark>' in out
    assert out.count("<mark") == 3  # script twice, garlic once
    assert html.unescape(re.sub(r"</?mark[^>]*>", "", out)) == text
    hostile = highlight_html('x"y', [[0, 1, '"><img src=x>']])
    assert "<img" not in hostile
    with pytest.raises(LimelightError):
        highlight_html("x", [], tag="mark onclick=1")


def test_split_sentences():
    text = "  First one. Second!  Third?\nFourth; fifth\n\n"
    sents = split_sentences(text)
    assert [s for _, _, s in sents] == ["First one.", "Second!", "Third?", "Fourth;", "fifth"]
    assert all(text[a:b] == s for a, b, s in sents)
    assert split_sentences("") == [] and split_sentences("   ") == []


def test_dense_sentences_are_encoder_cosines():
    enc = Encoder()
    text = ("Vim is a highly configurable text editor. It runs in a terminal. Garlic is a plant; "
            "kidneys filter blood.\nThe package ships the tiny build.")
    out = explain_dense(enc, "does garlic help kidneys", text)
    assert len(out["sentences"]) == 3 and out["n_sentences"] == 5
    sents = [s for _, _, s in split_sentences(text)]
    q = enc.encode(["does garlic help kidneys"]).astype(np.float64)[0]
    cos = []
    for s in sents:
        v = enc.encode([s]).astype(np.float64)[0]
        cos.append(float(v @ q / (np.linalg.norm(v) * np.linalg.norm(q))))
    best = np.argsort(-np.asarray(cos), kind="stable")[:3]
    assert [x["sentence"] for x in out["sentences"]] == [sents[i] for i in best]
    for x, i in zip(out["sentences"], best, strict=True):
        assert x["score"] == pytest.approx(cos[i], abs=1e-5)
        assert text[x["start"]:x["end"]] == x["sentence"]
    top2 = {x["sentence"] for x in out["sentences"][:2]}
    assert top2 == {"Garlic is a plant;", "kidneys filter blood."}
    json.dumps(out)


def test_refusal_by_capabilities(sci_bm25, scifact):
    load_kinds()
    sentences = {}
    for name in kind_names():
        kind = get_kind(name)
        reason = no_explanation(kind)
        if kind.needs_index:
            assert reason is None
        else:
            sentences[name] = reason
    assert sentences["run"] == "no explanation: results came from a run file"
    assert sentences["http"] == "no explanation: results came from a live service"
    assert sentences["pyterrier"] == "no explanation: results came from an external engine"
    text = scifact.collection.texts[0]
    assert explain(get_kind("run"), sci_bm25, "cells", 0, text) == {
        "explained": False, "reason": "no explanation: results came from a run file"}
    out = explain(get_kind("bm25"), sci_bm25, "cells", 0, text)
    assert out["explained"] and out["parts"][0]["kind"] == "bm25"
    odd = explain(get_kind("bm25"), object(), "cells", 0, text)
    assert not odd["explained"] and odd["reason"].startswith("no explanation")


@pytest.fixture(scope="module")
def sci_store(sci_bm25, log, tmp_path_factory):
    qs = log.head(3000)
    return compute_exposure(sci_bm25, qs, tmp_path_factory.mktemp("nm") / "store", depth=100)


def test_near_misses_equal_direct_search(sci_bm25, sci_store):
    """Near misses (ranks 101-1000) equal a direct depth-1000 search's, for the least exposed
    documents (every near miss) and the most exposed (the closest few, by the score ladder)."""
    nm = NearMisses(sci_store, sci_bm25)
    texts = sci_store.queries.texts.tolist()
    direct, _ = sci_bm25.search_batch(texts, 1000)
    n = sci_store.n_exposing()
    low = np.argsort(n, kind="stable")  # the least exposed documents first
    assert n[low[24]] < 10
    checked = 0
    for d in low[:25].tolist():
        docid = sci_bm25.doc_ids.strings[d]
        got = nm.document(docid, limit=None)
        hit = np.nonzero(direct == d)
        expect = {int(q): int(c) + 1 for q, c in zip(*hit, strict=True) if 101 <= c + 1 <= 1000}
        assert {x["qid"]: x["rank"] for x in got} == {
            sci_store.queries.ids.strings[q]: r for q, r in expect.items()}
        terms = set(sci_bm25.doc_term_weights(docid))
        for x in got:
            assert 101 <= x["rank"] <= 1000
            assert x["shared_terms"] and set(x["shared_terms"]) <= terms
        assert [x["rank"] for x in got] == sorted(x["rank"] for x in got)
        checked += len(got)
    assert checked > 50
    top = near_misses(sci_store, sci_bm25, sci_bm25.doc_ids.strings[low[0]], limit=3)
    assert len(top) <= 3
    json.dumps(top)
    # the most exposed documents (many near misses): the closest few come from the score
    # ladder's shallow rungs, yet equal the direct search's; every near miss is counted, the
    # hidden ones (every third query) left out of the list only
    hidden = np.zeros(len(texts), dtype=bool)
    hidden[::3] = True
    qids = sci_store.queries.ids.strings
    deep = 0
    for d in np.argsort(-n, kind="stable")[:8].tolist():
        docid = sci_bm25.doc_ids.strings[d]
        q, c = np.nonzero(direct == d)
        keep = (c + 1 >= 101) & (c + 1 <= 1000)
        expect = sorted(zip((c[keep] + 1).tolist(), qids[q[keep]].tolist(), q[keep].tolist(), strict=True))
        rows, every = nm.find(docid, 5)
        assert [(x["rank"], x["qid"]) for x in rows] == [(r, i) for r, i, _ in expect[:5]]
        assert every.tolist() == sorted(q[keep].tolist())
        rows_h, every_h = nm.find(docid, 5, hidden)
        assert every_h.tolist() == every.tolist()
        assert [(x["rank"], x["qid"]) for x in rows_h] == [(r, i) for r, i, j in expect if not hidden[j]][:5]
        deep += len(expect) > 50
    assert deep >= 3


def test_near_misses_debian(debian):
    ret, store, _ = debian
    nm = NearMisses(store, ret)
    low = np.flatnonzero(store.n_exposing() == 0)[:5]
    for d in low.tolist():
        got = nm.document(ret.doc_ids.strings[d], limit=30)
        if not got:
            continue
        docs, _ = ret.search_batch([x["query"] for x in got], 1000)
        for x, row in zip(got, docs, strict=True):
            assert 101 <= x["rank"] <= 1000
            assert int(np.flatnonzero(row == d)[0]) + 1 == x["rank"]


def test_group_exposure_shares():
    r = np.array([3.0, 1.0, 0.0, 0.0, 4.0])
    out = group_exposure_shares(r, ["a", "a", "b", "b", '["a", "c"]'])
    by = {x["group"]: x for x in out}
    assert by["b"]["exposure_share"] == 0 and by["b"]["doc_share"] == pytest.approx(0.4)
    assert by["a"]["exposure_share"] == pytest.approx(1.0)
    assert by["a"]["doc_share"] == pytest.approx(0.6)
    assert by["c"]["ratio"] == pytest.approx(0.5 / 0.2)
    assert out[0]["group"] == "b"
    json.dumps(out)
