"""The audit end to end on a shared collection (``configs/quick.toml --quick``: adi, a sample of
the real query log, BM25 + MiniLM + hybrid): report contents, results.json against the exposure
store, rendering in headless Chromium, stage caching, and interrupt + resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from limelight.audit.config import OPTIONAL_STAGES, load_config, parse_config
from limelight.audit.layout import AuditDir
from limelight.audit.runner import AuditRunner, run_audit

REPO = Path(__file__).resolve().parents[1]
QUICK = REPO / "configs" / "quick.toml"


def _run(cfg, out, **kw) -> tuple[dict, AuditRunner]:
    r = AuditRunner(cfg, out, quick=True, **kw)
    return r.run(), r


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    out = tmp_path_factory.mktemp("audit") / "quick"
    res, runner = _run(load_config(QUICK), out)
    return AuditDir(out), res, runner


def test_every_stage_present_or_skipped_with_reason(audit):
    a, res, runner = audit
    cfg = load_config(QUICK)
    man = a.manifest
    assert man["complete"] and man["quick"]
    names = [s["name"] for s in man["stages"]]
    expected = {"index", "query-vectors", "figures", *OPTIONAL_STAGES,
                *(f"exposure-{s.name}" for s in cfg.systems),
                *(f"retrievability-{s.name}" for s in cfg.systems)}
    assert set(names) == expected
    page = a.report_html.read_text()
    for s in man["stages"]:
        assert s["status"] in ("done", "cached", "skipped")
        assert f">{s['name']}<" in page  # the stage table lists it
        if s["status"] == "skipped":
            assert s["reason"] and s["reason"] in page.replace("&#x27;", "'").replace("&quot;", '"')
        assert res["stages"][s["name"]]["status"] == ("skipped" if s["status"] == "skipped" else "present")
    # adi has qrels: comparison and TK re-ranking ran; the sample is the [quick] size
    assert man["stages"][names.index("compare")]["status"] == "done"
    assert man["stages"][names.index("rerank")]["status"] == "done"
    assert res["queries"]["n_queries"] == cfg.quick_queries
    for sys_name, cmp in res["compare"]["measures"].items():
        assert set(cmp) == set(cfg.measures) and all(0 <= v <= 1 for v in cmp.values()), sys_name
    # every embedded figure comes with the command that reproduces it
    n_fig = page.count("<figure>")
    assert n_fig >= len(cfg.cutoffs) + 1
    assert page.count("Reproduce: <code>") == n_fig
    assert "http://" not in page and "https://" not in page  # self-contained
    assert man["stages"][names.index("eqi")]["status"] == "done"
    assert "no CtrlQGen entity schema" in man["stages"][names.index("ctrlqgen")]["reason"]
    for t in ("systems", "evaluation", "preferences", "rerank", "relq", "reverse", "robustness"):
        assert a.table(t).exists(), t


def test_results_match_the_store(audit):
    a, res, _ = audit
    assert set(res["systems"]) == set(a.systems)
    for name, s in res["systems"].items():
        st = a.store(name)
        q, d, rank, _ = st.pair_arrays()
        assert s["n_pairs"] == len(q)
        w = st.queries.weights
        for c in res["cutoffs"]:
            keep = rank <= c
            r = np.bincount(d[keep], weights=w[q[keep]], minlength=len(st.doc_ids))
            srt = np.sort(r)
            n = len(r)
            gini = float(np.dot(2 * np.arange(1, n + 1) - n - 1, srt) / (n * r.sum()))
            assert s[f"gini_c{c}"] == pytest.approx(gini, abs=1e-12)
            assert s[f"retrievable_fraction_c{c}"] == pytest.approx((r > 0).mean(), abs=1e-15)
            assert st.retrievability(c=c).gini == pytest.approx(s[f"gini_c{c}"], abs=1e-15)
        assert s["retrievable_fraction"] == s["retrievable_fraction_c100"]
        assert 0 <= s["gini_c100"] <= 1
        # the per-document table of the audit is the same r(d)
        import pandas as pd

        df = pd.read_parquet(a.retrievability_path(name))
        assert list(df["doc_id"]) == list(st.doc_ids.strings)
        keep = rank <= 100
        np.testing.assert_allclose(df["r_c100"], np.bincount(d[keep], weights=w[q[keep]],
                                                             minlength=len(st.doc_ids)))
    # the dense system retrieves every document of adi at depth 100, BM25 only term matches
    assert res["systems"]["dense"]["n_pairs"] == 82 * res["queries"]["n_queries"]
    assert res["systems"]["bm25"]["n_pairs"] < res["systems"]["dense"]["n_pairs"]


def test_report_renders_in_chromium(audit, tmp_path):
    from limelight.report.browser import render_page  # fails loudly when Chromium is missing

    a, _, _ = audit
    info = render_page(a.report_html, tmp_path / "shot.png")
    assert info["errors"] == []
    assert info["broken_images"] == 0 and info["n_images"] >= 3
    assert info["n_tables"] >= 4
    assert (tmp_path / "shot.png").stat().st_size > 10_000


def test_rerun_reuses_every_stage(audit):
    a, res, _ = audit
    res2, runner = _run(load_config(QUICK), a.path)
    assert res2 == res
    assert {s.status for s in runner.statuses} <= {"cached", "skipped"}
    assert runner._encoder is None  # nothing was encoded or retrieved again


def test_changed_setting_reruns_only_dependents(audit, tmp_path):
    a, res, _ = audit
    out = tmp_path / "copy"
    shutil.copytree(a.path, out)
    text = QUICK.read_text().replace("cutoffs = [10, 100]", "cutoffs = [20, 100]")
    res2, runner = _run(parse_config(text, QUICK), out)
    status = {s.name: s.status for s in runner.statuses}
    assert {k for k, v in status.items() if v == "done"} == \
        {"figures", *(k for k in status if k.startswith("retrievability-"))}
    assert "gini_c20" in res2["systems"]["bm25"] and "gini_c10" not in res2["systems"]["bm25"]
    for name, s in res["systems"].items():  # c=100 did not change
        assert res2["systems"][name]["gini_c100"] == s["gini_c100"]


def test_interrupt_and_resume_gives_identical_results(audit, tmp_path):
    a, res, _ = audit
    text = QUICK.read_text() + "\n[stages]\nrerank = false\nrobustness = false\neqi = false\n"
    cfg = parse_config(text, QUICK)
    out = tmp_path / "interrupted"

    def stop(stage: str, done: int, total: int) -> None:
        if stage == "exposure-dense" and 512 < done < total:  # after the first shard
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_audit(cfg, out, quick=True, progress=stop)
    d = AuditDir(out)
    assert not d.results_json.exists()
    rec = json.loads(d.stage_record("exposure-dense").read_text())
    assert rec["status"] == "running"
    shards = sorted((d.store_dir("dense") / "shards").glob("part-*.parquet"))
    assert 0 < len(shards) < 3  # 1,500 queries in shards of 512: stopped part-way

    logs: list[str] = []
    res2, runner = _run(cfg, out, log=logs.append)
    assert any("exposure-dense: resuming" in line for line in logs)
    status = {s.name: s.status for s in runner.statuses}
    assert status["exposure-bm25"] == "cached" and status["exposure-dense"] == "done"
    assert res2["systems"] == res["systems"]
    assert res2["compare"] == res["compare"]
    for name in a.systems:
        for x, y in zip(AuditDir(out).store(name).pair_arrays(), a.store(name).pair_arrays(), strict=True):
            np.testing.assert_array_equal(x, y)
