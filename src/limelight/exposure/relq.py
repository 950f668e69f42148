"""RELQ, the ranked exposure list quality of Li et al. (WWW 2022, §3.1, eq. 1-4).

For a document ``d``, an EQI system returns a ranked list ψ_d of queries. With μ_{d→q} the
browsing model of the EQI user and μ_{q→d} that of the searcher::

    RELQ(ψ_d) = Σ_{q_i ∈ ψ_d} μ_{d→q}(ρ(q_i, ψ_d)) · g(q_i)  /  Σ_{q_j ∈ ψ*_d} μ_{d→q}(ρ(q_j, ψ*_d)) · g(q_j)
    g(q)      = μ_{q→d}(ρ(d, σ_q))  if d is in the top n_{q→d} of σ_q, else 0

ρ is the 0-based rank, as in the paper (stored ranks are 1-based; ``browsing.to_rho`` converts).
ψ*_d, the ideal list, holds d's exposing queries by decreasing g (increasing rank), cut at
n_{d→q}; both lists are cut at n_{d→q}. Instances (``RELQ`` objects)::

    RELQ(GeometricDiscount(0.5), GeometricDiscount(0.9))   "RELQ(0.5,0.9)"  — γ_{q→d} first, as in Table 2
    RELQ(GeometricDiscount(1), GeometricDiscount(1))       "RELQ(1,1)"
    RELQ(LogDiscount(), ConstantDiscount())                "RELQ(EXH,NDCG)" — eq. 4

(the browsing models are the rank discounts of ``limelight.evaluation.discounts``).

Eq. 4 reads garbled in the paper's text (``ρ(d, σ_q)/log2(i+1)``); we read it, as its name says,
as an exhaustive EQI user (μ_{d→q} = 1) and nDCG's discount for the searcher,
g(q) = 1 / log2(ρ(d, σ_q) + 2). A document with no exposing query has an empty ideal list: its
RELQ is undefined (NaN) and it is left out of means (the reference code skips such documents);
``relq_many`` reports how many were left out. The brute-force list is the ideal list, so it
scores 1.0 by construction.

Usage::

    from limelight.exposure.relq import relq, relq_many, RELQ, TABLE2
    relq(["q3", "q1"], {"q1": 1, "q3": 4}, RELQ.parse("RELQ(0.5,0.9)"))     # one document
    scores = relq_many(retrieved, truth_ranks, TABLE2)  # retrieved: (m, k) query codes (-1 pad),
                                                        # truth_ranks: (m, |Q|) sparse 1-based ranks
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from limelight.errors import LimelightError
from limelight.evaluation.discounts import ConstantDiscount, GeometricDiscount, LogDiscount
from limelight.exposure.browsing import BrowsingModel

__all__ = ["RELQ", "TABLE2", "relq", "relq_many", "parse_relq"]


@dataclass(frozen=True)
class RELQ:
    """One RELQ instance: ``mu_qd`` (the searcher, μ_{q→d}), ``mu_dq`` (the EQI user,
    μ_{d→q}) and the cut ``n_dq`` (n_{d→q}) of both lists. Hashable; ``str`` is its name."""

    mu_qd: BrowsingModel
    mu_dq: BrowsingModel
    n_dq: int = 100

    def __post_init__(self):
        if self.n_dq < 1:
            raise LimelightError(f"n_dq must be ≥ 1, got {self.n_dq}")

    def __str__(self) -> str:
        def part(m: BrowsingModel) -> str:
            if isinstance(m, GeometricDiscount):
                return f"{m.gamma:g}"
            if isinstance(m, LogDiscount):
                return "NDCG"
            if isinstance(m, ConstantDiscount):
                return "EXH"
            return m.name

        a, b = part(self.mu_qd), part(self.mu_dq)
        if not isinstance(self.mu_qd, GeometricDiscount) or not isinstance(self.mu_dq, GeometricDiscount):
            a, b = b, a  # the paper writes RELQ_{EXH,NDCG}: EQI user first for these
        s = f"RELQ({a},{b})"
        return s if self.n_dq == 100 else f"{s}@{self.n_dq}"

    @classmethod
    def parse(cls, spec: str) -> RELQ:
        """``RELQ(0.5,0.9)`` (γ_{q→d}, γ_{d→q}), ``RELQ(EXH,NDCG)``, optional ``@n``."""
        return parse_relq(spec)


TABLE2: tuple[RELQ, ...] = (
    RELQ(GeometricDiscount(0.5), GeometricDiscount(0.5)),
    RELQ(GeometricDiscount(0.5), GeometricDiscount(0.9)),
    RELQ(GeometricDiscount(1.0), GeometricDiscount(1.0)),
    RELQ(LogDiscount(), ConstantDiscount()),
)

_SPEC = re.compile(r"^\s*relq\s*\(\s*([^,()]+)\s*,\s*([^,()]+)\s*\)\s*(?:@\s*(\d+))?\s*$", re.I)


def parse_relq(spec: str) -> RELQ:
    """Parse a RELQ name (see ``RELQ.parse``); a bad spec is a one-line ``LimelightError``."""
    m = _SPEC.match(spec)
    if not m:
        raise LimelightError(f"bad RELQ spec {spec!r} (e.g. RELQ(0.5,0.9), RELQ(EXH,NDCG))")
    a, b, n = m.group(1).strip().upper(), m.group(2).strip().upper(), m.group(3)
    n_dq = int(n) if n else 100

    def model(s: str) -> BrowsingModel:
        if s in ("EXH", "EXHAUSTIVE"):
            return ConstantDiscount()
        if s in ("NDCG", "DCG"):
            return LogDiscount()
        try:
            return GeometricDiscount(float(s))
        except ValueError:
            raise LimelightError(f"bad RELQ spec {spec!r}: {s!r} is not γ, EXH or NDCG") from None

    ma, mb = model(a), model(b)
    if isinstance(ma, GeometricDiscount) and isinstance(mb, GeometricDiscount):
        return RELQ(ma, mb, n_dq)  # (γ_{q→d}, γ_{d→q})
    return RELQ(mb, ma, n_dq)  # (EQI user, searcher), as RELQ_{EXH,NDCG}


def relq(retrieved: Sequence[str], exposing: Mapping[str, int], measure: RELQ | str) -> float:
    """RELQ of one document: ``retrieved`` is the ranked query list ψ_d (ids, best first),
    ``exposing`` maps each exposing query to the 1-based rank of the document in its results
    (the brute-force ground truth). NaN when the document has no exposing query."""
    m = parse_relq(measure) if isinstance(measure, str) else measure
    ret = list(retrieved)[: m.n_dq]
    if len(set(ret)) != len(ret):
        raise LimelightError("the retrieved query list repeats a query")
    ranks = np.asarray(list(exposing.values()), dtype=np.int64)
    if len(ranks) == 0:
        return float("nan")
    ideal = np.sort(ranks)[: m.n_dq]
    den = float(np.sum(m.mu_dq.mu(np.arange(len(ideal))) * m.mu_qd.weights(ideal)))
    got = np.asarray([exposing.get(q, 0) for q in ret], dtype=np.int64)
    num = float(np.sum(m.mu_dq.mu(np.arange(len(got))) * m.mu_qd.weights(got))) if len(got) else 0.0
    return num / den


def relq_many(retrieved: np.ndarray, truth: sp.spmatrix, measures: Sequence[RELQ | str] | RELQ | str,
              ) -> dict[str, np.ndarray]:
    """RELQ of many documents at once (vectorized).

    ``retrieved``: ``(m, k)`` int query codes, row ``i`` the list ψ of document ``i``, best first,
    padded with ``-1``. ``truth``: ``(m, n_queries)`` sparse matrix of 1-based ranks of document
    ``i`` in query ``j``'s top-n (0 = not exposed), e.g. ``store.ranks()[docs]``.
    Returns ``{str(measure): (m,) float64}``, NaN for documents without an exposing query.
    """
    if isinstance(measures, RELQ | str):
        measures = [measures]
    ms = [parse_relq(x) if isinstance(x, str) else x for x in measures]
    retrieved = np.asarray(retrieved)
    if retrieved.ndim != 2:
        raise LimelightError(f"retrieved must be (documents, k), got shape {retrieved.shape}")
    truth = sp.csr_matrix(truth)
    m, k = retrieved.shape
    if truth.shape[0] != m:
        raise LimelightError(f"truth has {truth.shape[0]} rows for {m} documents")
    if retrieved.size and int(retrieved.max()) >= truth.shape[1]:
        raise LimelightError("a retrieved query code is outside the query set")
    truth.eliminate_zeros()
    # gains of the retrieved lists: rank of document i in query retrieved[i, j] (0 = not exposing)
    valid = retrieved >= 0
    rows = np.broadcast_to(np.arange(m)[:, None], (m, k))
    got = np.zeros((m, k), dtype=np.int64)
    if valid.any():
        got[valid] = np.asarray(truth[rows[valid], retrieved[valid]]).ravel()
    _check_unique(retrieved, valid)
    # ideal lists: each row's ranks sorted ascending
    indptr = truth.indptr
    row_of = np.repeat(np.arange(m), np.diff(indptr))
    order = np.lexsort((truth.data, row_of))
    ideal_rank = truth.data[order].astype(np.int64)
    pos = np.arange(len(order)) - indptr[row_of]
    out: dict[str, np.ndarray] = {}
    for me in ms:
        kk = min(k, me.n_dq)
        mu_pos = me.mu_dq.mu(np.arange(kk))
        num = (me.mu_qd.weights(got[:, :kk]) * mu_pos[None, :]).sum(axis=1)
        keep = pos < me.n_dq
        ig = me.mu_dq.mu(pos[keep]) * me.mu_qd.weights(ideal_rank[keep])
        den = np.bincount(row_of[keep], weights=ig, minlength=m)
        with np.errstate(invalid="ignore", divide="ignore"):
            val = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
        out[str(me)] = val
    return out


def _check_unique(retrieved: np.ndarray, valid: np.ndarray) -> None:
    if not valid.any():
        return
    s = np.sort(np.where(valid, retrieved, -1 - np.arange(retrieved.shape[1])[None, :]), axis=1)
    if (s[:, 1:] == s[:, :-1]).any():
        i = int(np.flatnonzero((s[:, 1:] == s[:, :-1]).any(axis=1))[0])
        raise LimelightError(f"the retrieved list of document row {i} repeats a query")
