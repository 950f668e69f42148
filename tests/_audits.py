"""What several test files write into, or do with, a small audit: one home for each piece.

- :func:`stages_off` / :data:`CORE_STAGES`: the ``[stages]`` table of a test audit's TOML;
- :func:`tiny_adi_audit`: a BM25-only audit of adi, a store and a report in a few seconds;
- :func:`audited`: a module fixture's audit, run once into a temporary folder.
"""

from __future__ import annotations

from typing import Any


def stages_off(*stages: str) -> str:
    """A ``[stages]`` table that switches ``stages`` off (the others keep their default)."""
    return "[stages]\n" + "".join(f"{s} = false\n" for s in stages)


#: the optional stages a quick test audit leaves out (intervention and topics keep their default)
CORE_STAGES = stages_off("eqi", "robustness", "ctrlqgen", "rerank", "compare")


def tiny_adi_audit(name: str, off: tuple[str, ...]) -> str:
    """The TOML of a BM25-only audit ``name`` of adi under the shared log (150 queries under
    ``--quick``, depth 20), the optional stages ``off`` switched off: a store and a report in a
    few seconds."""
    return f"""
[audit]
name = "{name}"
depth = 20
cutoffs = [10, 20]
seed = 0
shard_size = 64

[collection]
source = "adi"

[queries]
source = "log"

[quick]
queries = 150

[[systems]]
name = "bm25"
kind = "bm25"

""" + stages_off(*off)


def audited(tmp_path_factory: Any, config: str, folder: str) -> tuple[Any, Any]:
    """``(AuditDir, results)`` of the audit of ``config`` (TOML text) run into a new temporary
    ``folder``/audit (what a module-scoped ``audit`` fixture returns)."""
    from limelight.audit.config import parse_config
    from limelight.audit.layout import AuditDir
    from limelight.report import run_audit

    out = tmp_path_factory.mktemp(folder) / "audit"
    res = run_audit(parse_config(config), out)
    return AuditDir(out), res
