"""For whom a system works: per-query quality by group of searchers' queries (the consumers' side).

Neophytou, Mitra & Stinson (ECIR 2022) ask whether a recommender's utility differs across user
groups: Kruskal-Wallis across the groups, Bonferroni over the tests, and two ways of binning a
numeric attribute (equal-width bins and equal-count bins, which can tell different stories when
the attribute is skewed). Here the users are queries: groups from a query field (a log's
source), from query length in words binned either way (``length_bins``), or from a user's TSV
(``groups_from_tsv``); the values are any per-query figure (nDCG@10 and R@100 on judged
collections; on an unjudged log, figures that need no judgment).

``compare_groups`` gives each system's per-group means (with bootstrap intervals over the
group's queries), the Kruskal-Wallis H and p across the groups, the worst-off group (lowest
mean), and — given relevance positions — the lexirecall preference between every two systems
within each group (the share of the group's queries on which each is preferred). Groups named in
``omit`` (``(none)``, the queries with no value) are shown but left out of the test, as the
paper leaves out its N/A group. ``bonferroni`` corrects a family of p-values.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from limelight.errors import LimelightError

NONE_GROUP = "(none)"


def query_lengths(texts: Sequence[str]) -> np.ndarray:
    """Each query's length in whitespace-separated words."""
    return np.fromiter((len(str(t).split()) for t in texts), dtype=np.int64, count=len(texts))


def length_bins(texts: Sequence[str], n_bins: int = 4, kind: str = "width") -> np.ndarray:
    """Query-length groups: ``width`` cuts [min, max] words into ``n_bins`` equal ranges;
    ``count`` cuts at the quantiles, so bins hold about equal numbers of queries (lengths are
    integers: a length is never split, so equal-count bins are only as equal as ties allow and
    may be fewer). Labels name the words each bin holds (``"3-4 words"``)."""
    if n_bins < 2:
        raise LimelightError(f"need at least 2 bins, got {n_bins}")
    n = query_lengths(texts)
    if not len(n):
        return np.array([], dtype=object)
    lo, hi = int(n.min()), int(n.max())
    if kind == "width":  # [lo + i·w, lo + (i+1)·w), w = (hi + 1 − lo) / n_bins
        edges = np.linspace(lo, hi + 1, n_bins + 1)
        b = np.clip(np.searchsorted(edges, n, side="right") - 1, 0, n_bins - 1)
    elif kind == "count":  # each bin closes at a quantile: lengths ≤ the i/n_bins quantile
        cuts = np.unique(np.quantile(n, np.arange(1, n_bins) / n_bins, method="lower"))
        cuts = np.append(cuts[cuts < hi], hi)
        b = np.searchsorted(cuts, n, side="left")
    else:
        raise LimelightError(f"unknown binning {kind!r} (width, count)")
    labels = np.empty(len(n), dtype=object)
    for i in np.unique(b):
        m = b == i
        a, z = int(n[m].min()), int(n[m].max())
        labels[m] = f"{a} word{'s' if a != 1 else ''}" if a == z else f"{a}-{z} words"
    return labels


def groups_from_tsv(path: str | os.PathLike, qids: Sequence[str]) -> np.ndarray:
    """``qid<TAB>group`` lines → one label per query of ``qids`` (``(none)`` when absent); a query
    the set lacks is an error naming the first ones."""
    want = {q: i for i, q in enumerate(qids)}
    labels = np.full(len(qids), NONE_GROUP, dtype=object)
    unknown: list[str] = []
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 2:
            raise LimelightError(f"{path}:{lineno}: expected 'qid<TAB>group'")
        q, g = parts[0].strip(), parts[1].strip()
        if q not in want:
            unknown.append(q)
        else:
            labels[want[q]] = g
    if unknown:
        raise LimelightError(f"{path}: {len(unknown):,} query id(s) not in the query set (first: "
                             f"{', '.join(map(repr, unknown[:5]))})")
    return labels


def bonferroni(p: Sequence[float] | np.ndarray) -> np.ndarray:
    """Bonferroni-corrected p-values: min(1, m·p) over the family of m tests (NaN kept, not
    counted)."""
    p = np.asarray(p, dtype=np.float64)
    m = int(np.isfinite(p).sum())
    return np.where(np.isfinite(p), np.minimum(1.0, p * m), np.nan)


