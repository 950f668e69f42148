"""Evaluation stages of the issue-26 pipeline: exposure over the whole catalog, the
pre-registered H1 tests, the H2 suggestion simulation and the validity figures."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import stats
from study import (
    Stopped,
    Study,
    _jsonable,
    load_avg,
    log,
    save_npz,
    write_committed_topk,
    write_json,
    write_parquet,
)

from limelight.errors import LimelightError

H1_PAIRS = [("Click", "QGen"), ("Click", "InPars"), ("Click", "CtrlQGen_narrow"),
            ("Click", "CtrlQGen_broad"), ("Click", "CtrlQGen_both"),
            ("CtrlQGen_narrow", "QGen"), ("CtrlQGen_broad", "QGen"), ("CtrlQGen_both", "QGen")]
PRIMARY_SETS = ("test", "broad_test")


def _want(only: str | None, name: str) -> bool:
    return only is None or only in name


def query_sets(study: Study) -> dict[str, dict]:
    """Held-out query sets (texts, relevant entity, weights o_q) and the real query-log sample."""
    from limelight.data import load_query_log

    out = {}
    for s in PRIMARY_SETS:
        df = pd.read_parquet(study.dir("weaklabels") / f"click_{s}.parquet")
        out[s] = {"texts": df["text"].tolist(), "rel": df["entity"].to_numpy(),
                  "w": np.ones(len(df))}
    n_log = study.cfg["exposure"].get("n_log", 0)
    if n_log:
        ql = load_query_log()
        ql = ql.sample(min(n_log, len(ql)), seed=0)
        out["log"] = {"texts": ql.texts.tolist(), "rel": None, "w": np.asarray(ql.weights)}
    return out


# ---- 5. exposure -------------------------------------------------------------------------------


def encoder_for(study: Study, model: str):
    from limelight.retrieval.dense import Encoder

    ec = study.cfg["exposure"]
    path = None
    if model != "zero-shot":
        done = study.done("finetune", model)
        if not done:
            raise LimelightError(f"exposure of {model} needs its bi-encoder: run the finetune stage")
        path = done["model"]
        if done.get("restored") or not Path(path).exists():
            why = "restored from the committed results, which keep none" if done.get("restored") \
                else f"{path} is missing"
            raise LimelightError(f"bi-encoder {model} has no weights here ({why}): delete "
                                 f"{study.dir('finetune', model)} to train it again")
    return Encoder(path, max_seq_length=ec["max_seq_length"], variant=ec["variant"],
                   threads=study.threads, model_cache=study.work / "onnx")


def catalog_embeddings(study: Study, model: str, enc) -> np.ndarray:
    """s(e) of every entity under ``enc``, encoded in fixed chunks saved as they finish."""
    ec = study.cfg["exposure"]
    d = study.dir("exposure", model)
    full = d / "emb.npy"
    if full.exists():
        return np.load(full)
    texts = study.texts
    n_chunks = math.ceil(len(texts) / ec["chunk"])
    made = 0
    for i in range(n_chunks):
        p = d / f"emb-{i:04d}.npy"
        if p.exists():
            continue
        if made and study.out_of_time(f"exposure:{model}", i):
            raise Stopped(f"encoding for {model} stopped before chunk {i + 1}/{n_chunks}")
        t = time.perf_counter()
        emb = enc.encode(texts[i * ec["chunk"]:(i + 1) * ec["chunk"]].tolist())
        np.save(p, emb)
        made += 1
        log(f"exposure {model}: chunk {i + 1}/{n_chunks}, "
            f"{len(emb) / (time.perf_counter() - t):.0f} entities/s, load {load_avg()[0]}")
    emb = np.concatenate([np.load(d / f"emb-{i:04d}.npy") for i in range(n_chunks)])
    np.save(full, emb)
    for i in range(n_chunks):
        (d / f"emb-{i:04d}.npy").unlink()
    return emb


def topk_for(study: Study, model: str, qsets: dict) -> dict[str, np.ndarray]:
    k = study.cfg["exposure"]["k"]
    if model == "BM25":
        from limelight.retrieval.bm25 import BM25, BM25Index

        bm = BM25(BM25Index.build(study.text_collection()))
        return {s: bm.search_batch(q["texts"], k)[0] for s, q in qsets.items()}
    from limelight.retrieval.dense import DenseIndex

    enc = encoder_for(study, model)
    emb = catalog_embeddings(study, model, enc)
    idx = DenseIndex.from_embeddings(study.collection.ids, emb, {"encoder": enc.identity()})
    return {s: idx.search(enc.encode(q["texts"]), k)[0] for s, q in qsets.items()}


def model_summary(study: Study, top: dict[str, np.ndarray], qsets: dict) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """R@100, Gini and retrievable fraction per query set and cutoff; per-entity r (rows with a
    non-zero value) and per-query recall tables."""
    from limelight.exposure.retrievability import gini, retrievable_fraction

    n = len(study.collection)
    summ, rcols, rec = {}, {}, {}
    for s, q in qsets.items():
        row = {"n_queries": len(q["texts"])}
        if q["rel"] is not None:
            rec[s] = stats.recall_at(top[s], q["rel"], 100)
            row["R@100"] = float(rec[s].mean())
        for c in study.cfg["tests"]["cutoffs"]:
            r = np.asarray(stats.f_from_topk(top[s], n, c) @ q["w"]).ravel()
            row[f"gini_c{c}"] = gini(r)
            row[f"retrievable_c{c}"] = retrievable_fraction(r)
            rcols[f"r_{s}_c{c}"] = r
        summ[s] = row
    r_df = pd.DataFrame({"entity": np.arange(n), **rcols})
    r_df = r_df[(r_df.drop(columns="entity") > 0).any(axis=1)].reset_index(drop=True)
    rec_df = pd.DataFrame({"set": np.concatenate([[s] * len(v) for s, v in rec.items()]),
                           "query": np.concatenate([np.arange(len(v)) for v in rec.values()]),
                           "hit": np.concatenate(list(rec.values())).astype(np.int8)})
    return summ, r_df, rec_df


def exposure_model(study: Study, model: str) -> None:
    if study.done("exposure", model):
        return
    t0 = time.perf_counter()
    d = study.dir("exposure", model)
    d.mkdir(parents=True, exist_ok=True)
    qsets = query_sets(study)
    try:
        top = topk_for(study, model, qsets)
    except Stopped:
        study.add_spent(d, t0)
        raise
    save_npz(top, d / "topk.npz")
    summ, r_df, rec_df = model_summary(study, top, qsets)
    out = study.results / "exposure"
    # the top-k committed too (ids + 1 as uint16 for Debian: about 5 MB a model), so that a fresh
    # clone restores this exposure (Study.restore) and the comparisons read the same top-k
    key = study.key("exposure", model)
    write_committed_topk(top, len(study.collection), key, out / f"{model}.topk.npz")
    write_parquet(r_df, out / f"{model}.r.parquet")
    write_parquet(rec_df, out / f"{model}.recall.parquet")
    extra = {}
    old = out / f"{model}.json"
    if old.exists():  # a recomputation (e.g. a reference model a fresh clone had no top-k of)
        prev = json.loads(old.read_text())
        same = json.dumps(prev.get("summary"), sort_keys=True) == json.dumps(
            json.loads(json.dumps(summ, default=_jsonable)), sort_keys=True)
        if prev.get("key") == key and not same:
            extra["differs_from_run_of"] = prev.get("finished")
            log(f"warning: exposure {model} differs from the committed run of the same key "
                f"({prev.get('finished')}): comparisons made from that run (tests.json) are stale")
    info = study.mark_done("exposure", model, {"summary": summ, **extra}, t0)
    write_json(info, out / f"{model}.json")
    log(f"exposure {model}: " + ", ".join(f"{s} R@100 {v.get('R@100', float('nan')):.3f} "
                                          f"Gini@100 {v.get('gini_c100', float('nan')):.3f}"
                                          for s, v in summ.items()))


def stage_exposure(study: Study, only: str | None = None) -> None:
    for m in study.all_models():
        if _want(only, m):
            exposure_model(study, m)


# ---- 6. H1 tests -------------------------------------------------------------------------------


def load_topk(study: Study, model: str) -> dict[str, np.ndarray]:
    done = study.done("exposure", model)
    if not done:
        raise LimelightError(f"the tests need the exposure of {model}: run the exposure stage")
    z = np.load(study.dir("exposure", model) / "topk.npz")
    return {k: z[k] for k in z.files}


def systems_of(study: Study) -> dict[str, list[str]]:
    """Each system and its models (the seeds of a trained set; one model for a baseline)."""
    out = {b: [b] for b in study.cfg["exposure"].get("baselines", [])}
    for s in study.cfg["biencoder"]["sets"]:
        out[s] = [f"{s}-s{seed}" for seed in study.seeds]
    return out


def stage_tests(study: Study, only: str | None = None) -> None:
    """The pre-registered H1 family (PLAN.md): the planned pairs among the configured sets × 6
    metrics, Bonferroni over the pairs of each metric (``tests.exploratory`` systems: their pairs
    are reported with the same factor but are not in the family); the query-log rows are
    secondary."""
    if study.done("tests"):
        return
    t0 = time.perf_counter()
    tc = study.cfg["tests"]
    qsets = query_sets(study)
    systems = systems_of(study)
    tops = {m: load_topk(study, m) for ms in systems.values() for m in ms}
    n = len(study.collection)
    explo = set(tc.get("exploratory", []))
    pairs = [p for p in H1_PAIRS if p[0] in systems and p[1] in systems]
    primary = [p for p in pairs if not set(p) & explo]
    res: dict = {"pairs": [f"{a} vs {b}" for a, b in primary], "bonferroni_m": len(primary),
                 "exploratory_pairs": [f"{a} vs {b}" for a, b in pairs if {a, b} & explo]}
    for s in PRIMARY_SETS:
        rec = {sy: np.stack([stats.recall_at(tops[m][s], qsets[s]["rel"]) for m in ms])
               for sy, ms in systems.items()}
        r = stats.recall_tests(rec, pairs, tc["n_boot"], tc["seed"], tc["alpha"])
        stats.bonferroni(r["tests"], len(primary))
        res[f"R@100 {s}"] = r
    for s in list(qsets):
        for c in tc["cutoffs"]:
            t = time.perf_counter()
            fs = {sy: [stats.f_from_topk(tops[m][s], n, c) for m in ms] for sy, ms in systems.items()}
            g = stats.gini_tests(fs, pairs, tc["n_boot"], tc["seed"], tc["alpha"], qsets[s]["w"])
            if s in PRIMARY_SETS:
                stats.bonferroni(g["tests"], len(primary))
            res[f"Gini {s} c{c}"] = g
            log(f"tests: Gini {s} c={c} in {time.perf_counter() - t:.0f}s")
    info = study.mark_done("tests", "", {"n_boot": tc["n_boot"]}, t0)
    write_json({**info, **res}, study.results / "tests.json")


# ---- 7. H2 -------------------------------------------------------------------------------------


def suggestions(study: Study, ents: np.ndarray) -> dict[int, list[str]]:
    """``n_suggestions`` broad CtrlQGen queries per entity (the library's
    ``broad_suggestions``), generated in resumable chunks."""
    from limelight.querygen.generator import QueryGenerator
    from limelight.querygen.suggest import broad_suggestions

    h = study.cfg["h2"]
    d = study.dir("h2")
    chunk = study.cfg["generate"]["chunk"]
    ids = study.collection.ids.strings[ents]
    n_chunks = math.ceil(len(ids) / chunk)
    g, made = None, 0
    for i in range(n_chunks):
        p = d / f"sugg-{i:04d}.parquet"
        if p.exists():
            continue
        if made and study.out_of_time("h2", i):
            raise Stopped(f"H2 suggestions stopped before chunk {i + 1}/{n_chunks}")
        if g is None:
            done = study.done("generator", "ctrlqgen")
            if not done:
                raise LimelightError("H2 needs the CtrlQGen generator: run the generator stage")
            if done.get("restored"):
                raise LimelightError("H2 needs the weights of generator ctrlqgen, restored from the "
                                     f"committed results without them: delete "
                                     f"{study.dir('generator', 'ctrlqgen')} to train it again")
            g = QueryGenerator.load(done["model"])
            g.check_base(done["base_model"], "the H2 generator")
        by_e = broad_suggestions(study.collection, study.schema,
                                 ids[i * chunk:(i + 1) * chunk].tolist(), n=h["n_suggestions"],
                                 generator=g, seed=h["seed"] + i,
                                 batch_size=study.cfg["generate"]["batch_size"])
        rows = [(e, t) for e, ts in by_e.items() for t in ts]
        write_parquet(pd.DataFrame({"entity_id": np.asarray([e for e, _ in rows], dtype=str),
                                    "text": np.asarray([t for _, t in rows], dtype=str)}), p)
        made += 1
        log(f"h2 suggestions chunk {i + 1}/{n_chunks}, load {load_avg()[0]}")
    df = pd.concat([pd.read_parquet(d / f"sugg-{i:04d}.parquet") for i in range(n_chunks)])
    out: dict[int, list[str]] = {}
    for e, t in zip(df["entity_id"].tolist(), df["text"].tolist(), strict=True):
        out.setdefault(study.collection.ids.lookup(e), []).append(t)
    return out


def h2_added_sets(study: Study, sample: np.ndarray) -> tuple[dict, dict]:
    """Per H2 system: the suggestion texts (3 per top-5 entity of each sampled query, under its
    seed-0 model) and as many control queries (other log queries: the Click val split)."""
    from limelight.querygen.suggest import ranked_suggestions

    h = study.cfg["h2"]
    top5 = {sy: load_topk(study, f"{sy}-s{study.seeds[0]}")["test"][sample, :h["top_k"]]
            for sy in h["models"]}
    ents = np.unique(np.concatenate([t[t >= 0] for t in top5.values()]))
    sugg = suggestions(study, ents)
    val = pd.read_parquet(study.dir("weaklabels") / "click_val.parquet")["text"].tolist()
    order = np.random.default_rng(h["seed"] + 1).permutation(len(val))
    added, control, rows = {}, {}, []
    for sy, t in top5.items():
        pairs = [(int(qi), q, e) for qi, row in zip(sample.tolist(), t, strict=True)
                 for q, e in ranked_suggestions(row[row >= 0].tolist(), sugg)]
        added[sy] = [q for _, q, _ in pairs]
        if len(added[sy]) > len(val):
            raise LimelightError(f"H2 control needs {len(added[sy])} other log queries, the Click "
                                 f"val split has {len(val)}: raise click.n_queries")
        control[sy] = [val[i] for i in order[:len(added[sy])].tolist()]
        u = h2_acceptance_draws(h, len(added[sy]))
        rows.append(pd.DataFrame({
            "system": sy, "position": np.arange(len(pairs)),
            "test_query": [qi for qi, _, _ in pairs],
            "entity_index": [e for _, _, e in pairs],
            "entity_id": study.collection.ids.strings[np.array([e for _, _, e in pairs], dtype=np.int64)],
            "suggestion": added[sy], "u": u, "control": control[sy]}))
    write_h2_queries(study, pd.concat(rows, ignore_index=True))
    return added, control


def h2_acceptance_draws(h: dict, n: int) -> np.ndarray:
    """One seeded uniform draw per added query: suggestion i (and control query i) is accepted at
    acceptance rate a when u_i < a, so the accepted sets are nested."""
    return np.random.default_rng(h["seed"] + 2).random(n)


def write_h2_queries(study: Study, df: pd.DataFrame) -> None:
    """The H2 query sets, committed with the results: per system, each suggestion (the sampled
    Click-test row it was made for, the top entity it came from, its acceptance draw) beside the
    control query at the same position."""
    from limelight._io import atomic_path

    with atomic_path(study.results / "h2_queries.parquet") as tmp:
        df.to_parquet(tmp, index=False)


def stage_h2(study: Study, only: str | None = None) -> None:
    """Figure 4 analog with a control (PLAN.md, H2)."""
    done = study.done("h2")
    if done and (study.results / "h2_queries.parquet").exists():
        return
    h, tc = study.cfg["h2"], study.cfg["tests"]
    base_q = pd.read_parquet(study.dir("weaklabels") / "click_test.parquet")
    sample = np.sort(np.random.default_rng(h["seed"]).choice(len(base_q), h["n_queries"], replace=False))
    if done:  # the query file went missing: written again from the cached suggestions (seconds)
        h2_added_sets(study, sample)
        return
    t0 = time.perf_counter()
    d = study.dir("h2")
    d.mkdir(parents=True, exist_ok=True)
    n = len(study.collection)
    try:
        added, control = h2_added_sets(study, sample)
    except Stopped:
        study.add_spent(d, t0)
        raise
    out: dict = {"n_sampled_queries": len(sample), "curves": {}, "tests": {}}
    fs_s, fs_c = {}, {}
    for sy in h["models"]:
        u = h2_acceptance_draws(h, len(added[sy]))
        mats = {c: {"S": [], "C": []} for c in tc["cutoffs"]}
        for seed in study.seeds:
            m = f"{sy}-s{seed}"
            base_top = load_topk(study, m)["test"]
            top_s, top_c = h2_search(study, m, added[sy], control[sy])
            for c in tc["cutoffs"]:
                mats[c]["S"].append(stats.f_from_topk(np.vstack([base_top, top_s]), n, c))
                mats[c]["C"].append(stats.f_from_topk(np.vstack([base_top, top_c]), n, c))
        out["curves"][sy] = h2_curves(mats, len(base_q), u, h["acceptance"])
        out["curves"][sy]["n_added"] = len(added[sy])
        for c in tc["cutoffs"]:
            fs_s[(sy, c)], fs_c[(sy, c)] = mats[c]["S"], mats[c]["C"]
    out["tests"] = h2_tests(fs_s, fs_c, len(base_q), h["models"], tc)
    info = study.mark_done("h2", "", {}, t0)
    write_json({**info, **out}, study.results / "h2.json")


def h2_search(study: Study, model: str, added: list[str], control: list[str]):
    from limelight.retrieval.dense import DenseIndex

    enc = encoder_for(study, model)
    p = study.dir("exposure", model) / "emb.npy"
    if not p.exists():  # a restored exposure keeps only its top-k
        raise LimelightError(f"H2 needs the catalog embeddings of {model} ({p}): delete "
                             f"{study.dir('exposure', model)} to compute its exposure again")
    emb = np.load(p)
    idx = DenseIndex.from_embeddings(study.collection.ids, emb, {"encoder": enc.identity()})
    k = study.cfg["exposure"]["k"]
    return idx.search(enc.encode(added), k)[0], idx.search(enc.encode(control), k)[0]


def h2_curves(mats: dict, n_base: int, u: np.ndarray, acceptance: list[float]) -> dict:
    """Seed-averaged Gini and retrievable fraction with the accepted suggestions (S) and with as
    many control queries (C), per cutoff and acceptance rate (the same accepted positions)."""
    from limelight.exposure.retrievability import gini, retrievable_fraction

    out = {}
    for c, m in mats.items():
        rows = []
        for a in acceptance:
            w = np.concatenate([np.ones(n_base), (u < a).astype(np.float64)])
            row = {"acceptance": a, "n_accepted": int((u < a).sum())}
            for kind in ("S", "C"):
                rs = [np.asarray(f @ w).ravel() for f in m[kind]]
                row[f"gini_{kind}"] = float(np.mean([gini(r) for r in rs]))
                row[f"retrievable_{kind}"] = float(np.mean([retrievable_fraction(r) for r in rs]))
            rows.append(row)
        out[f"c{c}"] = rows
    return out


def h2_tests(fs_s: dict, fs_c: dict, n_base: int, models: list[str], tc: dict) -> dict:
    """At 100 % acceptance: Gini(Q ∪ S) − Gini(Q ∪ C) per system and cutoff, and the difference
    of that effect between the two systems at the largest cutoff (two-level bootstrap: Q resampled
    once per replicate, each added block stratified, seeds per system; Bonferroni over these)."""
    from limelight.exposure.retrievability import gini

    rows = {}
    for c in tc["cutoffs"]:
        fs = {}
        for sy in models:
            fs[f"{sy}|S"], fs[f"{sy}|C"] = fs_s[(sy, c)], fs_c[(sy, c)]
        reps = stats.boot_gini_blocks(fs, n_base, tc["n_boot"], tc["seed"] + c)
        rng = np.random.default_rng(tc["seed"] + 100 + c)
        avg = {k: stats.seed_average(v, rng) for k, v in reps.items()}
        point = {k: float(np.mean([gini(np.asarray(f.sum(axis=1)).ravel()) for f in v]))
                 for k, v in fs.items()}
        eff = {sy: point[f"{sy}|S"] - point[f"{sy}|C"] for sy in models}
        for sy in models:
            rows[f"{sy}: suggestions vs control, c={c}"] = {
                "gini_S": point[f"{sy}|S"], "gini_C": point[f"{sy}|C"],
                **stats.diff_summary(eff[sy], avg[f"{sy}|S"] - avg[f"{sy}|C"], tc["alpha"])}
        if len(models) == 2 and c == max(tc["cutoffs"]):
            a, b = models[1], models[0]
            rows[f"interaction ({a} effect − {b} effect), c={c}"] = stats.diff_summary(
                eff[a] - eff[b], (avg[f"{a}|S"] - avg[f"{a}|C"]) - (avg[f"{b}|S"] - avg[f"{b}|C"]),
                tc["alpha"])
    stats.bonferroni(rows, len(rows))
    return rows


# ---- 8. validity -------------------------------------------------------------------------------


def stage_validity(study: Study, only: str | None = None) -> None:
    """Narrow validity (a term shared with a narrow field), broad WeakLabeling-IP agreement, with
    Wilson intervals; WeakLabeling-Un on the same entities; appendix D overlaps."""
    from limelight.analysis import Analyzer
    from limelight.querygen.weaklabel import (
        WeakLabelingUn,
        normalize_query,
        role_texts,
        weaklabel_ip,
    )
    from limelight.retrieval.dense import Encoder

    if study.done("validity"):
        return
    t0 = time.perf_counter()
    coll, schema = study.collection, study.schema
    an = Analyzer()
    enc = Encoder(max_seq_length=study.cfg["weaklabels"]["ip_max_seq_length"], variant="torch-fp32")
    lab = WeakLabelingUn(schema).fit(coll)
    click = set()
    for s in ("train", "val", "test", "broad_test"):
        click |= {normalize_query(q) for q in
                  pd.read_parquet(study.dir("weaklabels") / f"click_{s}.parquet")["text"].tolist()}
    gen_train = {normalize_query(q) for q in
                 pd.read_parquet(study.dir("weaklabels") / "gen_ctrlqgen.parquet")["text"].tolist()}
    sources = {}
    for it in ("narrow", "broad"):
        df = pd.read_parquet(study.dir("generate", f"ctrl_{it}") / "queries.parquet")
        sources[f"CtrlQGen {it}"] = (it, df["text"].tolist(), df["entity"].to_numpy())
        ei, _, q = lab.generate(df["entity"].to_numpy(), it, seed=0)
        sources[f"WeakLabeling-Un {it}"] = (it, q.tolist(), ei)
    out = {}
    for name, (it, qs, ents) in sources.items():
        narrow_t, _ = role_texts(coll, schema, ents)
        share = np.asarray([bool(set(an.tokenize(q)) & set(an.tokenize(t)))
                            for q, t in zip(qs, narrow_t, strict=True)])
        ip = weaklabel_ip(qs, coll, schema, ents, enc)
        k_share, k_ip = int(share.sum()), int((ip == it).sum())
        ser = study.texts
        out[name] = {
            "n": len(qs), "n_entities": int(len(np.unique(ents))),
            "share_term_with_narrow_field": k_share / len(qs),
            "share_ci95": stats.wilson(k_share, len(qs)),
            f"ip_predicts_{it}": k_ip / len(qs), "ip_ci95": stats.wilson(k_ip, len(qs)),
            "exact_in_click_log": float(np.mean([normalize_query(q) in click for q in qs])),
            "not_substring_of_entity": float(np.mean([q.lower() not in ser[e].lower()
                                                      for q, e in zip(qs, ents.tolist(), strict=True)])),
            "differs_from_generator_training_queries": float(np.mean(
                [normalize_query(q) not in gen_train for q in qs]))}
        log(f"validity {name}: {out[name]}")
    info = study.mark_done("validity", "", {}, t0)
    write_json({**info, "sources": out}, study.results / "validity.json")
