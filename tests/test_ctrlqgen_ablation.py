"""Issue 26, PLAN.md amendment 2026-11-25: the Table 4 ablation of the CtrlQGen study pipeline
(experiments/ctrlqgen/stages_ablation.py) — no key of the main study changes (tiny setting and
the Debian study's finished work), the verdict rules of findings (I) and (II) on hand-built
numbers (every branch), and a tiny end-to-end ablation run (interrupted and resumed) with real
tiny models: ablation.json with every row and column, no test data in any ablation training
set, generators that keep their kind and entity text, the report's Table 4 analog."""

from __future__ import annotations

import copy
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from limelight.errors import LimelightError
from limelight.querygen.generator import QueryGenerator, entity_dicts
from limelight.querygen.serialize import SEP, plain_text, serialize_entity
from limelight.querygen.weaklabel import find_leaks

REPO = Path(__file__).resolve().parents[1]
EXP = REPO / "experiments" / "ctrlqgen"
sys.path.insert(0, str(EXP))
import pipeline  # noqa: E402  (experiments/ctrlqgen/pipeline.py)
import stages  # noqa: E402
import study_report as sr  # noqa: E402
from _tiny_models import tiny_t5  # noqa: E402  (tests/_tiny_models.py)
from test_ctrlqgen_pipeline import tiny_config  # noqa: E402  (the pipeline tests' tiny setting)

ALL_GENERATORS = ["qgen_ser", "intent_ip", "intent_ipun", "ctrl_ip"]
ROWS = ["QGen", "+(1)", "+(2a,3)", "+(2a,2b,3)", "+(1,2a,3)", "+(1,2a,2b,3)"]
A = 0.05
BELOW = float(np.nextafter(A, 0))


def main_jobs(study: pipeline.Study) -> list[tuple[str, str]]:
    """Every sub-job of the main stages 1-8 (what ``status`` lists without an ablation)."""
    c = study.cfg
    jobs = [("weaklabels", ""), ("generator", "ctrlqgen"), ("generator", "qgen")]
    jobs += [("generate", s) for s in c["generate"]["sets"]]
    jobs += [("finetune", m) for m in study.trained_models()]
    jobs += [("exposure", m) for m in study.all_models()]
    return jobs + [("tests", ""), ("h2", ""), ("validity", "")]


def ablation_config(root: Path, t5: Path) -> dict:
    """The tiny setting with the reference rows' main sets only (seed 0) and every ablation
    generator."""
    cfg = tiny_config(root, t5)
    cfg["generate"]["sets"] = ["qgen", "ctrl_narrow", "ctrl_broad"]
    cfg["biencoder"]["sets"] = ["QGen", "CtrlQGen_narrow", "CtrlQGen_broad"]
    cfg["exposure"]["baselines"] = []
    cfg["ablation"] = {"generators": list(ALL_GENERATORS)}
    return cfg


# ---- no existing key changes -------------------------------------------------------------------


def test_ablation_section_changes_no_main_key(tmp_path):
    """The tiny setting (every planned set) with and without ``[ablation]``: every main sub-job
    has the same key; the ablation's own sub-jobs have keys (folders) of their own."""
    base = tiny_config(tmp_path, tmp_path / "t5")
    base["biencoder"]["sets"] = ["Click", "QGen", "InPars", "CtrlQGen_narrow", "CtrlQGen_broad",
                                 "CtrlQGen_both"]
    with_abl = copy.deepcopy(base)
    with_abl["ablation"] = {"generators": list(ALL_GENERATORS)}
    a, b = pipeline.Study(base), pipeline.Study(with_abl)
    jobs = main_jobs(a)
    assert len(jobs) == 1 + 2 + 4 + 6 + 7 + 3
    assert {j: a.key(*j) for j in jobs} == {j: b.key(*j) for j in jobs}
    assert a.all_models() == b.all_models() and not a.has_ablation and b.has_ablation
    abl = [("generator", g) for g in b.ablation_generators()]
    abl += [("generate", s) for s in b.ablation_sets()]
    abl += [("finetune", m) for m in b.ablation_models()]
    abl += [("exposure", m) for m in b.ablation_models()] + [("ablation", "")]
    assert len(abl) == 4 + 7 + 7 + 7 + 1
    dirs = [b.dir(*j) for j in jobs + abl]
    assert len(set(dirs)) == len(dirs)
    # the ablation sub-jobs hang on the main inputs: another generator setting changes them too
    other = copy.deepcopy(with_abl)
    other["generator"]["lr"] = 2e-3
    c = pipeline.Study(other)
    assert all(c.key(*j) != b.key(*j) for j in abl)
    # status lists the ablation's sub-jobs only when configured
    assert len(pipeline.status(a)) == len(jobs) and len(pipeline.status(b)) == len(jobs) + len(abl)


