"""The relevance-position vector, built once per (run, qrels, threshold) as a padded 2-D array.

For query ``q`` with ``m_q`` relevant documents (grade ≥ threshold), row ``q`` of ``pos`` holds
the sorted 1-based ranks of its relevant documents in the run; relevant documents the run did
not retrieve are imputed pessimistically at the bottom of the corpus (``n - u + 1 .. n`` for
``u`` unretrieved ones, section 2.2 of the lexirecall paper). Columns ``≥ m_q`` are padding
(``n + 1``). ``grade`` keeps the grades of those documents in the same order.

The query set is the qrels' queries with at least one document of grade ≥ 1; a query missing
from the run is an empty ranking (every relevant document imputed); queries only in the run
are ignored (and listed in ``extra_queries``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from limelight.data.ids import IdMap
from limelight.data.qrels import Qrels
from limelight.data.run import Run
from limelight.errors import LimelightError


@dataclass
class RelPositions:
    """Padded relevance positions of one run against one qrels at one grade threshold."""

    qids: IdMap  # the evaluated query set (qrels queries with a document of grade ≥ 1)
    pos: np.ndarray  # int64 (nq, M): sorted 1-based positions, padding n + 1
    grade: np.ndarray  # int32 (nq, M): grades in the same order, padding 0
    m: np.ndarray  # int64 (nq,): number of relevant documents
    depth: np.ndarray  # int64 (nq,): number of documents the run retrieved (ñ)
    n: int  # corpus size used for imputation
    threshold: int = 1
    name: str = "run"
    extra_queries: list[str] = field(default_factory=list)

    @property
    def n_queries(self) -> int:
        return len(self.m)

    @property
    def valid(self) -> np.ndarray:
        """Mask of real (non-padding) entries."""
        return np.arange(self.pos.shape[1])[None, :] < self.m[:, None]

    @property
    def retrieved(self) -> np.ndarray:
        """Mask of relevant documents the run actually retrieved (not imputed)."""
        return self.valid & (self.pos <= self.depth[:, None])


class QrelsIndex:
    """Qrels prepared for fast joins with many runs (one per evaluation).

    ``qids`` is the query set; per-threshold relevant counts and judged grades are looked up
    with ``searchsorted`` on ``query * n_docs + doc`` keys (no Python loop over documents).
    """

    def __init__(self, qrels: Qrels):
        self.qrels = qrels
        has_rel = qrels.n_relevant(1) > 0
        keep_q = np.flatnonzero(has_rel)
        self.qids = IdMap(qrels.qids.strings[keep_q], kind="query")
        self._qmap = np.full(len(qrels.qids), -1, dtype=np.int64)
        self._qmap[keep_q] = np.arange(len(keep_q))
        self.empty_queries = [str(s) for s in qrels.qids.strings[~has_rel]]
        rows = self._qmap[qrels.q] >= 0
        self.q = self._qmap[qrels.q[rows]]
        self.d = qrels.d[rows].astype(np.int64)
        self.rel = qrels.rel[rows]
        self.nd = max(len(qrels.docids), 1)
        self.keys = self.q * self.nd + self.d  # sorted: qrels rows are sorted by (q, d)
        self._recode_cache: dict[int, tuple[IdMap, np.ndarray]] = {}
        self._table: np.ndarray | None = None

    def dense_table(self, limit: int = 20_000_000) -> np.ndarray | None:
        """``table[q * n_docs + d]`` = qrels row (or -1), when queries × judged documents is
        small enough (``limit`` entries); ``None`` otherwise (joins then use ``searchsorted``)."""
        if self._table is None and len(self.qids) * self.nd <= limit:
            t = np.full(len(self.qids) * self.nd, -1, dtype=np.int64)
            t[self.keys] = np.arange(len(self.keys))
            self._table = t
        return self._table

    def n_relevant(self, threshold: int) -> np.ndarray:
        return np.bincount(self.q[self.rel >= threshold], minlength=len(self.qids)).astype(np.int64)

    def doc_recode(self, docids: IdMap) -> np.ndarray:
        """Map a run's doc codes to this qrels' doc codes (-1: not judged); cached per map."""
        hit = self._recode_cache.get(id(docids))
        if hit is not None and hit[0] is docids:
            return hit[1]
        if docids.has_prefix(self.qrels.docids):  # one shared map (qrels' documents first)
            rec = np.full(len(docids), -1, dtype=np.int64)
            rec[:len(self.qrels.docids)] = np.arange(len(self.qrels.docids))
            self._recode_cache[id(docids)] = (docids, rec)
            return rec
        # look the (few) judged documents up in the run's map, not the run's documents here
        codes = docids.encode(self.qrels.docids.strings, missing=-1)
        rec = np.full(len(docids), -1, dtype=np.int64)
        ok = codes >= 0
        rec[codes[ok]] = np.flatnonzero(ok)
        self._recode_cache[id(docids)] = (docids, rec)
        return rec

    def query_recode(self, qids: IdMap) -> np.ndarray:
        """Map a run's query codes to query-set indices (-1: not in the query set)."""
        return self.qids.encode(qids.strings, missing=-1).astype(np.int64)


