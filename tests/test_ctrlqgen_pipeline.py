"""Issue 26: the resumable CtrlQGen study pipeline (experiments/ctrlqgen/pipeline.py) and the
library pieces it needs — exact resume of generator and bi-encoder training, the entity-disjoint
Click split, the leakage check and the one-line errors — on tiny real settings (the movies
catalog, real MiniLM, a tiny T5 made here with SmolLM2's tokenizer)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from limelight.errors import LimelightError
from limelight.querygen.generator import QueryGenerator, entity_dicts, training_pairs
from limelight.querygen.serialize import load_schema
from limelight.querygen.weaklabel import (
    assert_no_leakage,
    click_dataset,
    find_leaks,
    normalize_query,
)
from limelight.retrieval.finetune import finetune_biencoder

REPO = Path(__file__).resolve().parents[1]
EXP = REPO / "experiments" / "ctrlqgen"
sys.path.insert(0, str(EXP))
import pipeline  # noqa: E402  (experiments/ctrlqgen/pipeline.py)
from _tiny_models import tiny_t5  # noqa: E402  (tests/_tiny_models.py)


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    return tiny_t5(tmp_path_factory.mktemp("t5") / "t5")


def _pairs(gen, movies, n=12):
    s = load_schema("movies")
    idx = np.asarray([i for i in range(300) if movies.fields["Major Genre"][i]][:n])
    ents = entity_dicts(movies, s, idx)
    return training_pairs(gen, movies, idx, [str(e["Title"]).lower() for e in ents],
                          ["narrow" if i % 2 else "broad" for i in range(len(idx))])


# ---- library: exact resume ---------------------------------------------------------------------


@pytest.mark.parametrize("backbone", ["t5", "smollm2"])
def test_generator_fit_resumes_exactly(backbone, t5, movies, tmp_path):
    """Stopped after 2 of 5 steps and resumed = one uninterrupted run (weights and losses)."""
    path = t5 if backbone == "t5" else None
    kw = dict(steps=5, batch_size=3, lr=1e-3, train_layers=1, seed=4)

    def make():
        return QueryGenerator(path, kind="ctrlqgen", schema="movies", max_input_tokens=16,
                              max_new_tokens=4)

    a = make()
    prompts, targets = _pairs(a, movies)
    full = a.fit(prompts, targets, **kw)
    b = make()
    part = b.fit(prompts, targets, checkpoint_dir=tmp_path / "ck", stop=lambda s: s == 2, **kw)
    assert not part.completed and len(part.losses) == 2
    c = make()  # a fresh process: nothing but the checkpoint carries over
    rest = c.fit(prompts, targets, checkpoint_dir=tmp_path / "ck", checkpoint_every=2, **kw)
    assert rest.completed and rest.resumed_from == 2
    assert rest.losses == full.losses
    sa, sc = a.model.state_dict(), c.model.state_dict()
    assert all(torch.equal(sa[k], sc[k]) for k in sa)


def test_causal_loss_on_query_positions_equals_the_full_model_loss(movies):
    """The vocabulary projection on the query tokens only gives the model's own loss."""
    g = QueryGenerator(None, kind="ctrlqgen", schema="movies", max_input_tokens=24, max_new_tokens=6)
    prompts, targets = _pairs(g, movies, 4)
    batch = g._batch(prompts, targets)
    with torch.no_grad():
        assert abs(float(g.loss(batch)) - float(g.model(**batch).loss)) < 1e-5


def test_generator_checkpoint_of_other_base_or_data_is_refused(t5, movies, tmp_path):
    other = tiny_t5(tmp_path / "t5b", d_model=48)
    a = QueryGenerator(t5, kind="ctrlqgen", schema="movies", max_input_tokens=16, max_new_tokens=4)
    prompts, targets = _pairs(a, movies)
    a.fit(prompts, targets, steps=3, batch_size=3, checkpoint_dir=tmp_path / "ck", stop=lambda s: True)
    b = QueryGenerator(other, kind="ctrlqgen", schema="movies", max_input_tokens=16, max_new_tokens=4)
    with pytest.raises(LimelightError, match="checkpoint written for base model") as e:
        b.fit(prompts, targets, steps=3, batch_size=3, checkpoint_dir=tmp_path / "ck")
    assert "\n" not in str(e.value)
    with pytest.raises(LimelightError, match="checkpoint written for data"):
        a.fit(prompts[:-1], targets[:-1], steps=3, batch_size=3, checkpoint_dir=tmp_path / "ck")
    saved = QueryGenerator.load(b.save(tmp_path / "gb"))
    assert saved.base_model == b.base_model
    with pytest.raises(LimelightError, match="was trained from base model"):
        saved.check_base(a)


