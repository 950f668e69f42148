"""The stages of the issue-26 pipeline (see pipeline.py for the order and the caching rules).

Each ``stage_*`` function takes the ``Study`` and an optional ``only`` filter on sub-job names,
skips sub-jobs whose ``done.json`` exists, continues started ones, and raises ``Stopped`` (after
saving its state) when the study's budget is spent.
"""

from __future__ import annotations

import json
import math
import numbers
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
from study import (
    ABLATION_SETS,
    SET_SOURCES,
    WEAKLABEL_FILES,
    Stopped,
    Study,
    eprime_of,
    heldout_of,
    load_avg,
    log,
    write_json,
    write_parquet,
)

from limelight.errors import LimelightError

SPLITS = ("train", "val", "test", "broad_test")
TEST_SETS = ("test", "broad_test")


def _want(only: str | None, name: str) -> bool:
    return only is None or only in name


# ---- 1. weak labels ----------------------------------------------------------------------------


def popularity(study: Study) -> np.ndarray | None:
    """Entity weights of the Click log (``click.popularity``): ``"revdeps"``, 1 + log(1 + reverse
    dependencies) (Debian); ``"field"``, 1 + log(1 + the numeric field ``click.popularity_field``),
    e.g. the movies' ``IMDB Votes`` (a missing value counts as 0); ``"uniform"``: None."""
    how = study.cfg["click"].get("popularity", "uniform")
    if how == "uniform":
        return None
    if how == "field":
        return field_popularity(study.collection, study.cfg["click"].get("popularity_field"))
    if how != "revdeps":
        raise LimelightError(f"click.popularity must be 'revdeps', 'field' or 'uniform', got {how!r}")
    coll = study.collection
    if "depends" not in coll.fields or "name" not in coll.fields:
        raise LimelightError(f"click.popularity = 'revdeps' needs the fields 'depends' and 'name', "
                             f"which catalog {coll.name!r} lacks")
    deps = [d for ds in coll.fields["depends"].tolist() for d in (ds or [])]
    names, counts = np.unique(np.asarray(deps, dtype=object), return_counts=True)
    rev = dict(zip(names.tolist(), counts.tolist(), strict=True))
    n = np.asarray([rev.get(x, 0) for x in coll.fields["name"].tolist()], dtype=np.float64)
    return 1 + np.log1p(n)


def field_popularity(coll, name: str | None) -> np.ndarray:
    """1 + log(1 + v) of a numeric catalog field (missing: v = 0); a one-line error when the
    field is absent, not numeric or negative."""
    if not name:
        raise LimelightError("click.popularity = 'field' needs click.popularity_field (a numeric "
                             "field of the catalog, e.g. 'IMDB Votes')")
    if name not in coll.fields:
        raise LimelightError(f"click.popularity_field {name!r} is not a field of catalog "
                             f"{coll.name!r}")
    vals = []
    for i, v in enumerate(coll.fields[name].tolist()):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            v = 0
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or v < 0:
            raise LimelightError(f"click.popularity_field {name!r} must hold counts ≥ 0 or be "
                                 f"empty; entity {coll.ids.strings[i]!r} has {v!r}")
        vals.append(float(v))
    return 1 + np.log1p(np.asarray(vals, dtype=np.float64))


def click_frames(study: Study, click) -> dict[str, pd.DataFrame]:
    ids = study.collection.ids.strings
    return {s: pd.DataFrame({"query_id": click.queries[s].ids.strings,
                             "text": click.queries[s].texts.astype(str),
                             "intent": click.queries[s].intents.astype(str),
                             "entity": click.entity_idx[s].astype(np.int64),
                             "entity_id": ids[click.entity_idx[s]]}) for s in SPLITS}


def read_click(study: Study, split: str) -> pd.DataFrame:
    return pd.read_parquet(study.dir("weaklabels") / f"click_{split}.parquet")


def test_sets(study: Study) -> dict:
    """The held-out sets as ``name -> (texts, entity indices)`` for the leakage checks."""
    return {f"click_{s}": (read_click(study, s)["text"].tolist(), read_click(study, s)["entity"].to_numpy())
            for s in TEST_SETS}


