"""Issue 26: the study report (experiments/ctrlqgen/study_report.py) — the pre-registered verdict
rules on hand-built numbers (every branch, the Bonferroni threshold), and the report rendered
from the real outputs of the finished movies study as committed (experiments/ctrlqgen/results/
movies), before any stage, after exposure, and after its test stages: the full one equals the
committed report.md. The stages that write those outputs run, at a toy size, in
tests/test_ctrlqgen_pipeline.py."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
EXP = REPO / "experiments" / "ctrlqgen"
sys.path.insert(0, str(EXP))
import pipeline  # noqa: E402  (experiments/ctrlqgen/pipeline.py)
import study_report as sr  # noqa: E402  (experiments/ctrlqgen/study_report.py)
from _tiny_models import tiny_t5  # noqa: E402  (tests/_tiny_models.py)
from test_ctrlqgen_pipeline import tiny_config  # noqa: E402  (the pipeline tests' tiny setting)

A = 0.05
BELOW = float(np.nextafter(A, 0))  # the largest corrected p that is significant


def d(diff: float, p_bonf: float, p: float | None = None) -> sr.Diff:
    return sr.Diff(diff, diff - 0.01, diff + 0.01, p_bonf if p is None else p, p_bonf)


# ---- verdict rules on hand-built numbers -------------------------------------------------------


def test_significance_is_strictly_below_alpha_on_the_corrected_p():
    assert sr.significant(BELOW, A) and not sr.significant(A, A)
    assert not sr.significant(0.0501, A) and sr.significant(0.0, A)
    # the same raw p decides differently under m = 8 (0.006 × 8 = 0.048) and m = 10 (0.06)
    assert sr.h1_component(d(-0.02, min(1, 0.006 * 8), p=0.006)) == "reproduced"
    assert sr.h1_component(d(-0.02, min(1, 0.006 * 10), p=0.006)) == "not reproduced"
    # the rule reads the corrected p, never the raw one
    assert sr.h1_component(d(-0.02, 0.2, p=0.001)) == "not reproduced"


@pytest.mark.parametrize("diff, p_bonf, want", [
    (-0.03, 0.001, "reproduced"),
    (-0.03, BELOW, "reproduced"),
    (-0.03, A, "not reproduced"),        # at the threshold: not significant
    (-0.03, 0.3, "not reproduced"),
    (+0.03, 0.001, "refuted"),
    (+0.03, BELOW, "refuted"),
    (+0.03, A, "not reproduced"),
    (+0.03, 1.0, "not reproduced"),
    (0.0, 0.001, "not reproduced"),      # neither negative nor positive
])
def test_h1_component(diff, p_bonf, want):
    assert sr.h1_component(d(diff, p_bonf), A) == want


def test_h1_component_not_tested_and_alpha():
    assert sr.h1_component(None) == "not tested"
    assert sr.h1_component(d(-0.03, 0.02), alpha=0.01) == "not reproduced"
    assert sr.h1_component(d(-0.03, 0.02), alpha=0.05) == "reproduced"


R, F, N = "reproduced", "refuted", "not reproduced"


@pytest.mark.parametrize("narrow, broad, narrow10, broad10, want", [
    (R, R, N, N, "reproduced"),
    (R, R, F, F, "reproduced"),
    (R, N, N, N, "partly"),               # one is reproduced
    (N, R, N, N, "partly"),
    (R, F, N, N, "partly"),               # one reproduced beats one refuted (rule order)
    (F, R, F, N, "partly"),
    (N, N, R, N, "partly"),               # neither at c = 100, but one at c = 10
    (N, N, N, R, "partly"),
    (N, N, R, R, "partly"),
    (F, N, N, R, "partly"),               # the c = 10 clause comes before "refuted"
    (F, N, N, N, "refuted"),              # one refuted, none reproduced
    (N, F, N, N, "refuted"),
    (F, F, F, F, "refuted"),
    (N, N, N, N, "not reproduced"),
    (N, N, F, F, "not reproduced"),       # refuted at c = 10 only: not "refuted"
    ("not tested", R, R, R, "incomplete"),
    (R, "not tested", N, N, "incomplete"),
])
def test_h1_overall(narrow, broad, narrow10, broad10, want):
    assert sr.h1_overall(narrow, broad, narrow10, broad10) == want


def test_any_synthetic_count():
    diffs = {"QGen": d(-0.05, 0.001), "InPars": d(-0.05, A), "CtrlQGen_narrow": d(+0.05, 0.001),
             "CtrlQGen_broad": d(-0.01, BELOW), "CtrlQGen_both": d(-0.05, 0.4)}
    assert sr.any_synthetic_count(diffs, A) == (2, 5)
    diffs["InPars"] = None  # InPars dropped by the budget rule: 4 sets tested
    assert sr.any_synthetic_count(diffs, A) == (2, 4)
    assert sr.any_synthetic_count({}, A) == (0, 0)


@pytest.mark.parametrize("eff, inter, want", [
    ((-0.02, 0.001), (-0.03, 0.001), "reproduced"),
    ((-0.02, BELOW), (-0.03, BELOW), "reproduced"),
    ((-0.02, 0.001), (-0.03, A), "partly"),        # interaction at the threshold
    ((-0.02, 0.001), (-0.03, 0.5), "partly"),
    ((-0.02, 0.001), (+0.03, 0.001), "partly"),    # interaction positive
    ((-0.02, A), (-0.03, 0.001), "not reproduced"),  # the effect itself is not significant
    ((-0.02, 0.2), (-0.03, 0.2), "not reproduced"),
    ((+0.02, 0.001), (-0.03, 0.001), "refuted"),
    ((+0.02, BELOW), (+0.03, 0.9), "refuted"),
    ((+0.02, A), (+0.03, 0.001), "not reproduced"),
    ((0.0, 0.001), (-0.03, 0.001), "not reproduced"),
])
def test_h2_verdict(eff, inter, want):
    assert sr.h2_verdict(d(*eff), d(*inter), A) == want


def test_h2_verdict_not_tested():
    assert sr.h2_verdict(None, d(-0.03, 0.001)) == "not tested"
    assert sr.h2_verdict(d(-0.03, 0.001), None) == "not tested"


def test_narrow_validity_target():
    assert sr.narrow_target(0.80) == "met" and sr.narrow_target(0.93) == "met"
    assert sr.narrow_target(0.7999) == "not met"
    assert sr.narrow_target(0.85, target=0.9) == "not met"


def _hand_tests(cfg: dict) -> dict:
    """A tests.json-shaped dict: Click vs each synthetic set (Click − set) at both cutoffs."""
    def col(diffs: dict[str, float]) -> dict:
        return {"systems": {"Click": {"gini": 0.80}},
                "tests": {k: {"diff": v, "low": v - 0.01, "high": v + 0.005, "p": 0.001,
                              "p_bonf": 0.008} for k, v in diffs.items()}}
    return {"pairs": [], "exploratory_pairs": [], "bonferroni_m": 8,
            # Click − CtrlQGen_narrow > 0: the synthetic set is LOWER (H1-narrow reproduced)
            "Gini test c100": col({"Click vs CtrlQGen_narrow": 0.04, "Click vs QGen": -0.02,
                                   "Click vs CtrlQGen_broad": 0.001}),
            "Gini test c10": col({"Click vs CtrlQGen_narrow": 0.01}),
            # Click − CtrlQGen_broad < 0: the synthetic set is HIGHER (H1-broad refuted)
            "Gini broad_test c100": col({"Click vs CtrlQGen_broad": -0.03}),
            "Gini broad_test c10": col({"Click vs CtrlQGen_broad": -0.03})}


def test_h1_verdicts_read_tests_json_as_synthetic_minus_click():
    cfg = {"tests": {"cutoffs": [10, 100], "alpha": 0.05},
           "biencoder": {"sets": ["Click", "QGen", "CtrlQGen_narrow", "CtrlQGen_broad"]}}
    v = sr.h1_verdicts(cfg, _hand_tests(cfg))
    n = v[("narrow", 100)]["diff"]
    assert (n.diff, n.low, n.high) == pytest.approx((-0.04, -0.045, -0.03))
    assert v[("narrow", 100)]["verdict"] == "reproduced"
    assert v[("broad", 100)]["verdict"] == "refuted" and v[("broad", 100)]["diff"].diff > 0
    assert v["overall"] == "partly"
    # QGen is higher (Click − QGen < 0); CtrlQGen_narrow and CtrlQGen_broad are lower
    assert v["count"] == (2, 3) and set(v["synthetic"]) == {"QGen", "CtrlQGen_narrow",
                                                            "CtrlQGen_broad"}
    assert sr.gini_diff(_hand_tests(cfg), "test", 100, "Click", "QGen").diff == -0.02
    assert sr.gini_diff(_hand_tests(cfg), "test", 100, "InPars", "Click") is None


def test_h2_diffs_pick_the_broad_effect_and_the_interaction_at_the_largest_cutoff():
    row = {"diff": -0.01, "low": -0.02, "high": 0.0, "p": 0.01, "p_bonf": 0.05}
    h2 = {"tests": {"CtrlQGen_broad: suggestions vs control, c=10": {**row, "diff": 9.0},
                    "CtrlQGen_broad: suggestions vs control, c=100": {**row, "gini_C": 0.5},
                    "Click: suggestions vs control, c=100": {**row, "diff": 7.0},
                    "interaction (CtrlQGen_broad effect − Click effect), c=100": {**row, "diff": -0.3}}}
    eff, inter, r = sr.h2_diffs(h2, {"tests": {"cutoffs": [10, 100]}})
    assert eff.diff == -0.01 and inter.diff == -0.3 and r["gini_C"] == 0.5
    assert sr.h2_verdict(eff, inter) == "not reproduced"  # p_bonf = 0.05 is not below α
    assert sr.h2_diffs(None, {"tests": {"cutoffs": [10, 100]}})[:2] == (None, None)


def test_h2_query_concentration_counts_repeats_per_system_and_set():
    rows = ([{"system": "Click", "suggestion": "library", "control": f"q{i}"} for i in range(6)]
            + [{"system": "Click", "suggestion": f"s{i}", "control": "q0"} for i in range(4)]
            + [{"system": "CtrlQGen_broad", "suggestion": "python", "control": "x"}])
    text = "\n".join(sr.h2_query_concentration(rows, top=2))
    # Click S: 10 queries, 5 distinct, the 2 most frequent (library 6, s0 1) hold 7
    assert "| Click | suggestions S | 10 | 5 | 70.0 % |" in text
    # Click C: q0 5 times (once in the first block, 4 in the second), q1-q5 once: top 2 hold 6
    assert "| Click | control C | 10 | 6 | 60.0 % |" in text
    assert "| CtrlQGen_broad | suggestions S | 1 | 1 | 100.0 % |" in text
    assert "- most frequent suggestions, Click: `library` 6, `s0` 1" in text


# ---- the report from the movies study's committed results -------------------------------------


SECTIONS = ("## 1. Table 2 analog: Click test", "## 2. Table 3 analog: broad test",
            "## 3. H1 family", "## 4. Verdicts", "### H1", "### H2", "## 5. H2 curves",
            "## 6. Validity")
COMMITTED = EXP / "results" / "movies"
# what the test stages (tests, h2, validity) and the report itself write under results
LATER = ("tests.json", "h2.json", "h2.png", "h2_queries.parquet", "validity.json", "report.md")


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The movies study (movies.toml: every planned set, three seeds, BM25 and zero-shot) with
    its results folder in a temporary folder; the report is rendered before any stage (an empty
    folder), after exposure (the committed results without what the test stages wrote), and
    after tests, h2 and validity (every committed result)."""
    root = tmp_path_factory.mktemp("ctrlqgen-report")
    cfg = pipeline.read_config(EXP / "movies.toml")
    cfg.update(results=str(root / "results"), work=str(root / "work"))
    cfg_path = root / "cfg.json"
    cfg_path.write_text(json.dumps(cfg))
    study = pipeline.Study(cfg)
    out = {"cfg": cfg, "cfg_path": cfg_path, "study": study}
    study.results.mkdir(parents=True, exist_ok=True)
    out["empty"] = sr.write_report(cfg, study.results)[1]
    shutil.copytree(COMMITTED, study.results, dirs_exist_ok=True,
                    ignore=lambda d, names: [n for n in names if Path(d) == COMMITTED and n in LATER])
    out["partial"] = sr.write_report(cfg, study.results)[1]
    shutil.copytree(COMMITTED, study.results, dirs_exist_ok=True)
    out["full"] = sr.write_report(cfg, study.results)[1]
    return out


