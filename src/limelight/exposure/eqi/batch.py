"""Batch kernels of exact reverse search: many new documents scored against the query log at once.

BM25 (``bm25_exposure``): query-major. The new documents form a small inverted index (term → the
new documents holding it, with their frozen-statistics weights, and per term the largest weight
over the batch). Each query holding a term of the batch is visited once: a full list whose upper
bound (the sum of its tokens' largest weights) cannot beat its stored threshold is skipped;
otherwise its tokens' postings are read in token order into one float32 accumulator per new
document — for every document, the engine's sum in the engine's order — and the documents above
the threshold are merged with the stored list right away. The work is shared across the batch:
one pass over the affected queries and their thresholds, with accumulators that stay in cache,
instead of one pass over the log per document (where each touched query is scored through a
vocabulary-sized weight map). Threads split the queries.

Dense (``dense_candidates``): FAISS range search of the queries over the new documents' vectors
finds the candidates (each block's smallest threshold, less FAISS's rounding bound, as radius);
each candidate pair is scored as a dense search scores it (``exact_inner_products``: float64
sums, the same whatever is searched with the pair), each query keeps the documents above its
own threshold, and ``exact`` merges them into the stored lists.

Results are grouped by ascending query code.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

# relative slack of the float64 bounds against float32 sums of up to L terms (each addition
# rounds by at most 2^-24): a pruned query or document provably cannot beat its threshold
_SLACK = 2.0 ** -20


@numba.njit(cache=True, nogil=True)
def _touched_queries(terms, iptr, iq, nq):  # pragma: no cover - numba
    """Ascending codes of the queries holding at least one of ``terms`` (inverted index)."""
    mark = np.zeros(nq, dtype=np.uint8)
    n = 0
    for t in terms:
        for z in range(iptr[t], iptr[t + 1]):
            q = iq[z]
            if mark[q] == 0:
                mark[q] = 1
                n += 1
    out = np.empty(n, dtype=np.int32)
    c = 0
    for q in range(nq):
        if mark[q]:
            out[c] = q
            c += 1
    return out


@numba.njit(cache=True, nogil=True)
def _query_work(qs, qptr, qtok, pptr):  # pragma: no cover - numba
    """Postings of the batch each query would read without pruning (for load balancing)."""
    out = np.empty(len(qs), dtype=np.int64)
    for a in range(len(qs)):
        q = qs[a]
        w = 0
        for z in range(qptr[q], qptr[q + 1]):
            t = qtok[z]
            w += pptr[t + 1] - pptr[t]
        out[a] = w + 1
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _n_above(S, L, q, m, s, lx):  # pragma: no cover - numba
    """Entries among the first ``m`` of stored list ``q`` ranked above (score ``s``, lexical key
    ``lx``) in trec_eval's order (score desc, then id desc) — the stored lists' order."""
    lo, hi = 0, m
    while lo < hi:
        mid = (lo + hi) >> 1
        if S[q, mid] > s or (S[q, mid] == s and L[q, mid] > lx):
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, nogil=True)
def _bm25_queries(qs, qptr, qtok, thr, full, pptr, pdoc, pw, maxw, m, S, L, nvalid, lex, n,
                  out_q, out_d, out_s, out_r):  # pragma: no cover - numba
    """The new documents entering the lists of the queries ``qs`` (ascending), with their ranks.

    Per query: a full list whose bound (the sum of its tokens' largest batch weights) cannot beat
    its threshold is skipped. Otherwise the query's tokens are read in token order and each
    posting adds ``1.0 * w(t, d)`` to its document's float32 accumulator — for every document,
    the engine's sum in the engine's order (a term a document lacks adds nothing). The documents
    above the threshold (any positive score for a list not full) are merged with the stored list
    (``nvalid`` entries, by score desc then lexical key ``L`` desc) as the engine keeps its top-n
    — score desc, then the lower code: stored documents win ties, then new ones in batch order —
    and ranked by (score desc, lexical key ``lex`` desc). Writes the first ``len(out_q)`` entries
    and returns how many there are (the caller retries with room for all when they did not fit:
    growing arrays inside the loop would slow it several-fold)."""
    acc = np.zeros(m, dtype=np.float32)
    touched = np.empty(m, dtype=np.int32)
    cd = np.empty(m, dtype=np.int32)     # the query's candidates: document, score, position
    cs = np.empty(m, dtype=np.float32)
    cp = np.empty(m, dtype=np.int64)
    n_out = 0
    for q in qs:
        z0 = qptr[q]
        z1 = qptr[q + 1]
        f = full[q]
        th = thr[q]
        if f:
            bound = 0.0
            for z in range(z0, z1):
                bound += maxw[qtok[z]]
            if bound * (1.0 + _SLACK * (z1 - z0 + 1)) <= th:
                continue
        nt = 0
        for z in range(z0, z1):
            t = qtok[z]
            for p in range(pptr[t], pptr[t + 1]):
                d = pdoc[p]
                if acc[d] == 0:  # weights are positive: 0 means not yet touched
                    touched[nt] = d
                    nt += 1
                acc[d] += np.float32(1.0) * pw[p]
        k = 0
        for a in range(nt):
            d = touched[a]
            s = acc[d]
            acc[d] = 0
            if (f and s > th) or (not f and s > 0):
                # insertion into the candidates by (score desc, document asc)
                b = k - 1
                while b >= 0 and (cs[b] < s or (cs[b] == s and cd[b] > d)):
                    cs[b + 1] = cs[b]
                    cd[b + 1] = cd[b]
                    b -= 1
                cs[b + 1] = s
                cd[b + 1] = d
                k += 1
        if k > 0:
            n_out = _enter(q, cd, cs, cp, k, S, L, nvalid[q], lex, n, out_q, out_d, out_s, out_r,
                           n_out)
    return n_out


@numba.njit(cache=True, nogil=True, inline="always")
def _enter(q, cd, cs, cp, k, S, L, nv, lex, n, out_q, out_d, out_s, out_r, n_out
           ):  # pragma: no cover - numba
    """Merge the ``k`` candidates of query ``q`` (documents ``cd``, scores ``cs``, by score desc
    then document asc) with its stored list (``nv`` entries): candidate j enters iff the stored
    entries scoring at least as high (they win ties) and the j candidates before it leave it
    room, so a prefix enters; the stored entries left are a prefix of the stored list. Writes
    (q, document, score, rank) from ``n_out`` on while there is room; returns the new count."""
    sel = 0
    for j in range(k):
        s = cs[j]
        pos = _n_above(S, L, q, nv, s, lex[cd[j]])
        a = pos
        while a < nv and S[q, a] >= s:
            a += 1
        if a + j >= n:
            break
        cp[j] = pos
        sel = j + 1
    n_old = min(nv, n - sel)
    cap = len(out_q)
    for j in range(sel):
        s = cs[j]
        lx = lex[cd[j]]
        better = min(cp[j], n_old)
        for b in range(sel):
            if b != j and (cs[b] > s or (cs[b] == s and lex[cd[b]] > lx)):
                better += 1
        if n_out < cap:
            out_q[n_out] = q
            out_d[n_out] = cd[j]
            out_s[n_out] = s
            out_r[n_out] = better + 1
        n_out += 1
    return n_out


def _bm25_run(qs: np.ndarray, args: tuple, cap: int) -> tuple[np.ndarray, ...]:
    """``_bm25_queries`` over ``qs`` with room for ``cap`` entries (again with room for all of
    them when they are more)."""
    while True:
        out = (np.empty(cap, np.int32), np.empty(cap, np.int32), np.empty(cap, np.float32),
               np.empty(cap, np.int32))
        k = _bm25_queries(qs, *args, *out)
        if k <= cap:
            return tuple(x[:k] for x in out)
        cap = k


def _split(work: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """Contiguous ranges of about equal total ``work``."""
    if parts <= 1 or len(work) < 2 * parts:
        return [(0, len(work))]
    cum = np.cumsum(work)
    cuts = np.searchsorted(cum, cum[-1] * np.arange(1, parts) / parts)
    bounds = np.unique(np.r_[0, cuts, len(work)])
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


def bm25_exposure(dptr: np.ndarray, dterm: np.ndarray, dw: np.ndarray, n_terms: int,
                  qptr: np.ndarray, qtok: np.ndarray, iptr: np.ndarray, iq: np.ndarray,
                  S: np.ndarray, L: np.ndarray, nvalid: np.ndarray, thr: np.ndarray,
                  full: np.ndarray, lex: np.ndarray, threads: int | None = None
                  ) -> tuple[np.ndarray, ...]:
    """``(q, doc, score, rank)`` of every new document entering a query's top-n (BM25).

    New documents: CSR ``dptr``/``dterm`` (ext term ids)/``dw`` (float32 weights) over
    ``n_terms`` terms, lexical keys ``lex``. Queries: tokens ``qptr``/``qtok`` in text order,
    inverted index ``iptr``/``iq`` (term → queries), stored lists ``S`` (scores, -inf padded)
    and ``L`` (lexical keys) with ``nvalid`` entries, threshold ``thr`` (the n-th score) where
    ``full``. The queries are
    split across ``threads`` (default: numba's thread count) by their work; the result is
    grouped by ascending query."""
    m = len(dptr) - 1
    nq, n = S.shape
    empty = (np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float32), np.zeros(0, np.int32))
    if m == 0 or len(dterm) == 0:
        return empty
    dterm = np.ascontiguousarray(dterm, dtype=np.int64)
    dw = np.ascontiguousarray(dw, dtype=np.float32)
    # the batch's inverted index: term → new documents (ascending), largest weight per term
    order = np.argsort(dterm, kind="stable")
    pdoc = np.repeat(np.arange(m, dtype=np.int32), np.diff(dptr))[order]
    pptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(np.bincount(dterm, minlength=n_terms), out=pptr[1:])
    maxw = np.zeros(n_terms, dtype=np.float64)
    np.maximum.at(maxw, dterm, dw.astype(np.float64))
    qs = _touched_queries(np.flatnonzero(pptr[1:] > pptr[:-1]), iptr, iq, nq)
    if len(qs) == 0:
        return empty
    threads = max(1, int(threads or numba.get_num_threads()))
    work = _query_work(qs, qptr, qtok, pptr)
    # small batches (a document or a few) in one piece: no thread start-up
    parts = _split(work, threads * 2 if threads > 1 and work.sum() > 200_000 else 1)
    args = (qptr, qtok, thr, full, pptr, pdoc, dw[order], maxw, m, S, L, nvalid,
            np.ascontiguousarray(lex, dtype=np.float64), n)
    cap = 1024 + 256 * m // len(parts)  # ~125 entries per new document on the Debian log
    if len(parts) == 1:
        return _bm25_run(qs, args, cap)
    with ThreadPoolExecutor(min(threads, len(parts))) as pool:
        res = list(pool.map(lambda ab: _bm25_run(qs[ab[0]:ab[1]], args, cap), parts))
    return tuple(np.concatenate([r[i] for r in res]) for i in range(4))


# ---- dense ----------------------------------------------------------------------------------------
QUERY_BLOCK = 4096  # queries range-searched at a time (each block's radius: its smallest bound)


def dense_candidates(query_emb: np.ndarray, thr: np.ndarray, full: np.ndarray,
                     doc_emb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(q, doc, score)`` of every (query, new document) pair with a score above the query's
    threshold (on a tie the stored document, whose code is lower, keeps its place), every pair
    for a list not full.

    The scores are those of a dense search (``DenseIndex.search``): ``exact_inner_products``,
    the same for a pair whatever is searched with it. FAISS's range search, whose float32
    scores are within ``faiss_error_bound`` of them, finds the candidates: its radius is the
    block's smallest threshold less that bound."""
    from limelight.exposure.eqi.base import faiss_ip_index
    from limelight.retrieval.dense import exact_inner_products, faiss_error_bound, max_norm

    query_emb = np.ascontiguousarray(query_emb, dtype=np.float32)
    doc_emb = np.ascontiguousarray(doc_emb, dtype=np.float32)
    index = faiss_ip_index(doc_emb)
    t = np.where(full, thr, -np.inf).astype(np.float32)
    low = t.astype(np.float64) - faiss_error_bound(query_emb, max_norm(doc_emb))
    out_q, out_d, out_s = [], [], []
    for a in range(0, len(query_emb), QUERY_BLOCK):
        b = min(len(query_emb), a + QUERY_BLOCK)
        radius = float(low[a:b].min())  # FAISS keeps scores above the radius
        lims, _, c = index.range_search(query_emb[a:b], radius)
        q = (a + np.repeat(np.arange(b - a), np.diff(lims.astype(np.int64)))).astype(np.int32)
        c = c.astype(np.int64).reshape(-1, 1)
        sc = np.empty(len(q), np.float32)
        for i in range(0, len(q), 1 << 16):  # (the pairs' query vectors, 96 MB at a time)
            sc[i:i + (1 << 16)] = exact_inner_products(query_emb[q[i:i + (1 << 16)]], doc_emb,
                                                       c[i:i + (1 << 16)])[:, 0]
        keep = sc > t[q]
        out_q.append(q[keep])
        out_d.append(c[keep, 0].astype(np.int32))
        out_s.append(sc[keep])
    if not out_q:
        return np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float32)
    return tuple(np.concatenate(x) for x in (out_q, out_d, out_s))