@pytest.mark.parametrize("domain", ["debian", "movies"])
def test_finished_study_work_keeps_its_keys(domain):
    """Every sub-job the real study has finished (its committed manifest) still has the key it
    was cached under, with the config as committed (Debian: with its [ablation] section) and
    without the section."""
    cfg = pipeline.read_config(EXP / f"{domain}.toml")
    man = json.loads((EXP / "results" / domain / "manifest.json").read_text())
    plain = {k: v for k, v in cfg.items() if k != "ablation"}
    assert ("ablation" in cfg) == (domain == "debian")
    assert len(man) >= 1
    for study in (pipeline.Study(cfg), pipeline.Study(plain)):
        for entry, v in man.items():
            stage, _, name = entry.partition("/")
            if stage == "ablation" or name in pipeline.ABLATION_GENERATORS or \
                    name in pipeline.ABLATION_SETS or name.rsplit("-s", 1)[0] in pipeline.ABLATION_SETS:
                continue
            assert study.key(stage, name) == v["key"], entry
    if domain == "debian":  # the keys of the plan's progress log (PLAN.md)
        s = pipeline.Study(cfg)
        assert (s.key("weaklabels"), s.key("generator", "ctrlqgen"), s.key("generator", "qgen"),
                s.key("generate", "ctrl_narrow")) == ("9a2c6f85bae3", "d36eae922158",
                                                      "0d0ce5979da6", "a39bcc0554df")


