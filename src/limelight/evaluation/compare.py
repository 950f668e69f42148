"""Library calls behind ``limelight evaluate`` and ``limelight compare``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from limelight.data.qrels import Qrels
from limelight.data.run import Run
from limelight.errors import LimelightError
from limelight.evaluation.evaluate import EvalResult, Evaluator, unique_names
from limelight.evaluation.measures import Measure, parse_measure
from limelight.evaluation.preferences import metric_preference_matrix, preference_matrix
from limelight.evaluation.relpos import stack_positions
from limelight.evaluation.stats import (
    PairOutcome,
    discriminative_power,
    holm_matrix,
    mc4,
    paired_test_matrix,
    sign_test_matrix,
    win_tie_loss,
)

CORRECTION_FAMILY = "Holm-Bonferroni over all pairs of runs, per measure"
"""The one multiple-comparison family of ``evaluate_runs`` and ``compare_runs``: for ``k`` runs,
each measure's ``k(k-1)/2`` pairwise tests are corrected together (Holm), whichever pairs a
report then shows. A pair therefore gets the same corrected p-value from ``evaluate`` (its row
against the first run) and from ``compare`` when both use the same test (the sign test of
per-query preferences for LexiRecall/LexiPrecision)."""


@dataclass
class RunTable:
    """Runs × measures, with p-values of each run against the first: a paired t-test or
    Wilcoxon for metrics, the sign test of per-query preferences for LexiRecall and
    LexiPrecision, Holm-corrected over all pairs of runs per measure (``CORRECTION_FAMILY``;
    the full corrected matrices are in ``p_pairs``)."""

    names: list[str]
    measures: list[Measure]
    results: list[EvalResult]
    p_vs_first: dict[Measure, np.ndarray]  # (k,), NaN for the first run
    p_pairs: dict[Measure, np.ndarray] | None = None  # (k, k) Holm-corrected, 1 on the diagonal

    def aggregate(self) -> dict[str, dict[str, float]]:
        return {n: {str(m): r.aggregate[m] for m in self.measures}
                for n, r in zip(self.names, self.results, strict=True)}

    def per_query(self) -> dict[str, dict[str, dict[str, float]]]:
        out = {}
        for n, r in zip(self.names, self.results, strict=True):
            qids = r.qids.strings.tolist()
            out[n] = {str(m): dict(zip(qids, r.per_query[m].tolist(), strict=True)) | {"all": r.aggregate[m]}
                      for m in self.measures}
        return out


def _common_stack(ev: Evaluator, runs: Sequence[Run], results: Sequence[EvalResult],
                  threshold: int) -> np.ndarray:
    """The runs' relevance positions stacked at one corpus size, for lexicographic
    preferences (which compare positions across runs): each run's own positions where the runs'
    own sizes agree, else every run at the largest of them (a preference does not change with
    ``n`` once it is common and large enough; the values shown keep each run's own size)."""
    rps = [r.positions[threshold] for r in results]
    n = max(rp.n for rp in rps)
    return stack_positions([rp if rp.n == n else ev.positions(run, threshold, n)
                            for run, rp in zip(runs, rps, strict=True)])


def evaluate_runs(runs: Sequence[Run], qrels: Qrels, measures: str | Iterable[str | Measure],
                  n_docs: int | None = None, test: str = "t", warn: bool = True,
                  progress: Callable[[int], None] | None = None) -> RunTable:
    """Evaluate ``runs`` and test each against the first (corrected over all pairs of runs,
    ``CORRECTION_FAMILY``). Each run's values are those it gets alone: ``n_docs``, or its own
    default corpus size (``relpos.corpus_size``), never one that depends on the other runs.
    ``progress(n)``: called with the number of runs evaluated so far, after each; between runs
    a deferred Ctrl-C (``progress.deferred_interrupt``) stops it (``KeyboardInterrupt``)."""
    from limelight.progress import check_interrupt

    if not runs:
        raise LimelightError("no runs given")
    if test not in ("t", "wilcoxon"):
        raise LimelightError(f"--test must be t or wilcoxon, got {test!r}")
    ev = Evaluator(qrels, measures, n_docs)
    results: list[EvalResult] = []
    for r in runs:  # each run's values as it gets alone
        results.append(ev.evaluate(r, warn=warn))
        if progress is not None:
            progress(len(results))
        check_interrupt()
    pvals: dict[Measure, np.ndarray] = {}
    pairs: dict[Measure, np.ndarray] = {}
    for m in ev.measures:
        p = np.full(len(runs), np.nan)
        pm = np.ones((len(runs), len(runs)))
        if len(runs) > 1:
            if m.is_preference:
                stack = _common_stack(ev, runs, results, m.threshold)
                raw = sign_test_matrix(preference_matrix(stack, m.preference))
            else:
                raw = paired_test_matrix(np.stack([r.per_query[m] for r in results]), test)
            pm = holm_matrix(raw)  # one family: every pair of runs (as compare_runs)
            p[1:] = pm[0, 1:]
        pvals[m] = p
        pairs[m] = pm
    return RunTable(unique_names(runs), ev.measures, results, pvals, pairs)


@dataclass
class Comparison:
    """All-pairs comparison of runs under one preference (or metric)."""

    names: list[str]
    preference: Measure
    prefs: np.ndarray  # (k, k, nq) int8
    pairs: list[PairOutcome]
    p_holm: np.ndarray  # (k, k) Holm-corrected sign-test p-values
    order: list[int]  # MC4
    stationary: np.ndarray

    def to_dict(self) -> dict:
        k = len(self.names)
        return {
            "preference": str(self.preference),
            "runs": self.names,
            "n_queries": int(self.prefs.shape[2]),
            "pairs": [{"a": self.names[o.a], "b": self.names[o.b], "wins": o.wins, "ties": o.ties,
                       "losses": o.losses, "p_value": o.p_value,
                       "p_holm": float(self.p_holm[o.a, o.b])} for o in self.pairs],
            "mc4": [self.names[i] for i in self.order],
            "discriminative_power": discriminative_power(self.p_holm) if k > 1 else 0.0,
        }


def compare_runs(runs: Sequence[Run], qrels: Qrels, preference: str | Measure = "LexiRecall",
                 n_docs: int | None = None, warn: bool = True) -> Comparison:
    """Per-query preferences between every pair of runs, win/tie/loss with sign tests
    (Holm-corrected over all pairs, ``CORRECTION_FAMILY``), and the MC4 ordering. ``preference`` is ``LexiRecall``,
    ``LexiPrecision`` or any metric (then the sign of the per-query difference)."""
    if len(runs) < 2:
        raise LimelightError("compare needs at least two runs")
    m = parse_measure(preference)
    ev = Evaluator(qrels, [m], n_docs)
    results = [ev.evaluate(r, warn=warn) for r in runs]
    if m.is_preference:
        stack = _common_stack(ev, runs, results, m.threshold)
        prefs = preference_matrix(stack, m.preference)
    else:
        prefs = metric_preference_matrix(np.stack([r.per_query[m] for r in results]))
    pairs = win_tie_loss(prefs)
    p_holm = holm_matrix(sign_test_matrix(prefs))
    order, pi = mc4(prefs)
    return Comparison(unique_names(runs), m, prefs, pairs, p_holm, order, pi)
