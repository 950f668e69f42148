"""The exposure store's lookup tables (issue 44, item 3): a document's exposing pairs in one
slice of the document table and its queries' rows from the memory-mapped query table equal
what the pieces and the shards give, for every document, whatever the block size of the merge
that wrote them; a store without them (written before they existed) reads as before."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from limelight.data import load_query_log
from limelight.exposure import ExposureStore, compute_exposure, docindex


@pytest.fixture(scope="module")
def movies(movies_bm25):
    """BM25 over the movies catalog's index, its fingerprint and the log's first 1200 queries."""
    return (*movies_bm25, load_query_log().head(1200))


def _compute(movies, path):
    retriever, fp, qs = movies
    return compute_exposure(retriever, qs, path, depth=20, shard_size=300, fingerprint=fp)


def _without_tables(src, dst):
    shutil.copytree(src, dst)
    docindex.remove_lookup_tables(dst)
    return ExposureStore.open(dst)


def test_tables_equal_the_pieces_for_every_document(movies, tmp_path, monkeypatch):
    monkeypatch.setattr(docindex, "_BLOCK_PAIRS", 500)  # many blocks, documents split across none
    st = _compute(movies, tmp_path / "store")
    fresh = ExposureStore.open(st.path)
    assert fresh.has_lookup_tables
    old = _without_tables(st.path, tmp_path / "old")
    assert not old.has_lookup_tables
    n = fresh.n_exposing()
    assert n.max() > 20
    # without the table: the pieces' counts read with pread (none memory-mapped), the same
    np.testing.assert_array_equal(old.n_exposing(), n)
    assert old._pieces is None and n.dtype == old.n_exposing().dtype == np.int64
    for d in range(len(fresh.doc_ids)):
        a, b = fresh.document_pairs(d), old.document_pairs(d)
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(fresh.document_ranks(d), old.document_ranks(d))
        assert len(a[0]) == n[d]
    busy = fresh.doc_ids[int(np.argmax(n))]
    assert ExposureStore.open(st.path).exposing_queries(busy) == old.exposing_queries(busy)
    whole = ExposureStore.open(st.path).exposing_queries(busy)
    assert ExposureStore.open(st.path).exposing_queries(busy, limit=7, offset=5) == whole[5:12]
    assert old.exposing_queries(busy, limit=7, offset=5) == whole[5:12]
    # with the query set in memory, the same rows
    assert st.exposing_queries(busy) == whole


def test_block_size_does_not_change_the_table(movies, tmp_path, monkeypatch):
    a = _compute(movies, tmp_path / "a")
    monkeypatch.setattr(docindex, "_BLOCK_PAIRS", 97)
    monkeypatch.setattr(docindex, "_BLOCK_KEYS", 20 * 3)
    b = _compute(movies, tmp_path / "b")
    for f in ("offsets", "q", "rank", "score"):
        assert (a.path / "doc_table" / f"{f}.npy").read_bytes() == (b.path / "doc_table" / f"{f}.npy").read_bytes()
    assert (a.path / "queries.arrow").read_bytes() == (b.path / "queries.arrow").read_bytes()


def test_resumed_job_rewrites_the_tables(movies, tmp_path):
    st = _compute(movies, tmp_path / "s")
    before = {f: (st.path / "doc_table" / f"{f}.npy").read_bytes() for f in ("q", "rank", "score")}
    (st.path / "shards" / "part-00001.parquet").unlink()
    st2 = _compute(movies, tmp_path / "s")
    assert st2.has_lookup_tables
    assert before == {f: (st2.path / "doc_table" / f"{f}.npy").read_bytes() for f in ("q", "rank", "score")}


def test_top_searches_partial_sort_keeps_the_full_sort_order():
    """The web app's "searches that show it most" ranks candidates only (a partial sort): the
    same rows, in the same order, as sorting every exposing query, ties included."""
    from limelight.data import Queries
    from limelight.service import insight

    rng = np.random.default_rng(0)
    n = 5000
    qs = Queries.from_lists([f"q{i}" for i in range(n)], [f"t{i}" for i in range(n)])
    for _ in range(20):
        q = rng.permutation(n)[:3000]
        rank = rng.integers(1, 6, size=len(q))
        weights = rng.integers(1, 4, size=len(q)).astype(np.float64)  # many ties of o_q · μ
        mu = 0.8 ** (rank - 1)
        order = np.lexsort((q, rank, -(weights * mu)))[:insight.TOP_SEARCHES]
        got = insight.top_searches(q, rank, weights, mu, qs)
        assert [g["qid"] for g in got] == [f"q{int(q[i])}" for i in order]
