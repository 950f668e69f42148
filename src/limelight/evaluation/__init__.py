"""Evaluation: measures, lexicographic preferences, significance tests, robustness analyses.

See ``docs/results-evaluation.md``. The relevance-position array (``relevance_positions``) is the
shared input of every measure and preference.
"""

from limelight.evaluation.compare import Comparison, RunTable, compare_runs, evaluate_runs
from limelight.evaluation.evaluate import EvalResult, Evaluator, evaluate
from limelight.evaluation.kernels import (
    compute,
    lexiprecision_metric,
    lexirecall_metric,
    recall_level,
)
from limelight.evaluation.measures import (
    AP,
    RBP,
    RR,
    TSE,
    LexiPrecision,
    LexiRecall,
    Measure,
    MeasureError,
    P,
    R,
    Rprec,
    nDCG,
    parse_measure,
    parse_measures,
)
from limelight.evaluation.preferences import (
    lexi_ranks,
    lexiprecision,
    lexirecall,
    metric_preference_matrix,
    pairwise,
    preference_matrix,
    tse,
    worst_off_provider,
)
from limelight.evaluation.relpos import (
    QrelsIndex,
    RelPositions,
    relevance_positions,
    stack_positions,
)

__all__ = [
    "AP", "RBP", "RR", "TSE", "Comparison", "EvalResult", "Evaluator", "LexiPrecision", "LexiRecall",
    "Measure", "MeasureError", "P", "QrelsIndex", "R", "RelPositions", "Rprec", "RunTable",
    "compare_runs", "compute", "evaluate", "evaluate_runs", "lexi_ranks", "lexiprecision",
    "lexiprecision_metric", "lexirecall", "lexirecall_metric", "metric_preference_matrix", "nDCG",
    "pairwise", "parse_measure", "parse_measures", "preference_matrix", "recall_level",
    "relevance_positions", "stack_positions", "tse", "worst_off_provider",
]
