"""Exact exposure, browsing models and retrievability.

- ``compute_exposure`` / ``ExposureStore``: every (query, document, rank, score) of every
  query's top-n, in Parquet shards and an embedded DuckDB database (resumable).
- ``RBP``, ``DCG``, ``Exhaustive``, ``Cutoff``: browsing models μ_{q→d} (0-based ρ inside).
- ``retrievability``, ``gini``, ``lorenz``, ``bootstrap_gini``, ``paired_bootstrap_gini``,
  ``group_retrievability``: retrievability over every document of the collection.
"""

from limelight.exposure.browsing import (
    DCG,
    RBP,
    BrowsingModel,
    Cutoff,
    Exhaustive,
    parse_browsing_model,
    to_rho,
)
from limelight.exposure.exact import (
    ExposureStore,
    compute_exposure,
    exposure_from_run,
    queries_fingerprint,
    retriever_fingerprint,
)
from limelight.exposure.retrievability import (
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

__all__ = [
    "DCG", "RBP", "BrowsingModel", "Cutoff", "Exhaustive", "ExposureStore", "Retrievability",
    "analyse", "analyse_pairs", "bootstrap_gini", "compute_exposure", "exposure_from_run", "gini",
    "group_retrievability", "lorenz", "paired_bootstrap_gini", "parse_browsing_model",
    "queries_fingerprint", "rank_matrix", "ranks_from_trec_run", "read_doc_ids",
    "retrievability", "retrievability_from_pairs", "retrievable_fraction",
    "retriever_fingerprint", "to_rho",
]