def test_biencoder_finetune_resumes_exactly(movies, tmp_path):
    from limelight.retrieval.dense import Encoder

    idx = np.arange(10)
    docs = [f"{movies.fields['Title'][i]} {movies.fields['Major Genre'][i]}" for i in idx]
    queries = [str(movies.fields["Title"][i]).lower() for i in idx]
    kw = dict(steps=4, batch_size=4, max_seq_length=16, lr=1e-4, seed=3, doc_keys=idx.tolist())
    full = finetune_biencoder(queries, docs, tmp_path / "full", **kw)
    part = finetune_biencoder(queries, docs, tmp_path / "res", checkpoint_dir=tmp_path / "ck",
                              stop=lambda s: s == 2, **kw)
    assert not part.completed and not (tmp_path / "res").exists()
    rest = finetune_biencoder(queries, docs, tmp_path / "res", checkpoint_dir=tmp_path / "ck", **kw)
    assert rest.completed and rest.resumed_from == 2 and rest.losses == full.losses
    assert not (tmp_path / "ck" / "train_state.pt").exists()
    ea = Encoder(tmp_path / "full", variant="torch-fp32").encode(docs)
    eb = Encoder(tmp_path / "res", variant="torch-fp32").encode(docs)
    assert np.array_equal(ea, eb)


# ---- library: entity-disjoint Click set and leakage -----------------------------------------------


def test_click_heldout_is_entity_and_text_disjoint(movies):
    held = np.arange(0, len(movies), 5)
    cs = click_dataset(movies, "movies", 600, 0.75, (0.5, 0.2, 0.3), n_broad_test=100, seed=1,
                       heldout=held)
    train_e = set(cs.entity_idx["train"].tolist()) | set(cs.entity_idx["val"].tolist())
    test_e = set(cs.entity_idx["test"].tolist()) | set(cs.entity_idx["broad_test"].tolist())
    assert test_e <= set(held.tolist()) and not train_e & set(held.tolist())
    seen = {normalize_query(q) for s in ("train", "val") for q in cs.queries[s].texts}
    assert not any(normalize_query(q) in seen for s in ("test", "broad_test") for q in cs.queries[s].texts)
    assert len(cs.queries["test"]) > 50 and set(cs.queries["broad_test"].intents) == {"broad"}
    assert np.array_equal(cs.heldout, held)


def test_leakage_check_fails_on_a_leak():
    test = {"click_test": (["alien", "space horror"], np.asarray([3, 4]))}
    assert find_leaks({"ok": (["toy story"], np.asarray([1]))}, test) == []
    with pytest.raises(LimelightError, match="entities of test set 'click_test'"):
        assert_no_leakage({"gen": (["toy story"], np.asarray([4]))}, test)
    with pytest.raises(LimelightError, match="queries of test set 'click_test'.*'Space  Horror'"):
        assert_no_leakage({"gen": (["Space  Horror"], np.asarray([9]))}, test)


def test_click_popularity_from_a_numeric_field(movies, tmp_path):
    """click.popularity = 'field' (the movies study: IMDB Votes): weights 1 + log(1 + v), a
    missing value counted as 0 votes; a missing, absent or non-numeric field is a one-line error."""
    import stages

    cfg = {"catalog": "movies", "schema": "movies", "work": str(tmp_path / "w"),
           "click": {"popularity": "field", "popularity_field": "IMDB Votes"}}
    w = stages.popularity(pipeline.Study(cfg))
    votes = movies.fields["IMDB Votes"].tolist()
    assert w.shape == (len(movies),)
    for i in (0, 3, 6):  # 1,071 votes, none, 15,133 votes
        assert w[i] == pytest.approx(1 + np.log1p(votes[i] or 0))
    assert votes[3] is None and w[3] == 1.0
    cfg["click"]["popularity"] = "uniform"
    assert stages.popularity(pipeline.Study(cfg)) is None
    for field, msg in ((None, "needs click.popularity_field"), ("Votes", "is not a field"),
                       ("Title", "must hold counts")):
        cfg["click"] = {"popularity": "field", "popularity_field": field}
        with pytest.raises(LimelightError, match=msg) as e:
            stages.popularity(pipeline.Study(cfg))
        assert "\n" not in str(e.value)
    cfg["click"] = {"popularity": "votes"}
    with pytest.raises(LimelightError, match="'revdeps', 'field' or 'uniform'"):
        stages.popularity(pipeline.Study(cfg))


# ---- the pipeline on a tiny setting ------------------------------------------------------------