def generator_pairs(study: Study, click: dict[str, pd.DataFrame], lab, test_texts: set) -> tuple:
    """(CtrlQGen pairs, QGen pairs, WeakLabeling-IP agreement) from the Click train split: the
    CtrlQGen pairs are the library's ``ip_un_pairs`` (IP on the first ``n_ip`` Click train
    pairs, ``n_un`` Un pairs outside the held-out entities, test texts dropped)."""
    from limelight.querygen.weaklabel import ip_un_pairs
    from limelight.retrieval.dense import Encoder

    wl = study.cfg["weaklabels"]
    coll, schema = study.collection, study.schema
    n_qgen = wl.get("n_qgen", wl["n_ip"])
    if len(click["train"]) < max(n_qgen, wl["n_ip"]):
        raise LimelightError(f"the Click train split has {len(click['train'])} pairs, weaklabels "
                             f"needs {max(n_qgen, wl['n_ip'])}: raise click.n_queries")
    qgen = click["train"].iloc[:n_qgen][["entity", "entity_id", "text"]].reset_index(drop=True)
    tr = click["train"]
    enc = Encoder(max_seq_length=wl["ip_max_seq_length"], variant="torch-fp32")
    pairs = ip_un_pairs(coll, schema, tr["text"].tolist(), tr["entity"].to_numpy(),
                        tr["intent"].tolist(), n_ip=wl["n_ip"], n_un=wl["n_un"], seed=wl["seed"],
                        labeler=lab, encoder=enc,
                        exclude_entities=np.load(study.dir("weaklabels") / "heldout.npy"),
                        exclude_texts=test_texts)
    return pairs.to_frame(coll), qgen, pairs.agreement, pairs.info


def stage_weaklabels(study: Study, only: str | None = None) -> None:
    """Split, Click log, generator training pairs, E', leakage check (one job, minutes)."""
    from limelight.querygen.weaklabel import (
        WeakLabelingUn,
        assert_no_leakage,
        click_dataset,
        normalize_query,
    )

    if study.done("weaklabels"):
        return
    t0 = time.perf_counter()
    c, d = study.cfg, study.dir("weaklabels")
    d.mkdir(parents=True, exist_ok=True)
    coll, schema = study.collection, study.schema
    held = heldout_of(c, len(coll))  # the same functions restore a fresh clone (Study.restore)
    np.save(d / "heldout.npy", held)
    lab = WeakLabelingUn(schema).fit(coll)
    ck = c["click"]
    cs = click_dataset(coll, schema, ck["n_queries"], ck["p_narrow"], tuple(ck["splits"]),
                       ck["n_broad_test"], seed=ck["seed"], labeler=lab,
                       entity_weights=popularity(study), heldout=held)
    click = click_frames(study, cs)
    log("click", {s: len(v) for s, v in click.items()})
    test_texts = {normalize_query(q) for s in TEST_SETS for q in click[s]["text"].tolist()}
    gen_ctrl, gen_qgen, agree, un_info = generator_pairs(study, click, lab, test_texts)
    pool = np.setdiff1d(np.arange(len(coll)), held)
    eprime = eprime_of(c, len(coll), held)
    train = {"click_train": (click["train"]["text"].tolist(), click["train"]["entity"].to_numpy()),
             "click_val (H2 control pool)": (click["val"]["text"].tolist(),
                                             click["val"]["entity"].to_numpy()),
             "generator_ctrlqgen": (gen_ctrl["text"].tolist(), gen_ctrl["entity"].to_numpy()),
             "generator_qgen": (gen_qgen["text"].tolist(), gen_qgen["entity"].to_numpy()),
             "E'": ([], eprime)}
    test = {f"click_{s}": (click[s]["text"].tolist(), click[s]["entity"].to_numpy()) for s in TEST_SETS}
    assert_no_leakage(train, test, coll.ids.strings)
    np.save(d / "eprime.npy", eprime)
    # what later stages read (WEAKLABEL_FILES), committed too: Study.restore copies them back
    for s, df in click.items():
        write_parquet(df, d / f"click_{s}.parquet")
        write_parquet(df, study.results / "weaklabels" / f"click_{s}.parquet")
    for name, df in (("gen_ctrlqgen", gen_ctrl), ("gen_qgen", gen_qgen)):
        write_parquet(df, d / f"{name}.parquet")
        write_parquet(df, study.results / "weaklabels" / f"{name}.parquet")
    assert sorted(WEAKLABEL_FILES) == sorted(p.name for p in d.glob("*.parquet"))
    summary = {"n_entities": len(coll), "n_heldout": len(held), "n_pool": len(pool),
               "click": {s: {"n": len(v), "narrow": int((v["intent"] == "narrow").sum()),
                             "entities": int(v["entity"].nunique())} for s, v in click.items()},
               "generator_pairs": {"ctrlqgen": len(gen_ctrl), "qgen": len(gen_qgen),
                                   "ctrlqgen_by_source_intent": gen_ctrl.groupby(
                                       ["source", "intent"]).size().to_dict()},
               "ip_agreement_with_wl_un_intent": agree, **un_info,
               "n_eprime": len(eprime), "leakage": "none (entities and normalized texts)"}
    summary["generator_pairs"]["ctrlqgen_by_source_intent"] = {
        f"{a}/{b}": int(v) for (a, b), v in summary["generator_pairs"]["ctrlqgen_by_source_intent"].items()}
    info = study.mark_done("weaklabels", "", summary, t0)
    write_json(info, study.results / "weaklabels" / "summary.json")


