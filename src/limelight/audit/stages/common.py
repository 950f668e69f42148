"""What every stage uses: tables, the systems able to take part (by capability), switches and
the presence of earlier stages."""

from __future__ import annotations

import pandas as pd

from limelight._io import atomic_path
from limelight.audit.stage import Audit, ConfigView, SystemView
from limelight.errors import with_article
from limelight.retrieval.systems import (
    CAPABILITIES,
    get_kind,
)
from limelight.retrieval.systems import QUERY_VECTORS as USES_QUERY_VECTORS


def write_table(audit: Audit, name: str, df: pd.DataFrame) -> str:
    path = audit.dir.table(name)
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False)
    return path.name


def dense_settings(cfg: ConfigView) -> dict | None:
    specs = [s for s in cfg.systems if s.uses_dense]
    if not specs:
        return None
    from limelight.retrieval.encoders import ONNX_RUN

    p = specs[0].params
    # ONNX_RUN: vectors of the batch-dependent int8 encoder of before are not reused
    return {"model": p.get("model") or "all-MiniLM-L6-v2", "max_seq_length": p.get("max_seq_length"),
            "onnx_run": ONNX_RUN}


def able(cfg: ConfigView, *capabilities: str) -> list[SystemView]:
    """The systems of ``cfg`` whose kind has every one of ``capabilities`` (stages ask for
    capabilities, never for kind names)."""
    return [s for s in cfg.systems if all(get_kind(s.kind).has(c) for c in capabilities)]


def left_out(systems: list[SystemView], *capabilities: str) -> str:
    """Which of ``systems`` lack one of ``capabilities`` and why (one line), or ``""``."""
    why = []
    for s in systems:
        lacks = [c for c in capabilities if not get_kind(s.kind).has(c)]
        if lacks:
            # the capability in words (its key has an underscore: the report shows no field names)
            why.append(f"{s.name} ({with_article(s.kind)} system lacks {lacks[0].replace('_', ' ')}: "
                       f"{CAPABILITIES[lacks[0]]})")
    return ("not run for " + "; ".join(why)) if why else ""


def none_able(audit: Audit, capability: str, what: str) -> str | None:
    """The skip reason when no system has ``capability`` (needed ``what``), else ``None``."""
    if able(audit.cfg, capability):
        return None
    return f"no system {CAPABILITIES[capability].split(' (')[0]} {what}: {left_out(audit.cfg.systems, capability)}"


def uses_vectors(spec: SystemView) -> bool:
    """Whether a system's kind searches with query vectors (dense) rather than terms (BM25)."""
    return get_kind(spec.kind).has(USES_QUERY_VECTORS)


def switched_off(audit: Audit, name: str) -> str | None:
    return None if audit.cfg.stages.get(name, True) else "switched off in [stages]"


def no_qrels(audit: Audit, what: str = "relevance judgments") -> str | None:
    inp = audit.inputs
    return f"{inp.dataset.name} has no qrels ({what})" if inp.eval_queries is None else None


def present(audit: Audit, name: str) -> bool:
    st = audit.status(name)
    return st is not None and st.present


def eval_qids(audit: Audit) -> list[str]:
    return audit.inputs.eval_queries.ids.strings.tolist()


# ---- report sections ----------------------------------------------------------------------------
def section_start(stages, name: str, heading: str) -> tuple[list, dict | None]:
    """The first blocks of a stage's report section: its heading and, when the stage did not run,
    why (``(blocks, None)``); when it ran, the line saying what it left out and why (e.g. a system
    lacking a capability), if any (``(blocks, record)``)."""
    from limelight.audit.stage import Heading, Text

    blocks: list = [Heading(heading)]
    rec = stages.get(name)
    if rec is None or rec.get("status") == "skipped":
        reason = rec.get("reason") if rec else "the stage was not run in this audit"
        blocks.append(Text(f"Skipped: {reason}", tone="skipped"))
        return blocks, None
    if rec.get("reason"):
        blocks.append(Text(rec["reason"], tone="note"))
    return blocks, rec


def section_table(stages, name: str, heading: str, audit_dir
                  ) -> tuple[list, dict | None, pd.DataFrame | None]:
    """``section_start``'s blocks and record, and the stage's table of the same name when the
    stage ran and the table has rows (else None)."""
    blocks, rec = section_start(stages, name, heading)
    df = read_table(audit_dir, name) if rec is not None else None
    return blocks, rec, (df if df is not None and len(df) else None)


def read_table(audit_dir, name: str) -> pd.DataFrame | None:
    """A table of the audit (``None`` when the stage did not write it)."""
    p = audit_dir.table(name)
    return pd.read_parquet(p) if p.exists() else None


def words(df: pd.DataFrame, labels: dict[str, str]) -> pd.DataFrame:
    """``df``'s columns of ``labels`` (in that order), renamed to their words."""
    keep = [c for c in labels if c in df.columns]
    return df[keep].rename(columns={c: labels[c] for c in keep})


def pct(x: float) -> str:
    """A fraction as a percentage for a sentence (one decimal; ``< 0.1 %`` and ``> 99.9 %`` near
    the ends, so that a rounded 0 % or 100 % never hides a document)."""
    p = 100.0 * float(x)
    if 0 < p < 0.1:
        return "< 0.1 %"
    if 99.9 < p < 100:
        return "> 99.9 %"
    return f"{p:.1f} %"
