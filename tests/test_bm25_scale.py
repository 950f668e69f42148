"""BM25 at scale: start-up work that does not grow with the corpus (posting weights from a
parallel kernel, pruning bounds per term on demand), equal bit for bit to the vectorized
formulas they replace, on the shared collections."""

from __future__ import annotations

import numpy as np
import pytest

import limelight.retrieval.bm25_kernels as K
from limelight.data import load_dataset, load_query_log
from limelight.retrieval.bm25 import BM25, BM25Index

PARAMS = [(0.9, 0.4), (1.2, 0.75), (0.0, 0.0), (2.5, 1.0), (0.31, 0.1234)]


@pytest.fixture(scope="module", params=["scifact", "npl"])
def index(request) -> BM25Index:
    return BM25Index.build(load_dataset(request.param).collection)


@pytest.fixture(scope="module")
def log_texts() -> list[str]:
    return load_query_log().sample(4000, seed=7).texts.tolist()


def _reference_weights(ix: BM25Index, k1: float, b: float) -> tuple[np.ndarray, np.ndarray]:
    """The posting weights as the previous release computed them (numpy, float64) and each
    posting's term."""
    term = np.repeat(np.arange(ix.n_terms, dtype=np.int32), ix.df)
    tf = np.asarray(ix.tf, dtype=np.float64)
    dl = np.asarray(ix.doc_len)[ix.docs].astype(np.float64)
    norm = k1 * ((1.0 - b) + b * dl / ix.avgdl)
    return (ix.idf[term].astype(np.float64) * (tf / (norm + tf))).astype(np.float32), term


def _reference_kth(ix: BM25Index, w: np.ndarray, term: np.ndarray, k: int) -> np.ndarray:
    """Each term's k-th largest weight as the previous release computed it (a lexsort of
    every posting)."""
    order = np.lexsort((-w, term))
    out = np.zeros(ix.n_terms, dtype=np.float32)
    has = ix.df >= k
    out[has] = w[order[np.asarray(ix.indptr[:-1])[has] + (k - 1)]]
    return out


@pytest.mark.parametrize(("k1", "b"), PARAMS)
def test_weights_equal_the_float64_formula_bit_for_bit(index, k1, b):
    ref, _ = _reference_weights(index, k1, b)
    for threads in (1, 2):
        fresh = BM25Index(index.analyzer, index.vocabulary, index.doc_ids, index.indptr,
                          index.docs, index.tf, index.doc_len)
        w = fresh.weights(k1, b, threads=threads)
        assert w.dtype == np.float32 and w.tobytes() == ref.tobytes()
    assert index.weights(k1, b) is index.weights(k1, b)  # cached


@pytest.mark.parametrize(("k1", "b"), PARAMS[:2])
def test_kth_bounds_per_term_equal_the_sorted_reference(index, k1, b):
    ref_w, term = _reference_weights(index, k1, b)
    rng = np.random.default_rng(3)
    for k in (1, 2, 10, 100, 1000):
        ref = _reference_kth(index, ref_w, term, k)
        fresh = BM25Index(index.analyzer, index.vocabulary, index.doc_ids, index.indptr,
                          index.docs, index.tf, index.doc_len)
        # on demand: a few terms (with repeats), then more, then all of them
        some = rng.integers(0, index.n_terms, 50)
        got = fresh.kth_weights(k1, b, k, some, threads=1)
        np.testing.assert_array_equal(got[some], ref[some])
        top = np.argsort(-index.df)[:20]  # the longest posting lists
        got = fresh.kth_weights(k1, b, k, top, threads=2)
        np.testing.assert_array_equal(got[top], ref[top])
        assert fresh.kth_weights(k1, b, k).tobytes() == ref.tobytes()


def test_kernels_on_edge_cases():
    indptr = np.array([0, 0, 3, 4, 9], dtype=np.int64)  # an empty term, ties, one posting
    pw = np.array([2, 2, 1, 5, 3, 3, 7, 3, 1], dtype=np.float32)
    terms = np.array([0, 1, 2, 3], dtype=np.int64)
    np.testing.assert_array_equal(K.kth_largest(indptr, pw, terms, 1), [0, 2, 5, 7])
    np.testing.assert_array_equal(K.kth_largest(indptr, pw, terms, 2), [0, 2, 0, 3])
    np.testing.assert_array_equal(K.kth_largest(indptr, pw, terms, 3), [0, 1, 0, 3])
    np.testing.assert_array_equal(K.kth_largest(indptr, pw, terms, 5), [0, 0, 0, 1])
    assert K.kth_largest(indptr, pw, terms[:0], 3).shape == (0,)
    docs = np.array([0, 1, 2, 0, 0, 1, 2, 3, 4], dtype=np.int32)
    tf = np.ones(9, dtype=np.int32)
    dl = np.array([1, 2, 3, 4, 5], dtype=np.int32)
    idf = np.ones(4, dtype=np.float32)
    for blocks in (1, 2, 7, 50):  # blocks that start inside a term and past the empty one
        w = K.posting_weights(indptr, docs, tf, dl, idf, 0.9, 0.4, 3.0, blocks)
        norm = 0.9 * ((1.0 - 0.4) + 0.4 * dl[docs].astype(np.float64) / 3.0)
        np.testing.assert_array_equal(w, (1.0 / (norm + 1.0)).astype(np.float32))
    assert K.posting_weights(indptr[:1], docs[:0], tf[:0], dl, idf[:0], 0.9, 0.4, 1.0, 4).shape == (0,)


def test_runs_equal_unpruned_search_and_a_reopened_index(tmp_path, index, log_texts):
    """The runs of the on-demand bounds equal those of a search without pruning, and those of
    the index written and opened again (memory-mapped) in the files of the previous release."""
    bm = BM25(index)
    for k in (10, 100, 1000):
        docs, scores = bm.search_batch(log_texts, k)
        qptr, qterms, qw = bm._encode(log_texts)
        free_d, free_s = K.search_csr(qptr, qterms, qw, index.indptr, index.docs, bm.weights,
                                      np.zeros(0, dtype=np.float32), index.n_docs, k, 8)
        np.testing.assert_array_equal(docs, free_d)
        np.testing.assert_array_equal(scores, free_s)
    path = index.save(tmp_path / "idx")
    assert sorted(p.name for p in path.iterdir()) == [
        ".limelight-output", "doc_len.npy", "docs.npy", "indptr.npy", "meta.json", "tf.npy"]
    again = BM25(BM25Index.load(path))
    d2, s2 = again.search_batch(log_texts, 100)
    d1, s1 = bm.search_batch(log_texts, 100)
    np.testing.assert_array_equal(d1, d2)
    np.testing.assert_array_equal(s1, s2)


def test_an_index_pickles_with_its_caches(index, log_texts):
    """Ray ships retrievers through its object store: the index's lock is not pickled, its
    caches are, and the copy searches alike."""
    import pickle

    bm = BM25(index)
    a = bm.search_batch(log_texts[:200], 10)
    copy = pickle.loads(pickle.dumps(bm))
    b = copy.search_batch(log_texts[:200], 10)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert copy.index._kth.keys() == index._kth.keys()
