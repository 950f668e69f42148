"""What every stage uses: tables, the systems able to take part (by capability), switches and
the presence of earlier stages."""

from __future__ import annotations

import pandas as pd

from limelight._io import atomic_path
from limelight.audit.stage import Audit, ConfigView, SystemView
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
            why.append(f"{s.name} (a {s.kind} system lacks {lacks[0]}: {CAPABILITIES[lacks[0]]})")
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
