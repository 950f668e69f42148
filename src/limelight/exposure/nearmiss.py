"""What can be done about a document with little exposure: near misses and group shares.

- :class:`NearMisses`: for a BM25 system and its exposure store, the log's queries that rank a
  document just below the store's depth (ranks ``depth + 1 .. 1000`` by default: 101-1000 for a
  depth-100 audit), with the terms they share with it. The log is encoded once into a query ×
  term matrix (the retriever's compiled query encoder); a document's candidate queries are the
  rows of that matrix in the document's terms (its postings, read through the retriever's
  document × term matrix), and only those are re-run, in one batch through the BM25 kernel at
  depth 1000 (the kernel ``BM25.search_batch`` runs, fed the log's own encoding, tokens in query order:
  the ranks equal those of a direct depth-1000 ``search_batch`` of each query).
- :func:`group_exposure_shares`: for each group of a document field, its share of exposure
  (Σ r(d) of its documents over Σ r(d)) against its share of documents, from
  ``retrievability.group_retrievability``.

Outputs are JSON-able (lists of dicts of str / int / float).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from limelight.errors import LimelightError
from limelight.exposure.retrievability import group_retrievability
from limelight.exposure.store import ExposureStore
from limelight.retrieval.bm25 import BM25

NEAR_MISS_DEPTH = 1000


class NearMisses:
    """Near-miss queries of documents for one BM25 system (``retriever``) and the exposure store
    of its audit (``store``: its query log and depth). Building encodes the log once (the
    query × term matrix, kept); :meth:`document` then costs one batched search of the
    document's candidate queries. The store's and the index's document ids must agree."""

    def __init__(self, store: ExposureStore, retriever: BM25, depth: int = NEAR_MISS_DEPTH):
        if not isinstance(retriever, BM25):
            raise LimelightError("near misses need a BM25 system (a local lexical index)")
        if len(store.doc_ids) != len(retriever.doc_ids):
            raise LimelightError(f"the store has {len(store.doc_ids)} documents, the index "
                                 f"{len(retriever.doc_ids)}: not the same collection")
        self.store = store
        self.retriever = retriever
        self.depth = int(depth)
        self.first = int(store.depth) + 1
        if self.depth < self.first:
            raise LimelightError(f"near-miss depth {self.depth} must exceed the store's depth "
                                 f"{store.depth}")
        queries = store.queries
        self.qids = queries.ids.strings
        self.texts = queries.texts
        # the raw encoding (tokens in query order, repeats kept), as search_batch runs it, so
        # that a re-run adds the same float32 terms in the same order as a direct search
        self.qptr, self.qterms, self.qw = retriever._encode(self.texts.tolist())
        rows = np.repeat(np.arange(len(self.qptr) - 1), np.diff(self.qptr))
        self.by_term: sp.csc_matrix = sp.csc_matrix(
            (np.ones(len(rows), dtype=np.int8), (rows, self.qterms)),
            shape=(len(self.qptr) - 1, retriever.index.n_terms))

    def candidates(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """``(term ids of document code d, codes of the log queries with one of them)``."""
        m = self.retriever.doc_matrix()
        terms = np.asarray(m.indices[m.indptr[d]:m.indptr[d + 1]], dtype=np.int64)
        bt = self.by_term
        if not len(terms):
            return terms, np.zeros(0, dtype=np.int64)
        lo, hi = bt.indptr[terms], bt.indptr[terms + 1]
        lens = hi - lo
        first = np.cumsum(lens) - lens
        idx = np.repeat(lo - first, lens) + np.arange(int(lens.sum()))
        return terms, np.unique(bt.indices[idx]).astype(np.int64)

    def _rows(self, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The raw encoding (``qptr``, ``qterms``, ``qw``) of the log queries ``cand``."""
        lo, hi = self.qptr[cand], self.qptr[cand + 1]
        lens = hi - lo
        sub_ptr = np.zeros(len(cand) + 1, dtype=np.int64)
        np.cumsum(lens, out=sub_ptr[1:])
        idx = np.repeat(lo - sub_ptr[:-1], lens) + np.arange(int(sub_ptr[-1]))
        return (sub_ptr, np.ascontiguousarray(self.qterms[idx]),
                np.ascontiguousarray(self.qw[idx]))

    def reachable(self, d: int, cand: np.ndarray) -> np.ndarray:
        """The candidates that can rank ``d`` within ``depth``: a query's ``depth``-th best score
        is at least ``max_t qtf · kth(t)`` (``kth``: the term's ``depth``-th largest weight; all
        weights are positive), so a query scoring ``d`` below that has ``depth`` documents
        strictly above it and is dropped before the search (exact, no near miss is lost)."""
        ptr, terms, qw = self._rows(cand)
        r = self.retriever
        s_d = r._score(ptr, terms, qw, np.full((len(cand), 1), d, dtype=np.int32))[:, 0]
        kth = r.index.kth_weights(r.k1, r.b, self.depth)
        floor = np.zeros(len(cand), dtype=np.float32)
        if len(terms):
            rows = np.repeat(np.arange(len(cand)), np.diff(ptr))
            np.maximum.at(floor, rows, (qw * kth[terms]).astype(np.float32))
        return cand[s_d >= floor]

    def _search(self, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Top ``depth`` of the log queries ``cand`` in one call of the BM25 batch kernel."""
        return self.retriever._search(*self._rows(cand), self.depth)

    def document(self, docid: str, limit: int | None = 20) -> list[dict[str, Any]]:
        """The log queries that rank ``docid`` between ``store.depth + 1`` and ``depth``, closest
        first (rank, then query id): ``qid``, ``query``, ``rank``, ``score`` and ``shared_terms``
        (analyzed terms the query shares with the document, in the query's order); at most
        ``limit`` (``None``: all)."""
        d = int(self.retriever.doc_ids.lookup(docid))
        terms, cand = self.candidates(d)
        cand = self.reachable(d, cand) if len(cand) else cand
        if not len(cand):
            return []
        docs, scores = self._search(cand)
        row, col = np.nonzero(docs == d)
        rank = col + 1
        keep = rank >= self.first
        row, rank, score = row[keep], rank[keep], scores[row[keep], col[keep]]
        q = cand[row]
        order = np.lexsort((self.qids[q], rank))
        if limit is not None:
            order = order[:int(limit)]
        vocab = self.retriever.index.vocabulary.strings
        doc_terms = set(terms.tolist())
        out = []
        for i in order.tolist():
            qi = int(q[i])
            qt = dict.fromkeys(self.qterms[self.qptr[qi]:self.qptr[qi + 1]].tolist())
            out.append({"qid": str(self.qids[qi]), "query": str(self.texts[qi]),
                        "rank": int(rank[i]), "score": float(score[i]),
                        "shared_terms": [str(vocab[t]) for t in qt if t in doc_terms]})
        return out


def near_misses(store: ExposureStore, retriever: BM25, docid: str, depth: int = NEAR_MISS_DEPTH,
                limit: int | None = 20) -> list[dict[str, Any]]:
    """One document's near misses (:meth:`NearMisses.document`); build a :class:`NearMisses`
    once to ask about many documents."""
    return NearMisses(store, retriever, depth).document(docid, limit)


def group_exposure_shares(r: np.ndarray, values: Sequence | np.ndarray) -> list[dict[str, Any]]:
    """For each group of a document field (``values``, one per document; list-valued fields
    count a document in each of its groups): ``group``, ``n_docs``, ``doc_share`` (its documents
    over all documents), ``exposure_share`` (its Σ r(d) over the collection's), ``ratio``
    (exposure share / document share: below 1, the group is under-exposed) and
    ``retrievable_fraction``; sorted by ``ratio`` ascending (the least exposed first)."""
    r = np.asarray(r, dtype=np.float64)
    table = group_retrievability(r, values)
    n = max(len(r), 1)
    out = []
    for row in table.itertuples(index=False):
        doc_share = row.n_docs / n
        share = float(row.r_share)
        out.append({"group": str(row.group), "n_docs": int(row.n_docs), "doc_share": doc_share,
                    "exposure_share": share, "ratio": share / doc_share if doc_share else 0.0,
                    "retrievable_fraction": float(row.retrievable_fraction)})
    out.sort(key=lambda x: (x["ratio"], x["group"]))
    return out
