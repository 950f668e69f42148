"""Exact reverse search: the exposing queries of a new or edited document without re-running
the query log.

Every query keeps its stored top-n (the exposure store); its threshold is its score at rank n.
A new document is scored against every query — for BM25 through an inverted index over the query
log (document terms → the queries that contain them, weights from the collection's term
statistics, which stay frozen), for dense retrieval by one product of the query embeddings with
the document's embedding — and kept for the queries whose threshold it beats; its rank inside
each query's list comes from the stored scores. Several new documents added together compete
with each other as well (``add_documents``), exactly as in a re-run over the collection plus
all of them.

Exactness: the result equals re-running every query over the collection plus the new documents
when (i) scores are computed bit for bit as the retriever computes them — BM25 sums a query's
term weights in its token order in float32 as the engine does; dense scores come from the same
FAISS inner product — and (ii) for BM25 the collection statistics (N, df, avgdl) stay those of the
store's index ("frozen"; a term the collection lacks gets idf(df=0)). Recomputing them after
adding documents changes every score; ``experiments/eqi`` reports that drift as RELQ. Ties follow
the engines: on a tie at the cut the BM25 engine keeps the lower document code (a new document
enters a full list only with a score strictly above the threshold) and FAISS's heap the higher
one (a new document tying the threshold enters); ranks inside the list follow trec_eval (score, then doc id descending).
Dense scores depend on the query embeddings: use the ones the store was computed from
(``query_embeddings=``); re-encoding may differ from them in the last bits.

An edited document (an id of the store) replaces its old version: its stored entries are
ignored. One case is not decidable from the top-n alone — the edited document falling to rank n
of a query that used to rank it inside — and is reported as exposing at rank n.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np

from limelight.data.ids import IdMap
from limelight.data.queries import Queries
from limelight.errors import IndexMismatchError, LimelightError
from limelight.exposure.eqi.base import DEFAULT_CACHE, check_k, check_texts, rows


@dataclass
class NewExposure:
    """Exposure of a batch of new documents: CSR by document over (query code, 1-based rank,
    score), each document's queries by rank then query id."""

    docids: list[str]
    ptr: np.ndarray
    q: np.ndarray
    rank: np.ndarray
    score: np.ndarray

    def lists(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s, e = self.ptr[i], self.ptr[i + 1]
        return self.q[s:e], self.rank[s:e], self.score[s:e]

    def ranked_codes(self, k: int) -> np.ndarray:
        """``(m, k)`` query codes of each document's list (``-1`` padded), for ``relq_many``."""
        m = len(self.docids)
        out = np.full((m, k), -1, dtype=np.int32)
        row = np.repeat(np.arange(m), np.diff(self.ptr))
        pos = np.arange(len(self.q)) - self.ptr[row]
        keep = pos < k
        out[row[keep], pos[keep]] = self.q[keep]
        return out


# ---- kernels -----------------------------------------------------------------------------------
def _merge_py(cptr, cq, cdoc, cscore, clex, S, L, n, new_wins):  # pragma: no cover - numba
    """Per query with candidates (sorted by score desc, new-doc code asc): merge with the stored
    list (scores ``S`` desc, lexical keys ``L``, -inf padding) keeping the engines' top-n, and
    rank each selected candidate by (score desc, lexical key desc). Returns ranks (0 = out)."""
    nq_c = len(cptr) - 1
    out = np.zeros(len(cdoc), dtype=np.int32)
    for g in numba.prange(nq_c):
        lo, hi = cptr[g], cptr[g + 1]
        if lo == hi:
            continue
        q = cq[lo]
        # insertion sort of the group by (score desc, new-doc code asc), in place
        for a in range(lo + 1, hi):
            sa, da, la = cscore[a], cdoc[a], clex[a]
            b = a - 1
            while b >= lo and (cscore[b] < sa or (cscore[b] == sa and (
                    (cdoc[b] > da and not new_wins) or (cdoc[b] < da and new_wins)))):
                cscore[b + 1] = cscore[b]
                cdoc[b + 1] = cdoc[b]
                clex[b + 1] = clex[b]
                b -= 1
            cscore[b + 1] = sa
            cdoc[b + 1] = da
            clex[b + 1] = la
        # selection: stored entries win ties against new documents (lower codes)
        i = 0
        j = lo
        taken = 0
        n_old = 0
        while taken < n and (i < n or j < hi):
            old_ok = i < n and S[q, i] != -np.inf
            if not old_ok and j >= hi:
                break
            if old_ok and (j >= hi or S[q, i] > cscore[j] or (S[q, i] == cscore[j] and not new_wins)):
                i += 1
                n_old += 1
            else:
                j += 1
            taken += 1
        sel_hi = j  # candidates lo..sel_hi are in the top-n
        for c in range(lo, sel_hi):
            s = cscore[c]
            lx = clex[c]
            better = 0
            for a in range(n_old):
                if S[q, a] > s or (S[q, a] == s and L[q, a] > lx):
                    better += 1
            for b in range(lo, sel_hi):
                if b != c and (cscore[b] > s or (cscore[b] == s and clex[b] > lx)):
                    better += 1
            out[c] = better + 1
    return out


@numba.njit(cache=True, nogil=True)
def _bm25_block(i0, i1, dptr, dterm, dw, iptr, iq, ikey, qptr, qtok, thr, full, n_terms, nq,
                optr, out_q, out_s, counts):  # pragma: no cover - numba
    wmap = np.zeros(n_terms, dtype=np.float32)
    seen = np.zeros(nq, dtype=np.uint8)
    touched = np.empty(nq, dtype=np.int32)
    for i in range(i0, i1):
        for p in range(dptr[i], dptr[i + 1]):
            wmap[dterm[p]] = dw[p]
        nt = 0
        for p in range(dptr[i], dptr[i + 1]):
            t = dterm[p]
            # a query q can beat its threshold only if some shared term has w(t, d) ≥
            # s / L_q > thr_q / L_q: scan the prefix of t's list (sorted by thr_q / L_q)
            bound = dw[p] * 1.0001
            lo = iptr[t]
            hi = iptr[t + 1]
            while lo < hi:
                mid = (lo + hi) >> 1
                if ikey[mid] < bound:
                    lo = mid + 1
                else:
                    hi = mid
            for z in range(iptr[t], lo):
                q = iq[z]
                if seen[q] == 0:
                    seen[q] = 1
                    touched[nt] = q
                    nt += 1
        c = 0
        base = optr[i]
        for a in range(nt):
            q = touched[a]
            seen[q] = 0
            s = np.float32(0.0)
            for z in range(qptr[q], qptr[q + 1]):
                w = wmap[qtok[z]]
                if w != 0:
                    s += np.float32(1.0) * w
            if (full[q] and s > thr[q]) or (not full[q] and s > 0):
                out_q[base + c] = q
                out_s[base + c] = s
                c += 1
        counts[i] = c
        for p in range(dptr[i], dptr[i + 1]):
            wmap[dterm[p]] = 0


def _bm25_reverse_scores_py(dptr, dterm, dw, iptr, iq, ikey, qptr, qtok, thr, full, n_terms, nq,
                         optr, out_q, out_s, n_blocks):  # pragma: no cover - numba
    """For each new document (CSR ``dptr``/``dterm``/``dw`` over the extended vocabulary): touch
    the queries that contain its terms and could beat their threshold (inverted index
    ``iptr``/``iq``, each list sorted by ``ikey`` = threshold / query length), score each in its
    token order (float32, as the engine sums), keep those that beat the threshold.
    Fills ``out_q``/``out_s`` from offsets ``optr`` (capacity: the document's postings, at
    most |Q|) and returns the counts."""
    m = len(dptr) - 1
    counts = np.zeros(m, dtype=np.int64)
    nb = max(1, min(n_blocks, m))
    step = (m + nb - 1) // nb
    for b in numba.prange(nb):
        i0 = b * step
        i1 = min(m, i0 + step)
        if i0 < i1:
            _bm25_block(i0, i1, dptr, dterm, dw, iptr, iq, ikey, qptr, qtok, thr, full, n_terms,
                        nq, optr, out_q, out_s, counts)
    return counts


# parallel kernels for batches; serial ones for a document or two (no thread wake-ups)
_merge_par = numba.njit(cache=True, parallel=True)(_merge_py)
_merge_ser = numba.njit(cache=True)(_merge_py)
_bm25_par = numba.njit(cache=True, parallel=True)(_bm25_reverse_scores_py)
_bm25_ser = numba.njit(cache=True)(_bm25_reverse_scores_py)


# ---- the engine --------------------------------------------------------------------------------
class ExactReverse:
    """Exact reverse search over an exposure store for a BM25 or dense retriever.

    ``ExactReverse.build(store, retriever)`` checks that the retriever's documents are the
    store's, reads the stored lists and prepares the query side (inverted index over the query
    log for BM25; query embeddings for dense). ``query(docid=...)`` reads the store;
    ``query(text=...)`` computes a new document's exposing queries; ``add_documents`` does many
    at once (they compete with each other as in one re-run).
    """

    name = "exact"

    def __init__(self, store, kind: str, retriever):
        self.store = store
        self.kind = kind
        self.retriever = retriever
        self.queries: Queries = store.queries
        self.depth = store.depth

    @classmethod
    def build(cls, store, retriever, query_embeddings: np.ndarray | None = None,
              cache_dir: str | None = DEFAULT_CACHE) -> ExactReverse:
        """Prepare exact reverse search for ``store`` computed with ``retriever``."""
        from limelight.exposure.exact import ids_fingerprint

        doc_ids = getattr(retriever, "doc_ids", None)
        if doc_ids is None or ids_fingerprint(doc_ids) != store.manifest.get("documents"):
            raise IndexMismatchError(f"{store.path}: the store was computed over other documents "
                                     "than the retriever's index")
        settings = store.manifest.get("settings", {})
        from limelight.retrieval.bm25 import BM25
        from limelight.retrieval.dense import DenseRetriever

        if isinstance(retriever, BM25):
            kind = "bm25"
            for key, val in (("k1", retriever.k1), ("b", retriever.b)):
                if key in settings and float(settings[key]) != val:
                    raise IndexMismatchError(f"{store.path}: the store was computed with {key}="
                                             f"{settings[key]}, the retriever has {key}={val}")
            if "k1" not in settings:  # computed in Python: compare the retriever's fingerprint
                from limelight.exposure.exact import retriever_fingerprint

                if retriever_fingerprint(retriever, doc_ids) != store.manifest.get("retriever"):
                    raise IndexMismatchError(f"{store.path}: the store was computed with another "
                                             f"retriever or settings than {retriever.name} (k1, b)")
        elif isinstance(retriever, DenseRetriever):
            kind = "dense"
            recorded = settings.get("encoder")
            if recorded is not None and not retriever.encoder.compatible_with(recorded):
                raise IndexMismatchError(f"{store.path}: the store's vectors cannot be mixed with "
                                         f"this retriever's encoder: "
                                         f"{retriever.encoder.mismatch(recorded)}")
        else:
            raise LimelightError(f"exact reverse search supports BM25 and dense retrievers, not "
                                 f"{type(retriever).__name__}")
        self = cls(store, kind, retriever)
        self._load_lists()
        if kind == "bm25":
            self._prepare_bm25()
        else:
            if query_embeddings is None:
                from limelight.exposure.eqi.base import encode_queries_cached

                query_embeddings = encode_queries_cached(self.queries, retriever.encoder, cache_dir)
            if query_embeddings.shape != (len(self.queries), retriever.index.dim):
                raise IndexMismatchError(f"query embeddings of shape {query_embeddings.shape} for "
                                         f"{len(self.queries)} queries of dimension {retriever.index.dim}")
            self.query_emb = np.ascontiguousarray(query_embeddings, dtype=np.float32)
        return self

    # -- stored lists --
    def _load_lists(self) -> None:
        q, d, rank, score = self.store.pair_arrays()
        nq, n = len(self.queries), self.depth
        S = np.full((nq, n), -np.inf, dtype=np.float32)
        D = np.full((nq, n), -1, dtype=np.int32)
        S[q, rank.astype(np.int64) - 1] = score
        D[q, rank.astype(np.int64) - 1] = d
        self.S, self.D = S, D
        self.full = D[:, n - 1] >= 0
        self.thr = np.where(self.full, S[:, n - 1], -np.inf).astype(np.float32)
        keys = [x.encode("utf-8") for x in self.store.doc_ids.strings.tolist()]
        self._old_sorted = np.array(sorted(keys), dtype=object)
        # lexical keys: old document of lexical rank r → 2r + 1; a new one goes between (below)
        self._old_lexkey = 2.0 * self.store.doc_ids.lexical_rank().astype(np.float64) + 1.0
        self.L = np.where(D >= 0, self._old_lexkey[np.maximum(D, 0)], -1.0)

    def _new_lexkeys(self, new_ids: Sequence[str]) -> np.ndarray:
        """Lexical keys of new documents, comparable with the old ones' (byte order)."""
        new = np.array([x.encode("utf-8") for x in new_ids], dtype=object)
        p = np.searchsorted(self._old_sorted, new, side="left").astype(np.float64)
        j = np.empty(len(new), dtype=np.float64)
        j[np.argsort(new, kind="stable")] = np.arange(len(new))
        return 2.0 * p + j / (len(new) + 1.0)

    # -- BM25 query side --
    def _prepare_bm25(self) -> None:
        from limelight.retrieval.bm25 import analyze_flat

        r = self.retriever
        ix = r.index
        rows_, codes, terms = analyze_flat(ix.analyzer, self.queries.texts.tolist())
        get = ix.vocabulary._index.get
        V = ix.n_terms
        lut = np.fromiter((get(t, -1) for t in terms), dtype=np.int64, count=len(terms))
        unknown = np.flatnonzero(lut < 0)
        lut[unknown] = V + np.arange(len(unknown))
        self._ext_terms = {t: int(lut[i]) for i, t in enumerate(terms)}
        self._vocab_get = get
        self.n_ext = V + len(unknown)
        tok = lut[codes].astype(np.int32)
        nq = len(self.queries)
        qptr = np.zeros(nq + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows_, minlength=nq), out=qptr[1:])
        self.qptr, self.qtok = qptr, tok
        # inverted index: term → distinct queries containing it
        pair = np.unique(tok.astype(np.int64) * nq + rows_)
        t_of, q_of = pair // nq, pair % nq
        iptr = np.zeros(self.n_ext + 1, dtype=np.int64)
        np.cumsum(np.bincount(t_of, minlength=self.n_ext), out=iptr[1:])
        self.iptr, self._iq_raw = iptr, q_of.astype(np.int32)
        self._t_of = t_of
        self._qlen = np.diff(qptr).astype(np.float64)
        self._sort_lists()
        # frozen statistics: the index's idf (float32), idf(df=0) for terms it lacks
        N = ix.n_docs
        idf0 = np.float32(np.log(1.0 + (N - 0.0 + 0.5) / (0.0 + 0.5)))
        self.idf = np.concatenate([np.asarray(ix.idf, dtype=np.float32),
                                   np.full(len(unknown), idf0, dtype=np.float32)])
        self.avgdl = ix.avgdl

    def _sort_lists(self) -> None:
        """Order each inverted list by threshold / query length (non-full lists first)."""
        t = np.where(self.full, self.thr.astype(np.float64), -np.inf)
        key_q = t / np.maximum(self._qlen, 1.0)
        key = key_q[self._iq_raw]
        order = np.lexsort((key, self._t_of))
        self.iq = self._iq_raw[order]
        self.ikey = key[order]

    def _bm25_doc_weights(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """CSR (ptr, extended term, float32 BM25 weight) of new documents, frozen statistics."""
        from limelight.retrieval.bm25 import analyze_flat

        r = self.retriever
        m = len(texts)
        rows_, codes, terms = analyze_flat(r.index.analyzer, texts)
        doc_len = np.bincount(rows_, minlength=m).astype(np.float64)
        ext = np.fromiter((self._ext_terms.get(t, -1) for t in terms), dtype=np.int64, count=len(terms))
        t = ext[codes]
        keep = t >= 0
        key, tf = np.unique(rows_[keep] * self.n_ext + t[keep], return_counts=True)
        drow, dterm = key // self.n_ext, key % self.n_ext
        tf = tf.astype(np.float64)
        dl = doc_len[drow]
        k1, b = r.k1, r.b
        norm = k1 * ((1.0 - b) + b * dl / self.avgdl)  # as BM25Index.weights computes it
        w = (self.idf[dterm].astype(np.float64) * (tf / (norm + tf))).astype(np.float32)
        dptr = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(np.bincount(drow, minlength=m), out=dptr[1:])
        return dptr, dterm.astype(np.int32), w

    # -- candidates --
    def _candidates(self, texts: list[str], embeddings: np.ndarray | None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(query, new-doc index, score) of every pair that may enter a query's top-n."""
        nq = len(self.queries)
        if self.kind == "bm25":
            dptr, dterm, dw = self._bm25_doc_weights(texts)
            m = len(texts)
            nb = numba.get_num_threads() * 4
            plen = np.diff(self.iptr)[dterm]
            cap = np.minimum(np.add.reduceat(plen, dptr[:-1]) if len(plen) else np.zeros(m, np.int64),
                             nq) * (np.diff(dptr) > 0)
            optr = np.zeros(m + 1, dtype=np.int64)
            np.cumsum(cap, out=optr[1:])
            out_q = np.empty(int(optr[-1]), dtype=np.int32)
            out_s = np.empty(int(optr[-1]), dtype=np.float32)
            kern = _bm25_par if m > 2 else _bm25_ser
            counts = kern(dptr, dterm, dw, self.iptr, self.iq, self.ikey, self.qptr,
                                          self.qtok, self.thr, self.full, self.n_ext, nq, optr,
                                          out_q, out_s, nb)
            # each document's results start at optr[i]: gather them (O(results), not O(capacity))
            cstart = np.cumsum(counts) - counts
            idx = np.repeat(optr[:-1] - cstart, counts) + np.arange(int(counts.sum()))
            out_q, out_s = out_q[idx], out_s[idx]
            doc = np.repeat(np.arange(m, dtype=np.int32), counts)
            return out_q, doc, out_s
        from limelight.exposure.eqi.base import faiss_ip_index, faiss_search

        emb = self.retriever.encode_queries(texts) if embeddings is None else embeddings
        emb = np.ascontiguousarray(np.atleast_2d(emb), dtype=np.float32)
        if emb.shape[1] != self.query_emb.shape[1]:
            raise IndexMismatchError(f"document embeddings have {emb.shape[1]} dimensions, the "
                                     f"queries {self.query_emb.shape[1]}")
        index = faiss_ip_index(emb)
        kk = min(self.depth, len(emb))
        c, s = faiss_search(index, self.query_emb, kk)
        qq = np.broadcast_to(np.arange(nq, dtype=np.int32)[:, None], c.shape)
        ok = (c >= 0) & ((s >= self.thr[:, None]) | ~self.full[:, None])  # FAISS: ties go to higher ids
        return qq[ok], c[ok], s[ok]

    def add_documents(self, texts: Sequence[str] | None = None, docids: Sequence[str] | None = None,
                      embeddings: np.ndarray | None = None) -> NewExposure:
        """Exposure lists of new (or edited) documents added to the collection together.

        ``texts`` are required for BM25; dense takes ``texts`` or document ``embeddings``.
        ``docids`` name them (default ``new-0``, ``new-1``, ...)."""
        if texts is not None:
            texts = check_texts(texts)
        elif self.kind == "bm25" or embeddings is None:
            raise LimelightError("give the new documents' texts")
        m = len(texts) if texts is not None else len(embeddings)
        if m == 0:
            return NewExposure([], np.zeros(1, np.int64), np.zeros(0, np.int32),
                               np.zeros(0, np.int32), np.zeros(0, np.float32))
        docids = [f"new-{i}" for i in range(m)] if docids is None else [str(x) for x in docids]
        if len(docids) != m:
            raise LimelightError(f"{len(docids)} document ids for {m} documents")
        if len(set(docids)) != m:
            dup = next(x for i, x in enumerate(docids) if x in docids[:i])
            raise LimelightError(f"duplicate new document id {dup!r}")
        edited = np.array([self.store.doc_ids.get(x) for x in docids], dtype=np.int64)
        S, D = self.S, self.D
        thr, full = self.thr, self.full
        if (edited >= 0).any():
            S, D = S.copy(), D.copy()
            hit = np.isin(D, edited[edited >= 0])
            rows_hit = np.flatnonzero(hit.any(axis=1))
            for r in rows_hit.tolist():  # few rows: compact each list without the old versions
                keep = ~hit[r]
                ss, dd = S[r][keep], D[r][keep]
                S[r] = -np.inf
                D[r] = -1
                S[r, :len(ss)] = ss
                D[r, :len(dd)] = dd
            full = D[:, -1] >= 0
            thr = np.where(full, S[:, -1], -np.inf).astype(np.float32)
            L = np.where(D >= 0, self._old_lexkey[np.maximum(D, 0)], -1.0)
        else:
            L = self.L
        saved = (self.S, self.D, self.thr, self.full)
        self.S, self.D, self.thr, self.full = S, D, thr, full
        try:
            if S is not saved[0] and self.kind == "bm25":
                self._sort_lists()
            cq, cdoc, cs = self._candidates(texts, embeddings)
        finally:
            self.S, self.D, self.thr, self.full = saved
            if S is not saved[0] and self.kind == "bm25":
                self._sort_lists()
        new_lex = self._new_lexkeys(docids)
        order = np.argsort(cq, kind="stable")
        cq = cq[order]
        cdoc = np.ascontiguousarray(cdoc[order], dtype=np.int32)
        cs = np.ascontiguousarray(cs[order], dtype=np.float32)
        starts = np.flatnonzero(np.r_[True, cq[1:] != cq[:-1]]) if len(cq) else np.zeros(0, np.int64)
        cptr = np.r_[starts, len(cq)].astype(np.int64)
        clex = new_lex[cdoc]
        merge = _merge_par if len(cptr) > 4096 else _merge_ser
        # ties at the cut: the BM25 engine keeps the lower document code, FAISS's heap the higher
        rank = merge(cptr, cq, cdoc, cs, clex, S, L, self.depth, self.kind == "dense")
        sel = rank > 0
        cq, cdoc, cs, rank = cq[sel], cdoc[sel], cs[sel], rank[sel]
        qlex = self.queries.ids.lexical_rank()
        nq = len(self.queries)
        key = (cdoc.astype(np.int64) * (self.depth + 1) + rank) * nq + qlex[cq]
        order = np.argsort(key)
        cq, cdoc, cs, rank = cq[order], cdoc[order], cs[order], rank[order]
        ptr = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(np.bincount(cdoc, minlength=m), out=ptr[1:])
        return NewExposure(docids, ptr, cq, rank.astype(np.int32), cs)

    def query(self, text: str | None = None, docid: str | None = None, k: int = 100) -> list[dict]:
        """A document's exposing queries ``[{"qid", "query", "score", "rank"}]`` by rank: from
        the store for a stored ``docid`` alone; computed for ``text`` (a new document, or the new
        version of ``docid``)."""
        k = check_k(k)
        if text is None:
            if docid is None:
                raise LimelightError("give a document id or a text")
            return self.store.exposing_queries(docid)[:k]
        res = self.add_documents([text], [docid] if docid is not None else None)
        q, r, s = res.lists(0)
        return rows(self.queries, q[:k], s[:k], r[:k])


# ---- the brute-force reference: re-run every query over the enlarged collection ------------------
def recompute_new_exposure(retriever, queries: Queries, depth: int, texts: Sequence[str] | None,
                           docids: Sequence[str], frozen: bool = True,
                           query_embeddings: np.ndarray | None = None,
                           doc_embeddings: np.ndarray | None = None,
                           threads: int | None = None) -> NewExposure:
    """Brute force: index the collection plus the new documents, re-run every query (top
    ``depth``) and read the new documents' exposure lists (what ``ExactReverse`` must equal).

    BM25: the new index holds the old postings plus the new documents'; with ``frozen`` its
    idf and avgdl are the old index's (a new term gets idf(df=0)), otherwise recomputed. Dense:
    a FAISS flat index over the old and new embeddings, searched with ``query_embeddings``."""
    from limelight.exposure.exact import _rows_from_topk
    from limelight.retrieval.bm25 import BM25, BM25Index
    from limelight.retrieval.dense import DenseIndex, DenseRetriever

    docids = [str(x) for x in docids]
    old_ids = retriever.doc_ids
    all_ids = IdMap(list(old_ids.strings.tolist()) + docids, kind="document")
    n_old = len(old_ids)
    if isinstance(retriever, BM25):
        from limelight.retrieval.bm25 import _invert, analyze_flat

        old = retriever.index
        texts = check_texts(texts or [])
        rows_, codes, terms = analyze_flat(old.analyzer, texts)
        _v, ip_new, docs_new, tf_new, len_new = _invert(len(texts), rows_, codes, terms)
        # merge the postings of the old index and of the new documents (codes n_old + i)
        old_terms = old.vocabulary.strings.tolist()
        vocab = IdMap(sorted(set(old_terms) | set(_v.strings.tolist())), kind="term")
        t_old = np.repeat(vocab.encode(old_terms).astype(np.int64), old.df)
        t_new = np.repeat(vocab.encode(_v.strings.tolist()).astype(np.int64), np.diff(ip_new))
        t = np.concatenate([t_old, t_new])
        d = np.concatenate([np.asarray(old.docs, np.int64), docs_new.astype(np.int64) + n_old])
        tf = np.concatenate([np.asarray(old.tf), tf_new])
        order = np.lexsort((d, t))
        indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
        np.cumsum(np.bincount(t, minlength=len(vocab)), out=indptr[1:])
        ix = BM25Index(old.analyzer, vocab, all_ids, indptr, d[order].astype(np.int32),
                       tf[order].astype(np.int32),
                       np.concatenate([np.asarray(old.doc_len), len_new]).astype(np.int32),
                       retriever.k1, retriever.b, "enlarged")
        if frozen:
            idf0 = np.float32(np.log(1.0 + (old.n_docs + 0.5) / 0.5))
            pos = old.vocabulary.encode(vocab.strings.tolist(), missing=-1)
            ix._idf = np.where(pos >= 0, np.asarray(old.idf)[np.maximum(pos, 0)], idf0).astype(np.float32)
            ix.avgdl = old.avgdl
        eng = BM25(ix, retriever.k1, retriever.b, threads=threads)
        docs, scores = eng.search_batch(queries.texts.tolist(), depth)
    elif isinstance(retriever, DenseRetriever):
        if query_embeddings is None:
            raise LimelightError("dense recomputation needs the store's query embeddings")
        new = (retriever.encode_queries(check_texts(texts)) if doc_embeddings is None
               else np.asarray(doc_embeddings, np.float32))
        emb = np.vstack([np.asarray(retriever.index.embeddings, np.float32), new])
        ix = DenseIndex.from_embeddings(all_ids, emb, {"encoder": retriever.index.encoder_identity})
        docs, scores = ix.search(query_embeddings, depth)
    else:
        raise LimelightError(f"unsupported retriever {type(retriever).__name__}")
    qq, dd, rank, scores = _rows_from_topk(docs, scores, 0, all_ids.lexical_rank())
    sel = dd >= n_old
    cq, cdoc, cr, cs = qq[sel], dd[sel] - n_old, rank[sel], scores[sel]
    qlex = queries.ids.lexical_rank()
    order = np.lexsort((qlex[cq], cr, cdoc))
    cq, cdoc, cr, cs = cq[order], cdoc[order], cr[order], cs[order]
    m = len(docids)
    ptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(np.bincount(cdoc, minlength=m), out=ptr[1:])
    return NewExposure(docids, ptr, cq.astype(np.int32), cr.astype(np.int32), cs.astype(np.float32))