# ---- 2. generators -----------------------------------------------------------------------------


def backbone(study: Study) -> str:
    """The configured generator backbone: a model folder, or ``smollm2`` (the shipped default,
    which ``QueryGenerator`` resolves)."""
    return study.cfg["generator"].get("backbone", "smollm2")


def backbone_base(study: Study) -> dict:
    """``base_model`` of the configured backbone (loads it once)."""
    from limelight.querygen.generator import QueryGenerator

    return QueryGenerator(backbone(study), kind="qgen", schema=study.schema,
                          threads=study.threads).base_model


def _write_curve(losses: list[float], path: Path, every: int = 1) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps({"step": i + 1, "loss": round(x, 5)}) + "\n"
                           for i, x in enumerate(losses) if (i + 1) % every == 0 or i == 0))
    tmp.replace(path)


def generator_training_data(study: Study, name: str) -> pd.DataFrame:
    """The (entity, text, intent) pairs a generator is trained on (``generator_spec``): the
    QGen or CtrlQGen pairs of stage weaklabels, or their WeakLabeling-IP part (``source``)."""
    from study import generator_spec

    spec = generator_spec(name)
    df = pd.read_parquet(study.dir("weaklabels") / f"gen_{spec['pairs']}.parquet")
    if spec["source"] is not None:
        df = df[df["source"] == spec["source"]].reset_index(drop=True)
        if len(df) == 0:
            raise LimelightError(f"generator {name} needs the {spec['source']!r} pairs of "
                                 f"gen_{spec['pairs']}.parquet: there are none")
    return df


