"""Query generation: controllable generation (CtrlQGen), query variations and simulated queries.

- CtrlQGen (``generator``, ``weaklabel``, ``serialize``): ``QueryGenerator`` (narrow or broad
  queries for an entity, ``generate_queries``), the weak labeller ``WeakLabelingUn`` and the
  Click training set (``click_dataset``), entities serialized by a ``Schema`` (``load_schema``,
  ``serialize_collection``); ``weaklabel_ip`` labels the intent of (query, entity) pairs and
  ``assert_no_leakage`` checks a train/test split. ``training``: ``weak_pairs`` (WeakLabeling-Un,
  or WeakLabeling-IP on a Click set + WeakLabeling-Un) and the resumable ``train_generator``;
  ``load_generator`` checks a saved generator against the configured schema and base model;
  ``suggest``: broad query suggestions for a query's top entities.
- Query variations (``variations``): ``generate_variations`` with any ``VariationMethod``
  (``get_method``) into ``Variations``, read back with ``read_variations_tsv``;
  their effect on systems (``robustness``): ``robustness_report`` → ``RobustnessReport``, over
  the systems ``build_systems`` names.
- Simulated queries (``simulation``): ``simulate_queries`` from a ``TermModel``, checked against
  real ones with ``validate_simulation`` → ``SimulationValidation``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from limelight._lazy import lazy_exports

if TYPE_CHECKING:  # the exports, written once: lazy_exports resolves them on first use
    from limelight.querygen.generator import QueryGenerator, generate_queries, load_generator
    from limelight.querygen.robustness import RobustnessReport, build_systems, robustness_report
    from limelight.querygen.serialize import Schema, load_schema, serialize_collection
    from limelight.querygen.simulation import (
        SimulationValidation,
        TermModel,
        simulate_queries,
        validate_simulation,
    )
    from limelight.querygen.suggest import Suggestions, suggest
    from limelight.querygen.training import train_generator, weak_pairs
    from limelight.querygen.variations import (
        VariationMethod,
        Variations,
        generate_variations,
        get_method,
        read_variations_tsv,
    )
    from limelight.querygen.weaklabel import (
        WeakLabelingUn,
        assert_no_leakage,
        click_dataset,
        weaklabel_ip,
    )

__all__, __getattr__, __dir__ = lazy_exports(__name__)
