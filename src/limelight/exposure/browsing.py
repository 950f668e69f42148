"""User browsing models μ_{q→d}: the probability that a searcher inspects the result at a rank.

A browsing model is a rank discount: the classes are those of ``limelight.evaluation.discounts``
(one implementation of every rank weighting, shared with TSE, nDCG, RBP, expected exposure,
retrievability and RELQ). Stored and displayed ranks are 1-based; the EQI paper (Li et al., §3)
writes its browsing models with the 0-based rank ρ: ``mu(rho)`` takes ρ, ``weights(rank)`` 1-based
ranks, and ``to_rho`` is the single place where one becomes the other. The configuration and
CLI spellings are ``rbp:γ``, ``dcg``, ``exhaustive`` and ``cutoff:c`` (``parse_browsing_model``):
each a registered ``BrowsingModelDef`` (``register_browsing_model``), so another module adds a
model with one small class and one call.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from limelight.errors import LimelightError
from limelight.evaluation.discounts import (
    ConstantDiscount,
    Discount,
    GeometricDiscount,
    LogDiscount,
    TruncatedDiscount,
    to_rho,
)
from limelight.evaluation.measures import MeasureError, ParamInfo

#: a browsing model μ(ρ) is a ``Discount``; the models are ``GeometricDiscount(γ)`` (RBP's
#: patient user, μ = γ^ρ, γ ∈ (0, 1]), ``LogDiscount()`` (nDCG's, μ = 1 / log2(ρ + 2)),
#: ``ConstantDiscount()`` (the exhaustive user, μ = 1) and ``TruncatedDiscount(c)`` (the user
#: who inspects the top c, μ = 1[ρ < c], i.e. 1-based rank ≤ c).
BrowsingModel = Discount

__all__ = ["BrowsingModel", "BrowsingModelDef", "ConstantDiscount", "GeometricDiscount",
           "LogDiscount", "TruncatedDiscount", "browsing_models", "parse_browsing_model",
           "register_browsing_model", "to_rho"]

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


@dataclass(frozen=True)
class BrowsingModelDef:
    """A browsing model as the configuration and the CLI spell it, declared once and registered
    (``register_browsing_model``), as a measure is (``limelight.evaluation.measures``).

    ``name`` is its spelling, ``aliases`` other spellings; ``model`` makes the model (a
    ``Discount``) from the one argument written after a colon (``rbp:0.9``), which ``param``
    declares (a ``ParamInfo`` with its type and default; None: the model takes none, and
    ``model`` is called without one); ``label`` is how the list of models writes the argument
    (``γ``).
    """

    name: str
    model: Callable[..., BrowsingModel]
    param: ParamInfo | None = None
    label: str = ""
    aliases: tuple[str, ...] = ()

    def build(self, arg: Any = None) -> BrowsingModel:
        """The model for ``arg`` (converted by ``param``; nothing without one)."""
        return self.model() if self.param is None else self.model(arg)

    @property
    def spelling(self) -> str:
        """``rbp:γ``, ``dcg``: how the list of models writes it."""
        return self.name + (f":{self.label}" if self.param is not None else "")


_MODELS: dict[str, BrowsingModelDef] = {}


def register_browsing_model(defn: BrowsingModelDef, *, replace: bool = False) -> BrowsingModelDef:
    """Add a browsing model under its ``name`` and ``aliases`` (lower case); another one under a
    taken name is refused unless ``replace``. Returns ``defn``."""
    for name in (defn.name, *defn.aliases):
        old = _MODELS.get(name.lower())
        if old is not None and not replace and old != defn:
            raise LimelightError(f"a browsing model {name!r} is registered already")
    for name in (defn.name, *defn.aliases):
        _MODELS[name.lower()] = defn
    return defn


def browsing_models() -> list[BrowsingModelDef]:
    """The registered browsing models, in registration order (each once)."""
    return list(dict.fromkeys(_MODELS.values()))


def parse_browsing_model(spec: str) -> BrowsingModel:
    """``rbp:0.8``, ``dcg``, ``exhaustive``, ``cutoff:10`` or any registered model's spelling
    → a model."""
    name, _, arg = spec.strip().lower().partition(":")
    defn = _MODELS.get(name)
    if defn is None:
        known = ", ".join(d.spelling for d in browsing_models())
        raise LimelightError(f"unknown browsing model {spec!r} ({known})")
    if defn.param is None:
        return defn.build()
    try:
        value = defn.param.convert(defn.name, arg) if arg else defn.param.default
    except MeasureError:
        raise LimelightError(f"bad browsing model argument in {spec!r}") from None
    return defn.build(value)


# ---- the shipped models: one declaration and one register call each -----------------------------
for _defn in (
    BrowsingModelDef("rbp", GeometricDiscount, ParamInfo(float, 0.8, desc="persistence γ ∈ (0, 1]"), "γ"),
    BrowsingModelDef("dcg", LogDiscount),
    BrowsingModelDef("exhaustive", ConstantDiscount, aliases=("exh",)),
    BrowsingModelDef("cutoff", TruncatedDiscount, ParamInfo(int, 10, desc="results the user inspects"), "c"),
):
    register_browsing_model(_defn)
