"""User browsing models μ_{q→d}: the probability that a searcher inspects the result at a rank.

A browsing model is a rank discount: the classes are those of ``limelight.evaluation.discounts``
(one implementation of every rank weighting, shared with TSE, nDCG, RBP, expected exposure,
retrievability and RELQ). Stored and displayed ranks are 1-based; the EQI paper (Li et al., §3)
writes its browsing models with the 0-based rank ρ: ``mu(rho)`` takes ρ, ``weights(rank)`` 1-based
ranks, and ``to_rho`` is the single place where one becomes the other.
"""

from __future__ import annotations

from limelight.errors import LimelightError
from limelight.evaluation.discounts import (
    ConstantDiscount,
    Discount,
    GeometricDiscount,
    LogDiscount,
    TruncatedDiscount,
    to_rho,
)

#: a browsing model μ(ρ) is a ``Discount``
BrowsingModel = Discount
RBP = GeometricDiscount  # rank-biased precision's user: μ = γ^ρ (γ ∈ (0, 1])
DCG = LogDiscount  # nDCG's discount: μ = 1 / log2(ρ + 2)
Exhaustive = ConstantDiscount  # a user who inspects every retrieved result: μ = 1
Cutoff = TruncatedDiscount  # a user who inspects the top c: μ = 1[ρ < c] (1-based rank ≤ c)

__all__ = ["DCG", "RBP", "BrowsingModel", "Cutoff", "Exhaustive", "parse_browsing_model", "to_rho"]


def parse_browsing_model(spec: str) -> BrowsingModel:
    """``rbp:0.8``, ``dcg``, ``exhaustive`` or ``cutoff:10`` → a model."""
    name, _, arg = spec.strip().lower().partition(":")
    try:
        if name == "rbp":
            return GeometricDiscount(float(arg) if arg else 0.8)
        if name == "dcg":
            return LogDiscount()
        if name in ("exhaustive", "exh"):
            return ConstantDiscount()
        if name == "cutoff":
            return TruncatedDiscount(int(arg) if arg else 10)
    except ValueError:
        raise LimelightError(f"bad browsing model argument in {spec!r}") from None
    raise LimelightError(f"unknown browsing model {spec!r} (rbp:γ, dcg, exhaustive, cutoff:c)")
