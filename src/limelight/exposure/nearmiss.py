"""What can be done about a document with little exposure: near misses and group shares.

- :class:`NearMisses`: for a BM25 system and its exposure store, the log's queries that rank a
  document just below the store's depth (ranks ``depth + 1 .. 1000`` by default: 101-1000 for a
  depth-100 audit), with the terms they share with it. The log is encoded once into a query ×
  term matrix (the retriever's compiled query encoder); a document's candidate queries are the
  rows of that matrix in the document's terms (its postings, read through the retriever's
  document × term matrix), and only those are re-run, in one batch through the BM25 kernel at
  depth 1000 (the kernel ``BM25.search_batch`` runs, fed the log's own encoding, tokens in query order:
  the ranks equal those of a direct depth-1000 ``search_batch`` of each query).
  A document of a popular subject has tens of thousands of candidates (Debian's ``iwyu``: 30,014
  of the 114,926 log queries): re-running them all at depth 1000 took 4-9 s. So every log query's
  score at a ladder of ranks (:data:`LEVELS`: the store's depth, 101, 102, 104, ... 1000) is
  computed once, by one depth-1000 search of the whole log (~25 s on the Debian log, 2 cores,
  kept: 4 bytes a query a rung), and a document's score for a query, against that ladder, says
  without a search whether the query ranks it within the store's depth, beyond 1000, or between,
  and how deep: only the queries needed for the closest ``limit`` are re-run, at the shallowest
  rung holding enough of them (iwyu: 122 queries at depth 132, 0.1 s).
- :func:`group_exposure_shares`: for each group of a document field, its share of exposure
  (Σ r(d) of its documents over Σ r(d)) against its share of documents, from
  ``retrievability.group_retrievability``.

Outputs are JSON-able (lists of dicts of str / int / float).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from limelight.errors import LimelightError
from limelight.exposure.retrievability import group_retrievability
from limelight.exposure.store import ExposureStore
from limelight.retrieval.bm25 import BM25

NEAR_MISS_DEPTH = 1000
#: rungs of the score ladder beyond the store's depth n: n + 1, n + 2, n + 4, ... (then the depth)
LEVEL_STEPS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
LADDER_BATCH = 4096  # log queries searched at once while building the ladder (8 bytes a result)
_TIE = 1e-5  # relative slack of a score against a rung: closer is searched, never decided


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
        # the same with each term's query weight (repeats summed): a document's BM25 score for
        # every log query at once, one sparse product (float64: within _TIE of the kernel's)
        self._weighted: sp.csc_matrix = sp.csc_matrix(
            (np.asarray(self.qw, dtype=np.float64), (rows, self.qterms)),
            shape=(len(self.qptr) - 1, retriever.index.n_terms))
        #: the ranks of the ladder: the store's depth, then ``LEVEL_STEPS`` beyond it, then ``depth``
        self.levels = np.asarray(sorted({self.first - 1, *(self.first - 1 + s for s in LEVEL_STEPS
                                                            if self.first - 1 + s < self.depth), self.depth}),
                                 dtype=np.int64)
        self._ladder: np.ndarray | None = None
        self._ladder_lock = threading.Lock()

    def ladder(self) -> np.ndarray:
        """Every log query's score at each rank of :attr:`levels` (``(n_queries, n_levels)``
        float32; 0 where the query retrieves fewer documents): one depth-``depth`` search of the
        whole log in batches, built on first use and kept."""
        with self._ladder_lock:
            if self._ladder is None:
                n = len(self.qptr) - 1
                out = np.zeros((n, len(self.levels)), dtype=np.float32)
                for a in range(0, n, LADDER_BATCH):
                    codes = np.arange(a, min(n, a + LADDER_BATCH))
                    _, scores = self.retriever._search(*self._rows(codes), self.depth)
                    out[codes] = scores[:, self.levels - 1]
                self._ladder = out
            return self._ladder

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

    def _search(self, cand: np.ndarray, depth: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top ``depth`` (default: the near-miss depth) of the log queries ``cand`` in one call of
        the BM25 batch kernel (pruned with the near-miss depth's bound: one cached bound for
        every rung)."""
        return self.retriever._search(*self._rows(cand), self.depth if depth is None else int(depth),
                                      self.depth)

    def _ranks(self, d: int, cand: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(codes, ranks, scores)`` of the queries ``cand`` that rank ``d`` within ``depth``
        and beyond the store's depth (one batched search)."""
        if not len(cand):
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
        docs, scores = self._search(cand, depth)
        row, col = np.nonzero(docs == d)
        keep = col + 1 >= self.first
        return cand[row[keep]], col[keep] + 1, scores[row[keep], col[keep]]

    def find(self, docid: str, limit: int | None = 20, hidden: np.ndarray | None = None
             ) -> tuple[list[dict[str, Any]], np.ndarray]:
        """The closest near misses of ``docid`` (as :meth:`document`), leaving out the queries
        whose code is ``True`` in ``hidden`` (one bool per log query: the searchers' privacy),
        and the codes of **every** log query that ranks it between ``store.depth + 1`` and
        ``depth`` (hidden or not, listed or not; sorted).

        Exact: a query's score for ``d`` against the query's :meth:`ladder` decides whether it
        ranks ``d`` within the store's depth, beyond ``depth``, or between; a score within
        ``_TIE`` of a rung is searched, never decided. The listed ones are found by re-running
        only the queries whose score reaches the shallowest rung that ``limit`` of them reach
        (every other query ranks ``d`` deeper than that rung), deeper rungs only if too few of
        them turn out to rank ``d`` beyond the store's depth."""
        d = int(self.retriever.doc_ids.lookup(docid))
        m = self.retriever.doc_matrix()
        terms = np.asarray(m.indices[m.indptr[d]:m.indptr[d + 1]], dtype=np.int64)
        empty = np.zeros(0, dtype=np.int64)
        if not len(terms):
            return [], empty
        # the candidates (queries sharing a term with d) and their scores of d, in one product
        col = self._weighted[:, terms].tocsr() @ np.asarray(m.data[m.indptr[d]:m.indptr[d + 1]], dtype=np.float64)
        cand = np.flatnonzero(col > 0).astype(np.int64)
        if not len(cand):
            return [], empty
        s_d = col[cand]
        lad = self.ladder()[cand]
        slack = np.abs(lad) * _TIE
        below_top = s_d <= lad[:, 0] + slack[:, 0]  # not surely within the store's depth
        within = s_d >= lad[:, -1] - slack[:, -1]  # not surely beyond ``depth``
        maybe = below_top & within
        # the edges: a score tied with the store's depth or the last rung, decided by a search
        edge = maybe & ((s_d >= lad[:, 0] - slack[:, 0]) | (s_d <= lad[:, -1] + slack[:, -1]))
        sure = cand[maybe & ~edge]
        edge_q = self._ranks(d, cand[edge], self.depth)[0]
        every = np.sort(np.concatenate([sure, edge_q]))
        visible = maybe if hidden is None else maybe & ~np.asarray(hidden, dtype=bool)[cand]
        need = len(cand) if limit is None else int(limit)
        q, rank, score = empty, empty, np.zeros(0, np.float32)
        for j in range(1, len(self.levels)):
            pool = visible & (s_d >= lad[:, j] - slack[:, j])
            last = j == len(self.levels) - 1
            if not last and int(pool.sum()) < need:
                continue
            q, rank, score = self._ranks(d, cand[pool], int(self.levels[j]))
            if len(q) >= need or last:
                break
        order = np.lexsort((self.qids[q], rank))
        if limit is not None:
            order = order[:int(limit)]
        vocab = self.retriever.index.vocabulary.strings
        doc_terms = set(terms.tolist())
        out = []
        for i in order.tolist():
            qi = int(q[i])
            qt_i = dict.fromkeys(self.qterms[self.qptr[qi]:self.qptr[qi + 1]].tolist())
            out.append({"qid": str(self.qids[qi]), "query": str(self.texts[qi]),
                        "rank": int(rank[i]), "score": float(score[i]),
                        "shared_terms": [str(vocab[t]) for t in qt_i if t in doc_terms]})
        return out, every

    def document(self, docid: str, limit: int | None = 20) -> list[dict[str, Any]]:
        """The log queries that rank ``docid`` between ``store.depth + 1`` and ``depth``, closest
        first (rank, then query id): ``qid``, ``query``, ``rank``, ``score`` and ``shared_terms``
        (analyzed terms the query shares with the document, in the query's order); at most
        ``limit`` (``None``: all). See :meth:`find`."""
        return self.find(docid, limit)[0]


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