def train_generator(study: Study, name: str) -> None:
    """A generator (main: ``ctrlqgen``, ``qgen``; the ablation's: ``ABLATION_GENERATORS``)
    fine-tuned, resumable, with the same steps for all: enough for each main generator to see
    every one of its pairs."""
    from study import generator_spec

    from limelight.querygen.generator import QueryGenerator, training_pairs
    from limelight.querygen.weaklabel import assert_no_leakage

    if study.done("generator", name):
        return
    t0 = time.perf_counter()
    g_cfg, spec = study.cfg["generator"], generator_spec(name)
    d = study.dir("generator", name)
    d.mkdir(parents=True, exist_ok=True)
    use = g_cfg.get(f"use_{name}")
    if use:  # a generator trained elsewhere (e.g. `limelight generate train`)
        g = QueryGenerator.load(use)
        g.check_base(backbone_base(study), f"generator.use_{name}")
        study.mark_done("generator", name, {"model": str(use), "base_model": g.base_model}, t0)
        return
    g = QueryGenerator(backbone(study), kind=spec["kind"],
                       schema=study.schema, max_input_tokens=g_cfg["max_input_tokens"],
                       max_new_tokens=g_cfg["max_new_tokens"], threads=study.threads,
                       serialize=spec["serialize"])
    wl = study.dir("weaklabels")
    df = generator_training_data(study, name)
    assert_no_leakage({f"generator_{name}": (df["text"].tolist(), df["entity"].to_numpy())},
                      test_sets(study), study.collection.ids.strings)
    # the same steps for every generator: enough for each main one to see every one of its pairs
    n_max = max(len(pd.read_parquet(wl / f"gen_{k}.parquet")) for k in ("ctrlqgen", "qgen"))
    steps = math.ceil(g_cfg["epochs"] * n_max / g_cfg["batch_size"])
    prompts, targets = training_pairs(g, study.collection, df["entity"].to_numpy(),
                                      df["text"].tolist(),
                                      df["intent"].tolist() if spec["kind"] == "ctrlqgen" else None)

    def progress(step, loss):
        if step % 25 == 0 or step == steps:
            log(f"generator {name} step {step}/{steps} loss {loss:.3f} "
                f"({time.perf_counter() - t0:.0f}s this run, load {load_avg()[0]})")

    st = g.fit(prompts, targets, steps=steps, batch_size=g_cfg["batch_size"], lr=g_cfg["lr"],
               train_layers=g_cfg["train_layers"], seed=g_cfg["seed"], progress=progress,
               checkpoint_dir=d / "ckpt", checkpoint_every=g_cfg["checkpoint_every"],
               stop=study.stopper(f"generator:{name}"))
    _write_curve(st.losses, d / "train.log.jsonl")
    _write_curve(st.losses, study.results / "generator" / f"{name}.log.jsonl")
    if not st.completed:
        study.add_spent(d, t0)
        raise Stopped(f"generator {name} checkpointed at step {len(st.losses)}/{steps}")
    g.save(d / "model")
    shutil.rmtree(d / "ckpt", ignore_errors=True)
    first, last = np.mean(st.losses[:50]), np.mean(st.losses[-50:])
    info = study.mark_done("generator", name, {
        "model": str(d / "model"), "base_model": g.base_model, "kind": g.kind,
        "serialize": g.serialize, "pairs_source": spec["source"] or "all", "steps": steps,
        "pairs": len(prompts), "epochs": steps * g_cfg["batch_size"] / len(prompts),
        "train_seconds": round(st.seconds, 1), "s_per_step": round(st.seconds / steps, 3),
        "loss_first50": float(first), "loss_last50": float(last)}, t0)
    write_json(info, study.results / "generator" / f"{name}.json")


def stage_generator(study: Study, only: str | None = None) -> None:
    for name in ("ctrlqgen", "qgen"):
        if _want(only, name):
            train_generator(study, name)


# ---- 3. generation -----------------------------------------------------------------------------


def load_set_generator(study: Study, set_name: str):
    """The generator a synthetic set comes from (InPars: the backbone with few-shot examples
    drawn from the QGen pairs, the same pairs QGen is trained on)."""
    from study import generator_of_set

    from limelight.querygen.generator import QueryGenerator, entity_dicts

    g_cfg = study.cfg["generator"]
    gname = generator_of_set(set_name)
    if gname is None:
        g = QueryGenerator(backbone(study), kind="inpars",
                           schema=study.schema, max_input_tokens=g_cfg["max_input_tokens"],
                           max_new_tokens=g_cfg["max_new_tokens"],
                           n_shots=study.cfg["generate"]["inpars_shots"], threads=study.threads)
        pool = pd.read_parquet(study.dir("weaklabels") / "gen_qgen.parquet")
        ents = entity_dicts(study.collection, study.schema, pool["entity"].to_numpy())
        g.examples = [(g.entity_text(e, e["id"]), q) for e, q in
                      zip(ents, pool["text"].tolist(), strict=True)]
        return g
    done = study.done("generator", gname)
    if not done:
        raise LimelightError(f"set {set_name} needs the {gname} generator: run the generator stage")
    if done.get("restored"):
        raise LimelightError(f"set {set_name} needs the weights of generator {gname}, restored "
                             f"from the committed results without them: delete "
                             f"{study.dir('generator', gname)} to train it again")
    g = QueryGenerator.load(done["model"])
    g.check_base(done["base_model"], f"generator for set {set_name}")
    return g


