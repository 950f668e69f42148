"""A dense search's row is a function of its query alone (``DenseIndex.search``): the same
documents, ranks and float32 scores, bit for bit, whatever batch the query is searched in.
FAISS's own float32 scores are not (BLAS blocking by batch size, another loop for small
batches), which made a resumed exposure job (other batches) differ from a straight one
(``test_audit.py::test_interrupt_and_resume_gives_identical_results``)."""

from __future__ import annotations

import numpy as np
import pytest

from limelight.data.ids import IdMap
from limelight.retrieval.dense import DenseIndex

N_DOCS, DIM, N_QUERIES, K = 1033, 384, 600, 100
# FAISS 1.15 multiplies batches of over ~300 queries by 1,033 documents with BLAS (sgemm),
# smaller ones pair by pair: its scores differ between the first two and the last
SPLITS = {"one batch": [0, N_QUERIES], "cut at 37 and 450": [0, 37, 450, N_QUERIES],
          "one at a time": list(range(N_QUERIES + 1))}


@pytest.fixture(scope="module")
def vectors():
    """Unit vectors: 41 identical documents (codes 500-540) and 40 queries next to them, whose
    top 20 ends among the duplicates (a tie that only the document codes can order)."""
    rng = np.random.default_rng(0)
    docs = rng.standard_normal((N_DOCS, DIM)).astype(np.float32)
    docs[500:541] = docs[7]
    queries = rng.standard_normal((N_QUERIES, DIM)).astype(np.float32)
    queries[:40] = docs[7] + 0.01 * queries[:40]
    for a in (docs, queries):
        a /= np.linalg.norm(a, axis=1, keepdims=True)
    return docs, queries


def _index(docs, **meta) -> DenseIndex:
    ids = IdMap([f"d{i}" for i in range(len(docs))], kind="document")
    return DenseIndex.from_embeddings(ids, docs, {"encoder": {"model": "random"}, **meta})


def _search(index: DenseIndex, queries: np.ndarray, cuts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    parts = [index.search(queries[a:b], K) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    return np.vstack([d for d, _ in parts]), np.vstack([s for _, s in parts])


@pytest.mark.parametrize("meta", [{}, {"dtype": "float16"}, {"hnsw": True}],
                         ids=["flat float32", "flat float16", "hnsw"])
def test_a_querys_results_do_not_depend_on_its_batch(vectors, meta):
    docs, queries = vectors
    index = _index(docs, **meta)
    first_docs, first_scores = _search(index, queries, SPLITS["one batch"])
    for name, cuts in SPLITS.items():
        d, s = _search(index, queries, cuts)
        np.testing.assert_array_equal(d, first_docs, err_msg=name)
        assert s.tobytes() == first_scores.tobytes(), name  # bit for bit


def test_the_exact_index_gives_the_true_top_k_with_ties_by_document_code(vectors):
    """The flat index's rows: the top ``k`` of the inner products summed in float64 and rounded
    to float32, equal scores ranked by document code, also where 41 duplicates straddle the cut
    (FAISS's top ``k + EXTRA_CANDIDATES`` holds only some of them: searched again with more)."""
    docs, queries = vectors
    index = _index(docs)
    true = (queries.astype(np.float64) @ docs.astype(np.float64).T).astype(np.float32)
    codes = np.broadcast_to(np.arange(N_DOCS), true.shape)
    for k in (K, 20):
        got_docs, got_scores = _search(index, queries, SPLITS["cut at 37 and 450"]) if k == K else \
            index.search(queries, k)
        order = np.lexsort((codes, -true), axis=-1)[:, :k]
        np.testing.assert_array_equal(got_docs, order)
        np.testing.assert_array_equal(got_scores, np.take_along_axis(true, order, axis=1))
    dups = (got_docs[:40] >= 500) & (got_docs[:40] <= 540)
    assert (dups.sum(axis=1) == 19).all() and (got_docs[:40, :20] == 7).any(axis=1).all()
    assert (got_docs[:40, 19] == 518).all()  # doc 7, then 500-518 of the 41 equal ones


def test_fewer_documents_than_k_and_blank_rows_are_padded(vectors):
    docs, queries = vectors
    index = _index(docs[:5])
    d, s = index.search(queries[:3], 8)
    assert d.shape == (3, 8) and (d[:, 5:] == -1).all() and np.isneginf(s[:, 5:]).all()
    assert sorted(d[0, :5].tolist()) == [0, 1, 2, 3, 4]
    assert (np.diff(s[:, :5], axis=1) <= 0).all()
