"""The stages of an audit, one module each, as data (:class:`limelight.audit.stage.Stage`): each
calls the library capability that owns the computation and records what it produced; a stage
whose input is missing, or that does not apply to the audit's collection, configuration or
systems (stages ask the systems' kinds for capabilities), is skipped with a reason.
:func:`audit_stages` lists them in the order the runner runs them.

Stage keys chain: a stage's key includes the keys of the stages it reads, so a changed setting
reruns exactly the stages that depend on it.
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
from limelight.audit.stages.common import dense_settings
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
    return [*out, FIGURES, TOPICS, COMPARE, RERANK, EQI, ROBUSTNESS, CTRLQGEN, INTERVENTION]


def report_sections() -> list[ReportSection]:
    """The report hooks of the stages, in the order the report shows them: the searches external
    systems answered (the exposure stages), retrievability (per system), what changes between
    systems and group fairness (figures), inequality within topics, then the optional stages. The report reads them from
    here, with the audit directory alone (no configuration)."""
    hooks = [exposure.report_section, retrievability.report_section]
    return hooks + [s.report for s in (FIGURES, TOPICS, COMPARE, RERANK, EQI, ROBUSTNESS, CTRLQGEN, INTERVENTION)
                    if s.report is not None]


__all__ = ["STAGE_OPTIONS", "audit_stages", "report_sections"]
