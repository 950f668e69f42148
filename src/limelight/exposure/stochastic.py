"""Stochastic ranking policies over any limelight ranker: Plackett-Luce over the top-k.

For one query, a ranker's top-k scores ``s_1 ≥ … ≥ s_k`` and a temperature ``T`` define the
Plackett-Luce policy that samples a ranking of those ``k`` documents position by position with
probabilities ∝ exp(s_j / (T·σ_q)), where σ_q is the standard deviation of the query's top-k
scores (1 when they are all equal or there is one document): temperatures are relative to each
query's score scale, so one grid serves BM25, cosine and RRF scores. A ranking is drawn with the
Gumbel-max trick: sort ``s_j / (T·σ_q) + G_j`` descending, G_j i.i.d. standard Gumbel.
``T = 0`` is the deterministic ranker itself (exact); ``T = inf`` the uniform shuffle of the
top-k (exact); in between, expectations are Monte-Carlo means over ``n_samples`` rankings.

What is kept is never a sampled ranking: a numba kernel sorts each sample's keys and adds
position weights ``w(rank)`` (any number of them at once: γ^(rank−1) for expected exposure,
1[rank ≤ c] for retrievability, nDCG@10's discount) into one ``(weights, queries, k)`` array of
expectations. The Gumbel noise comes from a counter-based generator (splitmix64 of the seed,
the query's index in its query set, the sample and the position), so results are identical bit
for bit whatever the block size, the thread count or the order of the queries' blocks.

``stochastic_store_exposure`` streams over the query blocks of an ``ExposureStore`` (e.g. the
Debian catalog × the whole log): expected r(d) = Σ_q o_q P(rank_q(d) ≤ c), its Gini, and the
expected exposure Σ_q o_q E[γ^(rank_q(d)−1)] of every document.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numba
import numpy as np

from limelight.data.ids import IdMap
from limelight.data.run import Run
from limelight.errors import LimelightError
from limelight.evaluation.discounts import GeometricDiscount, LogDiscount, TruncatedDiscount
from limelight.exposure.retrievability import gini

# ---- padded top-k arrays ---------------------------------------------------------------------------


def padded_from_run(run: Run, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A run's top ``k`` (default: its deepest query) as padded ``(n_queries, k)`` arrays
    ``(docs int32, scores float64)`` in the run's order (``-1`` / ``-inf`` padding)."""
    depth = run.depths()
    k = int(depth.max(initial=1)) if k is None else int(k)
    if k < 1:
        raise LimelightError(f"k must be ≥ 1, got {k}")
    rank = run.ranks().astype(np.int64)
    keep = rank <= k
    docs = np.full((run.n_queries, k), -1, dtype=np.int32)
    scores = np.full((run.n_queries, k), -np.inf)
    docs[run.q[keep], rank[keep] - 1] = run.d[keep]
    scores[run.q[keep], rank[keep] - 1] = run.score[keep]
    return docs, scores


def run_from_expectations(qids: IdMap, doc_ids: IdMap, docs: np.ndarray, values: np.ndarray,
                          name: str) -> Run:
    """A ``Run`` whose scores are per-(query, document) expectations (entries > 0 only)."""
    keep = (docs >= 0) & (values > 0)
    q = np.broadcast_to(np.arange(docs.shape[0], dtype=np.int32)[:, None], docs.shape)
    return Run.from_codes(qids, doc_ids, q[keep], docs[keep], values[keep], name)


