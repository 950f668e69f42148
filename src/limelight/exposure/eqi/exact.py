"""Exact reverse search: the exposing queries of a new or edited document without re-running
the query log.

Every query keeps its stored top-n (the exposure store); its threshold is its score at rank n.
New documents are scored against the queries in one pass for the whole batch
(``limelight.exposure.eqi.batch``) — for BM25 query by query, over a small inverted index of the
new documents (weights from the collection's term statistics, which stay frozen), only for the
queries holding one of their terms and whose threshold their bound can beat; for dense retrieval
by FAISS range search of the query embeddings over the documents' embeddings, block by block
against the queries' thresholds — and kept for the queries whose threshold they beat; their rank
inside each query's list comes from the stored scores. Documents added together compete with
each other as well (``add_documents``), exactly as in a re-run over the collection plus all of
them.

Exactness: the result equals re-running every query over the collection plus the new documents
when (i) scores are computed bit for bit as the retriever computes them — BM25 sums a query's
term weights in its token order in float32 as the engine does; dense scores are a dense search's
(``DenseIndex.search``: ``exact_inner_products``, float64 sums that are the same for a pair
whatever is searched with it; FAISS's range search only finds the candidates) — and (ii) for
BM25 the collection statistics (N, df, avgdl) stay those of the store's index ("frozen"; a term
the collection lacks gets idf(df=0)). Recomputing them after adding documents changes every
score; ``experiments/eqi`` reports that drift as RELQ. Ties follow the engines, and new documents
come after the collection's (codes N, N+1, ... in batch order). Both engines rank by score, then
the lower document code: a new document enters a full list only with a score strictly above the
threshold, and of tied new documents the first of the batch; it pushes out, of the documents
tied at the threshold, the one with the highest code. Ranks inside a list follow trec_eval
(score, then doc id descending). Dense scores depend on the query embeddings: use the ones the
store was computed from (``query_embeddings=``); re-encoding may differ from them in the last
bits.

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
from limelight.exposure.eqi.batch import bm25_exposure, dense_candidates
from limelight.exposure.eqi.lexicon import DocLexicon


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
def _merge_dense_py(cptr, cq, cdoc, cscore, clex, S, D, L, n, n_old, n_chunks
                    ):  # pragma: no cover - numba
    """Each query's top-n with its candidates: a dense search's top-n, by score, of equal
    scores the lower document code (``DenseIndex.search``), here the stored list (empty slots
    scored -inf) taking the new documents in code order — all above the stored codes: one
    enters when its score is above the list's worst, and replaces the worst — the lowest score,
    and of equal scores the highest code. Each candidate left in the list is ranked by (score
    desc, lexical key desc). Returns ranks (0 = out)."""
    nq_c = len(cptr) - 1
    out = np.zeros(len(cdoc), dtype=np.int32)
    nch = max(1, min(n_chunks, nq_c))
    step = (nq_c + nch - 1) // nch
    for ch in numba.prange(nch):
        hs = np.empty(n, dtype=np.float32)
        hid = np.empty(n, dtype=np.int64)
        hl = np.empty(n, dtype=np.float64)
        hc = np.empty(n, dtype=np.int64)
        for g in range(ch * step, min(nq_c, (ch + 1) * step)):
            lo, hi = cptr[g], cptr[g + 1]
            if lo == hi:
                continue
            q = cq[lo]
            # the candidates in processing order (new-doc code ascending), in place
            for a in range(lo + 1, hi):
                sa, da, la = cscore[a], cdoc[a], clex[a]
                b = a - 1
                while b >= lo and cdoc[b] > da:
                    cscore[b + 1] = cscore[b]
                    cdoc[b + 1] = cdoc[b]
                    clex[b + 1] = clex[b]
                    b -= 1
                cscore[b + 1] = sa
                cdoc[b + 1] = da
                clex[b + 1] = la
            for a in range(n):
                hs[a] = S[q, a]
                hid[a] = D[q, a]
                hl[a] = L[q, a]
                hc[a] = -1
            for c in range(lo, hi):
                t = 0
                for a in range(1, n):
                    if hs[a] < hs[t] or (hs[a] == hs[t] and hid[a] > hid[t]):
                        t = a
                if cscore[c] > hs[t]:
                    hs[t] = cscore[c]
                    hid[t] = n_old + cdoc[c]
                    hl[t] = clex[c]
                    hc[t] = c
            for a in range(n):
                c = hc[a]
                if c < 0:
                    continue
                better = 0
                for b in range(n):
                    if b != a and hid[b] >= 0 and (hs[b] > hs[a] or (hs[b] == hs[a] and hl[b] > hl[a])):
                        better += 1
                out[c] = better + 1
    return out


# parallel kernel for batches; serial one for a document or two (no thread wake-ups)
_merge_dense_par = numba.njit(cache=True, parallel=True)(_merge_dense_py)
_merge_dense_ser = numba.njit(cache=True)(_merge_dense_py)


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

    def __init__(self, store, lexical: bool, retriever):
        self.store = store
        self.lexical = lexical  # BM25's inverted lists (else a dense retriever's vectors)
        self.retriever = retriever
        self.queries: Queries = store.queries
        self.depth = store.depth
        self._pending: tuple | None = None  # (query embeddings, cache folder) until prepared

    @classmethod
    def build(cls, store, retriever, query_embeddings: np.ndarray | None = None,
              cache_dir: str | None = DEFAULT_CACHE, prepare: bool = True) -> ExactReverse:
        """Prepare exact reverse search for ``store`` computed with ``retriever``.

        ``prepare=False`` checks the retriever against the store and stops there: a stored
        document's exposing queries (``query(docid=...)``) are read from the store, and what new
        documents need (the stored lists, the query side: on the demo's log ~0.5 GB for a
        system, read in seconds) is prepared when ``add_documents`` is first called."""
        from limelight.exposure.fingerprints import ids_fingerprint

        doc_ids = getattr(retriever, "doc_ids", None)
        if doc_ids is None or ids_fingerprint(doc_ids) != store.manifest.get("documents"):
            raise IndexMismatchError(f"{store.path}: the store was computed over other documents "
                                     "than the retriever's index")
        settings = store.manifest.get("settings", {})
        from limelight.retrieval.bm25 import BM25
        from limelight.retrieval.dense import DenseRetriever

        lexical = isinstance(retriever, BM25)
        if lexical:
            for key, val in (("k1", retriever.k1), ("b", retriever.b)):
                if key in settings and float(settings[key]) != val:
                    raise IndexMismatchError(f"{store.path}: the store was computed with {key}="
                                             f"{settings[key]}, the retriever has {key}={val}")
            if "k1" not in settings:  # computed in Python: compare the retriever's fingerprint
                from limelight.exposure.fingerprints import retriever_fingerprint

                if retriever_fingerprint(retriever, doc_ids) != store.manifest.get("retriever"):
                    raise IndexMismatchError(f"{store.path}: the store was computed with another "
                                             f"retriever or settings than {retriever.name} (k1, b)")
        elif isinstance(retriever, DenseRetriever):
            recorded = settings.get("encoder")
            if recorded is not None and not retriever.encoder.compatible_with(recorded):
                raise IndexMismatchError(f"{store.path}: the store's vectors cannot be mixed with "
                                         f"this retriever's encoder: "
                                         f"{retriever.encoder.mismatch(recorded)}")
        else:
            raise LimelightError(f"exact reverse search supports BM25 and dense retrievers, not "
                                 f"{type(retriever).__name__}")
        self = cls(store, lexical, retriever)
        if not lexical and query_embeddings is not None:
            self._check_query_embeddings(query_embeddings)
        self._pending = (query_embeddings, cache_dir)
        if prepare:
            self._prepare()
        return self

    def _prepare(self) -> None:
        """Read the stored lists and prepare the query side (once: see ``build``)."""
        if self._pending is None:
            return
        query_embeddings, cache_dir = self._pending
        self._load_lists()
        if self.lexical:
            self._prepare_bm25()
        else:
            if query_embeddings is None:
                from limelight.exposure.eqi.base import encode_queries_cached

                query_embeddings = encode_queries_cached(self.queries, self.retriever.encoder, cache_dir)
                self._check_query_embeddings(query_embeddings)
            self.query_emb = np.ascontiguousarray(query_embeddings, dtype=np.float32)
        self._pending = None

    def _check_query_embeddings(self, query_embeddings: np.ndarray) -> None:
        if query_embeddings.shape != (len(self.queries), self.retriever.index.dim):
            raise IndexMismatchError(f"query embeddings of shape {query_embeddings.shape} for "
                                     f"{len(self.queries)} queries of dimension {self.retriever.index.dim}")

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
        self.nvalid = (D >= 0).sum(axis=1, dtype=np.int32)
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
        self._doc_lexicon = DocLexicon.build(ix.analyzer, terms, lut)
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
        self.iptr, self.iq = iptr, q_of.astype(np.int32)
        # frozen statistics: the index's idf (float32), idf(df=0) for terms it lacks
        N = ix.n_docs
        idf0 = np.float32(np.log(1.0 + (N - 0.0 + 0.5) / (0.0 + 0.5)))
        self.idf = np.concatenate([np.asarray(ix.idf, dtype=np.float32),
                                   np.full(len(unknown), idf0, dtype=np.float32)])
        self.avgdl = ix.avgdl

    def _bm25_doc_weights(self, texts: list[str], compiled: bool = True
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """CSR (ptr, extended term, float32 BM25 weight) of new documents, frozen statistics.
        Only the terms of the query log are kept (no other term can change a score); every
        token that is not a stopword counts in a document's length. Analysis is compiled
        (``lexicon.DocLexicon``) where it can be, else ``analyze_flat`` (``compiled=False``
        forces it); both give the same arrays."""
        r = self.retriever
        m = len(texts)
        lex = self._doc_lexicon if compiled else None
        if lex is not None:
            doc_len, dptr, dterm, tf = lex.analyze(texts)
            drow = np.repeat(np.arange(m), np.diff(dptr))
        else:
            from limelight.retrieval.bm25 import analyze_flat

            rows_, codes, terms = analyze_flat(r.index.analyzer, texts)
            doc_len = np.bincount(rows_, minlength=m)
            ext = np.fromiter((self._ext_terms.get(t, -1) for t in terms), dtype=np.int64,
                              count=len(terms))
            t = ext[codes]
            keep = t >= 0
            key, tf = np.unique(rows_[keep] * self.n_ext + t[keep], return_counts=True)
            drow, dterm = key // self.n_ext, key % self.n_ext
            dptr = np.zeros(m + 1, dtype=np.int64)
            np.cumsum(np.bincount(drow, minlength=m), out=dptr[1:])
        tf = tf.astype(np.float64)
        dl = doc_len.astype(np.float64)[drow]
        k1, b = r.k1, r.b
        norm = k1 * ((1.0 - b) + b * dl / self.avgdl)  # as BM25Index.weights computes it
        w = (self.idf[dterm].astype(np.float64) * (tf / (norm + tf))).astype(np.float32)
        return dptr, dterm.astype(np.int32), w

    # -- the batch --
    def _bm25_new(self, texts: list[str], lists: tuple, new_lex: np.ndarray) -> tuple[np.ndarray, ...]:
        """(query, new-doc index, score, rank) of the new documents entering the lists (BM25):
        one pass over the affected queries, merged with the stored lists as it goes."""
        S, _D, L, nvalid, thr, full = lists
        dptr, dterm, dw = self._bm25_doc_weights(texts)
        return bm25_exposure(dptr, dterm, dw, self.n_ext, self.qptr, self.qtok, self.iptr, self.iq,
                             S, L, nvalid, thr, full, new_lex)

    def _dense_new(self, emb: np.ndarray, lists: tuple, new_lex: np.ndarray) -> tuple[np.ndarray, ...]:
        """(query, new-doc index, score, rank) of the new documents entering the lists (dense):
        the candidates above the thresholds (``dense_candidates``), merged into the lists."""
        S, D, L, _nvalid, thr, full = lists
        cq, cdoc, cs = dense_candidates(self.query_emb, thr, full, emb)
        return self._merge_dense(cq, cdoc, cs, new_lex, S, D, L)

    def _doc_vectors(self, texts: list[str] | None, embeddings: np.ndarray | None) -> np.ndarray:
        """The new documents' vectors (given, or encoded from their texts)."""
        emb = self.retriever.encode_queries(texts) if embeddings is None else embeddings
        emb = np.ascontiguousarray(np.atleast_2d(emb), dtype=np.float32)
        if emb.shape[1] != self.query_emb.shape[1]:
            raise IndexMismatchError(f"document embeddings have {emb.shape[1]} dimensions, the "
                                     f"queries {self.query_emb.shape[1]}")
        return emb

    def _lists_without(self, edited: np.ndarray) -> tuple[np.ndarray, ...]:
        """Stored lists ``(S, D, L, nvalid, thr, full)`` with the old versions of ``edited``
        codes removed (each list compacted: its threshold becomes the new n-th score, if any)."""
        if not (edited >= 0).any():
            return self.S, self.D, self.L, self.nvalid, self.thr, self.full
        S, D = self.S.copy(), self.D.copy()
        hit = np.isin(D, edited[edited >= 0])
        for r in np.flatnonzero(hit.any(axis=1)).tolist():  # few rows: compact each list
            keep = ~hit[r]
            ss, dd = S[r][keep], D[r][keep]
            S[r] = -np.inf
            D[r] = -1
            S[r, :len(ss)] = ss
            D[r, :len(dd)] = dd
        full = D[:, -1] >= 0
        thr = np.where(full, S[:, -1], -np.inf).astype(np.float32)
        L = np.where(D >= 0, self._old_lexkey[np.maximum(D, 0)], -1.0)
        return S, D, L, (D >= 0).sum(axis=1, dtype=np.int32), thr, full

    def _check_new(self, texts, docids, embeddings) -> tuple[list[str] | None, list[str]]:
        """Validated texts and document ids of a batch (default ids ``new-0``, ``new-1``, ...)."""
        if texts is not None:
            texts = check_texts(texts)
        elif self.lexical or embeddings is None:
            raise LimelightError("give the new documents' texts")
        m = len(texts) if texts is not None else len(embeddings)
        docids = [f"new-{i}" for i in range(m)] if docids is None else [str(x) for x in docids]
        if len(docids) != m:
            raise LimelightError(f"{len(docids)} document ids for {m} documents")
        if len(set(docids)) != m:
            dup = next(x for i, x in enumerate(docids) if x in docids[:i])
            raise LimelightError(f"duplicate new document id {dup!r}")
        return texts, docids

    def add_documents(self, texts: Sequence[str] | None = None, docids: Sequence[str] | None = None,
                      embeddings: np.ndarray | None = None) -> NewExposure:
        """Exposure lists of new (or edited) documents added to the collection together.

        ``texts`` are required for BM25; dense takes ``texts`` or document ``embeddings``.
        ``docids`` name them (default ``new-0``, ``new-1``, ...). The whole batch is scored in
        one pass over the affected queries (``limelight.exposure.eqi.batch``), then merged with
        the stored lists."""
        texts, docids = self._check_new(texts, docids, embeddings)
        self._prepare()
        m = len(docids)
        if m == 0:
            return NewExposure([], np.zeros(1, np.int64), np.zeros(0, np.int32),
                               np.zeros(0, np.int32), np.zeros(0, np.float32))
        edited = np.array([self.store.doc_ids.get(x) for x in docids], dtype=np.int64)
        lists = self._lists_without(edited)
        new_lex = self._new_lexkeys(docids)
        if self.lexical:
            cq, cdoc, cs, rank = self._bm25_new(texts, lists, new_lex)
        else:
            cq, cdoc, cs, rank = self._dense_new(self._doc_vectors(texts, embeddings), lists, new_lex)
        qlex = self.queries.ids.lexical_rank()
        nq = len(self.queries)
        key = (cdoc.astype(np.int64) * (self.depth + 1) + rank) * nq + qlex[cq]
        order = np.argsort(key)
        cq, cdoc, cs, rank = cq[order], cdoc[order], cs[order], rank[order]
        ptr = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(np.bincount(cdoc, minlength=m), out=ptr[1:])
        return NewExposure(docids, ptr, cq, rank.astype(np.int32), cs)

    def _merge_dense(self, cq: np.ndarray, cdoc: np.ndarray, cs: np.ndarray, new_lex: np.ndarray,
                     S: np.ndarray, D: np.ndarray, L: np.ndarray) -> tuple[np.ndarray, ...]:
        """Dense candidates that enter their query's top-n, with their 1-based ranks
        (``_merge_dense_py``)."""
        n = self.depth
        if len(cq) and not (cq[1:] >= cq[:-1]).all():
            order = np.argsort(cq, kind="stable")
            cq, cdoc, cs = cq[order], cdoc[order], cs[order]
        cdoc = np.ascontiguousarray(cdoc, dtype=np.int32)
        cs = np.ascontiguousarray(cs, dtype=np.float32)
        starts = np.flatnonzero(np.r_[True, cq[1:] != cq[:-1]]) if len(cq) else np.zeros(0, np.int64)
        cptr = np.r_[starts, len(cq)].astype(np.int64)
        par = len(cptr) > 4096
        rank = (_merge_dense_par if par else _merge_dense_ser)(
            cptr, cq, cdoc, cs, new_lex[cdoc], S, D, L, n, len(self.store.doc_ids),
            numba.get_num_threads() * 4 if par else 1)
        sel = rank > 0
        return cq[sel], cdoc[sel], cs[sel], rank[sel]

    def query(self, text: str | None = None, docid: str | None = None, k: int = 100) -> list[dict]:
        """A document's exposing queries ``[{"qid", "query", "score", "rank"}]`` by rank: from
        the store for a stored ``docid`` alone; computed for ``text`` (a new document, or the new
        version of ``docid``)."""
        k = check_k(k)
        if text is None:
            if docid is None:
                raise LimelightError("give a document id or a text")
            return self.store.exposing_queries(docid, limit=k)
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
    from limelight.exposure.shards import _rows_from_topk
    from limelight.retrieval.bm25 import BM25, BM25Index
    from limelight.retrieval.dense import DenseIndex, DenseRetriever

    docids = [str(x) for x in docids]
    old_ids = retriever.doc_ids
    all_ids = IdMap(list(old_ids.strings.tolist()) + docids, kind="document")
    n_old = len(old_ids)
    if isinstance(retriever, BM25):
        from limelight.retrieval.bm25 import analyze_flat, invert_postings

        old = retriever.index
        texts = check_texts(texts or [])
        rows_, codes, terms = analyze_flat(old.analyzer, texts)
        _v, ip_new, docs_new, tf_new, len_new = invert_postings(len(texts), rows_, codes, terms)
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