def corpus_size(qrels: Qrels, run: Run) -> int:
    """The default corpus size ``n`` of ``run`` (when none is given): the documents the qrels
    know (``Qrels.n_own_docs``: the judged documents of a qrels file, or the whole collection
    for qrels read against one) plus the documents ``run`` retrieves that are not among them.

    It is computed from this run and the qrels only, so a run's values never depend on which
    other runs are evaluated beside it (several runs read onto one shared document map count
    only the documents each retrieves), and it always leaves room for pessimistic imputation
    (``n ≥ depth + unretrieved`` for every query). With the qrels of a file, it is the smallest
    corpus that this run and the judgments imply; pass the collection's size for the paper's
    ``n`` (``--n-docs`` or ``--collection`` on the command line).
    """
    own = qrels.n_own_docs
    if len(run.d) == 0:
        return own
    hit = np.zeros(len(run.docids), dtype=bool)
    hit[run.d] = True
    if run.docids.has_prefix(qrels.docids):  # the qrels' own documents are the first codes
        return own + int(hit[own:].sum())
    codes = qrels.docids.encode(run.docids.strings[np.flatnonzero(hit)], missing=-1)
    return own + int(((codes < 0) | (codes >= own)).sum())


def default_n_docs(qrels: Qrels, runs: Sequence[Run]) -> int:
    """One corpus size for comparing ``runs`` position by position (lexicographic preferences
    need the same ``n`` on both sides): the largest of their own sizes (``corpus_size``), so
    that every run has room for imputation. A preference between two runs does not change
    with ``n`` once it is common and large enough; metric values use each run's own size."""
    return max((corpus_size(qrels, r) for r in runs), default=qrels.n_own_docs)


