"""Robustness analyses of section 6 of the lexirecall paper, on real runs.

* :func:`per_query_preferences`: ``(k, k, nq)`` preferences of every measure (lexicographic
  preferences exactly; metrics by the sign of the per-query difference).
* :func:`tied_fraction`: fraction of tied (run pair, query) comparisons (section 6.2.2).
* :func:`measure_agreement`: given μ(π) ≠ μ(π'), how often a reference preference (lexirecall)
  agrees with μ's ordering (section 6.2.1).
* :func:`degrade_qrels` and :func:`label_degradation`: remove a fraction of each query's
  relevant labels, uniformly or weighted by how many runs retrieve the document, and measure
  ties and agreement with the preferences under full labels (section 6.2.4, Figures 12-13).

``experiments/lexirecall/robustness.py`` runs them on BM25 variants of a shared collection.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from limelight.data.qrels import Qrels
from limelight.data.run import Run
from limelight.evaluation.evaluate import Evaluator
from limelight.evaluation.measures import Measure, parse_measures
from limelight.evaluation.preferences import metric_preference_matrix, preference_matrix
from limelight.evaluation.relpos import QrelsIndex, default_n_docs, stack_positions


def per_query_preferences(runs: Sequence[Run], qrels: Qrels, measures: str | Iterable[str | Measure],
                          n_docs: int | None = None) -> dict[Measure, np.ndarray]:
    """``{measure: (k, k, nq) int8}``: +1 where run ``a`` is preferred to run ``b`` on a query."""
    ev = Evaluator(qrels, measures, n_docs)
    n = n_docs if n_docs is not None else default_n_docs(qrels, runs)
    results = [ev.evaluate(r, n, warn=False) for r in runs]
    out = {}
    for m in ev.measures:
        if m.is_preference:
            stack = stack_positions([r.positions[m.threshold] for r in results])
            out[m] = preference_matrix(stack, m.preference)
        else:
            out[m] = metric_preference_matrix(np.stack([r.per_query[m] for r in results]))
    return out


def _upper(prefs: np.ndarray) -> np.ndarray:
    iu = np.triu_indices(prefs.shape[0], 1)
    return prefs[iu[0], iu[1], :]  # (pairs, nq)


def tied_fraction(prefs: np.ndarray) -> float:
    """Fraction of tied comparisons over unordered run pairs and queries."""
    u = _upper(prefs)
    return float((u == 0).mean()) if u.size else 0.0


def agreement(reference: np.ndarray, other: np.ndarray) -> float:
    """Among comparisons where ``other`` is not tied, the fraction where ``reference`` gives
    the same preference (the paper's sign agreement, section 6.2.1)."""
    r, o = _upper(reference), _upper(other)
    sel = o != 0
    return float((r[sel] == o[sel]).mean()) if sel.any() else float("nan")


def measure_agreement(runs: Sequence[Run], qrels: Qrels, measures: str | Iterable[str | Measure],
                      reference: str = "LexiRecall", n_docs: int | None = None) -> pd.DataFrame:
    """Per measure: fraction of tied comparisons and agreement of ``reference`` with it."""
    ms = parse_measures(measures)
    ref = parse_measures(reference)[0]
    prefs = per_query_preferences(runs, qrels, list(dict.fromkeys([*ms, ref])), n_docs)
    rows = [{"measure": str(m), "tied": tied_fraction(prefs[m]),
             f"agreement_with_{ref}": agreement(prefs[ref], prefs[m])} for m in ms]
    return pd.DataFrame(rows)


def degrade_qrels(qrels: Qrels, fraction: float, mode: str = "uniform", runs: Sequence[Run] = (),
                  seed: int = 0, threshold: int = 1) -> Qrels:
    """Remove ``fraction`` of each query's relevant labels (rounded down), keeping at least one.

    ``mode="uniform"`` samples uniformly; ``mode="frequency"`` samples without replacement with
    probability proportional to the number of ``runs`` that retrieve the document for that
    query (Efraimidis-Spirakis keys; documents no run retrieves come last). Removed labels are
    dropped from the qrels (they become unjudged, i.e. non-relevant).
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError("fraction must lie in [0, 1]")
    if mode not in ("uniform", "frequency"):
        raise ValueError("mode must be 'uniform' or 'frequency'")
    rng = np.random.default_rng(seed)
    rel_rows = np.flatnonzero(qrels.rel >= threshold)
    q = qrels.q[rel_rows].astype(np.int64)
    u = rng.random(len(rel_rows))
    if mode == "uniform":
        key = u
    else:
        freq = np.zeros(len(rel_rows))
        nd = max(len(qrels.docids), 1)
        keys_rel = q * nd + qrels.d[rel_rows]
        order = np.argsort(keys_rel)
        for run in runs:
            dq = qrels.qids.encode(run.qids.strings, missing=-1).astype(np.int64)[run.q]
            dd = qrels.docids.encode(run.docids.strings, missing=-1).astype(np.int64)[run.d]
            ok = (dq >= 0) & (dd >= 0)
            k = dq[ok] * nd + dd[ok]
            idx = np.minimum(np.searchsorted(keys_rel[order], k), len(order) - 1)
            hit = keys_rel[order][idx] == k
            np.add.at(freq, order[idx[hit]], 1.0)
        with np.errstate(divide="ignore"):
            key = np.where(freq > 0, u ** (1.0 / np.maximum(freq, 1e-300)), -1.0 + u * 1e-3)
    m = np.bincount(q, minlength=len(qrels.qids))
    remove_n = np.minimum(np.floor(fraction * m).astype(np.int64), np.maximum(m - 1, 0))
    order = np.lexsort((-key, q))  # per query, highest key first
    qs = q[order]
    start = np.zeros(len(qrels.qids) + 1, dtype=np.int64)
    np.cumsum(m, out=start[1:])
    rank_in_q = np.arange(len(qs)) - start[qs]
    drop = np.zeros(len(qrels.q), dtype=bool)
    drop[rel_rows[order[rank_in_q < remove_n[qs]]]] = True
    keep = ~drop
    return Qrels.from_codes(qrels.qids, qrels.docids, qrels.q[keep], qrels.d[keep], qrels.rel[keep],
                            f"{qrels.name}-{mode}{fraction:g}")


def label_degradation(runs: Sequence[Run], qrels: Qrels, measures: str | Iterable[str | Measure],
                      fractions: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 0.9),
                      mode: str = "uniform", samples: int = 10, seed: int = 0,
                      n_docs: int | None = None) -> pd.DataFrame:
    """Figures 12-13: for each fraction of removed labels, the fraction of tied comparisons
    and the agreement of degraded-label preferences with full-label ones (mean over
    ``samples`` seeded degradations). Columns: fraction, measure, tied, agreement."""
    ms = parse_measures(measures)
    n = n_docs if n_docs is not None else default_n_docs(qrels, runs)
    full = per_query_preferences(runs, qrels, ms, n)
    nq = len(QrelsIndex(qrels).qids)
    rows = []
    for f in fractions:
        acc: dict[Measure, list[tuple[float, float]]] = {m: [] for m in ms}
        for s in range(samples if f > 0 else 1):
            dq = degrade_qrels(qrels, f, mode, runs, seed=seed * 100003 + s)
            prefs = per_query_preferences(runs, dq, ms, n)
            for m in ms:
                assert prefs[m].shape[2] == nq
                acc[m].append((tied_fraction(prefs[m]), agreement(full[m], prefs[m])))
        for m in ms:
            a = np.array(acc[m])
            rows.append({"fraction": f, "measure": str(m), "tied": float(a[:, 0].mean()),
                         "agreement": float(np.nanmean(a[:, 1]))})
    return pd.DataFrame(rows)
