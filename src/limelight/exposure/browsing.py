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
from typing import Any, ClassVar

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


class BrowsingModelDef:
    """A browsing model as the configuration and the CLI spell it, declared once and registered
    (``register_browsing_model``), as a measure is (``limelight.evaluation.measures``).

    ``NAME`` is its spelling, ``ALIASES`` other spellings; ``PARAM`` the one argument written
    after a colon (``rbp:0.9``; a ``ParamInfo`` with its type and default; None: the model takes
    none) and ``PARAM_LABEL`` how the list of models writes it (``γ``); ``build`` the model
    (a ``Discount``) from the converted argument.
    """

    NAME: ClassVar[str] = ""
    ALIASES: ClassVar[tuple[str, ...]] = ()
    PARAM: ClassVar[ParamInfo | None] = None
    PARAM_LABEL: ClassVar[str] = ""

    def build(self, arg: Any) -> BrowsingModel:  # pragma: no cover - abstract
        """The model for the argument ``arg`` (converted by ``PARAM``; None without one)."""
        raise NotImplementedError

    @property
    def spelling(self) -> str:
        """``rbp:γ``, ``dcg``: how the list of models writes it."""
        return self.NAME + (f":{self.PARAM_LABEL}" if self.PARAM is not None else "")


_MODELS: dict[str, BrowsingModelDef] = {}


def register_browsing_model(defn: BrowsingModelDef, *, replace: bool = False) -> BrowsingModelDef:
    """Add a browsing model under its ``NAME`` and ``ALIASES`` (lower case); another one under a
    taken name is refused unless ``replace``. Returns ``defn``."""
    for name in (defn.NAME, *defn.ALIASES):
        old = _MODELS.get(name.lower())
        if old is not None and not replace and type(old) is not type(defn):
            raise LimelightError(f"a browsing model {name!r} is registered already")
    for name in (defn.NAME, *defn.ALIASES):
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
    if defn.PARAM is None:
        return defn.build(None)
    try:
        value = defn.PARAM.convert(defn.NAME, arg) if arg else defn.PARAM.default
    except MeasureError:
        raise LimelightError(f"bad browsing model argument in {spec!r}") from None
    return defn.build(value)


# ---- the shipped models: one small class and one register call each ---------------------------
class _RBPUser(BrowsingModelDef):
    """RBP's patient user: μ = γ^ρ."""

    NAME = "rbp"
    PARAM = ParamInfo(float, 0.8, desc="persistence γ ∈ (0, 1]")
    PARAM_LABEL = "γ"

    def build(self, arg: Any) -> BrowsingModel:
        return GeometricDiscount(arg)


class _DCGUser(BrowsingModelDef):
    """nDCG's user: μ = 1 / log2(ρ + 2)."""

    NAME = "dcg"

    def build(self, arg: Any) -> BrowsingModel:
        return LogDiscount()


class _ExhaustiveUser(BrowsingModelDef):
    """The user who inspects every retrieved result: μ = 1."""

    NAME = "exhaustive"
    ALIASES = ("exh",)

    def build(self, arg: Any) -> BrowsingModel:
        return ConstantDiscount()


class _CutoffUser(BrowsingModelDef):
    """The user who inspects the top c: μ = 1[ρ < c]."""

    NAME = "cutoff"
    PARAM = ParamInfo(int, 10, desc="how many results the user inspects")
    PARAM_LABEL = "c"

    def build(self, arg: Any) -> BrowsingModel:
        return TruncatedDiscount(arg)


for _defn in (_RBPUser(), _DCGUser(), _ExhaustiveUser(), _CutoffUser()):
    register_browsing_model(_defn)
