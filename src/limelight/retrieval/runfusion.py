"""Rank and score fusion of runs, as functions: RRF, CombSUM, CombMNZ, min-max interpolation.

Every function takes columnar ``Run`` objects and works on whole arrays (no loop over queries):
the fused run holds, for each query of any input run, the union of the documents the runs
retrieved for it. A run that lacks a query (or a document) contributes nothing to it.

* ``rrf(*runs, k=60)``: ``sum_r w_r / (k + rank_r(d))`` (Cormack et al. 2009), ranks 1-based as
  the runs order documents (score descending, ties by docid descending).
* ``combsum(*runs, norm='min-max')``: ``sum_r w_r * norm_r(s_r(d))``.
* ``combmnz(*runs, norm='min-max')``: CombSUM times the number of runs that retrieved ``d``.
* ``linear(a, b, alpha=0.5)``: ``alpha * mm(s_a) + (1 - alpha) * mm(s_b)`` with per-query min-max
  normalisation, the interpolation of Chen et al. (ECIR 2022, Sect. 6).
* ``rrf_topk``: RRF of padded ``(n, k)`` top-k arrays (what ``Hybrid`` fuses, without ``Run``).

Min-max maps each query's scores to ``(s - min) / (max - min)``, 0 when all scores are equal
(as ranx does). ``depth`` cuts each input run to its top ``depth`` documents before fusing.

This module knows no pipeline stage: the fusion stages (``RRF``, ``CombSUM``, ..., ``a | b``)
live with ``Stage`` in ``limelight.retrieval.base`` and call these functions;
``limelight.retrieval.fusion`` gathers both and the ``Hybrid`` retriever.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from limelight.data.ids import IdMap
from limelight.data.run import Run
from limelight.errors import LimelightError

NORMS = ("min-max", "none")


# ---- helpers ----------------------------------------------------------------------------------
def _flatten(items: tuple) -> list:
    if len(items) == 1 and isinstance(items[0], list | tuple):
        return list(items[0])
    return list(items)


def _union_map(maps: list[IdMap]) -> IdMap:
    out = maps[0]
    for m in maps[1:]:
        if m is not out and m != out:
            out = out.union(m)
    return out


def _recode(codes: np.ndarray, src: IdMap, dst: IdMap) -> np.ndarray:
    if src is dst or (len(src) <= len(dst) and np.array_equal(src.strings, dst.strings[:len(src)])):
        return codes  # same map, or dst extends src (union keeps existing codes)
    return dst.encode(src.strings)[codes]


def _weights(weights: Sequence[float] | None, n: int) -> np.ndarray:
    if weights is None:
        return np.ones(n, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n,):
        raise LimelightError(f"fusion: {len(w)} weights for {n} runs")
    return w


def minmax_scores(run: Run) -> np.ndarray:
    """Each row's score min-max normalised within its query (0 where max == min)."""
    if len(run) == 0:
        return np.zeros(0, dtype=np.float64)
    depths = run.depths()
    has = depths > 0
    first = run.offsets[:-1]
    last = run.offsets[1:] - 1
    # rows are ordered by score descending within a query, so the extremes are at the ends;
    # use min/max of both ends anyway, in case a run was built with sort=False out of order
    hi = np.zeros(run.n_queries)
    lo = np.zeros(run.n_queries)
    hi[has] = np.maximum(run.score[first[has]], run.score[last[has]])
    lo[has] = np.minimum(run.score[first[has]], run.score[last[has]])
    span = (hi - lo)[run.q]
    out = np.zeros(len(run), dtype=np.float64)
    ok = span > 0
    out[ok] = (run.score[ok] - lo[run.q][ok]) / span[ok]
    return out


