"""numba kernels of the BM25 engine: batched term-at-a-time scoring with a partial top-k.

Every kernel is compiled with ``cache=True`` so that only the very first call on a machine pays
for compilation. Queries arrive as a CSR matrix over the vocabulary (``qptr``, ``qterms``,
``qweights``); the index as a CSC term→document weight matrix (``indptr``, ``pdocs``, ``pw``).

Ranking order everywhere: score descending, ties broken by the lower document code first.
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
