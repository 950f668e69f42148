"""Batch exact reverse search (issue 20 item 3): many new documents inserted at once equal a
brute-force re-run of every query over the collection plus all of them — lists, ranks and float32
scores — for BM25 (frozen statistics) and dense retrieval, including exact score ties, which the
engines settle by document code at the cut and trec_eval by document id inside a list."""

from __future__ import annotations

import numpy as np
import pytest

from limelight.data import load_dataset, load_query_log
from limelight.data.collection import Collection
from limelight.data.ids import IdMap
from limelight.exposure import compute_exposure
from limelight.exposure.eqi import ExactReverse
from limelight.exposure.eqi.exact import recompute_new_exposure
from limelight.retrieval.bm25 import BM25, BM25Index


def _same(a, b) -> None:
    assert a.docids == b.docids
    for f in ("ptr", "q", "rank", "score"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f


def _ties_at(st, n_pairs: int) -> tuple[np.ndarray, np.ndarray]:
    """(query code, document code) of stored pairs at the last rank of full lists."""
    q, d, rank, _ = st.pair_arrays()
    at = np.flatnonzero(rank == st.depth)
    return q[at[:n_pairs]], d[at[:n_pairs]]


@pytest.fixture(scope="module")
def log():
    return load_query_log()


@pytest.fixture(scope="module")
def bm25_batch(log, tmp_path_factory):
    """cranfield minus 150 held-out documents, 6000 log queries, top 50; the batch: the held-out
    documents, copies of stored documents (among them documents at the cut of some list) and
    copies of held-out documents, under ids that sort before and after the collection's."""
    coll = load_dataset("cranfield").collection
    rng = np.random.default_rng(7)
    new = np.sort(rng.choice(len(coll), 150, replace=False))
    keep = np.setdiff1d(np.arange(len(coll)), new)
    base = Collection(IdMap(coll.ids.strings[keep], kind="document"), coll.texts[keep], name="cranfield")
    ret = BM25(BM25Index.build(base), threads=2)
    qs = log.head(6000)
    st = compute_exposure(ret, qs, tmp_path_factory.mktemp("eqib") / "bm25", depth=50)
    _, at_cut = _ties_at(st, 40)
    old = np.unique(np.r_[np.unique(at_cut)[:25], np.flatnonzero(st.n_exposing() > 0)[:15]])
    texts = (coll.texts[new].tolist() + base.texts[old].tolist()
             + coll.texts[new[:20]].tolist())
    ids = (coll.ids.strings[new].tolist() + [f"!copy-{i:03d}" for i in range(len(old) // 2)]
           + [f"~copy-{i:03d}" for i in range(len(old) - len(old) // 2)]
           + [f"{x}~again" for x in coll.ids.strings[new[:20]].tolist()])
    order = rng.permutation(len(texts))  # copies before and after their originals in the batch
    return ret, qs, st, [texts[i] for i in order], [ids[i] for i in order]


def test_bm25_batch_equals_brute_force_with_ties(bm25_batch):
    ret, qs, st, texts, ids = bm25_batch
    ex = ExactReverse.build(st, ret)
    got = ex.add_documents(texts, ids)
    want = recompute_new_exposure(ret, qs, 50, texts, ids, frozen=True)
    assert len(want.q) > 5000
    _same(got, want)
    # copies tie with each other: two new documents with the same score in one list
    _, counts = np.unique(np.c_[got.q, got.score.view(np.int32)], axis=0, return_counts=True)
    assert (counts > 1).any()
    # each document alone is a batch of one: the same as its own re-run
    for i in (0, len(ids) - 1):
        one = ex.add_documents(texts[i:i + 1], ids[i:i + 1])
        _same(one, recompute_new_exposure(ret, qs, 50, texts[i:i + 1], ids[i:i + 1], frozen=True))


def test_compiled_document_analysis_equals_the_analyzer(bm25_batch, log):
    """New documents analyzed by the compiled lexicon give the same weights as ``analyze_flat``
    (tokens, stopwords, words no query asks for counted in the length only), on the batch, on
    queries of the log as documents, and on texts with tricky characters."""
    ret, qs, st, texts, ids = bm25_batch
    ex = ExactReverse.build(st, ret)
    assert ex._doc_lexicon is not None
    tricky = ["İstanbul ΟΔΟΣ straße the and of a_b __ x1 9 99 é́e Ǆungla ﬁle ß ẞ",
              "linux-image-6.1 (amd64) — the kernel's modules; C++ & Ruby/Rails x86_64 e-mail",
              "a", "日本語 テキスト 中文 한국어 ٱلْعَرَبِيَّة हिन्दी", "\x00\t\n  — ", "0 00 000"]
    for batch_texts in (texts, log.texts[:3000].tolist(), tricky):
        a = ex._bm25_doc_weights(batch_texts)
        b = ex._bm25_doc_weights(batch_texts, compiled=False)
        for x, y in zip(a, b, strict=True):
            assert np.array_equal(x, y)


def test_bm25_batch_split_across_threads_is_the_same(bm25_batch):
    """The query-major kernel splits the queries across threads: any split gives the same lists."""
    from limelight.exposure.eqi import batch

    ret, qs, st, texts, ids = bm25_batch
    ex = ExactReverse.build(st, ret)
    dptr, dterm, dw = ex._bm25_doc_weights(texts)
    args = (dptr, dterm, dw, ex.n_ext, ex.qptr, ex.qtok, ex.iptr, ex.iq, ex.S, ex.L, ex.nvalid,
            ex.thr, ex.full, ex._new_lexkeys(ids))
    one = batch.bm25_exposure(*args, threads=1)
    assert len(one[0]) > 5000 and np.all(np.diff(one[0]) >= 0)  # grouped by ascending query
    for t in (2, 3):
        many = batch.bm25_exposure(*args, threads=t)
        for a, b in zip(one, many, strict=True):
            assert np.array_equal(a, b)


# ---- dense ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=[20, 100], ids=["heap", "reservoir"])
def dense_batch(log, tmp_path_factory, request):
    """Vectors with entries in {0, 1/4, 1/2, 1} in 8 dimensions: every inner product is exact in
    float32 whatever FAISS's summation order, so exact ties are everywhere (at the cut and inside
    lists). 1,100 documents (FAISS's 1,024-document blocks are crossed) with ids not in code
    order, 1,500 queries, top 20 (FAISS keeps a heap) or top 100 (a reservoir). The batch: 120 new vectors — 80 fresh ones, copies of 20 stored
    documents at the cut of some list, copies of 20 of the fresh ones."""
    from limelight.retrieval.dense import DenseIndex, DenseRetriever, Encoder

    rng = np.random.default_rng(3)
    vals = np.float32([0, 0.25, 0.5, 1])

    def vecs(n):
        return vals[rng.integers(0, 4, size=(n, 8))]

    n_old = 1100
    demb = vecs(n_old)
    ids = [f"d{int(x)}" for x in rng.permutation(5000)[:n_old]]  # codes not in id order
    enc = Encoder()
    ix = DenseIndex.from_embeddings(IdMap(ids, kind="document"), demb, {"encoder": enc.identity()})
    ret = DenseRetriever(ix, enc)
    qs = log.head(1500)
    qemb = vecs(len(qs))

    class FromEmbeddings:  # the store is computed from the same query vectors
        doc_ids = ret.doc_ids
        name = "dense-synthetic"

        def search_batch(self, texts, k):
            lookup = {t: i for i, t in enumerate(qs.texts.tolist())}
            return ret.search_vectors(qemb[[lookup[t] for t in texts]], k)

    depth = request.param
    st = compute_exposure(FromEmbeddings(), qs, tmp_path_factory.mktemp("eqib") / "dense", depth=depth)
    _, at_cut = _ties_at(st, 60)
    fresh = vecs(80)
    new = np.vstack([fresh, demb[np.unique(at_cut)[:20]], fresh[:20]])
    new_ids = ([f"n{i:03d}" for i in range(80)] + [f"a{i:03d}" for i in range(20)]
               + [f"z{i:03d}" for i in range(20)])
    return ret, qs, qemb, st, new, new_ids, depth


def test_dense_batch_equals_brute_force_with_ties(dense_batch):
    """Ties at the cut are settled as a dense search settles them (``DenseIndex.search``: the
    lower document code stays), at top 20 and top 100 alike."""
    ret, qs, qemb, st, new, ids, depth = dense_batch
    ex = ExactReverse.build(st, ret, query_embeddings=qemb)
    got = ex.add_documents(None, ids, embeddings=new)
    want = recompute_new_exposure(ret, qs, depth, None, ids, query_embeddings=qemb, doc_embeddings=new)
    assert len(want.q) > 500
    _same(got, want)
    for i in (0, 85, len(ids) - 1):
        one = ex.add_documents(None, ids[i:i + 1], embeddings=new[i:i + 1])
        _same(one, recompute_new_exposure(ret, qs, depth, None, ids[i:i + 1], query_embeddings=qemb,
                                          doc_embeddings=new[i:i + 1]))


def test_dense_scores_are_those_of_a_search_bit_for_bit():
    """The new documents' scores equal, bit for bit, those of a dense search of every query over
    the collection plus them (``DenseIndex.search``, one call or another split of the queries),
    whatever FAISS's own float32 scores of the range search were."""
    from limelight.exposure.eqi import batch
    from limelight.retrieval.dense import DenseIndex

    rng = np.random.default_rng(5)

    def unit(n):
        x = rng.standard_normal((n, 384)).astype(np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    old, new, q = unit(1100), unit(30), unit(600)
    none = np.zeros(len(q), dtype=bool)  # no list is full: every pair is a candidate
    cq, cd, cs = batch.dense_candidates(q, np.full(len(q), -np.inf, np.float32), none, new)
    assert len(cq) == len(q) * len(new)
    ix = DenseIndex.from_embeddings(IdMap([f"d{i}" for i in range(1130)], kind="document"),
                                    np.vstack([old, new]), {"encoder": {"model": "random"}})
    for cuts in ([0, len(q)], [0, 37, 450, len(q)]):  # (FAISS: BLAS, pair by pair, BLAS)
        parts = [ix.search(q[a:b], 1130) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
        codes, scores = np.vstack([c for c, _ in parts]), np.vstack([s for _, s in parts])
        want = np.empty((len(q), 1130), np.float32)
        np.put_along_axis(want, codes.astype(np.int64), scores, axis=1)
        assert np.array_equal(cs, want[cq, 1100 + cd])
    # thresholds: a query keeps exactly the new documents scoring above its own
    thr = np.sort(want[:, 1100:], axis=1)[:, 15]
    kq, kd, ks = batch.dense_candidates(q, thr, ~none, new)
    above = want[:, 1100:] > thr[:, None]
    assert len(kq) == int(above.sum()) and above[kq, kd].all()
