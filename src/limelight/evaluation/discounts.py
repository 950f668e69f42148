"""Rank discounts: the weight of the result at a rank, one abstraction for every rank weighting.

A ``Discount`` maps a rank to a weight, vectorized over numpy arrays. The same objects are

* the exposure models of TSE and the measure kernels (``rr``, ``ndcg``, ``rbp``, ``lin``:
  ``limelight.evaluation.kernels.exposure_model``), nDCG's discount and the γ^(rank−1) of the
  expected-exposure measures;
* the browsing models μ_{q→d} of the exposure layer (``limelight.exposure.browsing``: RBP's
  patient user, nDCG's, the exhaustive user, the top-``c`` user) and the EQI user μ_{d→q} of
  RELQ;
* retrievability's cumulative 1[k ≤ c] and gravity 1[k ≤ c] / k^β functions
  (``retrievability_discount``).

**Rank bases.** Files, CLIs and reports use 1-based ranks; the formulas are written, as the EQI
paper writes its browsing models, with the 0-based rank ρ. Every discount implements its formula
once, in ``mu(rho)`` (0-based); ``weights(rank)`` takes 1-based ranks (0 = not retrieved, weight
0) and converts them with ``to_rho``, the one place where one base becomes the other.

===========================  =========================  ===========================
discount                     μ(ρ)                        name
===========================  =========================  ===========================
``GeometricDiscount(γ)``     γ^ρ (× ``scale``)           ``rbp(γ)``
``LogDiscount()``            1 / log2(ρ + 2)             ``dcg``
``ReciprocalDiscount(β=1)``  1 / (ρ + 1)^β               ``rr``, ``gravity(β)``
``LinearDiscount(n)``        1 − (ρ + 1) / n             ``lin(n)``
``ConstantDiscount()``       1                           ``exhaustive``
``TruncatedDiscount(c, d)``  d.μ(ρ) · 1[ρ < c]           ``cutoff(c)``, ``dcg@c``
===========================  =========================  ===========================

Discounts are frozen dataclasses: hashable, comparable, printable by ``name``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from limelight.errors import LimelightError

__all__ = [
    "ConstantDiscount",
    "Discount",
    "GeometricDiscount",
    "LinearDiscount",
    "LogDiscount",
    "ReciprocalDiscount",
    "TruncatedDiscount",
    "retrievability_discount",
    "to_rho",
]


def to_rho(rank: np.ndarray | int) -> np.ndarray:
    """0-based rank ρ from a 1-based rank (the only conversion between the two bases)."""
    r = np.asarray(rank)
    if r.size and (r < 1).any():
        raise LimelightError("ranks must be 1-based (≥ 1)")
    return r.astype(np.int64) - 1


class Discount:
    """A rank discount μ(ρ): implement ``mu`` (0-based ρ); call ``weights`` with 1-based ranks."""

    name: str = "discount"

    def mu(self, rho: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        """μ as a function of the 0-based rank ρ (float64, same shape)."""
        raise NotImplementedError

    def weights(self, rank: np.ndarray) -> np.ndarray:
        """μ of each 1-based ``rank`` (0 = not retrieved gives 0), float64, same shape."""
        rank = np.asarray(rank)
        hit = rank > 0
        if hit.all():
            return self.mu(to_rho(rank))
        out = np.zeros(rank.shape, dtype=np.float64)
        out[hit] = self.mu(to_rho(rank[hit]))
        return out

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, repr=False)
class GeometricDiscount(Discount):
    """μ = scale · γ^ρ (γ ∈ (0, 1]): the user of rank-biased precision (scale 1 as a browsing
    model and in expected exposure, 1 − γ in the RBP measure)."""

    gamma: float = 0.8
    scale: float = 1.0

    def __post_init__(self):
        if not 0 < self.gamma <= 1:
            raise LimelightError(f"RBP persistence γ must be in (0, 1], got {self.gamma}")

    @property
    def name(self) -> str:  # type: ignore[override]
        base = f"rbp({self.gamma:g})"
        return base if self.scale == 1.0 else f"{self.scale:g}*{base}"

    def mu(self, rho: np.ndarray) -> np.ndarray:
        w = np.power(self.gamma, np.asarray(rho).astype(np.float64))
        return w if self.scale == 1.0 else self.scale * w


@dataclass(frozen=True, repr=False)
class LogDiscount(Discount):
    """nDCG's discount: μ = 1 / log2(ρ + 2), i.e. 1 / log2(rank + 1)."""

    name = "dcg"

    def mu(self, rho: np.ndarray) -> np.ndarray:
        return 1.0 / np.log2(np.asarray(rho).astype(np.float64) + 2.0)


@dataclass(frozen=True, repr=False)
class ReciprocalDiscount(Discount):
    """μ = 1 / (ρ + 1)^β, i.e. 1 / rank^β: reciprocal rank (β = 1) or retrievability's gravity."""

    beta: float = 1.0

    def __post_init__(self):
        if not np.isfinite(self.beta) or self.beta < 0:
            raise LimelightError(f"gravity β must be a finite number ≥ 0, got {self.beta}")

    @property
    def name(self) -> str:  # type: ignore[override]
        return "rr" if self.beta == 1.0 else f"gravity({self.beta:g})"

    def mu(self, rho: np.ndarray) -> np.ndarray:
        x = np.asarray(rho).astype(np.float64) + 1.0
        return 1.0 / x if self.beta == 1.0 else 1.0 / np.power(x, self.beta)


@dataclass(frozen=True, repr=False)
class LinearDiscount(Discount):
    """μ = 1 − (ρ + 1) / n, i.e. 1 − rank / n over a collection of ``n`` documents."""

    n: int = 1

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"lin({self.n})"

    def mu(self, rho: np.ndarray) -> np.ndarray:
        return 1.0 - (np.asarray(rho).astype(np.float64) + 1.0) / float(self.n)


@dataclass(frozen=True, repr=False)
class ConstantDiscount(Discount):
    """No discount: μ = 1 (a user who inspects every retrieved result)."""

    name = "exhaustive"

    def mu(self, rho: np.ndarray) -> np.ndarray:
        return np.ones(np.shape(rho), dtype=np.float64)


@dataclass(frozen=True, repr=False)
class TruncatedDiscount(Discount):
    """``inner`` cut after the top ``c``: μ = inner.μ(ρ) · 1[ρ < c] (1-based rank ≤ c). With the
    default constant ``inner``, the user who inspects the top ``c`` (cumulative retrievability)."""

    c: int = 10
    inner: Discount = field(default_factory=ConstantDiscount)

    def __post_init__(self):
        if self.c < 1:
            raise LimelightError(f"cutoff c must be ≥ 1, got {self.c}")

    @property
    def name(self) -> str:  # type: ignore[override]
        if isinstance(self.inner, ConstantDiscount):
            return f"cutoff({self.c})"
        return f"{self.inner.name}@{self.c}"

    def mu(self, rho: np.ndarray) -> np.ndarray:
        rho = np.asarray(rho)
        return np.where(rho < self.c, self.inner.mu(rho), 0.0)


def retrievability_discount(c: int, beta: float | None = None) -> TruncatedDiscount:
    """Retrievability's f(k, c) (Azzopardi & Vinay 2008): cumulative 1[k ≤ c] (``beta`` None or
    0) or gravity 1[k ≤ c] / k^β."""
    if beta is not None and (not np.isfinite(beta) or beta < 0):
        raise LimelightError(f"gravity β must be a finite number ≥ 0, got {beta}")
    return TruncatedDiscount(int(c), ReciprocalDiscount(float(beta)) if beta else ConstantDiscount())
