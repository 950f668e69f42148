"""Measures as values: hashable, printable and parseable with ir_measures' spelling.

``AP``, ``nDCG@10``, ``RR``, ``P@10``, ``R@100``, ``Rprec``, ``RBP(p=0.8)``, ``TSE``,
``LexiRecall``, ``LexiPrecision``, the expected-exposure measures ``EE-L``, ``EE-D``, ``EE-R``
(Diaz et al., CIKM 2020; ``limelight.evaluation.expected_exposure``) and parameterised forms such
as ``AP(rel=2)@100``, ``TSE(e=ndcg)`` or ``EE-L(gamma=0.5)``. ``str(parse_measure(s)) == s``
for canonical spellings and ``parse_measure(str(m)) == m`` for every measure.

A measure is registered, as in ir_measures: one small ``MeasureDef`` subclass declares its
``NAME``, its parameters (``SUPPORTED_PARAMS``: ``ParamInfo`` with type, default, check), what it
is (a lexicographic ``PREFERENCE``, an ``EXPECTED_EXPOSURE`` measure) and its kernel
(``compute(measure, rp)`` on the relevance-position array), and one ``register_measure`` call adds it.
Code that uses measures asks the definition (``measure.definition``), never for a name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from limelight.evaluation.kernels import (
    MeasureError,
    deterministic_ee,
    exposure,
    lexiprecision_metric,
    lexirecall_metric,
    ndcg,
    recall_level,
    safe_div,
    seen_mask,
)
from limelight.evaluation.relpos import RelPositions

__all__ = ["MeasureDef", "Measure", "MeasureError", "ParamInfo", "compute", "definition",
           "parse_measure", "parse_measures", "register_measure", "registered"]


@dataclass(frozen=True)
class ParamInfo:
    """A declared measure parameter: its type (``int``, ``float`` or ``str``), the ``default``
    filled in when it is not given (None: it stays unset), whether the spelling of a measure
    shows it at its default (``shown``), the values it takes (``valid``, said by ``rule`` in an
    error: ``"must lie in (0, 1)"``) and a description."""

    dtype: type
    default: Any = None
    shown: bool = True
    valid: Callable[[Any], bool] | None = None
    rule: str = ""
    desc: str = ""

    def convert(self, key: str, value: Any) -> Any:
        """``value`` as this parameter's type, checked; a ``MeasureError`` naming ``key``."""
        try:
            if self.dtype is int:
                v: Any = int(value)
                if not isinstance(value, str) and v != value:
                    raise ValueError
            elif self.dtype is str:
                v = str(value).lower()
            else:
                v = self.dtype(value)
        except (TypeError, ValueError):
            raise MeasureError(f"bad value {value!r} for {key}") from None
        if self.valid is not None and not self.valid(v):
            raise MeasureError(f"{key} {self.rule}, got {v!r}")
        return v


def _unit(x: float) -> bool:
    return 0.0 < x < 1.0


#: the parameters the shipped measures share
REL = ParamInfo(int, 1, shown=False, valid=lambda r: r >= 1, rule="must be an integer ≥ 1",
                desc="minimum grade counted as relevant (trec_eval's -l)")
CUTOFF = ParamInfo(int, valid=lambda c: c >= 1, rule="must be a positive integer",
                   desc="rank cut-off")
PERSISTENCE = ParamInfo(float, 0.8, valid=_unit, rule="must lie in (0, 1)", desc="RBP's persistence p")
GAMMA = ParamInfo(float, 0.5, valid=_unit, rule="must lie in (0, 1)",
                  desc="RBP patience γ of the expected exposure, γ^(i-1) at 1-based rank i")


