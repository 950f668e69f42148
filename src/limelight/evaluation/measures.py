"""Measures as values: hashable, printable and parseable with ir_measures' spelling.

``AP``, ``nDCG@10``, ``RR``, ``P@10``, ``R@100``, ``Rprec``, ``RBP(p=0.8)``, ``TSE``,
``LexiRecall``, ``LexiPrecision``, the expected-exposure measures ``EE-L``, ``EE-D``, ``EE-R``
(Diaz et al., CIKM 2020; ``limelight.evaluation.expected_exposure``) and parameterised forms such
as ``AP(rel=2)@100``, ``TSE(e=ndcg)`` or ``EE-L(gamma=0.5)``. ``str(parse_measure(s)) == s``
for canonical spellings and ``parse_measure(str(m)) == m`` for every measure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from limelight.errors import LimelightError


class MeasureError(LimelightError, ValueError):
    """An unknown measure name or an invalid parameter."""


#: name -> (allowed parameters, whether a cutoff is allowed, whether a cutoff is required)
_SPECS: dict[str, tuple[frozenset[str], bool, bool]] = {
    "AP": (frozenset({"rel"}), True, False),
    "nDCG": (frozenset(), True, False),
    "RR": (frozenset({"rel"}), True, False),
    "P": (frozenset({"rel"}), True, True),
    "R": (frozenset({"rel"}), True, True),
    "Rprec": (frozenset({"rel"}), False, False),
    "RBP": (frozenset({"rel", "p"}), True, False),
    "TSE": (frozenset({"rel", "e", "p"}), False, False),
    "LexiRecall": (frozenset({"rel"}), False, False),
    "LexiPrecision": (frozenset({"rel"}), False, False),
    "EE-L": (frozenset({"gamma"}), False, False),
    "EE-D": (frozenset({"gamma"}), False, False),
    "EE-R": (frozenset({"gamma"}), False, False),
}
#: expected-exposure measures (RBP patience ``gamma``, default 0.5); EE-L and EE-D: lower is better
EXPECTED_EXPOSURE_NAMES = frozenset({"EE-L", "EE-D", "EE-R"})
#: names that are preferences between rankings (their table value is the metric form, §7.3.2)
PREFERENCE_NAMES = frozenset({"LexiRecall", "LexiPrecision"})
#: exposure models for TSE (section 3.2): e(i) for 1-based rank i
EXPOSURES = ("rr", "ndcg", "rbp", "lin")
_ALIASES = {"ndcg": "nDCG", "map": "AP", "mrr": "RR", "rprec": "Rprec", "recall": "R",
            "precision": "P", "lr": "LexiRecall", "lp": "LexiPrecision", "lexirecall": "LexiRecall",
            "lexiprecision": "LexiPrecision", "tse": "TSE", "rbp": "RBP", "ap": "AP", "rr": "RR",
            "ee-l": "EE-L", "ee-d": "EE-D", "ee-r": "EE-R"}


@dataclass(frozen=True)
class Measure:
    """One evaluation measure with its parameters.

    ``rel`` is the minimum grade counted as relevant (default 1, as trec_eval's ``-l``);
    ``cutoff`` the rank cut-off; ``p`` RBP's persistence (also TSE's with ``e="rbp"``);
    ``e`` TSE's exposure model (``rr``: 1/i, ``ndcg``: 1/log2(i+1), ``rbp``: (1-p)p^(i-1),
    ``lin``: 1-i/n); ``gamma`` the RBP patience of the expected-exposure measures (EE-L, EE-D,
    EE-R; default 0.5, exposure γ^(i-1) at 1-based rank i).
    """

    name: str
    cutoff: int | None = None
    rel: int | None = None
    p: float | None = None
    e: str | None = None
    gamma: float | None = None

    def __post_init__(self) -> None:
        if self.name not in _SPECS:
            raise MeasureError(f"unknown measure {self.name!r}; known: {', '.join(_SPECS)}")
        params, cut_ok, cut_req = _SPECS[self.name]
        if self.cutoff is not None:
            if not cut_ok:
                raise MeasureError(f"{self.name} takes no cutoff")
            if int(self.cutoff) != self.cutoff or self.cutoff < 1:
                raise MeasureError(f"cutoff must be a positive integer, got {self.cutoff!r}")
        elif cut_req:
            raise MeasureError(f"{self.name} needs a cutoff, e.g. {self.name}@10")
        for k in ("rel", "p", "e", "gamma"):
            if getattr(self, k) is not None and k not in params:
                raise MeasureError(f"{self.name} takes no parameter {k!r}")
        # canonical defaults so that equal measures compare and hash equal
        if self.name == "RBP" and self.p is None:
            object.__setattr__(self, "p", 0.8)
        if self.name == "TSE":
            if self.e is None:
                object.__setattr__(self, "e", "rr")
            if self.e not in EXPOSURES:
                raise MeasureError(f"TSE exposure must be one of {EXPOSURES}, got {self.e!r}")
            if self.e == "rbp" and self.p is None:
                object.__setattr__(self, "p", 0.8)
            if self.e != "rbp" and self.p is not None:
                raise MeasureError("TSE takes p only with e=rbp")
        if self.p is not None:
            object.__setattr__(self, "p", float(self.p))
            if not 0.0 < self.p < 1.0:
                raise MeasureError(f"p must lie in (0, 1), got {self.p}")
        if self.name in EXPECTED_EXPOSURE_NAMES:
            g = 0.5 if self.gamma is None else float(self.gamma)
            if not 0.0 < g < 1.0:
                raise MeasureError(f"gamma must lie in (0, 1), got {self.gamma}")
            object.__setattr__(self, "gamma", g)
        if self.rel == 1:  # rel=1 is the default: one spelling
            object.__setattr__(self, "rel", None)
        if self.rel is not None and (int(self.rel) != self.rel or self.rel < 1):
            raise MeasureError(f"rel must be an integer ≥ 1, got {self.rel!r}")

    # ---- ir_measures-style construction: AP@10, AP(rel=2) ----------------------------------
    def __matmul__(self, cutoff: int) -> Measure:
        return replace(self, cutoff=cutoff)

    def __call__(self, **params) -> Measure:
        unknown = set(params) - {"cutoff", "rel", "p", "e", "gamma"}
        if unknown:
            raise MeasureError(f"{self.name} takes no parameter {sorted(unknown)[0]!r}")
        return replace(self, **params)

    @property
    def threshold(self) -> int:
        """Minimum grade counted as relevant."""
        return 1 if self.rel is None else int(self.rel)

    @property
    def is_preference(self) -> bool:
        return self.name in PREFERENCE_NAMES

    @property
    def is_expected_exposure(self) -> bool:
        """EE-L, EE-D or EE-R (EE-L and EE-D: lower is better)."""
        return self.name in EXPECTED_EXPOSURE_NAMES

    def __str__(self) -> str:
        params = []
        if self.e is not None and self.name == "TSE" and self.e != "rr":
            params.append(f"e={self.e}")
        if self.p is not None:
            params.append(f"p={self.p:g}")
        if self.gamma is not None:
            params.append(f"gamma={self.gamma:g}")
        if self.rel is not None:
            params.append(f"rel={self.rel}")
        s = self.name + (f"({','.join(params)})" if params else "")
        return s + (f"@{self.cutoff}" if self.cutoff is not None else "")

    def __repr__(self) -> str:
        return str(self)


_RE = re.compile(r"^\s*([A-Za-z][A-Za-z-]*)\s*(?:\(([^)]*)\))?\s*(?:@\s*(\d+))?\s*$")


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
        name = {"map_cut": "AP", "ndcg_cut": "nDCG", "P": "P", "recall": "R"}[te.group(1)]
        return Measure(name, cutoff=int(te.group(2)))
    if s in ("map", "ndcg", "recip_rank"):
        return Measure({"map": "AP", "ndcg": "nDCG", "recip_rank": "RR"}[s])
    mt = _RE.match(s)
    if not mt:
        raise MeasureError(f"cannot parse measure {text!r}")
    name, args, cut = mt.groups()
    if name not in _SPECS:
        name = _ALIASES.get(name.lower(), name)
    params: dict[str, object] = {}
    if args:
        for part in args.split(","):
            if not part.strip():
                continue
            if "=" not in part:
                raise MeasureError(f"cannot parse parameter {part!r} in {text!r}")
            k, v = (x.strip() for x in part.split("=", 1))
            try:
                if k in ("rel", "cutoff"):
                    params[k] = int(v)
                elif k in ("p", "gamma"):
                    params[k] = float(v)
                elif k == "e":
                    params[k] = v.lower()
                else:
                    raise MeasureError(f"{name} takes no parameter {k!r}")
            except ValueError:
                raise MeasureError(f"bad value {v!r} for {k} in {text!r}") from None
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