def kruskal(values: np.ndarray, labels: np.ndarray, omit: Sequence[str] = (NONE_GROUP,)) -> tuple[float, float, int]:
    """Kruskal-Wallis H and p across the groups of ``labels`` (groups in ``omit`` and groups of
    one query left out); ``(nan, nan, k)`` with fewer than two groups, ``(0, 1, k)`` when every
    value is equal."""
    from scipy.stats import kruskal as _kw

    keep = ~np.isin(labels, list(omit))
    names, inv = np.unique(labels[keep].astype(str), return_inverse=True)
    vals = values[keep]
    samples = [vals[inv == i] for i in range(len(names)) if (inv == i).sum() > 1]
    if len(samples) < 2:
        return float("nan"), float("nan"), len(samples)
    if np.ptp(np.concatenate(samples)) == 0:
        return 0.0, 1.0, len(samples)
    h, p = _kw(*samples)
    return float(h), float(p), len(samples)


@dataclass
class SearcherGroups:
    """Per (system, group) means (``groups``), per system the Kruskal-Wallis test and its
    worst-off group (``tests``), and per (group, pair of systems) lexirecall preferences
    (``preferences``, empty without positions)."""

    groups: pd.DataFrame
    tests: pd.DataFrame
    preferences: pd.DataFrame


def natural_order(g: str) -> tuple:
    """Sort key: numbers by value (``"6-16 words"`` before ``"17-26 words"``), ``(none)`` last."""
    import re

    parts = re.split(r"(\d+)", str(g))
    return (g == NONE_GROUP, [(0, int(x), "") if x.isdigit() else (1, 0, x) for x in parts if x])


def _boot_mean(v: np.ndarray, rng: np.random.Generator, n_boot: int, alpha: float) -> tuple[float, float]:
    if len(v) < 2 or n_boot == 0:
        return float("nan"), float("nan")
    idx = rng.integers(0, len(v), size=(n_boot, len(v)))
    m = v[idx].mean(axis=1)
    return float(np.quantile(m, alpha / 2, method="lower")), float(np.quantile(m, 1 - alpha / 2, method="higher"))


def compare_groups(values: Mapping[str, np.ndarray], labels: np.ndarray, measure: str,
                   positions: Mapping[str, np.ndarray] | None = None, omit: Sequence[str] = (NONE_GROUP,),
                   n_boot: int = 1000, alpha: float = 0.05, seed: int = 0) -> SearcherGroups:
    """Compare per-query ``values`` (system → array aligned with ``labels``) across the groups
    of queries; ``positions`` (system → padded relevance positions, as ``relevance_positions``
    gives them, same queries) adds the lexirecall preferences per group."""
    labels = np.asarray(labels, dtype=object)
    rng = np.random.default_rng(seed)
    rows, tests = [], []
    names = sorted(set(labels.tolist()), key=natural_order)
    for sysname, v in values.items():
        v = np.asarray(v, dtype=np.float64)
        if v.shape != labels.shape:
            raise LimelightError(f"{sysname}: {len(v)} values for {len(labels)} queries")
        for g in names:
            x = v[labels == g]
            lo, hi = _boot_mean(x, rng, n_boot, alpha)
            rows.append({"system": sysname, "measure": measure, "group": g, "n": len(x),
                         "mean": float(x.mean()) if len(x) else float("nan"), "lo": lo, "hi": hi})
        h, p, k = kruskal(v, labels, omit)
        tested = [r for r in rows[-len(names):] if r["group"] not in omit and r["n"] > 1]
        means = [r["mean"] for r in tested]
        worst = min(tested, key=lambda r: (r["mean"], natural_order(r["group"])))["group"] \
            if tested and max(means) > min(means) else None  # no worst-off among equals
        tests.append({"system": sysname, "measure": measure, "groups": k, "H": h, "p": p,
                      "worst_group": worst})
    prefs = []
    if positions:
        from limelight.evaluation.preferences import pairwise

        syst = list(positions)
        for i, a in enumerate(syst):
            for b in syst[i + 1:]:
                pr = pairwise(positions[a], positions[b], "recall")
                for g in names:
                    m = labels == g
                    if m.any():
                        prefs.append({"group": g, "a": a, "b": b, "n": int(m.sum()),
                                      "a_preferred": float((pr[m] > 0).mean()),
                                      "b_preferred": float((pr[m] < 0).mean()),
                                      "tie": float((pr[m] == 0).mean())})
    return SearcherGroups(pd.DataFrame(rows), pd.DataFrame(tests), pd.DataFrame(prefs))
