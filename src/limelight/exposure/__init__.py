"""Exact exposure, browsing models and retrievability.

- ``compute_exposure`` / ``ExposureStore``: every (query, document, rank, score) of every
  query's top-n, in Parquet shards and an embedded DuckDB database (resumable); the shards are
  computed by an engine (``LocalEngine`` by default; ``limelight.scale.RayEngine``), cut and
  built as ``ExposureOptions`` say.
- ``GeometricDiscount`` (rbp:γ), ``LogDiscount`` (dcg), ``ConstantDiscount`` (exhaustive),
  ``TruncatedDiscount`` (cutoff:c): browsing models μ_{q→d} (0-based ρ inside), the rank
  discounts of ``limelight.evaluation.discounts``; their former names ``RBP``, ``DCG``,
  ``Exhaustive`` and ``Cutoff`` are deprecated aliases (``RBP`` is also a measure, ``Cutoff``
  a pipeline stage).
- ``retrievability``, ``gini``, ``lorenz``, ``bootstrap_gini``, ``paired_bootstrap_gini``,
  ``group_retrievability``: retrievability over every document of the collection.
- ``expected_weights``, ``policy_expectations``, ``stochastic_store_exposure``,
  ``stochastic_topk_exposure``: Plackett-Luce policies over a ranker's top-k (expected exposure
  and r(d) without keeping the rankings); ``sample_rankings`` draws a few, to inspect them.
- ``plot_lorenz``, ``plot_rank_size``, ``plot_histogram``: figures of r(d) (PNG and SVG).
- ``diff_stores``: what changes between two stores over the same documents and queries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from limelight._lazy import lazy_exports

_EXPORTS = {
    "analyse": "limelight.exposure.retrievability",
    "analyse_pairs": "limelight.exposure.retrievability",
    "bootstrap_gini": "limelight.exposure.retrievability",
    "BrowsingModel": "limelight.exposure.browsing",
    "compute_exposure": "limelight.exposure.compute",
    "ConstantDiscount": "limelight.evaluation.discounts",
    "Cutoff": "limelight.exposure.browsing",
    "DCG": "limelight.exposure.browsing",
    "diff_stores": "limelight.exposure.diff",
    "Exhaustive": "limelight.exposure.browsing",
    "expected_weights": "limelight.exposure.stochastic",
    "exposure_from_run": "limelight.exposure.compute",
    "ExposureOptions": "limelight.exposure.compute",
    "ExposureStore": "limelight.exposure.store",
    "GeometricDiscount": "limelight.evaluation.discounts",
    "gini": "limelight.exposure.retrievability",
    "group_retrievability": "limelight.exposure.retrievability",
    "LocalEngine": "limelight.exposure.engine",
    "LogDiscount": "limelight.evaluation.discounts",
    "lorenz": "limelight.exposure.retrievability",
    "paired_bootstrap_gini": "limelight.exposure.retrievability",
    "parse_browsing_model": "limelight.exposure.browsing",
    "plot_histogram": "limelight.exposure.plots",
    "plot_lorenz": "limelight.exposure.plots",
    "plot_rank_size": "limelight.exposure.plots",
    "policy_expectations": "limelight.exposure.stochastic",
    "queries_fingerprint": "limelight.exposure.fingerprints",
    "rank_matrix": "limelight.exposure.retrievability",
    "ranks_from_trec_run": "limelight.exposure.retrievability",
    "RBP": "limelight.exposure.browsing",
    "read_doc_ids": "limelight.exposure.retrievability",
    "Retrievability": "limelight.exposure.retrievability",
    "retrievability": "limelight.exposure.retrievability",
    "retrievability_from_pairs": "limelight.exposure.retrievability",
    "retrievable_fraction": "limelight.exposure.retrievability",
    "retriever_fingerprint": "limelight.exposure.fingerprints",
    "sample_rankings": "limelight.exposure.stochastic",
    "ShardEngine": "limelight.exposure.engine",
    "stochastic_store_exposure": "limelight.exposure.stochastic",
    "stochastic_topk_exposure": "limelight.exposure.stochastic",
    "to_rho": "limelight.exposure.browsing",
    "TruncatedDiscount": "limelight.evaluation.discounts",
}

__all__ = [n for n in _EXPORTS if n not in ("Cutoff", "DCG", "Exhaustive", "RBP")]  # deprecated
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # for type checkers and IDEs
    from limelight.evaluation.discounts import (  # noqa: F401
        ConstantDiscount,
        GeometricDiscount,
        LogDiscount,
        TruncatedDiscount,
    )
    from limelight.exposure.browsing import (  # noqa: F401
        BrowsingModel,
        parse_browsing_model,
        to_rho,
    )
    from limelight.exposure.compute import (  # noqa: F401
        ExposureOptions,
        compute_exposure,
        exposure_from_run,
    )
    from limelight.exposure.diff import diff_stores  # noqa: F401
    from limelight.exposure.engine import LocalEngine, ShardEngine  # noqa: F401
    from limelight.exposure.fingerprints import (  # noqa: F401
        queries_fingerprint,
        retriever_fingerprint,
    )
    from limelight.exposure.plots import plot_histogram, plot_lorenz, plot_rank_size  # noqa: F401
    from limelight.exposure.retrievability import (  # noqa: F401
        Retrievability,
        analyse,
        analyse_pairs,
        bootstrap_gini,
        gini,
        group_retrievability,
        lorenz,
        paired_bootstrap_gini,
        rank_matrix,
        ranks_from_trec_run,
        read_doc_ids,
        retrievability,
        retrievability_from_pairs,
        retrievable_fraction,
    )
    from limelight.exposure.stochastic import (  # noqa: F401
        expected_weights,
        policy_expectations,
        sample_rankings,
        stochastic_store_exposure,
        stochastic_topk_exposure,
    )
    from limelight.exposure.store import ExposureStore  # noqa: F401
