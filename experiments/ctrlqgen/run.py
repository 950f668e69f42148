"""CtrlQGen on the Debian catalog: H1 (Tables 2-3 analog), H2 (Figure 4 analog), appendix D,
validity of generated queries. CPU-sized: every size is an option; stages cache their outputs
under --work (default .cache/ctrlqgen-exp) so an interrupted run resumes.

    .venv/bin/python experiments/ctrlqgen/run.py --out experiments/ctrlqgen/results.json

Protocol (paper §4, scaled): a random subset of the catalog is the entity collection; a Books-style
Click set (WeakLabeling-Un, 75% narrow / 25% broad, entities drawn ∝ 1 + log(1 + reverse
dependencies), a real popularity proxy) gives train/test and a broad-only test set; every
bi-encoder starts from all-MiniLM-L6-v2 and is fine-tuned for the same number of MNRL steps;
retrievability uses a seeded sample of the real query log (weights o_q = occurrences), c = 100,
over every entity of the collection; R@100 differences: paired t-tests with Bonferroni; Gini
differences: paired bootstrap over queries (limelight.exposure.retrievability).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def cached(work: Path, name: str, fn):
    p = work / f"{name}.pkl"
    if p.exists():
        return pickle.loads(p.read_bytes())
    t = time.perf_counter()
    v = fn()
    tmp = p.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(v))
    tmp.replace(p)
    log(f"{name}: {time.perf_counter() - t:.0f}s")
    return v


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=".cache/ctrlqgen-exp")
    ap.add_argument("--out", default="experiments/ctrlqgen/results.json")
    ap.add_argument("--n-entities", type=int, default=2000)
    ap.add_argument("--n-click", type=int, default=3000)
    ap.add_argument("--n-broad-test", type=int, default=300)
    ap.add_argument("--n-log", type=int, default=3000)
    ap.add_argument("--n-gen", type=int, default=160, help="entities E' with generated queries")
    ap.add_argument("--gen-steps", type=int, default=30)
    ap.add_argument("--gen-lr", type=float, default=5e-4)
    ap.add_argument("--gen-layers", type=int, default=4)
    ap.add_argument("--bi-steps", type=int, default=25)
    ap.add_argument("--bi-batch", type=int, default=16)
    ap.add_argument("--n-h2", type=int, default=40, help="log queries that get suggestions")
    ap.add_argument("--n-boot", type=int, default=500)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reverse-eval", action="store_true",
                    help="evaluate models last-first (a second process can share the work)")
    ap.add_argument("--gen-only", action="store_true",
                    help="stop after the CtrlQGen generator, its queries and the validity check")
    ap.add_argument("--gen-init", default=None,
                    help="start the CtrlQGen generator from this saved generator (continued training)")
    ap.add_argument("--gen-seed", type=int, default=0, help="batch order of generator training")
    ap.add_argument("--ablation", action="store_true",
                    help="also the Table 4 ablation: QGen+serialization, intent-aware generation "
                         "without serialization (WeakLabeling-IP, IP+Un), CtrlQGen with IP only")
    ap.add_argument("--c", type=int, default=1,
                    help="retrievability cutoff (the paper: 100 over ~600k entities; scale it)")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from limelight.data import load_catalog, load_query_log
    from limelight.data.collection import Collection
    from limelight.data.ids import IdMap
    from limelight.evaluation.stats import paired_t
    from limelight.exposure.retrievability import (
        analyse,
        gini,
        paired_bootstrap_gini,
        rank_matrix,
        retrievability,
        retrievable_fraction,
    )
    from limelight.querygen.generator import QueryGenerator, entity_dicts, training_pairs
    from limelight.querygen.serialize import load_schema, serialize_collection
    from limelight.querygen.weaklabel import WeakLabelingUn, click_dataset, weaklabel_ip
    from limelight.retrieval.bm25 import BM25, BM25Index
    from limelight.retrieval.dense import DenseIndex, Encoder
    from limelight.retrieval.finetune import finetune_biencoder, finetuned_exists

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    schema = load_schema("debian")
    timings: dict[str, float] = {}

    # ---- data -----------------------------------------------------------------------------
    full = load_catalog("debian")
    rng = np.random.default_rng(0)
    sel = np.sort(rng.choice(len(full), args.n_entities, replace=False))
    # popularity proxy: reverse dependencies over the whole catalog
    dep_names = [d for ds in full.fields["depends"].tolist() for d in (ds or [])]
    names, counts = np.unique(np.asarray(dep_names, dtype=object), return_counts=True)
    rev = dict(zip(names.tolist(), counts.tolist(), strict=True))
    revdeps = np.asarray([rev.get(n, 0) for n in full.fields["name"][sel].tolist()], dtype=np.float64)
    doc_text = serialize_collection(full, schema, sel)
    coll = Collection(IdMap(full.ids.strings[sel], kind="document"), doc_text,
                      {k: v[sel] for k, v in full.fields.items()}, "debian-sub", ("serialized",))
    lab = WeakLabelingUn(schema).fit(coll)
    click = cached(work, "click", lambda: click_dataset(
        coll, schema, args.n_click, 0.75, n_broad_test=args.n_broad_test, seed=0, labeler=lab,
        entity_weights=1 + np.log1p(revdeps)))
    qlog = load_query_log()
    qlog = qlog.sample(args.n_log, seed=0)
    log(f"entities {len(coll)}; click train/val/test/broad {[len(click.queries[s]) for s in ('train', 'val', 'test', 'broad_test')]}; log {len(qlog)}")

    # ---- WeakLabeling-IP on the Click train set (agreement with the WeakLabeling-Un intents) --
    enc0 = Encoder(max_seq_length=64, variant="torch-fp32")
    ip = cached(work, "ip_train", lambda: weaklabel_ip(
        click.queries["train"].texts.tolist(), coll, schema, click.entity_idx["train"], enc0))
    wl_int = click.queries["train"].intents
    ip_agree = {it: float((ip[wl_int == it] == it).mean()) for it in ("narrow", "broad")}
    log("IP agreement with WL-Un intents", ip_agree)

    # ---- generators -------------------------------------------------------------------------
    gen_sel = np.sort(np.random.default_rng(1).choice(len(coll), args.n_gen, replace=False))

    def train_gen(kind: str, name: str | None = None, serialize: bool | None = None,
                  weak_un: bool = True, init: str | None = None):
        """A generator (cached under gen-<name>): QGen on the Click train pairs; intent-aware
        (kind ctrlqgen) on (2a) WeakLabeling-IP intents of the Click pairs, plus, with
        ``weak_un``, (2b) as many WeakLabeling-Un pairs for random entities."""
        name = name or kind
        path = work / f"gen-{name}"
        if (path / "limelight_qgen.json").exists():
            return QueryGenerator.load(path)
        g = QueryGenerator(init, kind=kind, schema=schema, max_input_tokens=48, max_new_tokens=8,
                           serialize=serialize)
        tq = click.queries["train"].texts.tolist()
        te = click.entity_idx["train"]
        if kind == "ctrlqgen":
            prompts, targets = training_pairs(g, coll, te, tq, ip.tolist())
            if weak_un:
                ue = np.random.default_rng(2).choice(len(coll), len(tq) // 2)
                ui = np.where(np.arange(len(ue)) % 2 == 0, "narrow", "broad")
                e2, i2, q2 = lab.generate(ue, ui, seed=3)
                p2, t2 = training_pairs(g, coll, e2, q2.tolist(), i2.tolist())
                prompts, targets = prompts + p2, targets + t2
        else:
            prompts, targets = training_pairs(g, coll, te, tq)
        t = time.perf_counter()
        g.fit(prompts, targets, steps=args.gen_steps, batch_size=8, train_layers=args.gen_layers,
              lr=args.gen_lr, seed=args.gen_seed,
              progress=lambda s, loss: log(f"  {name} step {s} loss {loss:.3f}") if s % 5 == 0 else None)
        timings[f"gen_fit_{name}_s_per_step"] = (time.perf_counter() - t) / args.gen_steps
        g.save(path)
        return g

    def gen_queries(g, intent, key, n=1, idx=None):
        idx = gen_sel if idx is None else idx

        def run():
            t = time.perf_counter()
            out = g.generate(entity_dicts(coll, schema, idx), intent, n=n, batch_size=32, seed=5)
            timings[f"gen_{key}_q_per_s"] = len(idx) * n / (time.perf_counter() - t)
            return out
        return cached(work, f"q-{key}", run)

    g_ctrl = train_gen("ctrlqgen", init=args.gen_init)
    q_ctrl_n = gen_queries(g_ctrl, "narrow", "ctrl-narrow")
    q_ctrl_b = gen_queries(g_ctrl, "broad", "ctrl-broad")
    del g_ctrl
    if not args.gen_only:
        g_qgen = train_gen("qgen")
        q_qgen = gen_queries(g_qgen, None, "qgen")
        del g_qgen
        g_inp = QueryGenerator(None, kind="inpars", schema=schema, max_input_tokens=48, max_new_tokens=8)
        ex_idx = np.random.default_rng(4).choice(len(click.queries["train"]), 200, replace=False)
        g_inp.examples = [(g_inp.entity_text(entity_dicts(coll, schema, [click.entity_idx["train"][i]])[0]),
                           click.queries["train"].texts[i]) for i in ex_idx.tolist()]
        q_inp = gen_queries(g_inp, None, "inpars")
        del g_inp

    def flat(qs):
        e = np.repeat(gen_sel, [len(x) for x in qs])
        t = [q for x in qs for q in x]
        keep = np.asarray([bool(x) for x in t])
        return list(np.asarray(t, dtype=object)[keep]), e[keep]

    # ---- validity and appendix D ------------------------------------------------------------
    def validity():
        from limelight.querygen.weaklabel import role_texts
        qn, en = flat(q_ctrl_n)
        qb, eb = flat(q_ctrl_b)
        narrow_t, _ = role_texts(coll, schema, en)
        share = np.mean([bool(set(q.lower().split()) & set(t.lower().replace(",", " ").split()))
                         for q, t in zip(qn, narrow_t, strict=True)])
        ipb = weaklabel_ip(qb, coll, schema, eb, enc0)
        ipn = weaklabel_ip(qn, coll, schema, en, enc0)
        logset = set(t.lower() for t in load_query_log().texts.tolist())
        clickset = set(t.lower() for t in click.queries["train"].texts.tolist())
        ser = {i: doc_text[i].lower() for i in np.unique(np.concatenate([en, eb])).tolist()}
        wl = set(click.queries["train"].texts.tolist())

        def d(qs, es):
            return {"n": len(qs),
                    "exact_in_log": float(np.mean([q.lower() in logset for q in qs])),
                    "exact_in_click_train": float(np.mean([q.lower() in clickset for q in qs])),
                    "not_substring_of_entity": float(np.mean([q.lower() not in ser[e] for q, e in zip(qs, es, strict=True)])),
                    "differs_from_weak_labels": float(np.mean([q not in wl for q in qs]))}
        return {"narrow_share_term_with_narrow_field": float(share),
                "broad_predicted_broad_by_ip": float((ipb == "broad").mean()),
                "narrow_predicted_narrow_by_ip": float((ipn == "narrow").mean()),
                "overlap_narrow": d(qn, en), "overlap_broad": d(qb, eb),
                "examples": [(coll.ids.strings[e], q) for q, e in list(zip(qn, en, strict=True))[:8]] +
                            [(coll.ids.strings[e], q) for q, e in list(zip(qb, eb, strict=True))[:8]]}
    valid = cached(work, "validity", validity)
    log("validity", {k: v for k, v in valid.items() if k != "examples"})
    if args.gen_only:  # the generators and their validity only (no bi-encoders, no H1/H2)
        return

    # ---- bi-encoders --------------------------------------------------------------------------
    # every bi-encoder sees the same number of distinct training pairs (the paper: "all dense
    # models were trained on the same amount of (synthetic or not) queries"): the size of the
    # smallest generated set; steps and batch size are equal too
    qn, en = flat(q_ctrl_n)
    qb, eb = flat(q_ctrl_b)
    gen_sets = {"QGen": flat(q_qgen), "InPars": flat(q_inp), "CtrlQGen_narrow": (qn, en),
                "CtrlQGen_broad": (qb, eb)}
    # both: narrow queries for the first half of E', broad queries for the second half
    first = set(gen_sel[: len(gen_sel) // 2].tolist())
    both = [(q, e) for q, e in zip(qn, en.tolist(), strict=True) if e in first] + \
           [(q, e) for q, e in zip(qb, eb.tolist(), strict=True) if e not in first]
    gen_sets["CtrlQGen_both"] = ([q for q, _ in both], np.asarray([e for _, e in both]))
    n_pairs = min(len(v[0]) for v in gen_sets.values())
    tr_q = click.queries["train"].texts.tolist()[:n_pairs]
    tr_e = click.entity_idx["train"][:n_pairs]
    r2 = np.random.default_rng(7)
    wl_e = r2.choice(len(coll), n_pairs)
    wl_i = np.where(r2.random(n_pairs) < 0.75, "narrow", "broad")
    wle, _, wlq = lab.generate(wl_e, wl_i, seed=8)
    n_syn = max(1, n_pairs // 10)  # 10% synthetic, 90% click (the paper's footnote 15)
    trainsets = {
        "Click": (tr_q, tr_e),
        "WeakLabelingUn": (wlq.tolist(), wle),
        **{k: (list(v[0])[:n_pairs], np.asarray(v[1])[:n_pairs]) for k, v in gen_sets.items()},
        "Click+CtrlQGen": (tr_q[:n_pairs - n_syn] + (qn + qb)[:n_syn],
                           np.concatenate([tr_e[:n_pairs - n_syn], np.concatenate([en, eb])[:n_syn]])),
    }
    models = {"zero-shot": None}
    for name, (q, e) in trainsets.items():
        path = work / f"bi-{name}"
        if not finetuned_exists(path):
            st = finetune_biencoder(q, [doc_text[i] for i in e.tolist()], path, steps=args.bi_steps,
                                    batch_size=args.bi_batch, max_seq_length=64, seed=0,
                                    doc_keys=e.tolist())
            timings[f"bi_{name}_s_per_1000_pairs"] = st.seconds / st.pairs * 1000
            log(f"bi-encoder {name}: {len(q)} distinct pairs, {st.steps} steps, {st.seconds:.0f}s, loss {st.losses[0]:.2f}->{st.losses[-1]:.2f}")
        models[name] = str(path)

    # ---- evaluation ---------------------------------------------------------------------------
    qsets = {"click_test": click.queries["test"], "broad_test": click.queries["broad_test"]}
    rel = {"click_test": click.entity_idx["test"], "broad_test": click.entity_idx["broad_test"]}

    def topk_ranks(docs: np.ndarray) -> np.ndarray:
        return docs

    def recall(docs: np.ndarray, target: np.ndarray) -> np.ndarray:
        return (docs == target[:, None]).any(axis=1).astype(np.float64)

    def ranks_of(docs: np.ndarray) -> tuple:
        q = np.repeat(np.arange(docs.shape[0]), docs.shape[1])
        d = docs.ravel()
        r = np.tile(np.arange(1, docs.shape[1] + 1), docs.shape[0])
        keep = d >= 0
        return q[keep], d[keep], r[keep]

    def eval_model(name):
        def run():
            out = {}
            if name == "BM25":
                bm = BM25(BM25Index.build(coll))
                search = lambda texts: bm.search_batch(texts, 100)[0]  # noqa: E731
            else:
                enc = Encoder(models[name], max_seq_length=64, variant="torch-fp32")
                t = time.perf_counter()
                emb = enc.encode(coll.texts.tolist())
                out["encode_docs_s"] = time.perf_counter() - t
                idx = DenseIndex.from_embeddings(coll.ids, emb, {"encoder": enc.identity()})
                search = lambda texts: idx.search(enc.encode(texts), 100)[0]  # noqa: E731
            for s, qs in qsets.items():
                out[s] = recall(search(qs.texts.tolist()), rel[s])
            out["log_docs"] = search(qlog.texts.tolist())
            return out
        return cached(work, f"eval-{name}", run)

    names = ["BM25", *models]
    res = {n: eval_model(n) for n in (names[::-1] if args.reverse_eval else names)}
    log_w = qlog.weights
    summary = {}
    mats = {}
    for n in names:
        q, d, r = ranks_of(res[n]["log_docs"])
        m = rank_matrix(q, d, r, len(coll), len(qlog))
        mats[n] = m
        ra = analyse(m, coll.ids, log_w, c=args.c)
        summary[n] = {"R@100_click_test": float(res[n]["click_test"].mean()),
                      "R@100_broad_test": float(res[n]["broad_test"].mean()),
                      "gini_log": ra.gini, "retrievable_fraction_log": ra.retrievable_fraction,
                      **{f"gini_log_c{c}": analyse(m, coll.ids, log_w, c=c).gini for c in (1, 10, 100)},
                      **{f"retrievable_c{c}": analyse(m, coll.ids, log_w, c=c).retrievable_fraction
                         for c in (1, 10, 100)}}
        log(n, summary[n])

    # t-tests (Bonferroni over all pairs of systems) and paired bootstrap of the Gini
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    m_tests = len(pairs)
    tests = {}
    for a, b in pairs:
        row = {}
        for s in qsets:
            p = paired_t(res[a][s], res[b][s])
            row[f"p_{s}_bonf"] = min(1.0, p * m_tests)
        pb = paired_bootstrap_gini(mats[a], mats[b], log_w, c=args.c, n_boot=args.n_boot, seed=0)
        row["gini_diff"] = pb["diff"]
        row["gini_ci"] = (pb["low"], pb["high"])
        row["p_gini_bonf"] = min(1.0, pb["p_value"] * m_tests)
        tests[f"{a} vs {b}"] = row

    # ---- Table 4: components added to QGen one at a time ------------------------------------
    ablation = {}
    if args.ablation:
        # (kind, serialize, WeakLabeling-Un pairs); QGen and full CtrlQGen are the main run's
        variants = {"+(1) serialization": ("qgen", True, False),
                    "+(2a,3) intent-aware, WeakLabeling-IP": ("ctrlqgen", False, False),
                    "+(2a,2b,3) intent-aware, WeakLabeling-IP+Un": ("ctrlqgen", False, True),
                    "+(1,2a,3) CtrlQGen, WeakLabeling-IP": ("ctrlqgen", True, False)}
        # each row: the bi-encoder evaluated on the narrow (Click) test set and the one on the
        # broad test set (intent-aware rows: trained on narrow resp. broad generated queries)
        rows = {"QGen": ("QGen", "QGen")}
        for i, (label, (kind, ser, un)) in enumerate(variants.items()):
            key = f"abl{i + 1}"
            g = None
            names_ = {}
            for it in (("narrow", "broad") if kind == "ctrlqgen" else (None,)):
                bname = f"{key}_{it or 'all'}"
                path = work / f"bi-{bname}"
                if not finetuned_exists(path):
                    g = g or train_gen(kind, key, serialize=ser, weak_un=un)
                    q, e = flat(gen_queries(g, it, f"{key}-{it or 'all'}"))
                    st = finetune_biencoder(list(q)[:n_pairs], [doc_text[j] for j in e[:n_pairs].tolist()],
                                            path, steps=args.bi_steps, batch_size=args.bi_batch,
                                            max_seq_length=64, seed=0, doc_keys=e[:n_pairs].tolist())
                    log(f"bi-encoder {bname}: {min(len(q), n_pairs)} pairs, {st.seconds:.0f}s")
                models[bname] = str(path)
                names_[it] = bname
            del g
            rows[label] = (names_.get("narrow", names_.get(None)), names_.get("broad", names_.get(None)))
        rows["+(1,2a,2b,3) CtrlQGen, WeakLabeling-IP+Un"] = ("CtrlQGen_narrow", "CtrlQGen_broad")
        ref_n, ref_b = rows["QGen"]
        for m_ in {m_ for pair in rows.values() for m_ in pair} - res.keys():
            res[m_] = eval_model(m_)  # once each (eval_model reads its cache from disk)
        for label, (mn, mb) in rows.items():
            r_n, r_b = res[mn], res[mb]
            row = {"model_narrow": mn, "model_broad": mb,
                   "R@100_click_test": float(r_n["click_test"].mean()),
                   "R@100_broad_test": float(r_b["broad_test"].mean())}
            for role, m_ in (("narrow", mn), ("broad", mb)):
                if m_ not in mats:
                    q, d, r = ranks_of(r_n["log_docs"] if role == "narrow" else r_b["log_docs"])
                    mats[m_] = rank_matrix(q, d, r, len(coll), len(qlog))
                row[f"gini_log_{role}_model"] = analyse(mats[m_], coll.ids, log_w, c=args.c).gini
            if label != "QGen":  # vs QGen, as the paper's daggers (paired t; bootstrap for Gini)
                row["p_click_test_vs_qgen"] = paired_t(r_n["click_test"], res[ref_n]["click_test"])
                row["p_broad_test_vs_qgen"] = paired_t(r_b["broad_test"], res[ref_b]["broad_test"])
                for role, m_, ref in (("narrow", mn, ref_n), ("broad", mb, ref_b)):
                    pb = paired_bootstrap_gini(mats[m_], mats[ref], log_w, c=args.c,
                                               n_boot=args.n_boot, seed=0)
                    row[f"gini_{role}_diff_vs_qgen"] = pb["diff"]
                    row[f"p_gini_{role}_vs_qgen"] = pb["p_value"]
            ablation[label] = row
            log("Table 4", label, {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()})

    # ---- H2: broad suggestions appended to the log ----------------------------------------
    def h2():
        g = QueryGenerator.load(work / "gen-ctrlqgen")
        rs = np.random.default_rng(9)
        hq = np.sort(rs.choice(len(qlog), args.n_h2, replace=False))
        out = {}
        for model in ("CtrlQGen_both", "Click"):
            top5 = res[model]["log_docs"][hq, :5]
            ents = np.unique(top5[top5 >= 0])
            sugg_c = cached(work, f"h2-sugg-{model}", lambda ents=ents: g.generate(
                entity_dicts(coll, schema, ents), "broad", n=3, batch_size=32, seed=11))
            sugg_w = lab.generate(np.repeat(ents, 3), "broad", seed=12)
            out[model] = {"entities": ents, "ctrlqgen": sugg_c, "weaklabel": sugg_w}
        return {"hq": hq, "sugg": out}
    h2d = cached(work, "h2", h2)
    fig4 = {}
    accept = [0.0, 0.25, 0.5, 0.75, 1.0]
    for model in ("CtrlQGen_both", "Click"):
        enc = Encoder(models[model], max_seq_length=64, variant="torch-fp32")
        emb = enc.encode(coll.texts.tolist())
        idx = DenseIndex.from_embeddings(coll.ids, emb, {"encoder": enc.identity()})
        sd = h2d["sugg"][model]
        ent_pos = {e: i for i, e in enumerate(sd["entities"].tolist())}
        for src in ("ctrlqgen", "weaklabel"):
            if src == "ctrlqgen":
                texts = [[q for q in qs if q] for qs in sd["ctrlqgen"]]
            else:
                ei, _, qq = sd["weaklabel"]
                texts = [[] for _ in sd["entities"]]
                for e, q in zip(ei.tolist(), qq.tolist(), strict=True):
                    texts[ent_pos[e]].append(q)
            # suggestions of each H2 log query: 3 per top-5 entity, weight o_q of that query
            s_text, s_w = [], []
            top5 = res[model]["log_docs"][h2d["hq"], :5]
            for qi, row in zip(h2d["hq"].tolist(), top5, strict=True):
                for e in row[row >= 0].tolist():
                    for t in texts[ent_pos[e]]:
                        s_text.append(t)
                        s_w.append(log_w[qi])
            sdocs = idx.search(enc.encode(s_text), 100)[0]
            allq = np.vstack([res[model]["log_docs"], sdocs])
            q, d, r = ranks_of(allq)
            m = rank_matrix(q, d, r, len(coll), allq.shape[0])
            curve = []
            for a in accept:
                w = np.concatenate([log_w, np.asarray(s_w) * (np.random.default_rng(13).random(len(s_w)) < a)])
                rr = retrievability(m, w, c=args.c)
                curve.append({"acceptance": a, "gini": gini(rr), "retrievable_fraction": retrievable_fraction(rr)})
            fig4[f"{model}/{src}"] = {"n_suggestions": len(s_text), "curve": curve}
            log("H2", model, src, [(c["acceptance"], round(c["gini"], 4)) for c in curve])

    out = {"settings": vars(args), "ip_agreement_with_wl_un": ip_agree, "validity": valid,
           "summary": summary, "tests": tests, "ablation": ablation, "fig4": fig4, "timings": timings,
           "n_train_pairs": {k: len(v[0]) for k, v in trainsets.items()}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(args.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))
    tmp.replace(args.out)
    log("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