def tiny_config(tmp_path: Path, t5: Path) -> dict:
    """Every stage at a toy size: 150 films, a tiny T5 generator, 2-step MiniLM fine-tuning."""
    return {
        "name": "tiny", "catalog": "movies", "schema": "movies", "catalog_subset": 150,
        "work": str(tmp_path / "work"), "results": str(tmp_path / "results"), "threads": 1,  # one worker a core (make test): 2 threads spun on a shared core, ~2x the CPU s
        "split": {"heldout_fraction": 0.2, "seed": 0},
        "click": {"n_queries": 300, "splits": [0.5, 0.3, 0.2], "p_narrow": 0.75,
                  "n_broad_test": 20, "popularity": "uniform", "seed": 0},
        "weaklabels": {"n_ip": 16, "n_un": 8, "ip_max_seq_length": 16, "n_eprime": 20, "seed": 2},
        "generator": {"backbone": str(t5), "max_input_tokens": 24, "max_new_tokens": 4,
                      "batch_size": 4, "train_layers": 1, "lr": 1e-3, "epochs": 0.5,
                      "checkpoint_every": 2, "seed": 0},
        "generate": {"sets": ["qgen", "ctrl_narrow", "ctrl_broad", "inpars"], "batch_size": 16, "chunk": 10,
                     "inpars_shots": 2, "seed": 5},
        "biencoder": {"sets": ["Click", "QGen", "CtrlQGen_broad", "InPars"], "seeds": [0], "n_pairs": 8,
                      "steps": 2, "batch_size": 4, "lr": 1e-4, "max_seq_length": 16,
                      "checkpoint_every": 1},
        "exposure": {"variant": "torch-fp32", "max_seq_length": 16, "k": 20, "n_log": 0,
                     "chunk": 64, "baselines": ["BM25"]},
        "tests": {"cutoffs": [2, 10], "n_boot": 40, "alpha": 0.05, "seed": 0},
        "h2": {"models": ["Click", "CtrlQGen_broad"], "n_queries": 4, "top_k": 2,
               "n_suggestions": 2, "acceptance": [0.0, 1.0], "seed": 9},
    }


def _stop_at(stage: str, at: int):
    return lambda st, step: st == stage and step == at


def test_pipeline_interrupted_stages_resume_to_the_same_output(tmp_path, t5):
    """Generator training stopped after 2 steps and generation after 1 chunk, each rerun: the
    same generator, training curve and queries as an uninterrupted run."""
    cfg_a = tiny_config(tmp_path / "a", t5)
    a = pipeline.Study(cfg_a)
    pipeline.run_stages(a, ["weaklabels", "generator", "generate"], only="ctrl")
    b = pipeline.Study(tiny_config(tmp_path / "b", t5))
    b.stop_hook = _stop_at("generator:ctrlqgen", 2)
    pipeline.run_stages(b, ["weaklabels"])
    with pytest.raises(pipeline.Stopped, match="step 2/"):
        pipeline.run_stages(b, ["generator"], only="ctrl")
    b.stop_hook = _stop_at("generate:ctrl_narrow", 1)
    pipeline.run_stages(b, ["generator"], only="ctrl")
    with pytest.raises(pipeline.Stopped, match="before chunk 2/"):
        pipeline.run_stages(b, ["generate"], only="ctrl_narrow")
    b.stop_hook = None
    pipeline.run_stages(b, ["generate"], only="ctrl")
    ga = a.dir("generator", "ctrlqgen")
    gb = b.dir("generator", "ctrlqgen")
    assert (ga / "train.log.jsonl").read_text() == (gb / "train.log.jsonl").read_text()
    wa = QueryGenerator.load(ga / "model").model.state_dict()
    wb = QueryGenerator.load(gb / "model").model.state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    for s in ("ctrl_narrow", "ctrl_broad"):
        qa = pd.read_parquet(a.dir("generate", s) / "queries.parquet")
        qb = pd.read_parquet(b.dir("generate", s) / "queries.parquet")
        pd.testing.assert_frame_equal(qa, qb)
        assert len(qa) > 0
    assert a.key("generate", "ctrl_narrow") == b.key("generate", "ctrl_narrow")


