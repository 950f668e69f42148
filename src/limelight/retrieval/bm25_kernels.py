"""numba kernels of the BM25 engine: batched term-at-a-time scoring with a partial top-k.

Every kernel is compiled with ``cache=True`` so that only the very first call on a machine pays
for compilation. Queries arrive as a CSR matrix over the vocabulary (``qptr``, ``qterms``,
``qweights``); the index as a CSC term→document weight matrix (``indptr``, ``pdocs``, ``pw``).

Ranking order everywhere: score descending, ties broken by the lower document code first.

Query analysis (``encode_tokens``, ``compact_tokens``, ``lexicon_*``): queries arrive as one
array of code points (``Analyzer.code_points``); a token is a maximal run of word characters
(``word[cp] == 1``) at least two code points long, which is what the default pattern
``(?u)\\b\\w\\w+\\b`` matches. Tokens are looked up in a *lexicon*, an open-addressing hash
table from surface words (code-point strings) to term ids (``-1``: a stopword or a word whose
term is outside the vocabulary). Arrays of a lexicon: ``slots`` (a power of two long; word
index or ``-1``; int32), ``whash`` (uint64 hash of each word), ``kptr``/``keys`` (word ``w`` is
``keys[kptr[w]:kptr[w + 1]]``), ``vals`` (int32 term id of each word).

This module is the BM25 kernel API other packages build on (public, so that none of them
imports a private name): the BM25 engine itself (``bm25``, ``bm25_build``), and the compiled
analysis of new documents of exact reverse search (``exposure.eqi.lexicon``), which splits
texts into tokens with ``next_token`` as the query analysis does, looks surface words up in a
lexicon with ``word_hash``/``find_word`` and builds one with
``lexicon_slots``/``lexicon_hashes``. Names starting with ``_`` stay inside this module.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True, inline="always")
def _better(s1: float, d1: int, s2: float, d2: int) -> bool:
    """``(s1, d1)`` ranks above ``(s2, d2)``: higher score, or equal score and lower code."""
    return s1 > s2 or (s1 == s2 and d1 < d2)


@njit(cache=True, nogil=True)
def _sift_down(hs, hd, pos, size):
    """Restore the min-heap (root = worst entry) below ``pos``."""
    s = hs[pos]
    d = hd[pos]
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        right = child + 1
        if right < size and _better(hs[child], hd[child], hs[right], hd[right]):
            child = right  # the worse of the two children
        if _better(s, d, hs[child], hd[child]):
            hs[pos] = hs[child]
            hd[pos] = hd[child]
            pos = child
        else:
            break
    hs[pos] = s
    hd[pos] = d


@njit(cache=True, nogil=True)
def _select_and_reset(acc, seen, touched, nt, k, hs, hd, out_d, out_s, floor):
    """Top-``k`` of ``acc`` over the ``nt`` touched documents, written best first into
    ``out_d``/``out_s``; resets ``acc`` and ``seen`` for the next query. Documents scoring below
    ``floor`` (a proven lower bound of the k-th best score) are skipped. Returns the count."""
    size = 0
    kk = min(k, nt)
    for i in range(nt):
        d = touched[i]
        s = acc[d]
        acc[d] = 0.0
        seen[d] = 0
        if s < floor:
            continue
        if size < kk:
            # push: sift up
            pos = size
            size += 1
            while pos > 0:
                parent = (pos - 1) >> 1
                if _better(hs[parent], hd[parent], s, d):
                    hs[pos] = hs[parent]
                    hd[pos] = hd[parent]
                    pos = parent
                else:
                    break
            hs[pos] = s
            hd[pos] = d
        elif _better(s, d, hs[0], hd[0]):
            hs[0] = s
            hd[0] = d
            _sift_down(hs, hd, 0, size)
    # heap sort: the worst goes last, the best ends at position 0
    n = size
    while n > 1:
        n -= 1
        ts = hs[0]
        td = hd[0]
        hs[0] = hs[n]
        hd[0] = hd[n]
        hs[n] = ts
        hd[n] = td
        _sift_down(hs, hd, 0, n)
    for i in range(size):
        out_d[i] = hd[i]
        out_s[i] = hs[i]
    return size


@njit(cache=True, nogil=True)
def _search_range(q0, q1, qstep, qptr, qterms, qweights, indptr, pdocs, pw, kth, n_docs, k,
                  out_d, out_s):
    acc = np.zeros(n_docs, dtype=np.float32)
    seen = np.zeros(n_docs, dtype=np.uint8)
    touched = np.empty(n_docs, dtype=np.int32)
    hs = np.empty(max(k, 1), dtype=np.float32)
    hd = np.empty(max(k, 1), dtype=np.int32)
    use_floor = len(kth) > 0
    for q in range(q0, q1, qstep):
        nt = 0
        # each term's k-th largest weight bounds the k-th best score from below (all
        # contributions are positive, and float32 sums of positives never decrease)
        floor = -np.inf
        if use_floor:
            floor = 0.0
            for j in range(qptr[q], qptr[q + 1]):
                v = qweights[j] * kth[qterms[j]]
                if v > floor:
                    floor = v
        for j in range(qptr[q], qptr[q + 1]):
            t = qterms[j]
            w = qweights[j]
            for p in range(indptr[t], indptr[t + 1]):
                d = pdocs[p]
                if seen[d] == 0:
                    seen[d] = 1
                    touched[nt] = d
                    nt += 1
                acc[d] += w * pw[p]
        if nt > 0:
            _select_and_reset(acc, seen, touched, nt, k, hs, hd, out_d[q], out_s[q], floor)


@njit(cache=True, nogil=True, parallel=True)
def search_csr(qptr, qterms, qweights, indptr, pdocs, pw, kth, n_docs, k, n_blocks):
    """Top-``k`` documents of every query row: ``(docs int32 (n, k), scores float32 (n, k))``,
    rows best first, padded with ``-1`` / ``0``. Queries are dealt round-robin into ``n_blocks``
    blocks run in parallel, each with its own dense accumulator and touched-document list
    (round-robin, not contiguous: query costs vary by orders of magnitude and are often sorted,
    e.g. a log's rare long queries at its end, and numba gives each thread a contiguous run of
    blocks).
    ``kth[t]`` is the k-th largest weight of term ``t`` (0 if df < k); pass an empty array when
    some query or posting weight may be ≤ 0 (no pruning then)."""
    nq = len(qptr) - 1
    out_d = np.full((nq, k), -1, dtype=np.int32)
    out_s = np.zeros((nq, k), dtype=np.float32)
    if nq == 0 or k == 0:
        return out_d, out_s
    nb = max(1, min(n_blocks, nq))
    for b in prange(nb):
        _search_range(b, nq, nb, qptr, qterms, qweights, indptr, pdocs, pw, kth, n_docs, k,
                      out_d, out_s)
    return out_d, out_s


@njit(cache=True, nogil=True, parallel=True)
def score_pairs(qptr, qterms, qweights, indptr, pdocs, pw, docs):
    """Scores of the documents ``docs[i, j]`` (``-1`` → 0) for query row ``i``; postings of a
    term are sorted by document code, so each lookup is a binary search."""
    nq, m = docs.shape
    out = np.zeros((nq, m), dtype=np.float32)
    for i in prange(nq):
        for j in range(qptr[i], qptr[i + 1]):
            t = qterms[j]
            w = qweights[j]
            lo0 = indptr[t]
            hi0 = indptr[t + 1]
            for c in range(m):
                d = docs[i, c]
                if d < 0:
                    continue
                lo = lo0
                hi = hi0
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if pdocs[mid] < d:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo < hi0 and pdocs[lo] == d:
                    out[i, c] += w * pw[lo]
    return out


# ---- posting weights and pruning bounds --------------------------------------------------------

@njit(cache=True, nogil=True, parallel=True)
def posting_weights(indptr, pdocs, tf, doc_len, idf, k1, b, avgdl, n_blocks):
    """The BM25 weight of every posting (float32), bit for bit the vectorized numpy formula
    ``float32(float64(idf[t]) * (tf / (k1 * ((1 - b) + b * dl / avgdl) + tf)))`` (float64
    arithmetic in the same order, no fast-math, so no fused multiply-adds). Postings are cut
    into ``n_blocks`` contiguous blocks run in parallel; each finds its first term by binary
    search in ``indptr``."""
    P = len(pdocs)
    out = np.empty(P, dtype=np.float32)
    if P == 0:
        return out
    nb = max(1, min(n_blocks, P))
    step = (P + nb - 1) // nb
    for blk in prange(nb):
        lo = blk * step
        hi = min(P, lo + step)
        if lo >= hi:
            continue
        t = np.searchsorted(indptr, lo, side="right") - 1
        nxt = indptr[t + 1]
        for p in range(lo, hi):
            while p >= nxt:
                t += 1
                nxt = indptr[t + 1]
            f = np.float64(tf[p])
            dl = np.float64(doc_len[pdocs[p]])
            norm = k1 * ((1.0 - b) + b * dl / avgdl)
            out[p] = np.float32(np.float64(idf[t]) * (f / (norm + f)))
    return out


@njit(cache=True, nogil=True)
def _heap_fix(h, pos, size):
    """Restore the min-heap ``h[:size]`` below ``pos``."""
    v = h[pos]
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        if child + 1 < size and h[child + 1] < h[child]:
            child += 1
        if h[child] < v:
            h[pos] = h[child]
            pos = child
        else:
            break
    h[pos] = v


@njit(cache=True, nogil=True, parallel=True)
def kth_largest(indptr, pw, terms, k):
    """For each term of ``terms``, the ``k``-th largest of its posting weights
    ``pw[indptr[t]:indptr[t + 1]]`` counted with multiplicity (0 when it has fewer than ``k``
    postings), float32: a min-heap of the ``k`` largest seen, one pass over the postings
    (terms in parallel). Equal to sorting each term's weights and taking position ``k - 1``."""
    n = len(terms)
    out = np.zeros(n, dtype=np.float32)
    if k < 1:
        return out
    for i in prange(n):
        t = terms[i]
        lo = indptr[t]
        hi = indptr[t + 1]
        if hi - lo < k:
            continue
        h = pw[lo:lo + k].copy()
        for pos in range(k // 2 - 1, -1, -1):
            _heap_fix(h, pos, k)
        for p in range(lo + k, hi):
            v = pw[p]
            if v > h[0]:
                h[0] = v
                _heap_fix(h, 0, k)
        out[i] = h[0]
    return out


@njit(cache=True, nogil=True)
def scatter_postings(gid, pdoc, ptf, cursor, out_docs, out_tf):
    """Place postings (term ``gid[p]``, document ``pdoc[p]``, frequency ``ptf[p]``) at their
    term's write cursor, advancing it: given each term's postings in ascending document order,
    this lays out the CSC arrays of the streaming build (``retrieval.bm25_build``)."""
    for p in range(len(gid)):
        g = gid[p]
        c = cursor[g]
        out_docs[c] = pdoc[p]
        out_tf[c] = ptf[p]
        cursor[g] = c + 1


# ---- query analysis ---------------------------------------------------------------------------

_FNV_OFFSET = np.uint64(14695981039346656037)
_FNV_PRIME = np.uint64(1099511628211)
_MIX = np.uint64(0xFF51AFD7ED558CCD)
_S33 = np.uint64(33)


@njit(cache=True, nogil=True, inline="always")
def next_token(buf, p, e, word):
    """``(s, r)``: the next maximal run of word code points (``word[cp] != 0``) in ``buf[p:e]``
    (``s == r == e`` when none is left). A token is a run at least two long; the caller goes on
    from ``r``."""
    while p < e and word[buf[p]] == 0:
        p += 1
    r = p
    while r < e and word[buf[r]] != 0:
        r += 1
    return p, r


@njit(cache=True, nogil=True, inline="always")
def word_hash(buf, s, e):
    """FNV-1a over code points ``buf[s:e]``, then a MurmurHash3 finalizer step (the table uses
    the low bits)."""
    h = _FNV_OFFSET
    for i in range(s, e):
        h = (h ^ np.uint64(buf[i])) * _FNV_PRIME
    h = (h ^ (h >> _S33)) * _MIX
    return h ^ (h >> _S33)


@njit(cache=True, nogil=True, inline="always")
def find_word(buf, s, e, h, slots, whash, kptr, keys):
    """Word index of ``buf[s:e]`` (hash ``h``) in the lexicon, or ``-1 - slot`` of the empty
    slot where it would go."""
    mask = np.uint64(len(slots) - 1)
    i = np.int64(h & mask)
    n = e - s
    while True:
        w = slots[i]
        if w < 0:
            return -1 - i
        if whash[w] == h and kptr[w + 1] - kptr[w] == n:
            k0 = kptr[w]
            same = True
            for j in range(n):
                if keys[k0 + j] != buf[s + j]:
                    same = False
                    break
            if same:
                return w
        i = (i + 1) & np.int64(mask)


@njit(cache=True, nogil=True, parallel=True)
def encode_tokens(buf, starts, ends, word, slots, whash, kptr, keys, vals, complete, bound,
                  n_blocks):
    """Tokenize query ``q`` (``buf[starts[q]:ends[q]]``) and look its tokens up, in parallel.

    Writes into ``out[bound[q]:bound[q] + counts[q]]`` (``bound``: offsets with room for
    ``(len + 1) // 3`` tokens per query, the most a text can hold) the term id of each token
    in text order, dropping tokens whose word maps to ``-1``. A token absent from the lexicon
    is dropped if ``complete`` (the lexicon then holds every word with a term), else written as
    ``-2 - start`` (its start in ``buf``) for the caller to resolve. The rest of each query's
    room is filled with ``-1``. Returns ``(out, counts)``.
    Queries go in chunks of 256, dealt round-robin to ``n_blocks`` parallel blocks (long
    queries are often together, e.g. at the end of a log)."""
    nq = len(starts)
    out = np.empty(bound[nq], dtype=np.int64)
    counts = np.zeros(nq, dtype=np.int64)
    chunk = 256
    n_chunks = (nq + chunk - 1) // chunk
    nb = max(1, min(n_blocks, n_chunks))
    for b in prange(nb):
        for c in range(b, n_chunks, nb):
            for q in range(c * chunk, min(nq, (c + 1) * chunk)):
                pos = bound[q]
                i = starts[q]
                e = ends[q]
                while i < e:
                    s, i = next_token(buf, i, e, word)
                    if i - s < 2:
                        continue
                    w = find_word(buf, s, i, word_hash(buf, s, i), slots, whash, kptr, keys)
                    if w >= 0:
                        v = vals[w]
                        if v >= 0:
                            out[pos] = v
                            pos += 1
                    elif not complete:
                        out[pos] = -2 - s
                        pos += 1
                counts[q] = pos - bound[q]
                for j in range(pos, bound[q + 1]):
                    out[j] = -1
    return out, counts


@njit(cache=True, nogil=True, parallel=True)
def compact_tokens(out, bound, counts):
    """The query CSR ``(qptr int64, qterms int32)`` of the non-negative entries of each
    query's ``out[bound[q]:bound[q] + counts[q]]``, in order."""
    nq = len(counts)
    kept = np.zeros(nq + 1, dtype=np.int64)
    for q in prange(nq):
        c = 0
        for j in range(bound[q], bound[q] + counts[q]):
            if out[j] >= 0:
                c += 1
        kept[q + 1] = c
    qptr = np.cumsum(kept)
    qterms = np.empty(qptr[nq], dtype=np.int32)
    for q in prange(nq):
        p = qptr[q]
        for j in range(bound[q], bound[q] + counts[q]):
            if out[j] >= 0:
                qterms[p] = out[j]
                p += 1
    return qptr, qterms


@njit(cache=True, nogil=True)
def token_ends(buf, starts, word):
    """End of the run of word characters starting at each of ``starts``."""
    ends = np.empty(len(starts), dtype=np.int64)
    n = len(buf)
    for t in range(len(starts)):
        e = starts[t] + 1
        while e < n and word[buf[e]] != 0:
            e += 1
        ends[t] = e
    return ends


@njit(cache=True, nogil=True)
def lexicon_insert(buf, starts, ends, slots, whash, kptr, keys, vals, n_words):
    """Add the words ``buf[starts[t]:ends[t]]`` missing from the lexicon (value ``-2``,
    pending), in place; the arrays must have room (``slots`` at most half full afterwards).
    Returns ``(word index of each t, new word count)``."""
    widx = np.empty(len(starts), dtype=np.int64)
    for t in range(len(starts)):
        s = starts[t]
        e = ends[t]
        h = word_hash(buf, s, e)
        w = find_word(buf, s, e, h, slots, whash, kptr, keys)
        if w < 0:
            slots[-1 - w] = n_words
            w = n_words
            k0 = kptr[w]
            for j in range(e - s):
                keys[k0 + j] = buf[s + j]
            kptr[w + 1] = k0 + e - s
            whash[w] = h
            vals[w] = -2
            n_words += 1
        widx[t] = w
    return widx, n_words


@njit(cache=True, nogil=True)
def lexicon_slots(whash, n_words, n_slots):
    """A fresh ``slots`` table of ``n_slots`` (a power of two) for the first ``n_words`` words
    (distinct, with hashes ``whash``)."""
    slots = np.full(n_slots, -1, dtype=np.int32)
    mask = np.uint64(n_slots - 1)
    for w in range(n_words):
        i = np.int64(whash[w] & mask)
        while slots[i] >= 0:
            i = (i + 1) & np.int64(mask)
        slots[i] = w
    return slots


@njit(cache=True, nogil=True, parallel=True)
def lexicon_hashes(kptr, keys, n_words):
    """Hash of each of the first ``n_words`` words."""
    out = np.empty(n_words, dtype=np.uint64)
    for w in prange(n_words):
        out[w] = word_hash(keys, kptr[w], kptr[w + 1])
    return out


def warmup() -> None:
    """Compile (or load from cache) the kernels on a tiny input."""
    qptr = np.array([0, 1], dtype=np.int64)
    qterms = np.array([0], dtype=np.int32)
    qw = np.array([1.0], dtype=np.float32)
    indptr = np.array([0, 2], dtype=np.int64)
    pdocs = np.array([0, 1], dtype=np.int32)
    pw = np.array([1.0, 2.0], dtype=np.float32)
    search_csr(qptr, qterms, qw, indptr, pdocs, pw, np.zeros(1, dtype=np.float32), 2, 1, 1)
    score_pairs(qptr, qterms, qw, indptr, pdocs, pw, np.zeros((1, 1), dtype=np.int32))
    posting_weights(indptr, pdocs, pdocs, pdocs, qw, 0.9, 0.4, 1.0, 1)
    kth_largest(indptr, pw, qterms, 1)
