"""The BM25 engine on the shared collections: bm25s equality, top-k, persistence, effectiveness."""

from __future__ import annotations

import json
import shutil

import bm25s
import ir_measures
import numpy as np
import pytest
import scipy.sparse as sp
from ir_measures import nDCG

from limelight.analysis import Analyzer
from limelight.data import Queries, load_dataset, load_query_log
from limelight.errors import IndexMismatchError, LimelightError, UnknownIdError
from limelight.retrieval.bm25 import BM25, BM25Index, analyze_flat


@pytest.fixture(scope="module")
def sci_index(scifact):
    return BM25Index.build(scifact.collection)


@pytest.fixture(scope="module")
def log_sample():
    return load_query_log().sample(3000, seed=1)


def _bm25s(index: BM25Index, texts, k1=0.9, b=0.4) -> bm25s.BM25:
    model = bm25s.BM25(k1=k1, b=b, method="lucene")
    model.index(index.analyzer.tokenize_many(texts), show_progress=False)
    return model


def _brute_topk(dense: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Score descending, ties by lower doc code; only documents with a positive score."""
    n, N = dense.shape
    docs = np.full((n, k), -1, dtype=np.int32)
    scores = np.zeros((n, k), dtype=np.float32)
    for i in range(n):
        order = np.lexsort((np.arange(N), -dense[i]))
        order = order[dense[i, order] > 0][:k]
        docs[i, :len(order)] = order
        scores[i, :len(order)] = dense[i, order]
    return docs, scores


# ---- exactness ------------------------------------------------------------------------------
@pytest.mark.parametrize(("k1", "b"), [(0.9, 0.4), (1.2, 0.75)])
def test_scores_equal_bm25s(scifact, sci_index, k1, b):
    ref = _bm25s(sci_index, scifact.collection.texts.tolist(), k1, b)
    texts = scifact.queries.texts.tolist() + ["protein protein binding binding binding"]
    ours = BM25(sci_index, k1=k1, b=b).score(texts, np.arange(sci_index.n_docs))
    for i, toks in enumerate(sci_index.analyzer.tokenize_many(texts)):
        expect = ref.get_scores(toks)
        np.testing.assert_allclose(ours[i], expect, rtol=0, atol=1e-5)


def test_term_statistics_and_weights(scifact, sci_index):
    bm = BM25(sci_index)
    N = sci_index.n_docs
    assert N == len(scifact.collection)
    assert sci_index.avgdl == pytest.approx(sci_index.doc_len.mean())
    df = sci_index.df
    assert df.sum() == len(sci_index.docs) and (df > 0).all()
    np.testing.assert_allclose(sci_index.idf, np.log(1 + (N - df + 0.5) / (df + 0.5)), rtol=1e-6)
    docs, w = bm.postings("protein")
    assert len(docs) == df[sci_index.vocabulary.lookup("protein")] and np.all(np.diff(docs) > 0)
    np.testing.assert_array_equal(bm.score(["protein"], docs)[0], w)
    assert bm.postings("notaterm_xyz")[0].size == 0
    d = scifact.collection.ids[int(docs[0])]
    dtw = bm.doc_term_weights(d)
    assert dtw["protein"] == pytest.approx(float(w[0]))
    toks = set(sci_index.analyzer.tokenize(scifact.collection.texts[int(docs[0])]))
    assert set(dtw) == toks
    with pytest.raises(UnknownIdError):
        bm.doc_term_weights("no-such-doc")


def test_analyze_flat_equals_tokenize_many(scifact, log_sample):
    for an in (Analyzer(), Analyzer(stemmer="english", stopwords="en_plus")):
        for texts in (scifact.collection.texts.tolist()[:2000], log_sample.texts.tolist()):
            rows, codes, terms = analyze_flat(an, texts)
            toks = an.tokenize_many(texts)
            assert rows.tolist() == [i for i, t in enumerate(toks) for _ in t]
            assert np.asarray(terms, dtype=object)[codes].tolist() == [w for t in toks for w in t]


# ---- top-k ----------------------------------------------------------------------------------
def test_topk_equals_brute_force(scifact, sci_index, log_sample):
    bm = BM25(sci_index)
    # single vocabulary terms produce many exact ties; the log has queries without known terms
    terms = sci_index.vocabulary.strings[np.argsort(-sci_index.df)[:40:3]].tolist()
    texts = (scifact.queries.texts.tolist()[:100] + terms + log_sample.texts.tolist()[:300]
             + ["", "   ", "zzzqqq xxyyzz", "the of and"])
    dense = bm.score(texts, np.arange(sci_index.n_docs))
    n_match = (dense > 0).sum(axis=1)
    assert (n_match < 1000).any() and (n_match > 1000).any() and (n_match == 0).any()
    for k in (1, 10, 1000, sci_index.n_docs + 5):
        docs, scores = bm.search_batch(texts, k)
        assert docs.shape == scores.shape == (len(texts), k)
        assert docs.dtype == np.int32 and scores.dtype == np.float32
        edocs, escores = _brute_topk(dense, k)
        np.testing.assert_array_equal(docs, edocs)
        np.testing.assert_array_equal(scores, escores)
    # a tie inside the top-k is broken by the lower doc code
    row = len(scifact.queries.texts.tolist()[:100])
    d, s = bm.search_batch(terms[:1], 1000)
    tied = s[0][:-1] == s[0][1:]
    assert tied.any() and np.all(d[0][:-1][tied] < d[0][1:][tied])
    assert row > 0


def test_empty_and_unknown_queries_retrieve_nothing(scifact, sci_index):
    bm = BM25(sci_index)
    qs = Queries.from_lists(["a", "empty", "blank", "unknown", "stop"],
                            ["protein folding", "", "  ", "qqqzzz", "the and of"])
    docs, scores = bm.search_batch(qs.texts.tolist(), 10)
    assert (docs[0] >= 0).all() and (docs[1:] == -1).all() and (scores[1:] == 0).all()
    run = bm.retrieve(qs, 10)
    assert run.n_queries == 5 and len(run) == 10
    assert run.query("empty")[0].size == 0
    with pytest.raises(LimelightError, match="k must be"):
        bm.search_batch(["protein"], 0)


def test_search_vectors_weighted(sci_index):
    bm = BM25(sci_index)
    rng = np.random.default_rng(0)
    V, N = sci_index.n_terms, sci_index.n_docs
    q = sp.random(50, V, density=20 / V, format="csr", random_state=rng, dtype=np.float32)
    q.data = (q.data * 3).astype(np.float32)
    W = sp.csc_matrix((bm.weights, sci_index.docs, sci_index.indptr), shape=(N, V))
    dense = (q @ W.T).toarray().astype(np.float32)
    docs, scores = bm.search_vectors(q, 100)
    edocs, escores = _brute_topk(dense, 100)
    np.testing.assert_array_equal(docs, edocs)
    np.testing.assert_allclose(scores, escores, rtol=1e-5)
    # counts from query_vectors reproduce search_batch
    texts = ["protein folding protein", "vitamin d deficiency"]
    a = bm.search_vectors(bm.query_vectors(texts), 20)
    b = bm.search_batch(texts, 20)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_allclose(a[1], b[1], rtol=1e-6)
    assert bm.query_vectors(texts)[0, sci_index.vocabulary.lookup("protein")] == 2
    with pytest.raises(LimelightError, match="columns"):
        bm.search_vectors(sp.csr_matrix((1, V + 1), dtype=np.float32), 10)


def test_threads_give_identical_results(sci_index, log_sample):
    texts = log_sample.texts.tolist()
    d1, s1 = BM25(sci_index, threads=1).search_batch(texts, 100)
    d2, s2 = BM25(sci_index, threads=2).search_batch(texts, 100)
    np.testing.assert_array_equal(d1, d2)
    np.testing.assert_array_equal(s1, s2)


# ---- persistence ----------------------------------------------------------------------------
def test_save_load_roundtrip_mmap(tmp_path, scifact, sci_index):
    path = sci_index.save(tmp_path / "idx")
    meta = json.loads((path / "meta.json").read_text())
    assert meta["n_docs"] == sci_index.n_docs and meta["k1"] == 0.9 and meta["b"] == 0.4
    assert meta["analyzer"] == Analyzer().config() and len(meta["vocabulary"]) == sci_index.n_terms
    loaded = BM25Index.load(path)
    assert isinstance(loaded.docs, np.memmap) and loaded.docs.mode == "c"
    assert loaded.avgdl == sci_index.avgdl and loaded.vocabulary == sci_index.vocabulary
    texts = scifact.queries.texts.tolist()
    a = BM25(sci_index).search_batch(texts, 100)
    b = BM25(loaded).search_batch(texts, 100)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    c = BM25(BM25Index.load(path, mmap=False, analyzer=Analyzer())).search_batch(texts, 100)
    np.testing.assert_array_equal(a[0], c[0])
    # saving again over an existing index replaces it atomically
    sci_index.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_load_with_other_analyzer_raises(tmp_path, sci_index):
    path = sci_index.save(tmp_path / "idx")
    with pytest.raises(IndexMismatchError, match="stemmer None .index. vs 'english'"):
        BM25Index.load(path, analyzer=Analyzer(stemmer="english"))


@pytest.mark.parametrize("damage", ["delete", "truncate", "shape", "meta", "missing_dir"])
def test_corrupt_index_raises_one_line(tmp_path, sci_index, damage):
    path = sci_index.save(tmp_path / "idx")
    target = path / "tf.npy"
    if damage == "delete":
        target.unlink()
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    elif damage == "shape":
        np.save(path / "doc_len.npy", np.zeros(3, dtype=np.int32))
        target = path / "doc_len.npy"
    elif damage == "meta":
        target = path / "meta.json"
        target.write_text("{not json")
    else:
        shutil.rmtree(path)
        target = path / "meta.json"
    with pytest.raises(LimelightError) as e:
        BM25Index.load(path)
    msg = str(e.value)
    assert "\n" not in msg and str(target) in msg


# ---- effectiveness --------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "stem", "ref"), [("adi", None, .422), ("adi", "english", .480),
                                                   ("cranfield", None, .332),
                                                   ("cranfield", "english", .352)])
def test_ndcg10_matches_reference(name, stem, ref):
    ds = load_dataset(name)
    bm = BM25(BM25Index.build(ds.collection, Analyzer(stemmer=stem)))
    run = bm.retrieve(ds.queries, 1000)
    res = ir_measures.calc_aggregate([nDCG @ 10], ds.qrels.to_ir_measures(), run.to_ir_measures())
    assert res[nDCG @ 10] == pytest.approx(ref, abs=0.01)