def test_pipeline_end_to_end_and_no_test_data_in_any_training_set(tmp_path, t5):
    """Every stage of the study at its toy size, then no test query in any training set.

    CPU: the only run of every stage in order (generator, generation, bi-encoders, exposure,
    tests, H2, validity); ~30 CPU s at one thread."""
    study = pipeline.Study(tiny_config(tmp_path, t5))
    pipeline.run_stages(study, list(pipeline.STAGES))
    import stages

    tests = stages.test_sets(study)
    train = {s: stages.training_set(study, s) for s in study.cfg["biencoder"]["sets"]}
    wl = study.dir("weaklabels")
    for name in ("gen_ctrlqgen", "gen_qgen"):
        df = pd.read_parquet(wl / f"{name}.parquet")
        train[name] = (df["text"].tolist(), df["entity"].to_numpy())
    for s in ("train", "val"):
        df = stages.read_click(study, s)
        train[f"click_{s}"] = (df["text"].tolist(), df["entity"].to_numpy())
    assert find_leaks(train, tests) == []
    # a leak is caught: a test pair slipped into the Click training split fails the bi-encoder stage
    leaked = stages.read_click(study, "train")
    leaked.loc[0, ["text", "entity"]] = stages.read_click(study, "test").loc[0, ["text", "entity"]]
    leaked.to_parquet(wl / "click_train.parquet", index=False)
    (study.dir("finetune", "Click-s0") / "done.json").unlink()
    with pytest.raises(LimelightError, match="test data leaks into training"):
        pipeline.run_stages(study, ["finetune"], only="Click")
    res = json.loads((study.results / "tests.json").read_text())
    assert res["bonferroni_m"] == 4  # the planned pairs among the configured sets
    assert {"R@100 test", "Gini test c10", "Gini broad_test c2"} <= set(res)
    h2 = json.loads((study.results / "h2.json").read_text())
    assert {"Click", "CtrlQGen_broad"} == set(h2["curves"]) and h2["tests"]
    # the H2 query sets are committed with the results: one row per added suggestion, its control
    # query at the same position, the acceptance draw that nests the accepted sets
    hq = pd.read_parquet(study.results / "h2_queries.parquet")
    for sy, g in hq.groupby("system"):
        assert len(g) == h2["curves"][sy]["n_added"] > 0
        assert g["position"].tolist() == list(range(len(g)))
        accepted = {a: set(g.loc[g["u"] < a, "position"]) for a in (0.25, 0.5, 1.0)}
        assert accepted[0.25] <= accepted[0.5] <= accepted[1.0] == set(g["position"])
    assert hq["entity_id"].isin(study.collection.ids.strings).all()
    assert set(hq["test_query"]) <= set(range(len(stages.read_click(study, "test"))))
    # a finished stage whose query file went missing writes it again, the same
    (study.results / "h2_queries.parquet").unlink()
    pipeline.run_stages(study, ["h2"])
    pd.testing.assert_frame_equal(pd.read_parquet(study.results / "h2_queries.parquet"), hq)
    assert pipeline.status(study)[0].startswith("done")


def _run_main(cfg: dict, tmp_path: Path, capsys, *args: str) -> tuple[int, str]:
    """``pipeline.py --config CFG run ARGS`` through its entry point in this process (what
    ``python pipeline.py`` runs, without a new interpreter's imports): exit status, stderr."""
    p = tmp_path / "cfg.json"
    p.write_text(json.dumps(cfg))
    capsys.readouterr()
    rc = pipeline.main(["--config", str(p), "run", *args])
    return rc, capsys.readouterr().err


def test_bad_inputs_give_one_line_errors(tmp_path, t5, monkeypatch, capsys):
    # a catalog without the configured fields (the movies catalog under the debian schema)
    cfg = tiny_config(tmp_path / "a", t5)
    cfg["schema"] = "debian"
    rc, err = _run_main(cfg, tmp_path, capsys, "weaklabels")
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith("error: schema 'debian'") and "lacks" in err
    # a generator trained from another base model than the configured backbone
    other = tiny_t5(tmp_path / "t5b", d_model=48)
    g = QueryGenerator(other, kind="ctrlqgen", schema="movies")
    g.save(tmp_path / "g-other")
    cfg = tiny_config(tmp_path / "b", t5)
    cfg["generator"]["use_ctrlqgen"] = str(tmp_path / "g-other")
    rc, err = _run_main(cfg, tmp_path, capsys, "weaklabels", "generator")
    assert rc == 2 and err.count("\n") == 1
    assert "was trained from base model t5b" in err
    # an empty generation (a generator that only produces rejected queries)
    cfg_path = tmp_path / "c.json"
    cfg_path.write_text(json.dumps(tiny_config(tmp_path / "c", t5)))
    assert pipeline.main(["--config", str(cfg_path), "--only", "ctrl", "run", "weaklabels",
                          "generator"]) == 0
    monkeypatch.setattr(QueryGenerator, "generate_from_prompts",
                        lambda self, prompts, n=1, **kw: [[""] * n for _ in prompts])
    capsys.readouterr()
    rc = pipeline.main(["--config", str(cfg_path), "--only", "ctrl_narrow", "run", "generate"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith("error: generation of set ctrl_narrow produced no acceptable query")