def score_scale(docs: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """σ_q: the standard deviation of each row's valid scores (1 where it is 0 or undefined)."""
    valid = docs >= 0
    nv = valid.sum(axis=1)
    s = np.where(valid, scores, 0.0).astype(np.float64)
    mean = s.sum(axis=1) / np.maximum(nv, 1)
    var = (np.where(valid, (s - mean[:, None]) ** 2, 0.0)).sum(axis=1) / np.maximum(nv, 1)
    sd = np.sqrt(var)
    return np.where((nv > 1) & (sd > 0) & np.isfinite(sd), sd, 1.0)


# ---- the kernel ------------------------------------------------------------------------------------

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@numba.njit(cache=True, inline="always")
def _splitmix(x):  # pragma: no cover - numba
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True, nogil=True, parallel=True)
def _pl_expect(keys, nvalid, weights, n_samples, seed, qindex, out, top):  # pragma: no cover - numba
    """out[w, i, j] = mean over samples of weights[w, rank of column j] (0-based rank) when row
    ``i``'s valid columns ``0..nvalid[i]-1`` are ranked by ``keys[i, j] + Gumbel``; the noise
    of (query ``qindex[i]``, sample, column) is splitmix64 of a counter mixed with ``seed``.
    Only ranks ``0..top-1`` carry weight: when a row has more columns, its ``top`` smallest sort
    keys are selected (``np.partition``) and only they are sorted — the same ranks."""
    nq, k = keys.shape
    nw = weights.shape[0]
    inv = 1.0 / n_samples
    for i in numba.prange(nq):
        nv = nvalid[i]
        if nv == 0:
            continue
        buf = np.empty(nv)
        sel = np.empty(nv, np.int64)
        sub = np.empty(nv)
        base = np.uint64(qindex[i]) * np.uint64(n_samples)
        for s in range(n_samples):
            ctr = (base + np.uint64(s)) * np.uint64(k)
            for j in range(nv):
                z = _splitmix((ctr + np.uint64(j)) ^ seed)
                u = (np.float64(z >> np.uint64(11)) + 0.5) * (1.0 / 9007199254740992.0)
                buf[j] = -(keys[i, j] - np.log(-np.log(u)))  # ascending sort = keys descending
            if top < nv:  # only the first ``top`` ranks carry weight: sort those alone
                thr = np.partition(buf, top - 1)[top - 1]
                m = 0
                for j in range(nv):
                    if buf[j] <= thr:
                        sel[m] = j
                        sub[m] = buf[j]
                        m += 1
                order = np.argsort(sub[:m])
                for r in range(min(m, top)):
                    c = sel[order[r]]
                    for w in range(nw):
                        out[w, i, c] += weights[w, r] * inv
                continue
            order = np.argsort(buf)
            for r in range(nv):
                c = order[r]
                for w in range(nw):
                    out[w, i, c] += weights[w, r] * inv
    return out


def _seed_key(seed: int) -> np.uint64:
    """A 64-bit key mixed into every counter (distinct seeds give unrelated streams)."""
    x = np.uint64(int(seed) & 0xFFFFFFFFFFFFFFFF)
    with np.errstate(over="ignore"):
        return np.uint64(_splitmix(x ^ _GOLDEN))


def _check_temperature(t: float) -> float:
    t = float(t)
    if not (t >= 0) or np.isnan(t):
        raise LimelightError(f"temperature must be ≥ 0 (or inf), got {t}")
    return t