def _fuse(runs: list[Run], values: list[np.ndarray], mnz: bool, name: str) -> Run:
    """Sum ``values`` (one array per run, aligned with its rows) per (query, document) over the
    union of the runs' queries and documents; ``mnz`` multiplies by the number of runs."""
    if not runs:
        raise LimelightError("fusion needs at least one run")
    qmap = _union_map([r.qids for r in runs])
    dmap = _union_map([r.docids for r in runs])
    q = np.concatenate([_recode(r.q, r.qids, qmap) for r in runs]).astype(np.int64)
    d = np.concatenate([_recode(r.d, r.docids, dmap) for r in runs]).astype(np.int64)
    v = np.concatenate(values).astype(np.float64)
    nd = max(len(dmap), 1)
    key = q * nd + d
    uniq, inv = np.unique(key, return_inverse=True)
    score = np.bincount(inv, weights=v, minlength=len(uniq))
    if mnz:
        score *= np.bincount(inv, minlength=len(uniq))
    return Run.from_codes(qmap, dmap, (uniq // nd).astype(np.int32), (uniq % nd).astype(np.int32),
                          score, name)


def _cut(runs: list[Run], depth: int | None) -> list[Run]:
    if depth is None:
        return runs
    return [r if (r.depths() <= depth).all() else r.topk(int(depth)) for r in runs]


def _name(method: str, runs: list[Run]) -> str:
    return f"{method}({','.join(r.name for r in runs)})"


def _norm_values(run: Run, norm: str | None) -> np.ndarray:
    if norm in (None, "none"):
        return run.score
    if norm == "min-max":
        return minmax_scores(run)
    raise LimelightError(f"unknown score normalisation {norm!r} (min-max or none)")


# ---- functions --------------------------------------------------------------------------------
def rrf(*runs: Run | Sequence[Run], k: float = 60, depth: int | None = None,
        weights: Sequence[float] | None = None, name: str | None = None) -> Run:
    """Reciprocal rank fusion: ``score(q, d) = sum_r w_r / (k + rank_r(q, d))``."""
    rs = _cut(_flatten(runs), depth)
    w = _weights(weights, len(rs))
    vals = [wi / (k + r.ranks().astype(np.float64)) for r, wi in zip(rs, w, strict=True)]
    return _fuse(rs, vals, False, name or _name("rrf", rs))


def combsum(*runs: Run | Sequence[Run], norm: str | None = "min-max", depth: int | None = None,
            weights: Sequence[float] | None = None, name: str | None = None) -> Run:
    """CombSUM: the (weighted) sum of each run's per-query normalised scores."""
    return _comb(runs, norm, depth, weights, name, mnz=False)


def combmnz(*runs: Run | Sequence[Run], norm: str | None = "min-max", depth: int | None = None,
            weights: Sequence[float] | None = None, name: str | None = None) -> Run:
    """CombMNZ: CombSUM times the number of runs that retrieved the document."""
    return _comb(runs, norm, depth, weights, name, mnz=True)


def _comb(runs, norm: str | None, depth: int | None, weights: Sequence[float] | None,
          name: str | None, mnz: bool) -> Run:
    """CombSUM (or, with ``mnz``, CombMNZ) of ``runs`` as the public functions take them."""
    rs = _cut(_flatten(runs), depth)
    w = _weights(weights, len(rs))
    vals = [wi * _norm_values(r, norm) for r, wi in zip(rs, w, strict=True)]
    return _fuse(rs, vals, mnz, name or _name("combmnz" if mnz else "combsum", rs))


def linear(a: Run, b: Run, alpha: float = 0.5, norm: str | None = "min-max",
           depth: int | None = None, name: str | None = None) -> Run:
    """Linear interpolation ``alpha * norm(a) + (1 - alpha) * norm(b)`` (min-max by default);
    a document missing from one run gets 0 from it."""
    if not 0.0 <= alpha <= 1.0:
        raise LimelightError(f"alpha must lie in [0, 1], got {alpha}")
    return combsum(a, b, norm=norm, depth=depth, weights=(alpha, 1.0 - alpha),
                   name=name or f"linear{alpha:g}({a.name},{b.name})")


FUSIONS = {"rrf": rrf, "combsum": combsum, "combmnz": combmnz}


def fuse(runs: Sequence[Run], method: str = "rrf", **params) -> Run:
    """Fuse ``runs`` with ``method`` (``rrf``, ``combsum``, ``combmnz`` or ``linear``)."""
    if method == "linear":
        if len(runs) != 2:
            raise LimelightError("linear fusion takes exactly two runs")
        return linear(runs[0], runs[1], **params)
    if method not in FUSIONS:
        raise LimelightError(f"unknown fusion method {method!r} (rrf, combsum, combmnz, linear)")
    return FUSIONS[method](*runs, **params)


# ---- padded top-k arrays ---------------------------------------------------------------------
def trec_order(docs: np.ndarray, scores: np.ndarray, tie_rank: np.ndarray | None) -> np.ndarray:
    """Reorder each row of a padded top-k array as a ``Run`` orders it: score descending, ties by
    ``tie_rank[doc]`` descending, padding (``-1``) last."""
    n, k = docs.shape
    valid = docs >= 0
    s = np.where(valid, scores.astype(np.float64), -np.inf).ravel()
    safe = np.where(valid, docs, 0).ravel()
    tie = (tie_rank[safe] if tie_rank is not None else safe).astype(np.float64)
    tie[~valid.ravel()] = np.inf  # padding after every real document
    order = np.lexsort((-tie, -s, np.repeat(np.arange(n), k)))
    return docs.ravel()[order].reshape(n, k)


def rrf_topk(doc_arrays: Sequence[np.ndarray], n_docs: int, k: int, rrf_k: float = 60,
             tie_rank: np.ndarray | None = None,
             score_arrays: Sequence[np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """RRF of padded ``(n, k_i)`` top-k doc arrays (``-1`` = none, column ``j`` = rank ``j+1``):
    the fused top ``k`` as ``(docs int32, scores float32)`` ``(n, k)`` arrays. Ties are broken by
    ``tie_rank[doc]`` descending (pass ``IdMap.lexical_rank()`` for trec_eval's order). With
    ``score_arrays``, each input row is first re-ordered by score with the same tie rule, so that
    ranks equal those of the corresponding ``Run`` (a retriever may order its ties otherwise)."""
    n = doc_arrays[0].shape[0]
    rows, docs, vals = [], [], []
    for i, a in enumerate(doc_arrays):
        a = np.asarray(a)
        if score_arrays is not None:
            a = trec_order(a, np.asarray(score_arrays[i]), tie_rank)
        r = np.broadcast_to(np.arange(n)[:, None], a.shape)
        rank = np.broadcast_to(np.arange(1, a.shape[1] + 1, dtype=np.float64)[None, :], a.shape)
        keep = a >= 0
        rows.append(r[keep])
        docs.append(a[keep].astype(np.int64))
        vals.append(1.0 / (rrf_k + rank[keep]))
    row = np.concatenate(rows).astype(np.int64)
    doc = np.concatenate(docs)
    key = row * max(n_docs, 1) + doc
    uniq, inv = np.unique(key, return_inverse=True)
    score = np.bincount(inv, weights=np.concatenate(vals), minlength=len(uniq))
    urow, udoc = uniq // max(n_docs, 1), uniq % max(n_docs, 1)
    tie = tie_rank[udoc] if tie_rank is not None else udoc
    order = np.lexsort((-tie, -score, urow))
    urow, udoc, score = urow[order], udoc[order], score[order]
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(urow, minlength=n), out=starts[1:])
    pos = np.arange(len(urow)) - starts[urow]
    keep = pos < k
    out_d = np.full((n, k), -1, dtype=np.int32)
    out_s = np.full((n, k), -np.inf, dtype=np.float32)
    out_d[urow[keep], pos[keep]] = udoc[keep]
    out_s[urow[keep], pos[keep]] = score[keep]
    return out_d, out_s