class MeasureDef:
    """What a measure is, declared once and registered (``register_measure``).

    ``NAME`` is its spelling; ``SUPPORTED_PARAMS`` its parameters in the order its spelling
    writes them (``cutoff``, written ``@k``, among them when a cut-off is allowed);
    ``CUTOFF_REQUIRED`` whether ``@k`` must be given; ``ALIASES`` other spellings (any case);
    ``PREFERENCE`` ``"recall"`` or ``"precision"`` for a lexicographic preference between
    rankings (its value is the metric form); ``EXPECTED_EXPOSURE`` for EE-L/EE-D/EE-R.
    ``compute`` is the kernel: per-query values from the relevance positions built at the
    measure's ``threshold``.
    """

    NAME: ClassVar[str] = ""
    SUPPORTED_PARAMS: ClassVar[dict[str, ParamInfo]] = {}
    CUTOFF_REQUIRED: ClassVar[bool] = False
    ALIASES: ClassVar[tuple[str, ...]] = ()
    PREFERENCE: ClassVar[str | None] = None
    EXPECTED_EXPOSURE: ClassVar[bool] = False

    def check(self, params: dict[str, Any]) -> dict[str, Any]:
        """The parameters made canonical (after each was converted and defaulted): a measure
        whose parameters depend on each other overrides this."""
        return params

    def compute(self, measure: Measure, rp: RelPositions) -> np.ndarray:  # pragma: no cover
        """Per-query values of ``measure`` (float64, one per query of ``rp``)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<measure {self.NAME}>"


_REGISTRY: dict[str, MeasureDef] = {}
_ALIASES: dict[str, str] = {}


def register_measure(defn: MeasureDef, *, replace: bool = False) -> MeasureDef:
    """Add a measure definition (its ``NAME`` and ``ALIASES``); another one under a taken name
    is refused unless ``replace``. Returns ``defn``."""
    if not defn.NAME:
        raise MeasureError(f"{type(defn).__name__} has no NAME")
    old = _REGISTRY.get(defn.NAME)
    if old is not None and not replace and type(old) is not type(defn):
        raise MeasureError(f"a measure {defn.NAME!r} is registered already")
    _REGISTRY[defn.NAME] = defn
    for alias in (defn.NAME, *defn.ALIASES):
        _ALIASES[alias.lower()] = defn.NAME
    return defn


def registered() -> dict[str, MeasureDef]:
    """The registered measures by name (a copy)."""
    return dict(_REGISTRY)


def definition(name: str) -> MeasureDef:
    """The registered definition of ``name`` (exact spelling)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise MeasureError(f"unknown measure {name!r}; known: {', '.join(_REGISTRY)}") from None