def generate_set(study: Study, set_name: str) -> None:
    """One query per E' entity (intent-aware generators: of the set's intent), in resumable
    chunks; generated texts equal to a test query dropped."""
    from study import set_intent

    from limelight.querygen.generator import generate_queries
    from limelight.querygen.weaklabel import normalize_query

    gc = study.cfg["generate"]
    done = study.done("generate", set_name)
    if done and done["n_entities"] >= gc.get("n_generate", done["n_entities"]):
        return
    t0 = time.perf_counter()
    d = study.dir("generate", set_name)
    d.mkdir(parents=True, exist_ok=True)
    coll = study.collection
    eprime = np.load(study.dir("weaklabels") / "eprime.npy")[:gc.get("n_generate")]
    ids = coll.ids.strings[eprime]
    intent, label = set_intent(set_name)
    n_chunks = math.ceil(len(ids) / gc["chunk"])
    g, made = None, 0
    for i in range(n_chunks):
        part = d / f"part-{i:04d}.parquet"
        if part.exists():
            continue
        if made and study.out_of_time(f"generate:{set_name}", i):
            study.add_spent(d, t0)
            raise Stopped(f"generation of {set_name} stopped before chunk {i + 1}/{n_chunks}")
        g = g or load_set_generator(study, set_name)
        t = time.perf_counter()
        chunk_ids = ids[i * gc["chunk"]:(i + 1) * gc["chunk"]].tolist()
        qs = generate_queries(coll, study.schema, intent, n=1, generator=g, entity_ids=chunk_ids,
                              seed=gc["seed"] + i, batch_size=gc["batch_size"])
        write_parquet(pd.DataFrame({"entity_id": qs.fields["entity_id"].astype(str),
                                    "text": qs.texts.astype(str)}), part)
        made += 1
        log(f"generate {set_name} chunk {i + 1}/{n_chunks}: {len(qs)} queries, "
            f"{len(chunk_ids) / (time.perf_counter() - t):.2f} entities/s, load {load_avg()[0]}")
    parts = [pd.read_parquet(d / f"part-{i:04d}.parquet") for i in range(n_chunks)]
    df = pd.concat(parts, ignore_index=True)
    if len(df) == 0:
        raise LimelightError(f"generation of set {set_name} produced no acceptable query for "
                             f"{len(ids)} entities: check the generator")
    df["entity"] = [coll.ids.lookup(e) for e in df["entity_id"].tolist()]
    df["intent"] = label
    tests = {normalize_query(q) for s in TEST_SETS for q in read_click(study, s)["text"].tolist()}
    leak = np.asarray([normalize_query(q) in tests for q in df["text"].tolist()], dtype=bool)
    df = df[~leak].reset_index(drop=True)[["entity", "entity_id", "intent", "text"]]
    write_parquet(df, d / "queries.parquet")
    write_parquet(df, study.results / "queries" / f"{set_name}.parquet")
    spent = study._spent(d) + time.perf_counter() - t0
    info = study.mark_done("generate", set_name, {
        "n_queries": len(df), "n_entities": len(ids), "dropped_test_texts": int(leak.sum()),
        "queries_per_s": round(len(ids) / max(spent, 1e-9), 3)}, t0)
    write_json(info, study.results / "queries" / f"{set_name}.json")


def stage_generate(study: Study, only: str | None = None) -> None:
    for s in study.cfg["generate"]["sets"]:
        if _want(only, s):
            generate_set(study, s)


# ---- 4. bi-encoders ----------------------------------------------------------------------------


