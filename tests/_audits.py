"""What several test files write into, or do with, a small audit: one home for each piece.

- :func:`stages_off` / :data:`CORE_OFF` / :data:`CORE_STAGES`: the ``[stages]`` table of a test audit's TOML;
- :func:`tiny_adi_audit`: an audit of adi (BM25 under the shared log by default), a store and a
  report in a few seconds;
- :func:`audited`: a module fixture's audit, run once into a temporary folder;
- :func:`seeded`: a new audit folder holding another audit's finished stages (its index), which
  an audit of the same collection then finds cached instead of building them again.
"""

from __future__ import annotations

from typing import Any


def stages_off(*stages: str) -> str:
    """A ``[stages]`` table that switches ``stages`` off (the others keep their default)."""
    return "[stages]\n" + "".join(f"{s} = false\n" for s in stages)


#: the optional stages a quick test audit leaves out (intervention and topics keep their default)
CORE_OFF = ("eqi", "robustness", "ctrlqgen", "rerank", "compare")
CORE_STAGES = stages_off(*CORE_OFF)


#: the TOML of one BM25 system (the default k1 and b)
BM25 = """[[systems]]
name = "bm25"
kind = "bm25"
"""

#: the ``[queries]`` table (and what follows it) of :func:`tiny_adi_audit` by default: the
#: shared log, 150 of its queries under ``--quick``
SHARED_LOG = """source = "log"

[quick]
queries = 150
"""


def tiny_adi_audit(name: str, off: tuple[str, ...], *, queries: str = SHARED_LOG,
                   systems: str = BM25) -> str:
    """The TOML of an audit ``name`` of adi at depth 20 (by default of BM25 under the shared
    log, 150 queries under ``--quick``), the optional stages ``off`` switched off: a store and a
    report in a few seconds. ``queries``: the ``[queries]`` table's lines (and any table after
    it); ``systems``: the ``[[systems]]`` tables."""
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
{queries}
{systems}
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


def seeded(src: Any, dst: Any, stages: tuple[str, ...] = ("index",)) -> Any:
    """``dst``, a new audit folder holding the finished ``stages`` of the audit folder ``src``
    (their records and the files those record as theirs, and the manifest that makes ``dst``
    an audit's folder): an audit run into it over the same collection (and queries) finds them
    cached, as its own rerun would, instead of building them again (a Debian index: ~10 CPU s)."""
    import json
    import shutil
    from pathlib import Path

    src, dst = Path(src), Path(dst)
    files = ["audit.json"]
    for stage in stages:
        rec = json.loads((src / "stages" / f"{stage}.json").read_text(encoding="utf-8"))
        assert rec["status"] == "done", (stage, rec["status"])
        files += [f"stages/{stage}.json", *rec["files"]]
    for f in files:
        (dst / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / f, dst / f)
    return dst