class Measure:
    """One evaluation measure with its parameters: a hashable value.

    ``Measure("AP", cutoff=10, rel=2)``; each parameter the measure declares reads as an
    attribute (``m.rel``, ``m.p``): its default where it has one (``AP.rel == 1``), None where
    the measure does not take it or leaves it unset.
    ``rel`` is the minimum grade counted as relevant (default 1, as trec_eval's ``-l``);
    ``cutoff`` the rank cut-off; ``p`` RBP's persistence (also TSE's with ``e="rbp"``);
    ``e`` TSE's exposure model (``rr``: 1/i, ``ndcg``: 1/log2(i+1), ``rbp``: (1-p)p^(i-1),
    ``lin``: 1-i/n); ``gamma`` the RBP patience of the expected-exposure measures (EE-L, EE-D,
    EE-R; default 0.5, exposure γ^(i-1) at 1-based rank i).
    """

    __slots__ = ("name", "cutoff", "params")
    name: str
    cutoff: int | None
    params: tuple[tuple[str, Any], ...]

    def __init__(self, name: str, cutoff: int | None = None, **params: Any) -> None:
        defn = definition(name)
        supported = defn.SUPPORTED_PARAMS
        for k in params:
            if k not in supported or k == "cutoff":
                raise MeasureError(f"{name} takes no parameter {k!r}")
        if cutoff is not None:
            if "cutoff" not in supported:
                raise MeasureError(f"{name} takes no cutoff")
            cutoff = supported["cutoff"].convert("cutoff", cutoff)
        elif defn.CUTOFF_REQUIRED:
            raise MeasureError(f"{name} needs a cutoff, e.g. {name}@10")
        given = {k: (supported[k].convert(k, v) if v is not None else supported[k].default)
                 for k, v in params.items()}
        full = {k: info.default for k, info in supported.items() if k != "cutoff"} | given
        full = defn.check(full)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "cutoff", cutoff)
        object.__setattr__(self, "params", tuple((k, v) for k, v in full.items() if v is not None))

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("a Measure is immutable")

    def __getattr__(self, key: str) -> Any:
        if key.startswith("__"):
            raise AttributeError(key)
        for k, v in object.__getattribute__(self, "params"):
            if k == key:
                return v
        if any(key in d.SUPPORTED_PARAMS for d in _REGISTRY.values()):
            return None  # a parameter this measure does not take, or leaves unset
        raise AttributeError(key)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Measure) and self.name == other.name
                and self.cutoff == other.cutoff and self.params == other.params)

    def __hash__(self) -> int:
        return hash((self.name, self.cutoff, self.params))

    def __reduce__(self):
        return (_rebuild, (self.name, self.cutoff, dict(self.params)))

    @property
    def definition(self) -> MeasureDef:
        """The registered definition: what the measure declares."""
        return _REGISTRY[self.name]

    # ---- ir_measures-style construction: AP@10, AP(rel=2) ----------------------------------
    def __matmul__(self, cutoff: int) -> Measure:
        return Measure(self.name, cutoff, **dict(self.params))

    def __call__(self, **params: Any) -> Measure:
        cutoff = params.pop("cutoff", self.cutoff)
        return Measure(self.name, cutoff, **(dict(self.params) | params))

    @property
    def threshold(self) -> int:
        """Minimum grade counted as relevant: the relevance positions its kernel reads."""
        rel = self.rel
        return 1 if rel is None else int(rel)

    @property
    def preference(self) -> str | None:
        """``"recall"`` or ``"precision"`` for a lexicographic preference, else None."""
        return self.definition.PREFERENCE

    @property
    def is_preference(self) -> bool:
        return self.definition.PREFERENCE is not None

    @property
    def is_expected_exposure(self) -> bool:
        """EE-L, EE-D or EE-R (EE-L and EE-D: lower is better)."""
        return self.definition.EXPECTED_EXPOSURE

    def __str__(self) -> str:
        supported = self.definition.SUPPORTED_PARAMS
        params = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.params
                  if supported[k].shown or v != supported[k].default]
        s = self.name + (f"({','.join(params)})" if params else "")
        return s + (f"@{self.cutoff}" if self.cutoff is not None else "")

    def __repr__(self) -> str:
        return str(self)


def _rebuild(name: str, cutoff: int | None, params: dict[str, Any]) -> Measure:
    return Measure(name, cutoff, **params)


def compute(measure: Measure, rp: RelPositions) -> np.ndarray:
    """Per-query values of ``measure`` (float64, one per query of ``rp``): the kernel its
    definition declares. ``rp`` must be built at ``measure.threshold``."""
    return measure.definition.compute(measure, rp)


_RE = re.compile(r"^\s*([A-Za-z][A-Za-z-]*)\s*(?:\(([^)]*)\))?\s*(?:@\s*(\d+))?\s*$")
#: trec_eval's spellings: name_k and plain names
_TREC_CUT = {"map_cut": "AP", "ndcg_cut": "nDCG", "P": "P", "recall": "R"}
_TREC = {"map": "AP", "ndcg": "nDCG", "recip_rank": "RR"}


def parse_measure(text: str | Measure) -> Measure:
    """Parse ``"nDCG@10"``, ``"AP(rel=2)"``, ``"RBP(p=0.8)"``, ``"TSE(e=ndcg)"``,
    ``"EE-L(gamma=0.5)"``...

    Also accepts trec_eval-style ``map``, ``ndcg_cut_10``, ``P_10``, ``recall_100``,
    ``recip_rank``.
    """
    if isinstance(text, Measure):
        return text
    s = str(text).strip()
    te = re.match(r"^(map_cut|ndcg_cut|P|recall)_(\d+)$", s)
    if te:
        return Measure(_TREC_CUT[te.group(1)], cutoff=int(te.group(2)))
    if s in _TREC:
        return Measure(_TREC[s])
    mt = _RE.match(s)
    if not mt:
        raise MeasureError(f"cannot parse measure {text!r}")
    name, args, cut = mt.groups()
    if name not in _REGISTRY:
        name = _ALIASES.get(name.lower(), name)
    params: dict[str, object] = {}
    for part in (args or "").split(","):
        if not part.strip():
            continue
        if "=" not in part:
            raise MeasureError(f"cannot parse parameter {part!r} in {text!r}")
        k, v = (x.strip() for x in part.split("=", 1))
        params[k] = v
    if cut is not None:
        params["cutoff"] = int(cut)
    try:
        return Measure(name, **params)  # type: ignore[arg-type]
    except MeasureError as e:  # named by the measure as written ("P@0: cutoff must be ...")
        raise MeasureError(f"{s}: {e}") from None


