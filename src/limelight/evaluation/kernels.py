"""Vectorized measure kernels on the padded relevance-position array.

Every measure is the recall-level form μ(π, R) = Σ_i e(p_i)·z(i, m) (sections 2.3.1 and 3.2 of
the lexirecall paper) evaluated on all queries at once: ``recall_level`` takes an exposure
array ``e`` (same shape as the positions) and a normalisation ``z`` and sums over columns.
Measures that trec_eval computes see only retrieved documents (exposure 0 beyond the retrieval
depth, as trec_eval and the paper's footnote on AP do); TSE and the lexicographic measures use
the pessimistically imputed positions. The expected-exposure formulas of a ranking (the ideal
policy's target ε* and EE-D/EE-R/EE-L from exposures) are kernels too and live at the end;
``limelight.evaluation.expected_exposure`` evaluates stochastic policies with them. Which
kernel a measure uses is declared by the measure (``limelight.evaluation.measures``).
"""

from __future__ import annotations

import numpy as np

import limelight.evaluation.discounts as D
from limelight.errors import LimelightError
from limelight.evaluation.relpos import RelPositions


class MeasureError(LimelightError, ValueError):
    """An unknown measure name or an invalid parameter."""


def recall_level(e: np.ndarray, z: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Σ_i e(p_i)·z(i, m) over the entries of ``mask`` (one value per query)."""
    return np.where(mask, e * z, 0.0).sum(axis=1)


def exposure_model(name: str, n: int, p: float | None = None) -> D.Discount:
    """The exposure model e(i) of TSE and the measure kernels as a ``Discount`` (strictly
    decreasing in the rank): ``rr`` 1/i, ``ndcg`` 1/log2(i+1), ``rbp`` (1−p)·p^(i−1) (p = 0.8
    by default), ``lin`` 1 − i/n."""
    if name == "rr":
        return D.ReciprocalDiscount()
    if name == "ndcg":
        return D.LogDiscount()
    if name == "rbp":
        pp = 0.8 if p is None else p
        return D.GeometricDiscount(pp, scale=1.0 - pp)
    if name == "lin":
        return D.LinearDiscount(int(n))
    raise MeasureError(f"unknown exposure model {name!r}")


def exposure(name: str, pos: np.ndarray, n: int, p: float | None = None) -> np.ndarray:
    """Exposure e(i) of 1-based positions ``pos`` under the model ``name`` (``exposure_model``)."""
    return exposure_model(name, n, p).weights(pos)


def seen_mask(rp: RelPositions, cutoff: int | None) -> np.ndarray:
    mask = rp.retrieved
    if cutoff is not None:
        mask = mask & (rp.pos <= cutoff)
    return mask


def safe_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    b = np.asarray(b, dtype=np.float64)
    return np.divide(a, b, out=np.zeros_like(np.asarray(a, dtype=np.float64)), where=b > 0)


def ndcg(rp: RelPositions, k: int | None) -> np.ndarray:
    """trec_eval's ndcg / ndcg_cut: gains are the grades, discount 1/log2(rank+1), ideal from
    all judged relevant documents (sorted by grade), both cut at ``k``."""
    seen = seen_mask(rp, k)
    gain = rp.grade.astype(np.float64)
    dcg = recall_level(exposure("ndcg", rp.pos, rp.n), gain, seen)
    return safe_div(dcg, ideal_dcg(rp, k))


def ideal_dcg(rp: RelPositions, k: int | None) -> np.ndarray:
    """trec_eval's ideal DCG per query: every judged relevant document sorted by grade, linear
    gains, discount 1/log2(rank+1), cut at ``k``."""
    gain = rp.grade.astype(np.float64)
    ideal = -np.sort(-np.where(rp.valid, gain, 0.0), axis=1)
    disc = D.LogDiscount() if k is None else D.TruncatedDiscount(int(k), D.LogDiscount())
    return (ideal * disc.weights(np.arange(1, ideal.shape[1] + 1))[None, :]).sum(axis=1)


def lexirecall_metric(pos: np.ndarray, m: np.ndarray, n: int, eps: float = 0.5) -> np.ndarray:
    """Metric lexirecall (section 7.3.2): Σ_i w_i·x_i with x_i = (n − p_i)/n and the paper's
    bottom-heavy weights w (Δ = 1/(n + ε)), evaluated by a Horner scheme from the top recall
    level down, v_1 = x_1, v_i = (Δ·v_{i−1} + x_i)/(1 + Δ), so that no power Δ^(m−1) (which
    underflows to 0 for large m and n) nor its reciprocal (which overflows) is ever formed.

    The value lies in [0, 1), sums weights that add up to 1, and orders rankings as lexirecall
    does wherever float64 can separate them (the preference functions are exact).
    """
    delta = 1.0 / (float(n) + eps)
    x = (float(n) - pos.astype(np.float64)) / float(n)
    cols = np.arange(pos.shape[1])
    v = x[:, 0].copy()
    for i in range(1, pos.shape[1]):
        nv = (delta * v + x[:, i]) / (1.0 + delta)
        v = np.where(cols[i] < m, nv, v)
    return np.where(m > 0, v, 0.0)


def lexiprecision_metric(pos: np.ndarray, m: np.ndarray, n: int, eps: float = 0.5) -> np.ndarray:
    """Metric lexiprecision: the leximax counterpart of :func:`lexirecall_metric`, with the
    top-heavy weights (the highest-ranked relevant document dominates), by the same Horner
    scheme run from the bottom recall level up."""
    delta = 1.0 / (float(n) + eps)
    x = (float(n) - pos.astype(np.float64)) / float(n)
    rows = np.arange(pos.shape[0])
    v = x[rows, np.maximum(m - 1, 0)].copy()
    for i in range(pos.shape[1] - 2, -1, -1):
        nv = (delta * v + x[:, i]) / (1.0 + delta)
        v = np.where(i < m - 1, nv, v)
    return np.where(m > 0, v, 0.0)


# ---- expected exposure (EE-D/EE-R/EE-L; see ``limelight.evaluation.expected_exposure``) ----


def _check_gamma(gamma: float) -> float:
    g = float(gamma)
    if not 0.0 < g < 1.0:
        raise LimelightError(f"gamma must lie in (0, 1), got {gamma}")
    return g


def target_exposure(grade: np.ndarray, valid: np.ndarray, n: int, gamma: float = 0.5
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ideal policy's expected exposure for padded rows of relevant grades.

    ``grade`` ``(nq, M)``: the grades (≥ 1) of each query's relevant documents in any order,
    ``valid`` the mask of real entries, ``n`` the number of candidate documents (the
    collection). Returns ``(target (nq, M)`` aligned with ``grade`` (0 on padding),
    ``non_relevant (nq,)`` the target of each non-relevant document, ``norm2 (nq,)`` = ||ε*||²
    over all ``n`` documents).
    """
    g = _check_gamma(gamma)
    grade = np.asarray(grade)
    valid = np.asarray(valid, dtype=bool)
    nq, M = grade.shape
    r = valid.sum(axis=1).astype(np.int64)
    if nq and int(r.max(initial=0)) > n:
        raise LimelightError(f"n={n} documents cannot hold {int(r.max())} relevant ones")
    key = np.where(valid, grade.astype(np.int64), -1)
    order = np.argsort(-key, axis=1, kind="stable")  # grades descending, padding last
    ks = np.take_along_axis(key, order, axis=1)
    cols = np.broadcast_to(np.arange(M), (nq, M))
    new = np.ones((nq, M), dtype=bool)
    new[:, 1:] = ks[:, 1:] != ks[:, :-1]
    end_ = np.ones((nq, M), dtype=bool)
    end_[:, :-1] = ks[:, :-1] != ks[:, 1:]
    start = np.maximum.accumulate(np.where(new, cols, 0), axis=1)
    last = np.minimum.accumulate(np.where(end_, cols, M)[:, ::-1], axis=1)[:, ::-1]
    size = (last - start + 1).astype(np.float64)
    ts = (np.power(g, start) - np.power(g, start + size)) / (size * (1.0 - g))
    target = np.zeros((nq, M))
    np.put_along_axis(target, order, ts, axis=1)
    target = np.where(valid, target, 0.0)
    rest = (n - r).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        t0 = np.where(rest > 0, (np.power(g, r) - g ** float(n)) / (rest * (1.0 - g)), 0.0)
    norm2 = (target ** 2).sum(axis=1) + rest * t0 ** 2
    return target, t0, norm2


def ee_from_parts(rel_exposure: np.ndarray, rp: RelPositions, total: np.ndarray,
                  norm2: np.ndarray, gamma: float) -> dict[str, np.ndarray]:
    """EE-D, EE-R and EE-L per query from the expected exposures of each query's relevant
    documents (``rel_exposure`` aligned with ``rp.grade``, 0 where not exposed), each query's
    total expected exposure Σ_d ε_d (``total``) and squared norm ||ε||² (``norm2``)."""
    valid = rp.valid
    target, t0, ideal2 = target_exposure(rp.grade, valid, rp.n, gamma)
    e = np.where(valid, rel_exposure, 0.0)
    rel_sum = e.sum(axis=1)
    eer = (e * target).sum(axis=1) + t0 * np.maximum(total - rel_sum, 0.0)
    eed = np.asarray(norm2, dtype=np.float64)
    eel = np.maximum(eed - 2.0 * eer + ideal2, 0.0)  # ≥ 0 exactly; clip rounding
    return {"EE-D": eed, "EE-R": eer, "EE-L": eel}


def deterministic_ee(rp: RelPositions, gamma: float) -> dict[str, np.ndarray]:
    """EE-D/EE-R/EE-L of the policy that always returns the run of ``rp`` (threshold 1): the
    document at rank ``i`` has exposure γ^(i−1), ranks beyond the run's depth none."""
    g = _check_gamma(gamma)
    depth = rp.depth.astype(np.float64)
    rel = np.where(rp.retrieved, D.GeometricDiscount(g).weights(rp.pos), 0.0)
    total = (1.0 - np.power(g, depth)) / (1.0 - g)
    norm2 = (1.0 - np.power(g * g, depth)) / (1.0 - g * g)
    return ee_from_parts(rel, rp, total, norm2, g)
