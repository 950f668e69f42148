"""Evaluation: measures, lexicographic preferences, significance tests, robustness analyses.

Rank discounts (``Discount`` and its kinds, ``limelight.evaluation.discounts``) are the one
implementation of every rank weighting: TSE's exposure models, nDCG and RBP, expected exposure,
and the exposure layer's browsing models, retrievability functions and RELQ.

See ``docs/results-evaluation.md``. The analyses of the lexirecall paper are exported too: ties,
agreement and label degradation on real runs (``measure_agreement``, ``label_degradation``, ...,
from ``robustness``) and closed-form and simulated ties of random rankings
(``tie_probability``, ``simulate_ties``, ``simulate_worst_case_agreement``, from ``simulate``).
The relevance-position array (``relevance_positions``) is the shared input of every measure and
preference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from limelight._lazy import lazy_exports

_EXPORTS = {
    "agreement": "limelight.evaluation.robustness",
    "AP": "limelight.evaluation.measures",
    "compare_runs": "limelight.evaluation.compare",
    "Comparison": "limelight.evaluation.compare",
    "compute": "limelight.evaluation.kernels",
    "ConstantDiscount": "limelight.evaluation.discounts",
    "degrade_qrels": "limelight.evaluation.robustness",
    "Discount": "limelight.evaluation.discounts",
    "EvalResult": "limelight.evaluation.evaluate",
    "evaluate": "limelight.evaluation.evaluate",
    "evaluate_exposure": "limelight.evaluation.expected_exposure",
    "evaluate_runs": "limelight.evaluation.compare",
    "Evaluator": "limelight.evaluation.evaluate",
    "expected_exposure_run": "limelight.evaluation.expected_exposure",
    "GeometricDiscount": "limelight.evaluation.discounts",
    "label_degradation": "limelight.evaluation.robustness",
    "lexi_ranks": "limelight.evaluation.preferences",
    "LexiPrecision": "limelight.evaluation.measures",
    "lexiprecision": "limelight.evaluation.preferences",
    "lexiprecision_metric": "limelight.evaluation.kernels",
    "LexiRecall": "limelight.evaluation.measures",
    "lexirecall": "limelight.evaluation.preferences",
    "lexirecall_metric": "limelight.evaluation.kernels",
    "LinearDiscount": "limelight.evaluation.discounts",
    "LogDiscount": "limelight.evaluation.discounts",
    "Measure": "limelight.evaluation.measures",
    "measure_agreement": "limelight.evaluation.robustness",
    "MeasureError": "limelight.evaluation.measures",
    "metric_preference_matrix": "limelight.evaluation.preferences",
    "nDCG": "limelight.evaluation.measures",
    "P": "limelight.evaluation.measures",
    "pairwise": "limelight.evaluation.preferences",
    "parse_measure": "limelight.evaluation.measures",
    "parse_measures": "limelight.evaluation.measures",
    "per_query_preferences": "limelight.evaluation.robustness",
    "preference_matrix": "limelight.evaluation.preferences",
    "QrelsIndex": "limelight.evaluation.relpos",
    "R": "limelight.evaluation.measures",
    "random_positions": "limelight.evaluation.simulate",
    "RBP": "limelight.evaluation.measures",
    "recall_level": "limelight.evaluation.kernels",
    "ReciprocalDiscount": "limelight.evaluation.discounts",
    "relevance_positions": "limelight.evaluation.relpos",
    "RelPositions": "limelight.evaluation.relpos",
    "retrievability_discount": "limelight.evaluation.discounts",
    "Rprec": "limelight.evaluation.measures",
    "RR": "limelight.evaluation.measures",
    "RunTable": "limelight.evaluation.compare",
    "simulate_ties": "limelight.evaluation.simulate",
    "simulate_worst_case_agreement": "limelight.evaluation.simulate",
    "stack_positions": "limelight.evaluation.relpos",
    "target_exposure": "limelight.evaluation.expected_exposure",
    "tie_probability": "limelight.evaluation.simulate",
    "tied_fraction": "limelight.evaluation.robustness",
    "to_rho": "limelight.evaluation.discounts",
    "TruncatedDiscount": "limelight.evaluation.discounts",
    "TSE": "limelight.evaluation.measures",
    "tse": "limelight.evaluation.preferences",
    "worst_off_provider": "limelight.evaluation.preferences",
}

__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # for type checkers and IDEs
    from limelight.evaluation.compare import Comparison, RunTable, compare_runs, evaluate_runs  # noqa: F401
    from limelight.evaluation.discounts import (  # noqa: F401
        ConstantDiscount,
        Discount,
        GeometricDiscount,
        LinearDiscount,
        LogDiscount,
        ReciprocalDiscount,
        TruncatedDiscount,
        retrievability_discount,
        to_rho,
    )
    from limelight.evaluation.evaluate import EvalResult, Evaluator, evaluate  # noqa: F401
    from limelight.evaluation.expected_exposure import (  # noqa: F401
        evaluate_exposure,
        expected_exposure_run,
        target_exposure,
    )
    from limelight.evaluation.kernels import (  # noqa: F401
        compute,
        lexiprecision_metric,
        lexirecall_metric,
        recall_level,
    )
    from limelight.evaluation.measures import (  # noqa: F401
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
    from limelight.evaluation.preferences import (  # noqa: F401
        lexi_ranks,
        lexiprecision,
        lexirecall,
        metric_preference_matrix,
        pairwise,
        preference_matrix,
        tse,
        worst_off_provider,
    )
    from limelight.evaluation.relpos import (  # noqa: F401
        QrelsIndex,
        RelPositions,
        relevance_positions,
        stack_positions,
    )
    from limelight.evaluation.robustness import (  # noqa: F401
        agreement,
        degrade_qrels,
        label_degradation,
        measure_agreement,
        per_query_preferences,
        tied_fraction,
    )
    from limelight.evaluation.simulate import (  # noqa: F401
        random_positions,
        simulate_ties,
        simulate_worst_case_agreement,
        tie_probability,
    )