def parse_measures(spec: str | Measure | Iterable[str | Measure]) -> list[Measure]:
    """Measures from a space/comma separated string or an iterable; duplicates removed."""
    if isinstance(spec, Measure):
        items: list[str | Measure] = [spec]
    elif isinstance(spec, str):
        # split on whitespace, and on commas outside parentheses
        items = [t for t in re.split(r"\s+|,(?![^()]*\))", spec) if t]
    else:
        items = list(spec)
    out: list[Measure] = []
    for it in items:
        m = parse_measure(it)
        if m not in out:
            out.append(m)
    if not out:
        raise MeasureError("no measures given")
    return out


# ---- the shipped measures: one small class and one register call each ---------------------------
def _levels(rp: RelPositions) -> np.ndarray:
    """Recall level i (1-based) of each column."""
    return np.arange(1, rp.pos.shape[1] + 1, dtype=np.float64)[None, :]


class _AP(MeasureDef):
    """Average precision: Σ_i (i / p_i) / m over the retrieved relevant documents."""

    NAME = "AP"
    SUPPORTED_PARAMS = {"cutoff": CUTOFF, "rel": REL}
    ALIASES = ("map",)

    def compute(self, measure: Measure, rp: RelPositions) -> np.ndarray:
        seen = seen_mask(rp, measure.cutoff)
        return safe_div(recall_level(1.0 / rp.pos, _levels(rp), seen), rp.m.astype(np.float64))


class _nDCG(MeasureDef):
    """trec_eval's ndcg / ndcg_cut: graded gains, discount 1/log2(rank+1)."""

    NAME = "nDCG"
    SUPPORTED_PARAMS = {"cutoff": CUTOFF}

    def compute(self, measure: Measure, rp: RelPositions) -> np.ndarray:
        return ndcg(rp, measure.cutoff)


class _RR(MeasureDef):
    """Reciprocal rank of the first relevant document retrieved (within the cut-off)."""

    NAME = "RR"
    SUPPORTED_PARAMS = {"cutoff": CUTOFF, "rel": REL}
    ALIASES = ("mrr",)

    def compute(self, measure: Measure, rp: RelPositions) -> np.ndarray:
        first, k = rp.pos[:, 0], measure.cutoff
        ok = (rp.m > 0) & (first <= rp.depth) & ((first <= k) if k is not None else True)
        return np.where(ok, 1.0 / first, 0.0)


class _AtCutoff(MeasureDef):
    """P@k (relevant documents in the top k, over k) or R@k (over all relevant ones)."""

    SUPPORTED_PARAMS = {"cutoff": CUTOFF, "rel": REL}
    CUTOFF_REQUIRED = True

    def __init__(self, name: str, alias: str, recall: bool):
        self.NAME, self.ALIASES, self.recall = name, (alias,), recall  # type: ignore[misc]

    def compute(self, measure: Measure, rp: RelPositions) -> np.ndarray:
        hits = seen_mask(rp, measure.cutoff).sum(axis=1).astype(np.float64)
        return safe_div(hits, rp.m.astype(np.float64)) if self.recall else hits / float(measure.cutoff)


class _Rprec(MeasureDef):
    """R-precision: precision at m, the number of relevant documents."""

    NAME = "Rprec"
    SUPPORTED_PARAMS = {"rel": REL}

    def compute(self, measure: Measure, rp: RelPositions) -> np.ndarray:
        seen = rp.retrieved & (rp.pos <= rp.m[:, None])
        return safe_div(seen.sum(axis=1).astype(np.float64), rp.m.astype(np.float64))


