"""``StoredTopK``: a retriever that answers the queries of a complete exposure store from the
store's own lists, and every other query (or a deeper ``k``) with the live retriever.

An audit computes a system's exact exposure once; a system built on it (the hybrid's RRF of
BM25 and dense) asks the same retriever the same queries again. Read back from the store, the
lists are the ones the live retriever returned (same documents, ranks and float32 scores), at
the cost of one read of the pairs instead of a second search (the demo's dense half of the
hybrid: 114,926 FAISS searches over 63,666 vectors).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from limelight.retrieval.base import Retriever


class StoredTopK(Retriever):
    """``live``'s top-k for the queries of ``store`` read from the store's pairs (``k`` up to
    the store's depth); other texts and deeper lists go to ``live``.

    The store must have been computed by ``live`` (or a retriever that ranks identically) over
    the same documents in the same order; the caller vouches for the first (an audit checks the
    stage keys), the constructor checks the second.
    """

    def __init__(self, live: Retriever, store):
        if not (store.doc_ids is live.doc_ids or store.doc_ids == live.doc_ids):
            raise ValueError(f"store {store.path} and retriever {live.name} index different "
                             f"documents")
        self.live, self.store = live, store
        self.doc_ids = live.doc_ids
        self.name = getattr(live, "name", "stored")
        self.n_live = 0  # texts answered by the live retriever (for tests and logs)
        self._lists: tuple[np.ndarray, np.ndarray] | None = None
        self._rows = None

    def _tables(self) -> tuple[np.ndarray, np.ndarray]:
        """Every stored query's list as padded ``(n_queries, depth)`` arrays (read once)."""
        if self._lists is None:
            import pandas as pd

            q, d, rank, score = self.store.pair_arrays()
            n, depth = len(self.store.queries), self.store.depth
            docs = np.full((n, depth), -1, dtype=np.int32)
            scores = np.full((n, depth), -np.inf, dtype=np.float32)
            col = rank.astype(np.int64) - 1
            docs[q, col] = d
            scores[q, col] = score
            texts = pd.Index(self.store.queries.texts.tolist())
            first = ~texts.duplicated()  # a repeated text has the same list: its first row
            self._lists = (docs[first], scores[first])
            self._rows = texts[first]
        return self._lists

    def search_batch(self, texts: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k``: stored rows for texts of the store (``k`` <= its depth), live otherwise."""
        texts = ["" if t is None else str(t) for t in texts]
        k = int(k)
        if k > self.store.depth:
            self.n_live += len(texts)
            return self.live.search_batch(texts, k)
        docs, scores = self._tables()
        pos = self._rows.get_indexer(texts)
        out_d = docs[np.maximum(pos, 0), :k].copy()
        out_s = scores[np.maximum(pos, 0), :k].copy()
        miss = np.flatnonzero(pos < 0)
        if len(miss):
            self.n_live += len(miss)
            ld, ls = self.live.search_batch([texts[i] for i in miss.tolist()], k)
            out_d[miss], out_s[miss] = ld, ls
        return out_d, out_s
