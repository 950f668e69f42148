"""Closed-form tie probabilities (section 5.3, Appendix D) and a simulator of random rankings
that reproduces Tables 2, 3 and 4 of the lexirecall paper.

A random ranking of ``n`` items with ``m`` relevant ones is, for every measure here, fully
described by its relevance-position vector: a uniformly random ``m``-subset of ``1..n``. With a
retrieval depth ``ñ < n`` the positions below ``ñ`` are re-imputed pessimistically.
``experiments/lexirecall/simulate.py`` prints the paper's tables beside these values.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import gammaln, logsumexp
from scipy.stats import hypergeom

from limelight.data.ids import IdMap
from limelight.evaluation.measures import Measure, compute, parse_measure
from limelight.evaluation.preferences import pairwise
from limelight.evaluation.relpos import RelPositions


def _logcomb(a: np.ndarray | float, b: np.ndarray | float) -> np.ndarray:
    return gammaln(np.asarray(a, dtype=np.float64) + 1) - gammaln(np.asarray(b, dtype=np.float64) + 1) \
        - gammaln(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64) + 1)


def tie_probability(measure: str, n: int, m: int, k: int = 1000) -> float:
    """Pr(π =_μ π') for two uniformly random complete rankings (Appendix D).

    ``measure``: ``TSE`` (Theorem D.2), ``R`` (R@k, Theorem D.3; ``k`` the cutoff), ``RP``
    (Theorem D.4), ``LR`` (lexirecall, Theorem D.1). Computed in log space (exact to ~1e-12).
    """
    name = measure.upper()
    if name in ("LR", "LEXIRECALL"):
        return float(np.exp(-_logcomb(n, m)))
    if name == "TSE":
        i = np.arange(m, n + 1, dtype=np.float64)
        return float(np.exp(logsumexp(2.0 * _logcomb(i - 1, m - 1)) - 2.0 * _logcomb(n, m)))
    if name in ("R", "RP", "RPREC"):
        kk = m if name != "R" else min(k, n)
        i = np.arange(0, m + 1)
        pmf = hypergeom.pmf(i, n, kk, m)
        return float(np.sum(pmf ** 2))
    raise ValueError(f"no closed form for {measure!r}")


def random_positions(n: int, m: int | np.ndarray, size: int, rng: np.random.Generator,
                     depth: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``size`` random relevance-position vectors: uniformly random ``m``-subsets of ``1..n``
    (``m`` may vary per row), sorted, padded with ``n + 1``. With ``depth`` < n, relevant items
    below the depth are re-imputed at the bottom (``n − u + 1 .. n``). Returns (pos, m)."""
    mm = np.broadcast_to(np.asarray(m, dtype=np.int64), (size,)).copy()
    M = int(mm.max())
    if M > n:
        raise ValueError("m > n")
    pos = np.empty((size, M), dtype=np.int64)
    todo = np.arange(size)
    cols = np.arange(M)[None, :]
    if M * M > n:  # rejection would rarely succeed: take random subsets of a permutation
        step = max(1, int(2e7 // n))
        for s in range(0, size, step):
            rows = slice(s, min(size, s + step))
            keys = rng.random((rows.stop - rows.start, n))
            x = np.argpartition(keys, M - 1, axis=1)[:, :M] + 1
            pos[rows] = np.where(cols < mm[rows, None], x, n + 1)
        pos.sort(axis=1)
        todo = todo[:0]
    while len(todo):
        x = rng.integers(1, n + 1, size=(len(todo), M))
        x = np.where(cols < mm[todo, None], x, n + 1)
        x.sort(axis=1)
        dup = ((x[:, 1:] == x[:, :-1]) & (x[:, 1:] <= n)).any(axis=1)
        pos[todo[~dup]] = x[~dup]
        todo = todo[dup]
    if depth is not None and depth < n:
        ret = (pos <= depth).sum(axis=1)
        u = mm - ret
        imp = (cols >= ret[:, None]) & (cols < mm[:, None])
        pos = np.where(imp, n - mm[:, None] + cols + 1, pos)
        _ = u
    return pos, mm


def _rp(pos: np.ndarray, m: np.ndarray, n: int, depth: int) -> RelPositions:
    qids = IdMap([str(i) for i in range(len(m))], kind="query")
    return RelPositions(qids, pos, np.ones_like(pos, dtype=np.int32), m,
                        np.full(len(m), depth, dtype=np.int64), n)


def _values(measure: Measure, pos: np.ndarray, m: np.ndarray, n: int, depth: int) -> np.ndarray:
    return compute(measure, _rp(pos, m, n, depth))


def simulate_ties(measures: Sequence[str], n: int, m: int | tuple[int, int], pairs: int = 20000,
                  seed: int = 0, depth: int | None = None) -> dict[str, float]:
    """Fraction of tied pairs of random rankings per measure (``LexiRecall`` compares
    positions exactly; metrics compare float values). ``m`` is fixed or ``(lo, hi)`` uniform."""
    rng = np.random.default_rng(seed)
    mm = rng.integers(m[0], m[1] + 1, size=pairs) if isinstance(m, tuple) else m
    d = n if depth is None else depth
    a, ma = random_positions(n, mm, pairs, rng, depth)
    b, _ = random_positions(n, ma, pairs, rng, depth)
    out = {}
    for s in measures:
        meas = parse_measure(s)
        if meas.is_preference:
            out[s] = float((pairwise(a, b, meas.preference) == 0).mean())
        else:
            out[s] = float((_values(meas, a, ma, n, d) == _values(meas, b, ma, n, d)).mean())
    return out


def simulate_worst_case_agreement(n: int, pairs: int = 10000, m: tuple[int, int] = (5, 50),
                                  seed: int = 0, measures: Sequence[str] = ("TSE", "R@1000", "Rprec", "AP", "nDCG"),
                                  ) -> dict[str, float]:
    """Table 2: sign agreement of each measure with the worst-off searcher WC_μ (= TSE, eq. 5)
    over random pairs of complete rankings with m ~ U(lo, hi).

    Agreement counts a pair when sign(μ(π) − μ(π')) equals sign(WC(π) − WC(π')), over the pairs
    where WC is not tied; ``tied`` is the fraction of pairs with WC tied; ``random`` is a fair
    coin's agreement. ``agreement_all`` variants count over all pairs (ties agreeing with ties).
    """
    rng = np.random.default_rng(seed)
    mm = rng.integers(m[0], m[1] + 1, size=pairs)
    a, _ = random_positions(n, mm, pairs, rng)
    b, _ = random_positions(n, mm, pairs, rng)
    rows = np.arange(pairs)
    wc = np.sign(b[rows, mm - 1] - a[rows, mm - 1])  # +1: π's last relevant item is higher
    untied = wc != 0
    out = {"tied": float((~untied).mean())}
    for s in measures:
        meas = parse_measure(s)
        sg = np.sign(_values(meas, a, mm, n, n) - _values(meas, b, mm, n, n))
        out[s] = float((sg[untied] == wc[untied]).mean())
        out[s + " (all pairs)"] = float((sg == wc).mean())
    coin = rng.choice(np.array([-1, 1]), size=pairs)
    out["random"] = float((coin[untied] == wc[untied]).mean())
    out["random (all pairs)"] = float((coin == wc).mean())
    return out


TABLE3_PAPER = {  # n -> TSE, R1000, RP, AP, LR (m = 10)
    10 ** 3: (0.005, 1.000, 0.825, 0.000, 0.000), 10 ** 4: (0.001, 0.313, 0.980, 0.000, 0.000),
    10 ** 5: (0.000, 0.826, 0.998, 0.000, 0.000), 10 ** 6: (0.000, 0.980, 1.000, 0.000, 0.000)}
TABLE4_PAPER = {  # m -> TSE, R1000, RP, AP, LR (n = 1e6)
    1: (0.000, 0.998, 1.000, 0.000, 0.000), 5: (0.000, 0.990, 1.000, 0.000, 0.000),
    10: (0.000, 0.981, 1.000, 0.000, 0.000), 25: (0.000, 0.952, 0.999, 0.000, 0.000),
    50: (0.000, 0.907, 0.995, 0.000, 0.000)}
TABLE2_PAPER = {  # n -> tied, TSE, R@1000, RP, AP, nDCG, random
    10 ** 3: (0.012, 1.000, 0.000, 0.285, 0.541, 0.535, 0.492),
    10 ** 4: (0.001, 1.000, 0.420, 0.077, 0.552, 0.549, 0.497),
    10 ** 5: (0.000, 1.000, 0.179, 0.008, 0.554, 0.555, 0.498),
    10 ** 6: (0.000, 1.000, 0.026, 0.001, 0.547, 0.554, 0.499)}


def table_ties(n: int, m: int, pairs: int = 20000, seed: int = 0) -> dict[str, tuple[float | None, float]]:
    """One row of Tables 3/4: measure -> (closed form or None, simulated)."""
    sim = simulate_ties(["TSE", "R@1000", "Rprec", "AP", "LexiRecall"], n, m, pairs, seed)
    return {
        "TSE": (tie_probability("TSE", n, m), sim["TSE"]),
        "R1000": (tie_probability("R", n, m, 1000), sim["R@1000"]),
        "RP": (tie_probability("RP", n, m), sim["Rprec"]),
        "AP": (None, sim["AP"]),
        "LR": (tie_probability("LR", n, m), sim["LexiRecall"]),
    }


COLS = ("TSE", "R1000", "RP", "AP", "LR")