def test_ablation_config_errors_are_one_line(tmp_path, capsys):
    cfg = tiny_config(tmp_path, tmp_path / "t5")
    p = tmp_path / "cfg.json"
    p.write_text(json.dumps(cfg))
    assert pipeline.main(["--config", str(p), "run", "ablation"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs an [ablation] section" in err
    cfg["ablation"] = {"generators": ["qgen_ser", "ctrl_un"]}
    with pytest.raises(LimelightError, match="ablation.generators must name") as e:
        pipeline.Study(cfg).ablation_sets()
    assert "\n" not in str(e.value)
    import stages_ablation

    cfg["ablation"] = {"generators": ["qgen_ser"]}  # CtrlQGen_narrow is not a main set here
    with pytest.raises(LimelightError, match="need the main bi-encoders CtrlQGen_narrow-s0"):
        stages_ablation.check_ablation(pipeline.Study(cfg))
    cfg["biencoder"]["seeds"] = [1]
    with pytest.raises(LimelightError, match="biencoder.seeds must hold 0"):
        stages_ablation.check_ablation(pipeline.Study(cfg))
    cfg = ablation_config(tmp_path, tmp_path / "t5")  # nothing has run: the comparisons wait
    stages_ablation.check_ablation(pipeline.Study(cfg))
    with pytest.raises(LimelightError, match="need the exposure of CtrlQGen_broad-s0, "):
        stages_ablation.ablation_tests(pipeline.Study(cfg))


def test_set_intents_and_generators():
    """Every set asks its generator for the right intent and stores an intent label only when
    the generator is intent-aware (the main sets as before)."""
    want = {"qgen": ("narrow", None), "inpars": ("narrow", None), "ctrl_narrow": ("narrow", "narrow"),
            "ctrl_broad": ("broad", "broad"), "qgen_ser": ("narrow", None),
            "intent_ip_broad": ("broad", "broad"), "intent_ipun_narrow": ("narrow", "narrow"),
            "ctrl_ip_broad": ("broad", "broad"), "ctrl_ip_narrow": ("narrow", "narrow")}
    assert {s: pipeline.set_intent(s) for s in want} == want
    assert pipeline.generator_of_set("ctrl_ip_broad") == "ctrl_ip"
    assert pipeline.generator_of_set("inpars") is None
    with pytest.raises(LimelightError, match="unknown generated set"):
        pipeline.generator_of_set("ctrl_both")


# ---- the verdict rules of findings (I) and (II) on hand-built numbers ----------------------------


def d(diff: float, p_bonf: float) -> sr.Diff:
    return sr.Diff(diff, diff - 0.01, diff + 0.01, p_bonf, p_bonf)


LO, HI, NS = d(-0.02, 0.001), d(+0.02, 0.001), d(-0.02, 0.2)  # lower, higher, not significant


@pytest.mark.parametrize("gini, r100, want", [
    ((LO, LO), (NS, NS), "reproduced"),
    ((LO, LO), (HI, d(+0.01, 0.9)), "reproduced"),          # a higher R@100 does not matter
    ((d(-0.02, BELOW), LO), (NS, NS), "reproduced"),
    ((LO, LO), (LO, NS), "not reproduced"),                  # a significantly lower R@100
    ((LO, LO), (NS, d(-0.01, BELOW)), "not reproduced"),
    ((LO, d(-0.02, A)), (NS, NS), "not reproduced"),         # corrected p = α: not significant
    ((LO, NS), (NS, NS), "not reproduced"),                  # only one pair lower
    ((NS, NS), (NS, NS), "not reproduced"),
    ((LO, HI), (NS, NS), "refuted"),                         # either significantly higher
    ((HI, NS), (NS, NS), "refuted"),
    ((HI, HI), (LO, LO), "refuted"),
    ((d(+0.02, A), NS), (NS, NS), "not reproduced"),
    ((d(0.0, 0.001), LO), (NS, NS), "not reproduced"),       # zero is neither lower nor higher
    ((None, LO), (NS, NS), "not tested"),
    ((LO, LO), (NS, None), "not tested"),
])
def test_finding_serialization(gini, r100, want):
    assert sr.finding_serialization(list(gini), list(r100), A) == want


@pytest.mark.parametrize("broad, click, want", [
    ((HI, NS), (NS, NS), "reproduced"),                      # at least one pair
    ((NS, HI), (LO, NS), "reproduced"),                      # a lower Click R@100 is allowed
    ((HI, HI), (NS, NS), "reproduced"),
    ((d(+0.02, BELOW), NS), (NS, NS), "reproduced"),
    ((HI, NS), (HI, NS), "not reproduced"),                  # Click R@100 higher in a pair
    ((HI, NS), (NS, d(+0.01, BELOW)), "not reproduced"),
    ((d(+0.02, A), NS), (NS, NS), "not reproduced"),         # corrected p = α
    ((NS, NS), (NS, NS), "not reproduced"),
    ((LO, NS), (NS, NS), "refuted"),                         # broad R@100 lower in either
    ((NS, LO), (HI, HI), "refuted"),
    ((HI, LO), (NS, NS), "reproduced"),                      # the written order: reproduced first
    ((HI, LO), (HI, NS), "refuted"),
    ((d(0.0, 0.001), NS), (NS, NS), "not reproduced"),
    ((None, HI), (NS, NS), "not tested"),
    ((HI, HI), (None, NS), "not tested"),
])
def test_finding_weaklabeling_un(broad, click, want):
    assert sr.finding_weaklabeling_un(list(broad), list(click), A) == want


def test_findings_read_ablation_json_as_component_added_minus_without():
    """ablation_verdicts takes a − b with a = the row with the component added, whichever way
    round the pair is stored, from the plan's columns (Click test c = 100 for Gini)."""
    def t(diff, p_bonf=0.001):
        return {"diff": diff, "low": diff - 0.01, "high": diff + 0.01, "p": p_bonf / 5,
                "p_bonf": p_bonf}
    cols = {"Gini test c100": {"tests": {"+(1) vs QGen": t(-0.03),
                                         "+(2a,2b,3) vs +(1,2a,2b,3)": t(+0.02)}},
            "Gini test c10": {"tests": {"+(1) vs QGen": t(+0.5)}},   # not the verdict's cutoff
            "R@100 test": {"tests": {"+(1) vs QGen": t(0.0, 1.0), "+(1,2a,2b,3) vs +(2a,2b,3)": t(0.0, 1.0),
                                     "+(2a,2b,3) vs +(2a,3)": t(+0.01, 0.3),
                                     "+(1,2a,2b,3) vs +(1,2a,3)": t(-0.01, 0.4)}},
            "R@100 broad_test": {"tests": {"+(2a,2b,3) vs +(2a,3)": t(+0.04),
                                           "+(1,2a,3) vs +(1,2a,2b,3)": t(+0.01, 0.6)}}}
    cfg = {"tests": {"cutoffs": [10, 100], "alpha": 0.05}}
    v = sr.ablation_verdicts(cfg, {"columns": cols})
    assert v["serialization"] == "reproduced" and v["weaklabeling_un"] == "reproduced"
    assert v["diffs"][("+(1,2a,2b,3)", "+(2a,2b,3)", "gini")].diff == -0.02
    assert v["diffs"][("+(1,2a,2b,3)", "+(1,2a,3)", "r_broad")].diff == -0.01
    cols["R@100 broad_test"]["tests"]["+(1,2a,3) vs +(1,2a,2b,3)"] = t(+0.05)  # stored b − a
    assert sr.ablation_verdicts(cfg, {"columns": cols})["weaklabeling_un"] == "reproduced"
    cols["R@100 broad_test"]["tests"]["+(2a,2b,3) vs +(2a,3)"] = t(-0.04)
    assert sr.ablation_verdicts(cfg, {"columns": cols})["weaklabeling_un"] == "refuted"
    del cols["Gini test c100"]["tests"]["+(1) vs QGen"]
    assert sr.ablation_verdicts(cfg, {"columns": cols})["serialization"] == "not tested"
    assert sr.ablation_verdicts(cfg, None)["weaklabeling_un"] == "not tested"


# ---- a tiny end-to-end ablation run --------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The main stages the ablation needs, then the ablation stopped twice by the budget (an
    ablation generator mid-training, an ablation bi-encoder mid-training) and rerun to the end;
    the report before and after.

    CPU: the study's tiny setting trained for real, stopped twice and resumed, once for the file."""
    root = tmp_path_factory.mktemp("ctrlqgen-ablation")
    t5 = tiny_t5(root / "t5")
    cfg = ablation_config(root, t5)
    study = pipeline.Study(cfg)
    pipeline.run_stages(study, ["weaklabels", "generator", "generate", "finetune", "exposure"])
    out = {"cfg": cfg, "study": study, "root": root, "t5": t5,
           "before": sr.write_report(cfg, study.results)[1], "stops": []}
    for stage, at in (("generator:qgen_ser", 2), ("finetune:intent_ip_narrow-s0", 1)):
        study.stop_hook = lambda st, step, stage=stage, at=at: st == stage and step == at
        with pytest.raises(pipeline.Stopped) as e:
            pipeline.run_stages(study, ["ablation"])
        out["stops"].append(str(e.value))
    study.stop_hook = None
    pipeline.run_stages(study, ["ablation"])
    out["after"] = sr.write_report(cfg, study.results)[1]
    return out


def test_ablation_runs_one_generator_chain_after_another(tmp_path, monkeypatch):
    """A generator's sets, bi-encoders and exposures all come before the next generator (its
    weights are not committed: a session that ends between chains loses none), then the
    reference rows and the comparisons."""
    import stages_ablation
    import stages_eval

    study = pipeline.Study(ablation_config(tmp_path, tmp_path / "t5"))
    calls: list[tuple[str, str]] = []
    for mod, fn in ((stages, "train_generator"), (stages, "generate_set"),
                    (stages, "train_biencoder"), (stages_eval, "exposure_model")):
        monkeypatch.setattr(mod, fn, lambda _study, name, fn=fn: calls.append((fn, name)))
    monkeypatch.setattr(stages_ablation, "ablation_tests", lambda _study: calls.append(("t", "")))
    stages_ablation.stage_ablation(study)
    starts = [calls.index(("train_generator", g)) for g in ALL_GENERATORS]
    assert starts == sorted(starts) and starts[0] == 0
    for g, a, b in zip(ALL_GENERATORS, starts, starts[1:] + [None], strict=True):
        sets = pipeline.ablation_sets_of(g)
        models = [f"{s}-s0" for s in sets]
        want = ([("train_generator", g)] + [("generate_set", s) for s in sets]
                + [("train_biencoder", m) for m in models] + [("exposure_model", m) for m in models])
        assert calls[a:a + len(want)] == want and b in (a + len(want), None)
    refs = [m for m in study.ablation_row_models() if m not in study.ablation_models()]
    assert refs == ["CtrlQGen_broad-s0", "CtrlQGen_narrow-s0", "QGen-s0"]
    tail = [(fn, m) for m in refs for fn in ("train_biencoder", "exposure_model")] + [("t", "")]
    assert calls[-len(tail):] == tail and len(calls) == 4 + 3 * 7 + 2 * len(refs) + 1


def test_ablation_run_resumes_after_budget_stops(tiny, tmp_path):
    """The stops were clean (exit-3 path), and the interrupted generator equals one trained
    without a stop (weights and curve)."""
    study = tiny["study"]
    assert tiny["stops"][0].startswith("generator qgen_ser checkpointed at step 2/")
    assert tiny["stops"][1].startswith("bi-encoder intent_ip_narrow-s0 checkpointed at step 1/")
    other = pipeline.Study(ablation_config(tmp_path, tiny["t5"]))
    pipeline.run_stages(other, ["weaklabels"])
    stages.train_generator(other, "qgen_ser")
    a, b = study.dir("generator", "qgen_ser"), other.dir("generator", "qgen_ser")
    assert a.name == b.name  # the same key
    assert (a / "train.log.jsonl").read_text() == (b / "train.log.jsonl").read_text()
    wa = QueryGenerator.load(a / "model").model.state_dict()
    wb = QueryGenerator.load(b / "model").model.state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not (a / "ckpt").exists()
    lines = pipeline.status(study)[-(4 + 7 + 7 + 7 + 1):]
    assert all(ln.startswith("done") for ln in lines) and lines[-1].split()[1] == "ablation"


def test_ablation_json_has_every_row_and_column(tiny):
    study, cfg = tiny["study"], tiny["cfg"]
    res = json.loads((study.results / "ablation.json").read_text())
    assert list(res["rows"]) == ROWS
    assert res["rows"]["+(1,2a,2b,3)"] == {"narrow_model": "CtrlQGen_narrow-s0",
                                           "broad_model": "CtrlQGen_broad-s0"}
    assert res["rows"]["QGen"] == {"narrow_model": "QGen-s0", "broad_model": "QGen-s0"}
    assert res["rows"]["+(2a,3)"] == {"narrow_model": "intent_ip_narrow-s0",
                                      "broad_model": "intent_ip_broad-s0"}
    assert res["bonferroni_m"] == 5 and res["n_boot"] == cfg["tests"]["n_boot"]
    assert res["pairs"] == [f"{r} vs QGen" for r in ROWS[1:]]
    assert res["extra_pairs"] == ["+(1,2a,2b,3) vs +(2a,2b,3)", "+(2a,2b,3) vs +(2a,3)",
                                  "+(1,2a,2b,3) vs +(1,2a,3)"]
    cols = [f"R@100 {s}" for s in ("test", "broad_test")]
    cols += [f"Gini {s} c{c}" for s in ("test", "broad_test") for c in cfg["tests"]["cutoffs"]]
    assert sorted(res["columns"]) == sorted(cols)
    for name, col in res["columns"].items():
        assert set(col["systems"]) == set(ROWS), name
        assert set(col["tests"]) == set(res["pairs"] + res["extra_pairs"]), name
        for t in col["tests"].values():
            assert t["p_bonf"] == min(1.0, 5 * t["p"]) and t["low"] <= t["high"]
    # the numbers are those of the models' own exposure (the row's narrow model on the Click
    # test, its broad model on the broad test)
    for row, ms in res["rows"].items():
        for qset, model in (("test", ms["narrow_model"]), ("broad_test", ms["broad_model"])):
            summ = json.loads((study.results / "exposure" / f"{model}.json").read_text())["summary"]
            assert res["columns"][f"R@100 {qset}"]["systems"][row]["R@100"] == \
                pytest.approx(summ[qset]["R@100"])
            for c in cfg["tests"]["cutoffs"]:
                assert res["columns"][f"Gini {qset} c{c}"]["systems"][row]["gini"] == \
                    pytest.approx(summ[qset][f"gini_c{c}"])
    man = json.loads((study.results / "manifest.json").read_text())
    assert man["ablation"]["key"] == study.key("ablation")
    assert {f"finetune/{m}" for m in study.ablation_models()} <= set(man)


def test_ablation_generators_train_as_planned_and_keep_kind_and_entity_text(tiny):
    """Each ablation generator: its pairs (IP only where planned), the main step count, and its
    kind and entity text (s(e) or plain values) kept by save/load."""
    study = tiny["study"]
    main = json.loads((study.results / "generator" / "qgen.json").read_text())
    wl = study.dir("weaklabels")
    ctrl = pd.read_parquet(wl / "gen_ctrlqgen.parquet")
    n_pairs = {"qgen_ser": len(pd.read_parquet(wl / "gen_qgen.parquet")),
               "intent_ip": int((ctrl["source"] == "ip").sum()), "intent_ipun": len(ctrl),
               "ctrl_ip": int((ctrl["source"] == "ip").sum())}
    assert 0 < n_pairs["intent_ip"] < n_pairs["intent_ipun"]
    coll, schema = study.collection, study.schema
    ent = entity_dicts(coll, schema, [0])[0]
    for name, spec in pipeline.ABLATION_GENERATORS.items():
        info = json.loads((study.results / "generator" / f"{name}.json").read_text())
        assert info["steps"] == main["steps"] and info["pairs"] == n_pairs[name], name
        assert (info["kind"], info["serialize"]) == (spec["kind"], spec["serialize"])
        g = QueryGenerator.load(info["model"])
        assert (g.kind, g.serialize) == (spec["kind"], spec["serialize"]), name
        text = g.entity_text(ent, ent["id"])
        want = serialize_entity(ent, schema, ent["id"]) if spec["serialize"] else \
            plain_text(ent, schema, ent["id"])
        assert text == want and (SEP in text) == spec["serialize"], name
        assert len((study.results / "generator" / f"{name}.log.jsonl").read_text().splitlines()) > 0
    for s in study.ablation_sets():
        q = pd.read_parquet(study.results / "queries" / f"{s}.parquet")
        assert len(q) > 0 and set(q["intent"].dropna()) == ({pipeline.set_intent(s)[1]} - {None})


def test_no_test_data_in_any_ablation_training_set(tiny):
    """The ablation generators' pairs and every ablation bi-encoder set are entity- and
    text-disjoint from both test sets (the pipeline's leak check), and a leak is caught."""
    study = tiny["study"]
    tests = stages.test_sets(study)
    train = {}
    for g in study.ablation_generators():
        df = stages.generator_training_data(study, g)
        train[f"generator_{g}"] = (df["text"].tolist(), df["entity"].to_numpy())
    for s in study.ablation_sets():
        train[s] = stages.training_set(study, s)
        assert len(train[s][0]) == study.cfg["biencoder"]["n_pairs"]
    assert len(train) == 4 + 7 and find_leaks(train, tests) == []
    # a test query slipped into the IP pairs stops the IP-only generator before it trains
    wl = study.dir("weaklabels")
    path = wl / "gen_ctrlqgen.parquet"
    keep = path.read_bytes()
    try:
        df = pd.read_parquet(path)
        i = int(np.flatnonzero(df["source"].to_numpy() == "ip")[0])
        df.loc[i, "text"] = stages.read_click(study, "test").loc[0, "text"]
        df.to_parquet(path, index=False)
        (study.dir("generator", "ctrl_ip") / "done.json").rename(study.dir("generator", "ctrl_ip") / "done.bak")
        with pytest.raises(LimelightError, match="test data leaks into training"):
            pipeline.run_stages(study, ["ablation"], only="ctrl_ip")
    finally:
        path.write_bytes(keep)
        (study.dir("generator", "ctrl_ip") / "done.bak").rename(study.dir("generator", "ctrl_ip") / "done.json")


def _line(text: str, prefix: str) -> str:
    hits = [ln for ln in text.splitlines() if ln.startswith(prefix)]
    assert len(hits) == 1, prefix
    return hits[0]


def test_report_table4_section(tiny):
    """Pending before the stage ran; then every row with its six columns, the paper's values
    beside, every test, and the findings' verdicts computed from ablation.json."""
    cfg, study = tiny["cfg"], tiny["study"]
    title = "## 7. Table 4 analog: the ablation (PLAN.md amendment 2026-11-25)"
    before, after = tiny["before"], tiny["after"]
    assert title in before and "pending (stage ablation not run)" in before
    assert title in after and "pending (stage ablation not run)" not in after
    assert "ablation done" in after and "ablation pending" in before
    res = json.loads((study.results / "ablation.json").read_text())
    for row in ROWS:
        models = ", ".join(dict.fromkeys(res["rows"][row].values()))
        line = _line(after, f"| {sr.ABLATION_ROW_LABEL[row]} | {models} | ")
        assert len(line.split(" | ")) == 2 + 6 + 2
        col = res["columns"][f"Gini broad_test c{max(cfg['tests']['cutoffs'])}"]
        assert f"{col['systems'][row]['gini']:.3f}" in line.split(" | ")[7]
    assert "| 0.756 / 0.766 | 0.009 / 0.540 |" in _line(after, "| QGen | QGen-s0 |")
    assert "| - / - | 0.033† / 0.480† |" in _line(
        after, "| +(1,2a,2b,3) CtrlQGen, IP+Un | CtrlQGen_narrow-s0, CtrlQGen_broad-s0 |")
    assert "| +(1) serialization | 0.312† |" in after  # the paper's Table 4 below ours
    n_tests = sum(len(c["tests"]) for c in res["columns"].values())
    assert after.count("(extra) |") == 3 * 6 and n_tests == 8 * 6
    v = sr.ablation_verdicts(cfg, res)
    assert _line(after, "- **(I) serialization helps: ").startswith(
        f"- **(I) serialization helps: {v['serialization']}**")
    assert _line(after, "- **(II) WeakLabeling-Un helps only the broad set: ").startswith(
        f"- **(II) WeakLabeling-Un helps only the broad set: {v['weaklabeling_un']}**")
    assert v["serialization"] != "not tested" and v["weaklabeling_un"] != "not tested"
    # a study without [ablation] (movies) has no such section
    plain = {k: x for k, x in cfg.items() if k != "ablation"}
    assert title not in sr.build_report(plain, sr.load_results(study.results))


# ---- a fresh clone: the work folder restored from the committed results ---------------------------


def test_committed_topk_round_trips_exactly_and_small(tmp_path):
    """ids + 1 in the smallest unsigned type (uint16 for Debian's 63,666 entities), read back
    with their values and dtypes; an id outside the catalog is refused."""
    rng = np.random.default_rng(0)
    top = {"test": rng.integers(0, 63666, (50, 100)).astype(np.int32),
           "log": np.full((3, 100), -1, np.int32), "other": np.arange(63666, dtype=np.int64)[None]}
    p = tmp_path / "m.topk.npz"
    pipeline.write_committed_topk(top, 63666, "k1", p)
    back, meta = pipeline.read_committed_topk(p)
    assert meta["key"] == "k1" and meta["code"] == np.dtype(np.uint16).str
    assert set(back) == set(top)
    for s, a in top.items():
        assert back[s].dtype == a.dtype and np.array_equal(back[s], a), s
    with np.load(p) as z:
        assert z["test"].dtype == np.uint16
    with pytest.raises(ValueError, match="outside"):
        pipeline.write_committed_topk({"test": np.asarray([[63666]])}, 63666, "k1", p)


def _fresh_clone(tiny, root: Path, change=None) -> pipeline.Study:
    """The tiny study as a fresh clone sees it: its committed results (copied), no work folder;
    ``change`` edits the config."""
    cfg = copy.deepcopy(tiny["cfg"])
    cfg["work"], cfg["results"] = str(root / "work"), str(root / "results")
    shutil.copytree(tiny["study"].results, root / "results")
    if change:
        change(cfg)
    return pipeline.Study(cfg)


def _states(study: pipeline.Study) -> dict[tuple[str, str], str]:
    lines = pipeline.status(study)
    jobs = study.jobs()
    assert len(lines) == len(jobs)
    for (stage, _), ln in zip(jobs, lines, strict=True):
        assert ln.split()[1] == stage, ln
    return {j: ln.split()[0] for j, ln in zip(jobs, lines, strict=True)}


def _want(study: pipeline.Study, pending: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    return {j: "pending" if j in pending else "restored" for j in study.jobs()}


# never run in the tiny ablation setting: the H1 tests, H2 and validity
NOT_RUN = [("tests", ""), ("h2", ""), ("validity", "")]


def test_fresh_clone_restores_what_the_committed_results_hold(tiny, tmp_path):
    """Status of a fresh clone: every finished sub-job restored, except what a pending stage
    still reads the weights of (H2: its bi-encoders, their exposure's embeddings, the CtrlQGen
    generator); the split, E', the Click and generated sets equal the originals."""
    orig = tiny["study"]
    clone = _fresh_clone(tiny, tmp_path)
    assert not clone.work.exists()
    h2_held = [("generator", "ctrlqgen"), ("finetune", "CtrlQGen_broad-s0"),
               ("exposure", "CtrlQGen_broad-s0")]
    assert _states(clone) == _want(clone, NOT_RUN + h2_held)
    assert _states(clone) == _want(clone, NOT_RUN + h2_held)  # a second status: the same
    d = clone.done("finetune", "QGen-s0")
    assert d["restored"] and d["weights"] == "not kept" and d["key"] == orig.key("finetune", "QGen-s0")
    assert d["loss_last25"] == orig.done("finetune", "QGen-s0")["loss_last25"]
    assert clone.done("generate", "ctrl_narrow")["n_queries"] == orig.done("generate", "ctrl_narrow")["n_queries"]
    wa, wb = orig.dir("weaklabels"), clone.dir("weaklabels")
    for f in ("heldout.npy", "eprime.npy"):
        a, b = np.load(wa / f), np.load(wb / f)
        assert a.dtype == b.dtype and np.array_equal(a, b), f
    assert sorted(p.name for p in wa.glob("*.parquet")) == sorted(pipeline.WEAKLABEL_FILES)
    for f in pipeline.WEAKLABEL_FILES:
        assert (wa / f).read_bytes() == (wb / f).read_bytes(), f
    for s in clone.cfg["generate"]["sets"] + clone.ablation_sets():
        pd.testing.assert_frame_equal(pd.read_parquet(orig.dir("generate", s) / "queries.parquet"),
                                      pd.read_parquet(clone.dir("generate", s) / "queries.parquet"))
    # a restored generator has no weights: a set that would need it says so in one line
    with pytest.raises(LimelightError, match="weights of generator qgen, restored") as e:
        stages.load_set_generator(clone, "qgen")
    assert "\n" not in str(e.value)


def test_fresh_clone_comparisons_read_the_same_topk(tiny, tmp_path):
    """With an H2 that reads none of this setting's bi-encoders (Click is not trained here),
    every exposure is restored with the top-k of the original, and the ablation comparisons made
    again from the restored work give the original ablation.json."""
    import stages_ablation
    from stages_eval import load_topk

    orig = tiny["study"]

    def h2_on_click(cfg):
        cfg["h2"]["models"] = ["Click"]

    clone = _fresh_clone(tiny, tmp_path, h2_on_click)
    assert _states(clone) == _want(clone, NOT_RUN + [("generator", "ctrlqgen")])
    for m in clone.all_models() + clone.ablation_models():
        a, b = load_topk(orig, m), load_topk(clone, m)
        assert set(a) == set(b) == {"test", "broad_test"}, m
        for s in a:
            assert a[s].dtype == b[s].dtype and np.array_equal(a[s], b[s]), (m, s)
        assert not (clone.dir("exposure", m) / "emb.npy").exists()
    (clone.dir("ablation") / "done.json").unlink()
    (clone.results / "ablation.json").unlink()
    stages_ablation.ablation_tests(clone)
    want = json.loads((orig.results / "ablation.json").read_text())
    got = json.loads((clone.results / "ablation.json").read_text())
    assert got["columns"] == want["columns"] and got["rows"] == want["rows"]


def test_changed_config_restores_nothing_of_the_changed_keys(tiny, tmp_path):
    """Another exposure setting: no exposure (nor bi-encoder, ablation) restored, the rest is;
    another split: nothing restored, nothing written."""
    def k10(cfg):
        cfg["exposure"]["k"] = 10

    clone = _fresh_clone(tiny, tmp_path / "k", k10)
    models = clone.all_models() + clone.ablation_models()
    changed = [(st, m) for st in ("finetune", "exposure") for m in models] + [("ablation", "")]
    assert _states(clone) == _want(clone, NOT_RUN + changed + [("generator", "ctrlqgen")])
    assert not (clone.work / "exposure").exists() and not (clone.work / "finetune").exists()

    def split1(cfg):
        cfg["split"]["seed"] = 1

    clone = _fresh_clone(tiny, tmp_path / "s", split1)
    assert set(_states(clone).values()) == {"pending"}
    assert not list(clone.work.rglob("done.json"))


def test_exposure_without_committed_topk_stays_pending_with_its_biencoder(tiny, tmp_path, capsys):
    """No committed top-k for QGen-s0 (as the Debian study's reference models): its exposure and
    its bi-encoder stay pending; a bi-encoder restored without weights whose exposure must be
    computed again is a one-line error naming it, never a silent load."""
    import stages_eval

    def h2_on_click(cfg):
        cfg["h2"]["models"] = ["Click"]

    clone = _fresh_clone(tiny, tmp_path, h2_on_click)
    (clone.results / "exposure" / "QGen-s0.topk.npz").unlink()
    pending = [("finetune", "QGen-s0"), ("exposure", "QGen-s0"), ("generator", "ctrlqgen")]
    assert _states(clone) == _want(clone, NOT_RUN + pending)
    with pytest.raises(LimelightError, match="exposure of QGen-s0 needs its bi-encoder"):
        stages_eval.encoder_for(clone, "QGen-s0")
    # a restored bi-encoder (weights not kept) whose exposure is pending
    info = {**clone.done("finetune", "CtrlQGen_narrow-s0"), "name": "QGen-s0",
            "key": clone.key("finetune", "QGen-s0")}
    pipeline.write_json(info, clone.dir("finetune", "QGen-s0") / "done.json")
    with pytest.raises(LimelightError, match="bi-encoder QGen-s0 has no weights here") as e:
        stages_eval.exposure_model(clone, "QGen-s0")
    assert "\n" not in str(e.value) and not clone.done("exposure", "QGen-s0")
    p = tmp_path / "cfg.json"
    p.write_text(json.dumps(clone.cfg))
    capsys.readouterr()
    assert pipeline.main(["--config", str(p), "status"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bi-encoder QGen-s0 was restored without its weights" in err
