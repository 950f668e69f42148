"""User browsing models μ_{q→d}: the probability that a searcher inspects the result at a rank.

A browsing model is a rank discount: the classes are those of ``limelight.evaluation.discounts``
(one implementation of every rank weighting, shared with TSE, nDCG, RBP, expected exposure,
retrievability and RELQ). Stored and displayed ranks are 1-based; the EQI paper (Li et al., §3)
writes its browsing models with the 0-based rank ρ: ``mu(rho)`` takes ρ, ``weights(rank)`` 1-based
ranks, and ``to_rho`` is the single place where one becomes the other. The configuration and
CLI spellings are ``rbp:γ``, ``dcg``, ``exhaustive`` and ``cutoff:c`` (``parse_browsing_model``).
"""

from __future__ import annotations

import warnings

from limelight.errors import LimelightError
from limelight.evaluation.discounts import (
    ConstantDiscount,
    Discount,
    GeometricDiscount,
    LogDiscount,
    TruncatedDiscount,
    to_rho,
)

#: a browsing model μ(ρ) is a ``Discount``; the models are ``GeometricDiscount(γ)`` (RBP's
#: patient user, μ = γ^ρ, γ ∈ (0, 1]), ``LogDiscount()`` (nDCG's, μ = 1 / log2(ρ + 2)),
#: ``ConstantDiscount()`` (the exhaustive user, μ = 1) and ``TruncatedDiscount(c)`` (the user
#: who inspects the top c, μ = 1[ρ < c], i.e. 1-based rank ≤ c).
BrowsingModel = Discount

__all__ = ["BrowsingModel", "ConstantDiscount", "GeometricDiscount", "LogDiscount",
           "TruncatedDiscount", "parse_browsing_model", "to_rho"]

# The models' former names. ``RBP`` also names the evaluation measure and ``Cutoff`` the
# retrieval pipeline stage, so each now has one meaning; these stay importable, with a warning.
_DEPRECATED = {"RBP": GeometricDiscount, "DCG": LogDiscount, "Exhaustive": ConstantDiscount,
               "Cutoff": TruncatedDiscount}


def __getattr__(name: str):
    if name in _DEPRECATED:
        new = _DEPRECATED[name]
        warnings.warn(f"limelight.exposure.browsing.{name} is deprecated: use {new.__name__} "
                      f"(limelight.evaluation.discounts; same arguments)", DeprecationWarning,
                      stacklevel=2)
        return new
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
