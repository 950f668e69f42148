"""Reverse retrieval baselines (Li et al. §5, §6.2): the query log indexed as a collection.

- ``BruteForce``: the exact answer, read from the exposure store (every query was run).
- ``BM25Reverse``: the query log indexed with BM25; a document is issued as a query weighted by
  its term counts (s(d, q) = Σ_t tf(t, d) · w_BM25(t, q)). ``k1``/``b`` are those of the reverse
  index; ``tune_bm25_reverse`` picks them on validation documents to maximise RELQ (BM25-tuned).
- ``DenseReverse``: nearest queries to the document's embedding in the retrieval model's space
  (FAISS ``IndexFlatIP``, exact).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from limelight.analysis import Analyzer
from limelight.data.collection import Collection
from limelight.data.queries import Queries
from limelight.errors import LimelightError
from limelight.exposure.eqi.base import check_k, check_texts, faiss_ip_index, faiss_search
from limelight.retrieval.defaults import DEFAULT_B, DEFAULT_K1


class BruteForce:
    """Exact EQI from the exposure store: a document's exposing queries by rank (then query id).
    The score is μ-free: minus the 1-based rank, so that higher is better."""

    name = "brute-force"

    def __init__(self, store):
        self.store = store
        self.queries = store.queries

    def search_docs(self, docs: np.ndarray, k: int = 100) -> tuple[np.ndarray, np.ndarray]:
        """``(codes (m, k), scores (m, k))`` for document codes of the store."""
        k = check_k(k)
        ranks = self.store.ranks()[np.asarray(docs)]
        m = ranks.shape[0]
        out_c = np.full((m, k), -1, dtype=np.int32)
        out_s = np.zeros((m, k), dtype=np.float32)
        row = np.repeat(np.arange(m), np.diff(ranks.indptr))
        order = np.lexsort((ranks.indices, ranks.data, row))
        pos = np.arange(len(order)) - ranks.indptr[row[order]]
        keep = pos < k
        r, p = row[order][keep], pos[keep]
        out_c[r, p] = ranks.indices[order][keep]
        out_s[r, p] = -ranks.data[order][keep].astype(np.float32)
        return out_c, out_s


class BM25Reverse:
    """The query log as a BM25 collection; documents issued as term-count-weighted queries.

    ``analyzer`` should be the document index's (same tokens on both sides). ``index`` reuses an
    already built query index (``with_params`` shares it).
    """

    def __init__(self, queries: Queries, analyzer: Analyzer | None = None, k1: float = DEFAULT_K1,
                 b: float = DEFAULT_B, index=None, name: str = "bm25-reverse"):
        from limelight.retrieval.bm25 import BM25, BM25Index

        self.queries = queries
        if index is None:
            index = BM25Index.build(Collection(queries.ids, queries.texts, name="querylog"),
                                    analyzer or Analyzer())
        self.index = index
        self.bm25 = BM25(index, k1=k1, b=b)
        self.k1, self.b = self.bm25.k1, self.bm25.b
        self.name = name

    def with_params(self, k1: float, b: float, name: str | None = None) -> BM25Reverse:
        """The same query index with other ``k1``/``b``."""
        return BM25Reverse(self.queries, k1=k1, b=b, index=self.index, name=name or self.name)

    def doc_vectors(self, texts: Sequence[str]):
        """Documents as ``(m, V)`` term-count vectors over the query index's vocabulary."""
        return self.bm25.query_vectors(list(texts))

    def search(self, texts: Sequence[str] | None = None, embeddings: np.ndarray | None = None,
               k: int = 100) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` queries for document texts: ``(codes (m, k) int32, scores float32)``."""
        if texts is None:
            raise LimelightError(f"{self.name} needs document texts")
        return self.bm25.search_vectors(self.doc_vectors(check_texts(texts)), check_k(k))


class DenseReverse:
    """Nearest queries to a document's embedding (inner product, exact FAISS search).

    ``query_embeddings``: ``(|Q|, dim)`` in the retrieval model's space (the store's query order);
    ``encoder`` embeds document texts (not needed when embeddings are passed).
    """

    def __init__(self, queries: Queries, query_embeddings: np.ndarray, encoder=None,
                 name: str = "dense-reverse"):
        if len(query_embeddings) != len(queries):
            raise LimelightError(f"{len(query_embeddings)} query embeddings for {len(queries)} queries")
        self.queries = queries
        self.encoder = encoder
        self.name = name
        self._index = faiss_ip_index(query_embeddings)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.encoder is None:
            raise LimelightError(f"{self.name}: no encoder to embed document texts")
        return self.encoder.encode(check_texts(texts))

    def search(self, texts: Sequence[str] | None = None, embeddings: np.ndarray | None = None,
               k: int = 100) -> tuple[np.ndarray, np.ndarray]:
        emb = self.embed(texts) if embeddings is None else embeddings
        return faiss_search(self._index, emb, check_k(k))


def tune_bm25_reverse(rev: BM25Reverse, store, docs: np.ndarray, texts: Sequence[str],
                      measure="RELQ(0.5,0.9)", k1s: Sequence[float] = (0.3, 0.6, 0.9, 1.2, 1.6, 2.0),
                      bs: Sequence[float] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0), k: int = 100
                      ) -> tuple[BM25Reverse, list[dict]]:
    """BM25-tuned: the ``(k1, b)`` of the reverse index that maximise mean ``measure`` on the
    validation documents ``docs`` (codes of ``store``) with ``texts``. Returns the tuned method
    (named ``bm25-tuned``) and the grid ``[{"k1", "b", measure: mean}]``."""
    from limelight.exposure.relq import parse_relq, relq_many

    m = parse_relq(measure) if isinstance(measure, str) else measure
    truth = store.ranks()[np.asarray(docs)]
    vecs = rev.doc_vectors(check_texts(texts))
    grid = []
    best = None
    for k1 in k1s:
        for b in bs:
            r = rev.with_params(k1, b)
            codes, _ = r.bm25.search_vectors(vecs, k)
            v = float(np.nanmean(relq_many(codes, truth, [m])[str(m)]))
            grid.append({"k1": k1, "b": b, str(m): v})
            if best is None or v > best[0]:
                best = (v, k1, b)
    assert best is not None
    return rev.with_params(best[1], best[2], name="bm25-tuned"), grid