def expected_weights(docs: np.ndarray, scores: np.ndarray, temperature: float,
                     weights: np.ndarray, n_samples: int = 100, seed: int = 0,
                     qindex: np.ndarray | None = None) -> np.ndarray:
    """E[weights[w, rank − 1]] of every (query, column) of padded top-k arrays under the
    Plackett-Luce policy at ``temperature`` (relative to each query's score scale).

    ``docs``/``scores``: ``(nq, k)`` rows in rank order (``-1`` padding at the end of a row);
    ``weights``: ``(W, k)`` position weights (rank 1 first). Returns ``(W, nq, k)`` float64
    (0 on padding). ``T = 0``: the deterministic ranking; ``T = inf``: uniform over the row's
    documents (both exact); otherwise the mean over ``n_samples`` sampled rankings, seeded by
    ``seed`` and ``qindex`` (each row's index in its query set; default ``0..nq−1``).
    """
    t = _check_temperature(temperature)
    docs = np.asarray(docs)
    nq, k = docs.shape
    weights = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    if weights.shape[1] != k:
        raise LimelightError(f"weights have {weights.shape[1]} positions for top-{k} rows")
    valid = docs >= 0
    nv = valid.sum(axis=1).astype(np.int64)
    if (valid[:, 1:] & ~valid[:, :-1]).any():
        raise LimelightError("padding (-1) must come after a row's documents")
    out = np.zeros((weights.shape[0], nq, k))
    if t == 0:
        out[:] = np.where(valid[None], weights[:, None, :], 0.0)
        return out
    if np.isinf(t):
        cum = np.concatenate([np.zeros((weights.shape[0], 1)), np.cumsum(weights, axis=1)], axis=1)
        mean = cum[:, nv] / np.maximum(nv, 1)[None, :]
        out[:] = np.where(valid[None], mean[:, :, None], 0.0)
        return out
    if n_samples < 1:
        raise LimelightError(f"n_samples must be ≥ 1, got {n_samples}")
    keys = np.where(valid, np.asarray(scores, dtype=np.float64), 0.0) / (
        t * score_scale(docs, scores))[:, None]
    if not np.isfinite(keys[valid]).all():
        raise LimelightError("scores must be finite")
    qi = np.arange(nq, dtype=np.int64) if qindex is None else np.asarray(qindex, dtype=np.int64)
    nz = np.flatnonzero((weights != 0).any(axis=0))
    top = int(nz[-1]) + 1 if len(nz) else 1  # ranks beyond carry no weight
    return _pl_expect(np.ascontiguousarray(keys), nv, np.ascontiguousarray(weights), int(n_samples),
                      _seed_key(seed), qi, out, top)


def sample_rankings(docs: np.ndarray, scores: np.ndarray, temperature: float, n_samples: int,
                    seed: int = 0) -> np.ndarray:
    """``n_samples`` Plackett-Luce rankings per row, ``(nq, n_samples, k)`` doc codes (``-1``
    padding), with the same noise as ``expected_weights`` (for inspection and tests: the
    expectations never need them)."""
    t = _check_temperature(temperature)
    docs = np.asarray(docs)
    nq, k = docs.shape
    valid = docs >= 0
    if t == 0:
        return np.repeat(docs[:, None, :], n_samples, axis=1)
    keys = np.where(valid, np.asarray(scores, dtype=np.float64), 0.0) / (
        t * score_scale(docs, scores))[:, None]
    j = np.arange(k, dtype=np.uint64)
    q = np.arange(nq, dtype=np.uint64)[:, None, None]
    s = np.arange(n_samples, dtype=np.uint64)[None, :, None]
    with np.errstate(over="ignore"):
        z = _splitmix_np(((q * np.uint64(n_samples) + s) * np.uint64(k) + j[None, None, :])
                         ^ _seed_key(seed))
    u = ((z >> np.uint64(11)).astype(np.float64) + 0.5) / 9007199254740992.0
    key = np.where(valid[:, None, :], keys[:, None, :] - np.log(-np.log(u)), -np.inf)
    order = np.argsort(-key, axis=2, kind="stable")
    return np.take_along_axis(np.broadcast_to(docs[:, None, :], key.shape), order, axis=2)


def _splitmix_np(x: np.ndarray) -> np.ndarray:
    z = x + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


# ---- position weights -------------------------------------------------------------------------------


def rbp_weights(k: int, gamma: float) -> np.ndarray:
    """γ^(rank−1) for ranks 1..k (the expected-exposure browsing model)."""
    return GeometricDiscount(gamma).weights(np.arange(1, k + 1))


def cutoff_weights(k: int, c: int) -> np.ndarray:
    """1[rank ≤ c] for ranks 1..k (cumulative retrievability)."""
    return TruncatedDiscount(c).weights(np.arange(1, k + 1))


def dcg_weights(k: int, cutoff: int | None = 10) -> np.ndarray:
    """nDCG's discount 1/log2(rank+1) for ranks 1..k, 0 beyond ``cutoff``."""
    d = LogDiscount() if cutoff is None else TruncatedDiscount(cutoff, LogDiscount())
    return d.weights(np.arange(1, k + 1))


# ---- a policy over a run -----------------------------------------------------------------------------