def training_set(study: Study, set_name: str) -> tuple[list[str], np.ndarray]:
    """The ``n_pairs`` (query, entity) training pairs of a set, in its fixed order."""
    n = study.cfg["biencoder"]["n_pairs"]
    if set_name == "Click":
        df = read_click(study, "train")
    elif set_name == "CtrlQGen_both":  # narrow for the first half of E', broad for the second
        eprime = np.load(study.dir("weaklabels") / "eprime.npy")
        eprime = eprime[:study.cfg["generate"].get("n_generate")]
        first = set(eprime[:len(eprime) // 2].tolist())
        nq = pd.read_parquet(study.dir("generate", "ctrl_narrow") / "queries.parquet")
        bq = pd.read_parquet(study.dir("generate", "ctrl_broad") / "queries.parquet")
        nq = nq[nq["entity"].isin(first)].iloc[:n // 2]
        bq = bq[~bq["entity"].isin(first)].iloc[:n - n // 2]
        df = pd.concat([nq, bq], ignore_index=True) if len(nq) + len(bq) == n else nq.iloc[:0]
    else:
        src = SET_SOURCES.get(set_name) or (set_name if set_name in ABLATION_SETS else None)
        if src is None:
            raise LimelightError(f"unknown training set {set_name!r}")
        p = study.dir("generate", src) / "queries.parquet"
        if not p.exists():
            raise LimelightError(f"set {set_name} needs generated queries: run the generate stage")
        df = pd.read_parquet(p)
    if len(df) < n:
        raise LimelightError(f"training set {set_name} has {len(df)} pairs, the plan needs {n} "
                             f"(biencoder.n_pairs) for every set")
    df = df.iloc[:n]
    return df["text"].tolist(), df["entity"].to_numpy()


def train_biencoder(study: Study, model: str) -> None:
    """One bi-encoder (``<set>-s<seed>``), resumable."""
    from limelight.querygen.weaklabel import assert_no_leakage
    from limelight.retrieval.finetune import finetune_biencoder

    if study.done("finetune", model):
        return
    t0 = time.perf_counter()
    bc = study.cfg["biencoder"]
    set_name, seed = model.rsplit("-s", 1)
    q, e = training_set(study, set_name)
    assert_no_leakage({set_name: (q, e)}, test_sets(study), study.collection.ids.strings)
    d = study.dir("finetune", model)
    d.mkdir(parents=True, exist_ok=True)

    def progress(step, loss):
        if step % 25 == 0 or step == bc["steps"]:
            log(f"bi-encoder {model} step {step}/{bc['steps']} loss {loss:.3f} "
                f"({time.perf_counter() - t0:.0f}s this run, load {load_avg()[0]})")

    st = finetune_biencoder(q, study.texts[e].tolist(), d / "model", steps=bc["steps"],
                            batch_size=bc["batch_size"], lr=bc["lr"],
                            max_seq_length=bc["max_seq_length"], seed=int(seed),
                            doc_keys=e.tolist(), checkpoint_dir=d / "ckpt",
                            checkpoint_every=bc["checkpoint_every"],
                            stop=study.stopper(f"finetune:{model}"), progress=progress)
    _write_curve(st.losses, d / "train.log.jsonl")
    _write_curve(st.losses, study.results / "finetune" / f"{model}.log.jsonl")
    if not st.completed:
        study.add_spent(d, t0)
        raise Stopped(f"bi-encoder {model} checkpointed at step {len(st.losses)}/{bc['steps']}")
    info = study.mark_done("finetune", model, {
        "model": str(d / "model"), "pairs": len(q), "distinct_entities": int(len(np.unique(e))),
        "steps": bc["steps"], "train_seconds": round(st.seconds, 1),
        "loss_first25": float(np.mean(st.losses[:25])), "loss_last25": float(np.mean(st.losses[-25:]))},
        t0)
    write_json(info, study.results / "finetune" / f"{model}.json")


def stage_finetune(study: Study, only: str | None = None) -> None:
    for m in study.trained_models():
        if _want(only, m):
            train_biencoder(study, m)
