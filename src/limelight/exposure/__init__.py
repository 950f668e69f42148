"""Exact exposure, browsing models and retrievability.

- ``compute_exposure`` / ``ExposureStore``: every (query, document, rank, score) of every
  query's top-n, once, in Parquet shards with a per-document index (resumable; DuckDB reads the
  shards in place through ``ExposureStore.connect``); the shards are computed by an engine
  (``LocalEngine`` by default; ``limelight.scale.RayEngine``), cut and built as
  ``ExposureOptions`` say.
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
- ``distfair`` (``distfair_from_pairs``, ``DistFair``): attention against merit accumulated over
  the log in its order (after DistFaiR): total variation per document and per group,
  query-aware and query-agnostic (their difference: fairwashing), the group ≤ individual bound
  checked, bootstrap intervals.
- ``Topics``, ``topics_from_texts``, ``topics_from_vectors``, ``topic_retrievability``,
  ``store_topic_retrievability``, ``sweep_topics``: topic-aware retrievability
  (T-Retrievability): the log's queries in K topics (K-means), r(d) and the Gini within each,
  each document's standing within its topics, topics as fairness groups.
- ``plot_lorenz``, ``plot_rank_size``, ``plot_histogram``: figures of r(d) (PNG and SVG).
- ``diff_stores``: what changes between two stores over the same documents and queries.
- ``group_fairness`` (``Groups``, ``Merit``): exposure of groups of documents against a target
  (uniform, size, merit), Singh & Joachims' ratios, AWRF and group expected exposure over the
  whole log, with bootstrap intervals and the documents behind each group's gap;
  ``fairness_table`` the same as one tidy row per group; ``balance_ranks`` / ``balance_curve``:
  a deterministic re-ranker that moves each query's exposure toward a target per group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from limelight._lazy import lazy_exports

if TYPE_CHECKING:  # the exports, written once: lazy_exports resolves them on first use
    from limelight.evaluation.discounts import (
        ConstantDiscount,
        GeometricDiscount,
        LogDiscount,
        TruncatedDiscount,
    )
    from limelight.exposure.balance import balance_curve, balance_ranks
    from limelight.exposure.browsing import (
        BrowsingModel,
        BrowsingModelDef,
        browsing_models,
        parse_browsing_model,
        register_browsing_model,
        to_rho,
    )
    from limelight.exposure.compute import (
        ExposureOptions,
        compute_exposure,
        exposure_from_run,
    )
    from limelight.exposure.diff import diff_stores
    from limelight.exposure.distfair import DistFair, distfair, distfair_from_pairs
    from limelight.exposure.engine import LocalEngine, ShardEngine
    from limelight.exposure.fairness import (
        GroupFairness,
        Groups,
        Merit,
        fairness_from_pairs,
        fairness_table,
        group_fairness,
        policy_curve,
    )
    from limelight.exposure.fingerprints import (
        queries_fingerprint,
        retriever_fingerprint,
    )
    from limelight.exposure.nearmiss import NearMisses, group_exposure_shares, near_misses
    from limelight.exposure.plots import plot_histogram, plot_lorenz, plot_rank_size
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
    from limelight.exposure.stochastic import (
        expected_weights,
        policy_expectations,
        sample_rankings,
        stochastic_store_exposure,
        stochastic_topk_exposure,
    )
    from limelight.exposure.store import ExposureStore
    from limelight.exposure.topics import (
        TopicRetrievability,
        Topics,
        store_topic_retrievability,
        sweep_topics,
        topic_retrievability,
        topics_from_texts,
        topics_from_vectors,
    )

# the browsing models' former names: importable, deprecated (browsing warns), not exported
__all__, __getattr__, __dir__ = lazy_exports(__name__, deprecated=dict.fromkeys(
    ("Cutoff", "DCG", "Exhaustive", "RBP"), "limelight.exposure.browsing"))