@dataclass
class PolicyExpectations:
    """Expected exposures of a Plackett-Luce policy over a run's top-k, as ``Run`` objects whose
    scores are expectations: ``exposure`` E[γ^(rank−1)] (for EE-L/EE-D/EE-R), ``dcg`` E[nDCG@k's
    discount] (expected nDCG by ``expected_ndcg``) and ``hit`` P(rank ≤ c)."""

    exposure: Run
    dcg: Run
    hit: Run
    temperature: float
    gamma: float
    c: int
    n_samples: int
    seed: int


def policy_expectations(run: Run, temperature: float, k: int = 100, gamma: float = 0.5,
                        c: int = 10, ndcg_cutoff: int = 10, n_samples: int = 100,
                        seed: int = 0) -> PolicyExpectations:
    """The Plackett-Luce policy over the top ``k`` of ``run`` at ``temperature``."""
    docs, scores = padded_from_run(run, k)
    kk = docs.shape[1]
    w = np.stack([rbp_weights(kk, gamma), dcg_weights(kk, ndcg_cutoff), cutoff_weights(kk, c)])
    e = expected_weights(docs, scores, temperature, w, n_samples, seed)
    tag = f"{run.name}@T={temperature:g}"
    mk = lambda i, what: run_from_expectations(run.qids, run.docids, docs, e[i], f"{tag}:{what}")  # noqa: E731
    return PolicyExpectations(mk(0, "exposure"), mk(1, "dcg"), mk(2, "hit"), float(temperature),
                              float(gamma), int(c), int(n_samples), int(seed))


# ---- over an exposure store --------------------------------------------------------------------------


@dataclass
class StochasticExposure:
    """Expected retrievability and exposure of every document under a Plackett-Luce policy over
    a store's top-n: ``r`` = Σ_q o_q P(rank_q(d) ≤ c), ``exposure`` = Σ_q o_q E[γ^(rank−1)]."""

    r: np.ndarray
    exposure: np.ndarray
    doc_ids: IdMap
    temperature: float
    c: int
    gamma: float
    n_samples: int
    seed: int
    n_queries: int
    seconds: float
    extra: dict = field(default_factory=dict)

    @property
    def gini(self) -> float:
        """Gini of the expected r(d) over every document of the collection."""
        return gini(self.r)

    def to_dict(self) -> dict:
        return {"temperature": self.temperature, "c": self.c, "gamma": self.gamma,
                "n_samples": self.n_samples, "seed": self.seed, "n_queries": self.n_queries,
                "n_docs": len(self.r), "gini": self.gini,
                "retrievable_fraction": float((self.r > 0).mean()) if len(self.r) else 0.0,
                "seconds": self.seconds, **self.extra}


