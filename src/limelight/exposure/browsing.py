"""User browsing models μ_{q→d}: the probability that a searcher inspects the result at a rank.

Stored and displayed ranks are 1-based; the EQI paper (Li et al., §3) writes its browsing models
with the 0-based rank ρ. ``to_rho`` is the single place where one becomes the other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from limelight.errors import LimelightError


def to_rho(rank: np.ndarray | int) -> np.ndarray:
    """0-based rank ρ from a 1-based rank (the only conversion between the two bases)."""
    r = np.asarray(rank)
    if r.size and (r < 1).any():
        raise LimelightError("ranks must be 1-based (≥ 1)")
    return r.astype(np.int64) - 1


class BrowsingModel:
    """A browsing model μ(ρ); call ``weights(rank)`` with 1-based ranks."""

    name: str = "model"

    def mu(self, rho: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        """μ as a function of the 0-based rank ρ."""
        raise NotImplementedError

    def weights(self, rank: np.ndarray) -> np.ndarray:
        """μ of each 1-based ``rank`` (0 = not retrieved gives 0), float64."""
        rank = np.asarray(rank)
        out = np.zeros(rank.shape, dtype=np.float64)
        hit = rank > 0
        out[hit] = self.mu(to_rho(rank[hit]))
        return out

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, repr=False)
class RBP(BrowsingModel):
    """Rank-biased precision's user: μ = γ^ρ (γ ∈ (0, 1])."""

    gamma: float = 0.8

    def __post_init__(self):
        if not 0 < self.gamma <= 1:
            raise LimelightError(f"RBP persistence γ must be in (0, 1], got {self.gamma}")

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"rbp({self.gamma:g})"

    def mu(self, rho: np.ndarray) -> np.ndarray:
        return np.power(self.gamma, rho.astype(np.float64))


@dataclass(frozen=True, repr=False)
class DCG(BrowsingModel):
    """nDCG's discount: μ = 1 / log2(ρ + 2)."""

    name = "dcg"

    def mu(self, rho: np.ndarray) -> np.ndarray:
        return 1.0 / np.log2(rho.astype(np.float64) + 2.0)


@dataclass(frozen=True, repr=False)
class Exhaustive(BrowsingModel):
    """A user who inspects every retrieved result: μ = 1."""

    name = "exhaustive"

    def mu(self, rho: np.ndarray) -> np.ndarray:
        return np.ones(rho.shape, dtype=np.float64)


@dataclass(frozen=True, repr=False)
class Cutoff(BrowsingModel):
    """A user who inspects the top ``c``: μ = 1[ρ < c] (i.e. 1-based rank ≤ c)."""

    c: int = 10

    def __post_init__(self):
        if self.c < 1:
            raise LimelightError(f"cutoff c must be ≥ 1, got {self.c}")

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"cutoff({self.c})"

    def mu(self, rho: np.ndarray) -> np.ndarray:
        return (rho < self.c).astype(np.float64)


def parse_browsing_model(spec: str) -> BrowsingModel:
    """``rbp:0.8``, ``dcg``, ``exhaustive`` or ``cutoff:10`` → a model."""
    name, _, arg = spec.strip().lower().partition(":")
    try:
        if name == "rbp":
            return RBP(float(arg) if arg else 0.8)
        if name == "dcg":
            return DCG()
        if name in ("exhaustive", "exh"):
            return Exhaustive()
        if name == "cutoff":
            return Cutoff(int(arg) if arg else 10)
    except ValueError:
        raise LimelightError(f"bad browsing model argument in {spec!r}") from None
    raise LimelightError(f"unknown browsing model {spec!r} (rbp:γ, dcg, exhaustive, cutoff:c)")
