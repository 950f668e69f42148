"""The stages of an audit, one module each, as data (:class:`limelight.audit.stage.Stage`): each
calls the library capability that owns the computation and records what it produced; a stage
whose input is missing, or that does not apply to the audit's collection, configuration or
systems (stages ask the systems' kinds for capabilities), is skipped with a reason.
:func:`audit_stages` lists them in the order the runner runs them.

Stage keys chain: a stage's key includes the keys of the stages it reads, so a changed setting
reruns exactly the stages that depend on it.

Another module adds a stage with :func:`register_stage`, once: its :class:`Stage` declares its
name, the stages it reads (``inputs``), its key, outputs, body and report section; the call
adds its options table (``[table]`` of the configuration, checked up front), its ``[stages]``
switch and, with ``summary=True``, its result's ``summary`` in ``results.json``. It runs after
limelight's own stages (``tests/test_toy_stage.py`` adds a toy one).
"""

from __future__ import annotations

import limelight.audit.stages.ctrlqgen as ctrlqgen
import limelight.audit.stages.eqi as eqi
import limelight.audit.stages.exposure as exposure
import limelight.audit.stages.intervention as intervention
import limelight.audit.stages.rerank as rerank
import limelight.audit.stages.retrievability as retrievability
import limelight.audit.stages.robustness as robustness
import limelight.audit.stages.topics as topics
from limelight.audit.stage import ReportSection, Stage, StageOptions
from limelight.audit.stages.common import dense_settings, switched_off
from limelight.audit.stages.compare import COMPARE
from limelight.audit.stages.ctrlqgen import CTRLQGEN
from limelight.audit.stages.eqi import EQI
from limelight.audit.stages.exposure import exposure_stage
from limelight.audit.stages.figures import FIGURES
from limelight.audit.stages.index import INDEX
from limelight.audit.stages.intervention import INTERVENTION
from limelight.audit.stages.query_vectors import QUERY_VECTORS
from limelight.audit.stages.rerank import RERANK
from limelight.audit.stages.retrievability import retrievability_stage
from limelight.audit.stages.robustness import ROBUSTNESS
from limelight.audit.stages.topics import TOPICS

#: the ``[table]`` of each stage that has options (the configuration checks them up front)
STAGE_OPTIONS: dict[str, StageOptions] = {m.OPTIONS.table: m.OPTIONS
                                          for m in (rerank, eqi, robustness, ctrlqgen, intervention, topics)}


#: stages other modules registered (:func:`register_stage`): name -> (stage, in results.json)
_REGISTERED: dict[str, tuple[Stage, bool]] = {}
#: the options table each registered stage added
_TABLES: dict[str, str] = {}
#: limelight's own stages of every audit (the per-system ones are ``exposure-``/``retrievability-``)
_OWN = (INDEX, QUERY_VECTORS, FIGURES, TOPICS, COMPARE, RERANK, EQI, ROBUSTNESS, CTRLQGEN, INTERVENTION)


def register_stage(stage: Stage, options: StageOptions | None = None, summary: bool = False) -> Stage:
    """Add ``stage`` to every audit, after limelight's own stages (in registration order):
    ``[stages] <name> = false`` switches it off; ``options`` (its ``[table]``) is checked with
    the configuration; with ``summary``, its result's ``"summary"`` is recorded in
    ``results.json`` under its name. A name already taken is refused. Returns the stage as it
    runs (its ``skip`` also honours the switch)."""
    from dataclasses import replace

    from limelight.errors import LimelightError

    taken = {s.name for s in _OWN} | set(_REGISTERED)
    if stage.name in taken or stage.name.startswith(("exposure-", "retrievability-")):
        raise LimelightError(f"audit stage {stage.name!r} is already registered")
    if options is not None and options.table in STAGE_OPTIONS:
        raise LimelightError(f"the configuration table [{options.table}] already belongs to a stage")
    own = stage.skip
    stage = replace(stage, skip=lambda audit: switched_off(audit, stage.name) or own(audit))
    _REGISTERED[stage.name] = (stage, summary)
    if options is not None:
        STAGE_OPTIONS[options.table] = options
        _TABLES[stage.name] = options.table
    return stage


def unregister_stage(name: str) -> None:
    """Remove the stage registered as ``name`` and its options table (a test puts things back)."""
    _REGISTERED.pop(name, None)
    if name in _TABLES:
        STAGE_OPTIONS.pop(_TABLES.pop(name), None)


def registered_stages() -> list[str]:
    """The names of the registered stages (the ``[stages]`` switches beyond limelight's own)."""
    return list(_REGISTERED)


def summary_stages() -> list[str]:
    """The registered stages whose result summary ``results.json`` records, in order."""
    return [n for n, (_, summary) in _REGISTERED.items() if summary]


def audit_stages(cfg) -> list[Stage]:
    """The stages of an audit of ``cfg`` (an ``AuditConfig``), in the order they run: the index,
    the shared dense query encoding (only when a system searches with query vectors), exact
    exposure then retrievability per system, the figures, topic-aware retrievability, and the
    optional stages (``[stages]``
    switches them off)."""
    out = [INDEX]
    if dense_settings(cfg) is not None:
        out.append(QUERY_VECTORS)
    out += [exposure_stage(spec, cfg.depth) for spec in cfg.systems]
    out += [retrievability_stage(spec) for spec in cfg.systems]
    return [*out, FIGURES, TOPICS, COMPARE, RERANK, EQI, ROBUSTNESS, CTRLQGEN, INTERVENTION,
            *(stage for stage, _ in _REGISTERED.values())]


def report_sections() -> list[ReportSection]:
    """The report hooks of the stages, in the order the report shows them: the searches external
    systems answered (the exposure stages), retrievability (per system), what changes between
    systems and group fairness (figures), inequality within topics, then the optional stages. The report reads them from
    here, with the audit directory alone (no configuration)."""
    hooks = [exposure.report_section, retrievability.report_section]
    return hooks + [s.report for s in (FIGURES, TOPICS, COMPARE, RERANK, EQI, ROBUSTNESS, CTRLQGEN,
                                       INTERVENTION, *(stage for stage, _ in _REGISTERED.values()))
                    if s.report is not None]


__all__ = ["STAGE_OPTIONS", "audit_stages", "register_stage", "registered_stages", "report_sections",
           "summary_stages", "unregister_stage"]