def stochastic_pairs_exposure(q: np.ndarray, d: np.ndarray, rank: np.ndarray, score: np.ndarray,
                              weights_q: np.ndarray, n_docs: int, temperature: float,
                              c: int = 10, gamma: float = 0.5, n_samples: int = 32, seed: int = 0,
                              block: int = 4096,
                              progress: Callable[[int, int], None] | None = None
                              ) -> tuple[np.ndarray, np.ndarray]:
    """``(r, exposure)`` of every document from exposure pairs grouped by query code ``q``
    (0..len(weights_q)−1, ranks 1-based and contiguous within a query), streaming over blocks
    of ``block`` queries: each block becomes padded top-k arrays whose expectations
    (``expected_weights``) are added into the documents with ``np.bincount``; no sampled ranking
    is kept. Query ``q``'s noise depends on ``q`` only, so the block size changes nothing."""
    if block < 1:
        raise LimelightError(f"block must be ≥ 1, got {block}")
    nq = len(weights_q)
    o = np.asarray(weights_q, dtype=np.float64)
    q = np.asarray(q)
    r = np.zeros(n_docs)
    ex = np.zeros(n_docs)
    if not len(q):
        return r, ex
    if (np.diff(q) < 0).any():
        raise LimelightError("exposure pairs must be grouped by query (ascending codes)")
    k = int(np.max(rank))
    starts = np.searchsorted(q, np.arange(0, nq + block, block))

    def blocks():
        for b0 in range(0, nq, block):
            b1 = min(nq, b0 + block)
            lo, hi = starts[b0 // block], starts[b0 // block + 1]
            qb, rb = q[lo:hi].astype(np.int64) - b0, np.asarray(rank[lo:hi], dtype=np.int64) - 1
            docs = np.full((b1 - b0, k), -1, dtype=np.int32)
            sc = np.full((b1 - b0, k), -np.inf)
            docs[qb, rb] = d[lo:hi]
            sc[qb, rb] = score[lo:hi]
            yield b0, docs, sc

    return _accumulate(blocks(), o, n_docs, k, temperature, c, gamma, n_samples, seed, progress)


def stochastic_topk_exposure(docs: np.ndarray, scores: np.ndarray, weights_q: np.ndarray,
                             n_docs: int, temperature: float, c: int = 10, gamma: float = 0.5,
                             n_samples: int = 32, seed: int = 0, block: int = 4096,
                             progress: Callable[[int, int], None] | None = None
                             ) -> tuple[np.ndarray, np.ndarray]:
    """``stochastic_pairs_exposure`` for padded top-k arrays ``(n_queries, k)`` (rows in rank
    order, ``-1`` padding), e.g. a retriever's ``search_batch`` output over a query log."""
    if block < 1:
        raise LimelightError(f"block must be ≥ 1, got {block}")
    docs = np.asarray(docs)
    nq = len(docs)
    if len(weights_q) != nq:
        raise LimelightError(f"{len(weights_q)} query weights for {nq} rows")
    blocks = ((b0, docs[b0:b0 + block], np.asarray(scores)[b0:b0 + block]) for b0 in range(0, nq, block))
    return _accumulate(blocks, np.asarray(weights_q, dtype=np.float64), n_docs, docs.shape[1],
                       temperature, c, gamma, n_samples, seed, progress)


def _accumulate(blocks, o: np.ndarray, n_docs: int, k: int, temperature: float, c: int,
                gamma: float, n_samples: int, seed: int, progress) -> tuple[np.ndarray, np.ndarray]:
    """Σ_q o_q E[γ^(rank−1)] and Σ_q o_q P(rank ≤ c) per document over blocks ``(first query
    index, docs, scores)`` of padded top-k arrays."""
    w = np.stack([rbp_weights(k, gamma), cutoff_weights(k, c)])
    r = np.zeros(n_docs)
    ex = np.zeros(n_docs)
    nq = len(o)
    for b0, docs, sc in blocks:
        b1 = b0 + len(docs)
        e = expected_weights(docs, sc, temperature, w, n_samples, seed,
                             qindex=np.arange(b0, b1, dtype=np.int64))
        valid = docs >= 0
        dv = docs[valid]
        ov = np.broadcast_to(o[b0:b1, None], docs.shape)[valid]
        ex += np.bincount(dv, weights=ov * e[0][valid], minlength=n_docs)
        r += np.bincount(dv, weights=ov * e[1][valid], minlength=n_docs)
        if progress:
            progress(b1, nq)
    return r, ex


def stochastic_store_exposure(store, temperature: float, c: int = 10, gamma: float = 0.5,
                              n_samples: int = 32, seed: int = 0, block: int = 4096,
                              progress: Callable[[int, int], None] | None = None
                              ) -> StochasticExposure:
    """Expected r(d) (cutoff ``c``, the store's o_q), its Gini and the expected exposure of
    every document of an ``ExposureStore`` under the Plackett-Luce policy over each query's
    stored top-n at ``temperature`` (``stochastic_pairs_exposure``)."""
    if c > store.depth:
        raise LimelightError(f"cutoff c={c} exceeds the store's depth {store.depth}")
    q, d, rank, score = store.pair_arrays()
    t0 = time.perf_counter()
    r, ex = stochastic_pairs_exposure(q, d, rank, score, store.queries.weights, len(store.doc_ids),
                                      temperature, c, gamma, n_samples, seed, block, progress)
    return StochasticExposure(r, ex, store.doc_ids, float(temperature), int(c), float(gamma),
                              int(n_samples), int(seed), len(store.queries),
                              time.perf_counter() - t0)
