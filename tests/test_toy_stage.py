"""A toy audit stage added by this one module (docs/architecture.md, "Extension points"): one
``Stage`` that declares the stage it reads (its dependency), its key, its body, its report
section, and one ``register_stage`` call with its ``[toy]`` options and its summary in
``results.json``. A small audit then runs it after limelight's own stages, checks its options up
front, switches it off with ``[stages] toy = false``, and shows its section in the report, with
no other file touched."""

from __future__ import annotations

import json

import numpy as np
import pytest
from _audits import tiny_adi_audit

from limelight.audit.config import parse_config
from limelight.audit.layout import AuditDir
from limelight.audit.stage import Heading, Option, Stage, StageOptions, Text
from limelight.audit.stages import register_stage, registered_stages, unregister_stage
from limelight.errors import LimelightError
from limelight.report import run_audit

OPTIONS = StageOptions("toy", {"top": Option(int, 3, help="how many of the most exposed documents")})


def _body(audit, progress) -> dict:
    """The ``top`` documents that the most queries expose in the BM25 system's store."""
    top = OPTIONS.values(audit)["top"]
    store = audit.dir.store("bm25")
    n = store.n_exposing()
    best = np.argsort(-n, kind="stable")[:top]
    progress.update(1, 1)
    return {"summary": {"documents": [str(store.doc_ids[int(i)]) for i in best],
                        "queries": [int(n[i]) for i in best]}}


def _report(audit_dir, stages) -> list:
    result = (stages.get("toy", {}).get("result") or {}).get("summary")
    if result is None:
        return []
    return [Heading("The most exposed documents (a toy stage)"),
            Text(f"{len(result['documents'])} documents lead: {', '.join(result['documents'])}.")]


TOY = Stage("toy", "toy: the most exposed documents", _body,
            key=lambda audit: (OPTIONS.values(audit),), inputs=("exposure-bm25",), report=_report)

CONFIG = tiny_adi_audit("adi-toy", ("eqi", "robustness", "ctrlqgen", "rerank", "compare", "intervention",
                                   "topics"))


@pytest.fixture(scope="module")
def toy():
    """The toy stage registered for this module's tests, and removed after them."""
    stage = register_stage(TOY, OPTIONS, summary=True)
    yield stage
    unregister_stage("toy")


def test_a_toy_stage_runs_after_the_others_and_reports(toy, tmp_path):
    out = tmp_path / "audit"
    res = run_audit(parse_config(CONFIG + "\n[toy]\ntop = 2\n"), out, quick=True)
    store = AuditDir(out).store("bm25")
    n = store.n_exposing()
    want = [str(store.doc_ids[int(i)]) for i in np.argsort(-n, kind="stable")[:2]]
    assert res["toy"]["documents"] == want and res["toy"]["queries"] == sorted(n.tolist(), reverse=True)[:2]
    assert json.loads((out / "results.json").read_text())["toy"] == res["toy"]
    last = AuditDir(out).manifest["stages"][-1]  # after every stage of limelight's own
    assert last["name"] == "toy" and last["status"] == "done"
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "The most exposed documents (a toy stage)" in html and want[0] in html
    # switched off like limelight's own optional stages
    res = run_audit(parse_config(CONFIG.replace('topics = false', 'topics = false\ntoy = false')), out, quick=True)
    last = AuditDir(out).manifest["stages"][-1]
    assert "toy" not in res and (last["name"], last["status"]) == ("toy", "skipped")
    assert last["reason"] == "switched off in [stages]"


def test_its_options_are_checked_up_front_and_leave_with_it(toy):
    with pytest.raises(LimelightError, match="top"):
        parse_config(CONFIG + '\n[toy]\ntop = "two"\n')
    with pytest.raises(LimelightError, match="already registered"):
        register_stage(TOY)
    assert "toy" in registered_stages()
    unregister_stage("toy")
    try:
        with pytest.raises(LimelightError, match=r"unknown table \[toy\]"):
            parse_config(CONFIG + "\n[toy]\ntop = 2\n")
    finally:
        register_stage(TOY, OPTIONS, summary=True)