def _retrieved_relevant(run: Run, qi: QrelsIndex, rq: np.ndarray, threshold: int
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows of ``run`` that retrieve a relevant document (grade ≥ ``threshold``), in run
    order: ``(run rows, query-set index, grade, qrels row)``. ``rq`` maps the run's query codes
    to query-set indices (-1: not in the query set).

    A join of (query, doc) with the qrels, judged documents first: every full-length operation
    here is one gather and one comparison.
    """
    dcode = qi.doc_recode(run.docids)[run.d] if len(run.d) else np.zeros(0, dtype=np.int64)
    cand = np.flatnonzero(dcode >= 0)
    runq_c = rq[run.q[cand]]
    ok = runq_c >= 0
    cand, runq_c = cand[ok], runq_c[ok]
    keys = runq_c * qi.nd + dcode[cand]
    table = qi.dense_table()
    if table is not None:  # O(1) lookups in a (query × judged doc) table of qrels rows
        idx_c = table[keys]
        found = idx_c >= 0
        idx_c = np.maximum(idx_c, 0)
    else:
        idx = np.searchsorted(qi.keys, keys)
        idx_c = np.minimum(idx, len(qi.keys) - 1)
        found = (idx < len(qi.keys)) & (qi.keys[idx_c] == keys)
    qrels_rows = idx_c[found]
    g = qi.rel[qrels_rows]
    isrel = g >= threshold
    return cand[found][isrel], runq_c[found][isrel], g[isrel], qrels_rows[isrel]


def relevance_positions(run: Run, qrels: Qrels | QrelsIndex, threshold: int = 1,
                        n_docs: int | None = None) -> RelPositions:
    """Build the padded relevance-position array of ``run`` against ``qrels``.

    ``n_docs`` is the corpus size ``n`` for pessimistic imputation; by default
    ``corpus_size(qrels, run)`` (the qrels' documents plus those the run retrieves). It must leave room for the unretrieved relevant
    documents below each query's retrieved list (``n ≥ depth + unretrieved``).
    """
    qi = qrels if isinstance(qrels, QrelsIndex) else QrelsIndex(qrels)
    nq = len(qi.qids)
    n = int(n_docs) if n_docs is not None else corpus_size(qi.qrels, run)
    m = qi.n_relevant(threshold)

    rq = qi.query_recode(run.qids)  # run query code -> query-set index
    extra = [str(s) for s in run.qids.strings[rq < 0]] if (rq < 0).any() else []
    depth = np.zeros(nq, dtype=np.int64)
    inq = rq >= 0
    depth[rq[inq]] = np.diff(run.offsets)[inq]

    rows, rq_rows, g, qrels_rows = _retrieved_relevant(run, qi, rq, threshold)
    # 1-based rank of a row: its offset within its query's block
    ranks = (rows - run.offsets[run.q[rows]] + 1).astype(np.int64)

    mret = np.bincount(rq_rows, minlength=nq).astype(np.int64)
    unret = m - mret
    need = depth + unret
    if nq and need.max(initial=0) > n:
        worst = int(np.argmax(need))
        raise LimelightError(
            f"corpus size n={n} is too small for query {qi.qids[worst]!r}: it retrieved "
            f"{int(depth[worst])} documents and misses {int(unret[worst])} relevant ones "
            f"(need n ≥ {int(need[worst])}; pass the collection size with --n-docs)")

    M = int(m.max(initial=0)) if nq else 0
    M = max(M, 1)
    pos = np.full((nq, M), n + 1, dtype=np.int64)
    grade = np.zeros((nq, M), dtype=np.int32)
    # retrieved relevant: rows are in run order (query-major, rank ascending) -> columns 0..mret-1
    if len(rows):
        order = np.argsort(rq_rows, kind="stable")  # rows are rank-ordered within a query
        rq_s, rk_s, g_s = rq_rows[order], ranks[order], g[order]
        start = np.zeros(nq + 1, dtype=np.int64)
        np.cumsum(mret, out=start[1:])
        col = np.arange(len(rq_s)) - start[rq_s]
        pos[rq_s, col] = rk_s
        grade[rq_s, col] = g_s
    # unretrieved relevant: imputed at n-u+1..n (grades descending, which no measure sees:
    # imputed documents are never exposed, but nDCG's ideal ordering needs every grade)
    if unret.any():
        cols = np.arange(M)[None, :]
        imp = (cols >= mret[:, None]) & (cols < m[:, None])
        pos[imp] = (n - m[:, None] + cols + 1)[imp]
        rel_rows = np.flatnonzero(qi.rel >= threshold)
        hit = np.zeros(len(qi.rel), dtype=bool)
        hit[qrels_rows] = True
        un = rel_rows[~hit[rel_rows]]
        order = np.lexsort((-qi.rel[un], qi.q[un]))
        uq, ug = qi.q[un][order], qi.rel[un][order]
        start = np.zeros(nq + 1, dtype=np.int64)
        np.cumsum(unret, out=start[1:])
        col = np.arange(len(uq)) - start[uq] + mret[uq]
        grade[uq, col] = ug
    return RelPositions(qi.qids, pos, grade, m, depth, n, threshold, run.name, extra)


def stack_positions(rps: Sequence[RelPositions]) -> np.ndarray:
    """Stack the position arrays of several runs (same qrels, threshold and n) as (k, nq, M)."""
    if not rps:
        raise ValueError("no runs")
    first = rps[0]
    M = max(r.pos.shape[1] for r in rps)
    out = np.full((len(rps), first.n_queries, M), first.n + 1, dtype=np.int64)
    for i, r in enumerate(rps):
        if r.n != first.n or r.threshold != first.threshold or r.n_queries != first.n_queries:
            raise ValueError("relevance positions of different qrels, threshold or n")
        out[i, :, :r.pos.shape[1]] = r.pos
    return out
