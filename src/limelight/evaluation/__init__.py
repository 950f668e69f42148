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

if TYPE_CHECKING:  # the exports, written once: lazy_exports resolves them on first use
    from limelight.evaluation.compare import Comparison, RunTable, compare_runs, evaluate_runs
    from limelight.evaluation.discounts import (
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
    from limelight.evaluation.evaluate import EvalResult, Evaluator, evaluate
    from limelight.evaluation.expected_exposure import (
        evaluate_exposure,
        expected_exposure_run,
        target_exposure,
    )
    from limelight.evaluation.kernels import (
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
        MeasureDef,
        MeasureError,
        P,
        ParamInfo,
        R,
        Rprec,
        compute,
        nDCG,
        parse_measure,
        parse_measures,
        register_measure,
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
    from limelight.evaluation.robustness import (
        agreement,
        degrade_qrels,
        label_degradation,
        measure_agreement,
        per_query_preferences,
        tied_fraction,
    )
    from limelight.evaluation.simulate import (
        random_positions,
        simulate_ties,
        simulate_worst_case_agreement,
        tie_probability,
    )

__all__, __getattr__, __dir__ = lazy_exports(__name__)