def test_report_before_the_stages_ran_says_pending(study):
    text = study["empty"]
    for s in SECTIONS:
        assert s in text
    for stage in ("exposure", "tests", "h2", "validity", "weaklabels"):
        assert f"pending (stage {stage} not run)" in text
    part = study["partial"]
    assert "pending (stage exposure not run)" not in part
    for stage in ("tests", "h2", "validity"):
        assert f"pending (stage {stage} not run)" in part
    assert "| CtrlQGen_both | 3/3 |" in part and "| BM25 | 1/1 |" in part


def test_full_report_is_the_committed_one(study):
    """Rendered again from the committed results, the report is the committed report.md (the
    results folder it names aside): what the study's page says is what its numbers give."""
    committed = (COMMITTED / "report.md").read_text(encoding="utf-8")
    here = f"`{study['study'].results}`"
    assert here in study["full"]
    assert study["full"].replace(here, "`experiments/ctrlqgen/results/movies`") == committed


def _line(text: str, prefix: str) -> str:
    hits = [ln for ln in text.splitlines() if ln.startswith(prefix)]
    assert len(hits) == 1, prefix
    return hits[0]


def test_full_report_sections_tables_and_files(study, capsys):
    rep, study = study, study["study"]
    (study.results / "report.md").unlink()
    assert sr.main(["--config", str(rep["cfg_path"])]) == 0
    printed = capsys.readouterr().out
    text = (study.results / "report.md").read_text(encoding="utf-8")
    assert printed == text == rep["full"]
    assert "pending" not in text
    for s in SECTIONS:
        assert s in text
    assert not list(study.results.glob(".report.md.*")) and not list(study.results.glob(".h2.png.*"))
    assert (study.results / "h2.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![H2: Gini and retrievable fraction vs acceptance](h2.png)" in text
    # Tables 2 and 3: every system, its seeds, and the paper's values beside ours
    for sy, n in (("BM25", 1), ("zero-shot", 1), ("Click", 3), ("QGen", 3), ("InPars", 3),
                  ("CtrlQGen_narrow", 3), ("CtrlQGen_broad", 3), ("CtrlQGen_both", 3)):
        assert text.count(f"| {sy} | {n}/{n} |") >= 2  # Click test and broad test tables
    assert "| Click | 3/3 |" in text and "| 0.769 | 0.767 |" in text        # PAPER_BOOKS
    assert "| 0.035 | 0.878 |" in text                                        # PAPER_TRACKS_BROAD
    exp = json.loads((study.results / "exposure" / "Click-s1.json").read_text())["summary"]
    click_row = next(ln for ln in text.splitlines() if ln.startswith("| Click | 3/3 |"))
    assert f"{exp['test']['gini_c10']:.3f}" in click_row
    # section 3: every planned pair in each of the six metric columns, with both p-values
    tests = json.loads((study.results / "tests.json").read_text())
    assert tests["bonferroni_m"] == 8
    for a, b in sr.H1_PAIRS:
        assert text.count(f"| {a} vs {b} |") == 6
    lo, hi = sr.cutoffs(rep["cfg"])  # c = 10 and c = 100
    t = tests[f"Gini broad_test c{lo}"]["tests"]["Click vs QGen"]
    row = [ln for ln in text.split(f"**Gini, broad test, c = {lo}**")[1].splitlines()
           if ln.startswith("| Click vs QGen |")][0]
    assert f"{t['diff']:+.4f} [{t['low']:+.4f}, {t['high']:+.4f}]" in row
    assert sr.fmt_p(t["p"]) in row and sr.fmt_p(t["p_bonf"]) in row
    # section 5: acceptance × system × cutoff
    h2 = json.loads((study.results / "h2.json").read_text())
    n_rows = sum(len(cur[k]) for cur in h2["curves"].values() for k in cur if k.startswith("c"))
    assert n_rows == len(rep["cfg"]["h2"]["acceptance"]) * 2 * 2
    assert len(re.findall(rf"^\| (Click|CtrlQGen_broad) \| ({lo}|{hi}) \| \d+ % \|", text,
                          re.M)) == n_rows
    for sy in ("Click", "CtrlQGen_broad"):  # the added queries' repetitiveness, from h2_queries
        n = h2["curves"][sy]["n_added"]
        assert re.search(rf"^\| {sy} \| suggestions S \| {n} \| \d+ \| [\d.]+ % \|$", text, re.M)


def test_full_report_verdict_lines_follow_the_results(study):
    rep, study, text = study, study["study"], study["full"]
    lo, hi = sr.cutoffs(rep["cfg"])
    tests = json.loads((study.results / "tests.json").read_text())
    h2 = json.loads((study.results / "h2.json").read_text())
    val = json.loads((study.results / "validity.json").read_text())["sources"]

    def comp(qset, c, s):  # Gini(s) − Gini(Click) = −(Click − s) from tests.json
        t = tests[f"Gini {qset} c{c}"]["tests"][f"Click vs {s}"]
        return sr.Diff(-t["diff"], -t["high"], -t["low"], t["p"], t["p_bonf"])

    narrow, broad = comp("test", hi, "CtrlQGen_narrow"), comp("broad_test", hi, "CtrlQGen_broad")
    vn, vb = sr.h1_component(narrow), sr.h1_component(broad)
    line = _line(text, "- **H1-narrow: ")
    assert line.startswith(f"- **H1-narrow: {vn}**")
    assert f"{narrow.diff:+.4f} [{narrow.low:+.4f}, {narrow.high:+.4f}]" in line
    assert _line(text, "- **H1-broad: ").startswith(f"- **H1-broad: {vb}**")
    low = [sr.h1_component(comp("test", lo, "CtrlQGen_narrow")),
           sr.h1_component(comp("broad_test", lo, "CtrlQGen_broad"))]
    assert _line(text, "- **H1 overall: ").startswith(
        f"- **H1 overall: {sr.h1_overall(vn, vb, *low)}**")
    k = sum(sr.significant(comp("test", hi, s).p_bonf) and comp("test", hi, s).diff < 0
            for s in sr.SYNTHETIC)
    assert _line(text, "- **Any synthetic set: ").startswith(f"- **Any synthetic set: {k} of 5**")
    rows = h2["tests"]
    eff = sr.Diff.from_json(rows[f"CtrlQGen_broad: suggestions vs control, c={hi}"])
    inter = sr.Diff.from_json(rows[f"interaction (CtrlQGen_broad effect − Click effect), c={hi}"])
    assert len(rows) == 5 and all(r["p_bonf"] == min(1.0, 5 * r["p"]) for r in rows.values())
    assert _line(text, "- **H2: ").startswith(f"- **H2: {sr.h2_verdict(eff, inter)}**")
    share = val["CtrlQGen narrow"]["share_term_with_narrow_field"]
    assert _line(text, "- **Narrow validity: ").startswith(
        f"- **Narrow validity: {sr.narrow_target(share)}** (target ≥ 80 %)")
    assert f"n = {val['CtrlQGen narrow']['n']} CtrlQGen narrow queries" in text
    assert "WeakLabeling-IP agreement with the intents of the Click pairs" in text


def test_narrow_miss_categories_in_order():
    """experiments/ctrlqgen/narrow_misses.py: the first matching category wins, valid → None."""
    import narrow_misses as nm  # experiments/ctrlqgen/narrow_misses.py

    narrow, broad, catalog = {"deerhunter", "cimino"}, {"drama"}, {"deerhunter", "cimino", "sony"}
    assert nm.classify({"deerhunter", "x"}, narrow, broad, catalog) is None
    assert nm.classify(set(), narrow, broad, catalog) == "no term"
    assert nm.classify({"deerhuntr"}, narrow, broad, catalog) == "near miss"
    assert nm.classify({"drama"}, narrow, broad, catalog) == "own broad"
    assert nm.classify({"sony"}, narrow, broad, catalog) == "other entity"
    assert nm.classify({"wach"}, narrow, broad, catalog) == "fragment"
    # a near miss beats a broad term in the same query
    assert nm.classify({"cimno", "drama"}, narrow, broad, catalog) == "near miss"


def test_prompt_lengths_serialized_entity_is_longer_and_cut_more(tmp_path, capsys):
    """experiments/ctrlqgen/prompt_lengths.py: s(e) adds the field names to the same values, so it
    is never shorter than the plain values, and the printed share cut follows the counts."""
    import prompt_lengths as pl  # experiments/ctrlqgen/prompt_lengths.py

    cfg = tiny_config(tmp_path, tiny_t5(tmp_path / "t5"))
    study = pipeline.Study(cfg)
    idx = np.arange(40)
    ser, plain = pl.lengths(study, idx, True), pl.lengths(study, idx, False)
    assert len(ser) == len(plain) == 40
    assert (ser >= plain).all() and (ser > plain).any()
    cfg_path = tmp_path / "cfg.json"
    cfg_path.write_text(json.dumps(cfg))
    assert pl.main(["--config", str(cfg_path), "--n", "40"]) == 0
    out = capsys.readouterr().out
    cap = cfg["generator"]["max_input_tokens"]
    assert f"cut at {cap} tokens" in out
    every = pl.lengths(study, np.sort(np.random.default_rng(0).choice(len(study.collection), 40,
                                                                       replace=False)), True)
    assert f"s(e): median {np.median(every):.0f} tokens" in out
    assert f"cut {np.mean(every > cap):.1%}" in out