class _RBP(MeasureDef):
    """Rank-biased precision: Σ (1 − p)·p^(rank−1) over the retrieved relevant documents."""

    NAME = "RBP"
    SUPPORTED_PARAMS = {"cutoff": CUTOFF, "p": PERSISTENCE, "rel": REL}

    def compute(self, measure: Measure, rp: RelPositions) -> np.ndarray:
        seen = seen_mask(rp, measure.cutoff)
        return recall_level(exposure("rbp", rp.pos, rp.n, measure.p), 1.0, seen)


#: exposure models for TSE (section 3.2): e(i) for 1-based rank i
EXPOSURES = ("rr", "ndcg", "rbp", "lin")


class _TSE(MeasureDef):
    """Total search efficiency: the exposure e of the last relevant document's position."""

    NAME = "TSE"
    SUPPORTED_PARAMS = {
        "e": ParamInfo(str, "rr", shown=False, valid=lambda e: e in EXPOSURES,
                       rule=f"must be one of {EXPOSURES}", desc="exposure model"),
        "p": ParamInfo(float, valid=_unit, rule="must lie in (0, 1)", desc="persistence with e=rbp"),
        "rel": REL,
    }

    def check(self, params: dict[str, Any]) -> dict[str, Any]:
        if params["e"] == "rbp" and params["p"] is None:
            params["p"] = 0.8
        if params["e"] != "rbp" and params["p"] is not None:
            raise MeasureError("TSE takes p only with e=rbp")
        return params

    def compute(self, measure: Measure, rp: RelPositions) -> np.ndarray:
        last = rp.pos[np.arange(len(rp.pos)), np.maximum(rp.m - 1, 0)]
        return np.where(rp.m > 0, exposure(measure.e, last, rp.n, measure.p), 0.0)


class _Lexicographic(MeasureDef):
    """LexiRecall or LexiPrecision: a lexicographic preference between rankings, valued by its
    metric form (section 7.3.2)."""

    SUPPORTED_PARAMS = {"rel": REL}

    def __init__(self, name: str, alias: str, preference: str,
                 metric: Callable[[np.ndarray, np.ndarray, int], np.ndarray]):
        self.NAME, self.ALIASES, self.PREFERENCE = name, (alias,), preference  # type: ignore[misc]
        self.metric = metric

    def compute(self, measure: Measure, rp: RelPositions) -> np.ndarray:
        return self.metric(rp.pos, rp.m, rp.n)


class _ExpectedExposure(MeasureDef):
    """EE-L, EE-D or EE-R of the policy that always returns the run (Diaz et al., CIKM 2020)."""

    SUPPORTED_PARAMS = {"gamma": GAMMA}
    EXPECTED_EXPOSURE = True

    def __init__(self, name: str):
        self.NAME = name  # type: ignore[misc]

    def compute(self, measure: Measure, rp: RelPositions) -> np.ndarray:
        return deterministic_ee(rp, measure.gamma)[measure.name]


for _defn in (_AP(), _nDCG(), _RR(), _AtCutoff("P", "precision", False),
              _AtCutoff("R", "recall", True), _Rprec(), _RBP(), _TSE(),
              _Lexicographic("LexiRecall", "lr", "recall", lexirecall_metric),
              _Lexicographic("LexiPrecision", "lp", "precision", lexiprecision_metric),
              _ExpectedExposure("EE-L"), _ExpectedExposure("EE-D"), _ExpectedExposure("EE-R")):
    register_measure(_defn)

AP = Measure("AP")
nDCG = Measure("nDCG")
RR = Measure("RR")
P = Measure("P", cutoff=10)
R = Measure("R", cutoff=1000)
Rprec = Measure("Rprec")
RBP = Measure("RBP")
TSE = Measure("TSE")
LexiRecall = Measure("LexiRecall")
LexiPrecision = Measure("LexiPrecision")
EE_L = Measure("EE-L")
EE_D = Measure("EE-D")
EE_R = Measure("EE-R")
