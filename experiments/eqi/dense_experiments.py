"""Table 2(b), Table 3, Figures 1-3 analogs for the dense retriever (all-MiniLM-L6-v2, FAISS
flat inner product) on npl with the shared query log.

    .venv/bin/python experiments/eqi/dense_experiments.py [--steps 400] [--skip table3,fig2,fig3,fig1]
    .venv/bin/python experiments/eqi/dense_experiments.py --dataset debian --from-audit demo-out \
        --skip table3,fig2,fig3,fig1      # after `make demo`: its Debian store and vectors

Test documents: 1,000 npl documents with an exposing query; validation documents: 300 others
(early stopping); neither is ever in D_train. Models: Append and Residual (train_eqi), at most
``--steps`` batches of 1000 triples (the paper: 100,000 batches), Adam lr 1e-5 with the heads
that score best on the validation documents kept (checked every 10 batches). Writes
results/*.json and docs/figures/eqi/*.png.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
from common import CACHE, EMB, ROOT, Timer, collection, dense_store, log_queries, sample_docs, save

from limelight.exposure.eqi import (
    DenseReverse,
    encode_queries_cached,
    evaluate_lists,
    method_lists,
    one_tailed_t,
    summarize,
    train_eqi,
    training_data,
)
from limelight.exposure.relq import relq_many
from limelight.retrieval.dense import DenseIndex, DenseRetriever, Encoder

FIG = ROOT / "docs" / "figures" / "eqi"
M = "RELQ(0.5,0.9)"
LR = 1e-5


def stopping(val):
    """Early stopping on the 300 validation documents (lr 1e-5, checked every 10 batches)."""
    return {"validation_docs": val, "eval_every": 10, "patience": 10, "lr": LR}


def progress(step, total, loss):
    if step % 500 == 1 or step == total:
        print(f"  step {step}/{total} loss {loss:.4f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="npl")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--table3-steps", type=int, default=400)
    ap.add_argument("--skip", default="", help="comma list of parts to skip: table3,fig2,fig3,fig1")
    ap.add_argument("--reuse", action="store_true", help="load the Table 2 models saved by a previous run")
    ap.add_argument("--t3-queries", default="10000,50000,100000")
    ap.add_argument("--t3-docs", default="1500,6000")
    ap.add_argument("--fig2-starts", default="20000,60000")
    ap.add_argument("--from-audit", type=Path, default=None,
                    help="use the dense system of this audit output (e.g. demo-out for --dataset debian)")
    args = ap.parse_args()
    skip = set(args.skip.split(","))
    name = args.dataset
    if args.from_audit:  # the dense system of an audit (`make demo`): its store and vectors
        from limelight.exposure import ExposureStore

        a = args.from_audit
        st = ExposureStore.open(a / "systems" / "dense" / "exposure")
        qs, enc = st.queries, None
        qemb = np.load(a / "systems" / "query_vectors.npy")
        demb = np.load(a / "index" / "dense" / "embeddings.npy")
        if len(qemb) != len(qs) or len(demb) != len(st.doc_ids):
            raise SystemExit(f"{a}: query vectors or embeddings do not match the dense store")
        name = f"{name}-audit"
    else:
        coll = collection(name)
        qs = log_queries()
        enc = Encoder()
        demb = enc.encode_collection(coll, cache_dir=EMB)
        qemb = encode_queries_cached(qs, enc, EMB)
        ret = DenseRetriever(DenseIndex.from_embeddings(coll.ids, demb, {"encoder": enc.identity()}), enc)
        with Timer() as t:
            st = dense_store(name, ret, qemb, qs)
        print(f"dense store {t.s:.1f}s; load {os.getloadavg()}", flush=True)
    test = sample_docs(st, 1000, seed=0)
    val = sample_docs(st, 300, seed=1, exclude=test)  # early stopping only; never in D_train
    held = np.concatenate([test, val])
    dense = DenseReverse(qs, qemb, enc)
    models = {}
    from limelight.exposure.eqi import EQIModel

    for method in ("residual", "append"):
        if args.reuse and (CACHE / f"{name}-{method}" / "model.json").exists():
            models[method] = EQIModel.load(CACHE / f"{name}-{method}").index_queries(qs, qemb, enc)
            continue
        with Timer() as t:
            models[method] = train_eqi(method, st, qemb, demb, n_queries=50_000, n_docs=6000,
                                       exclude_docs=held, steps=args.steps, batch_size=1000,
                                       encoder=enc, progress=progress, **stopping(val))
        print(f"{method}: trained in {t.s:.1f}s {models[method].meta['training']}", flush=True)
        models[method].save(CACHE / f"{name}-{method}")
    lists = {"dense-reverse": method_lists(dense, test, embeddings=demb[test])}
    for k, m in models.items():
        lists[k] = method_lists(m, test, embeddings=demb[test])
    per = evaluate_lists(st, test, lists)
    res = summarize(per)
    res["p_one_tailed"] = {
        f"{a}>{b}": {k: one_tailed_t(per[a][k], per[b][k]) for k in per[a]}
        for a, b in (("residual", "dense-reverse"), ("append", "dense-reverse"), ("residual", "append"))}
    res["training"] = {k: {x: m.meta[x] for x in ("training", "steps", "batch_size", "lr", "train_seconds",
                                                 "loss_first_100", "loss_last_100", "validation")}
                       for k, m in models.items()}
    # how many distinct queries the 1,000 lists hold (a collapse onto "hub" queries shows here)
    res["distinct_queries_in_lists"] = {k: int(len(np.unique(v[v >= 0]))) for k, v in lists.items()}
    res["distinct_exposing_queries"] = int(len(np.unique(st.ranks()[test].indices)))
    res["load"] = os.getloadavg()
    if not args.reuse:
        save(f"table2_dense_{name}", res)
    print(res, flush=True)

    ranks = st.ranks()
    truth = ranks[test]
    if "table3" not in skip:  # training queries × training documents
        t3 = {}
        for nq in map(int, args.t3_queries.split(",")):
            for nd in map(int, args.t3_docs.split(",")):
                m = train_eqi("residual", st, qemb, demb, n_queries=nq, n_docs=nd, exclude_docs=held,
                              steps=args.table3_steps, batch_size=1000, seed=1, **stopping(val))
                v = relq_many(method_lists(m, test, embeddings=demb[test]), truth, M)[M]
                t3[f"{nq}x{nd}"] = {"mean": float(np.nanmean(v)), "values": v}
                print("table3", nq, nd, t3[f"{nq}x{nd}"]["mean"], flush=True)
        keys = list(t3)
        tests = {}
        for a in keys:
            for b in keys:
                qa, da = map(int, a.split("x"))
                qb, db = map(int, b.split("x"))
                if (qa == qb and db > da) or (da == db and qb > qa):
                    tests[f"{b}>{a}"] = one_tailed_t(t3[b]["values"], t3[a]["values"])
        save(f"table3_{name}", {"steps": args.table3_steps, "means": {k: v["mean"] for k, v in t3.items()},
                                "p_one_tailed": tests, "bonferroni_m": len(tests)})

    if "fig2" not in skip:  # growing query log without retraining
        rng = np.random.default_rng(7)
        perm = rng.permutation(len(qs))
        sizes = [20_000, 40_000, 50_000, 60_000, 80_000, 100_000, len(qs)]
        curves = {}
        for q0 in map(int, args.fig2_starts.split(",")):
            if q0 == 50_000 and "residual" in models:
                # the Table 2 model: trained on Q_train = 50,000 queries drawn with seed 0
                m = models["residual"]
                start = np.sort(np.random.default_rng(0).choice(len(qs), 50_000, replace=False))
                rest = np.setdiff1d(np.arange(len(qs)), start)
                order = np.concatenate([start, rng.permutation(rest)])
            else:
                order = perm
                td = training_data(st, qemb, demb, q0, 6000, exclude_docs=held, seed=2,
                                   train_queries=np.sort(perm[:q0]))
                m = train_eqi("residual", st, qemb, demb, data=td, steps=args.table3_steps,
                              batch_size=1000, seed=2, **stopping(val))
            pts = []
            for size in [s for s in sizes if s >= q0]:
                u = np.sort(order[:size])
                m.index_queries(qs.take(u), qemb[u])
                codes = method_lists(m, test, embeddings=demb[test])
                dcodes = DenseReverse(qs.take(u), qemb[u]).search(embeddings=demb[test], k=100)[0]
                tr = truth[:, u]
                pts.append({"log": size, "residual": float(np.nanmean(relq_many(codes, tr, M)[M])),
                            "dense-reverse": float(np.nanmean(relq_many(dcodes, tr, M)[M]))})
                print("fig2", q0, pts[-1], flush=True)
            curves[str(q0)] = pts
        save(f"fig2_{name}", curves)
        _plot_fig2(curves)

    if "fig3" not in skip:
        _fig3(qs, st, test, lists, name)
    if "fig1" not in skip:
        _fig1(per, lists, truth, test, st)


def _plot_fig2(curves):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    FIG.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for q0, pts in curves.items():
        ax.plot([p["log"] for p in pts], [p["residual"] for p in pts], marker="o", label=f"residual, trained on {q0}")
    last = curves[list(curves)[0]]
    ax.plot([p["log"] for p in last], [p["dense-reverse"] for p in last], ls="--", color="gray", label="dense-reverse")
    ax.set_xlabel("query log size (queries)")
    ax.set_ylabel(M)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(FIG / "fig2_growing_log.png", dpi=120)


def _fig3(qs, st, test, lists, name):
    """P(exposing for a test document) vs P(retrieved in top-10 / top-100) by query length and
    rarity (minimum document frequency of its terms in the collection's BM25 index)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from limelight.retrieval.bm25 import BM25, BM25Index

    bm = BM25(BM25Index.build(collection(name)))
    qv = bm.query_vectors(qs.texts.tolist()).tocsr()
    df = bm.index.df.astype(np.float64)
    mindf = np.full(len(qs), np.nan)
    nz = np.diff(qv.indptr) > 0
    rows = np.repeat(np.arange(len(qs)), np.diff(qv.indptr))
    tmp = np.full(len(qs), np.inf)
    np.minimum.at(tmp, rows, df[qv.indices])
    mindf[nz] = tmp[nz]
    length = np.array([len(t.split()) for t in qs.texts.tolist()])
    # per query: the share of the test documents it exposes / retrieves (the paper's Figure 3
    # probabilities, averaged over documents)
    m = len(test)
    exposing = np.bincount(st.ranks()[test].indices, minlength=len(qs)) / m
    retrieved = {}
    for mname, codes in lists.items():
        for k in (10, 100):
            c = codes[:, :k].ravel()
            retrieved[f"{mname}@{k}"] = np.bincount(c[c >= 0], minlength=len(qs)) / m
    out = {}
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, (label, feat, bins) in zip(axes, [("query length (words)", length, [1, 2, 3, 4, 5, 6, 8, 10, 15, 100]),
                                              ("min df of query terms", mindf, [1, 2, 5, 10, 30, 100, 300, 1000, 1e9])], strict=True):
        b = np.digitize(np.nan_to_num(feat, nan=-1), bins) - 1
        ok = (b >= 0) & (b < len(bins) - 1)
        cnt = np.bincount(b[ok], minlength=len(bins) - 1).astype(float)
        cnt[cnt == 0] = np.nan
        series = {"exposing": np.bincount(b[ok], weights=exposing[ok], minlength=len(bins) - 1) / cnt}
        for key, v in retrieved.items():
            series[key] = np.bincount(b[ok], weights=v[ok], minlength=len(bins) - 1) / cnt
        xs = [f"{bins[i]:g}-" for i in range(len(bins) - 1)]
        for s, v in series.items():
            ax.plot(range(len(xs)), v, marker="o" if s == "exposing" else ".", lw=2 if s == "exposing" else 1, label=s)
        ax.set_xticks(range(len(xs)), xs, rotation=45, fontsize=7)
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("probability")
        out[label] = {s: [None if np.isnan(x) else float(x) for x in v] for s, v in series.items()}
        out[label]["bins"] = list(map(float, bins))
    axes[1].legend(fontsize=6)
    fig.tight_layout()
    FIG.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIG / "fig3_query_characteristics.png", dpi=120)
    save(f"fig3_{name}", out)


def _fig1(per, lists, truth, test, st):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    v = per["residual"][M]
    ok = np.flatnonzero(~np.isnan(v))
    picks = ok[np.argsort(v[ok])][np.linspace(0, len(ok) - 1, 4).astype(int)][::-1]
    fig, axes = plt.subplots(4, 2, figsize=(10, 8), sharey=True)
    for r, i in enumerate(picks):
        row = truth[i].toarray().ravel()
        both = set(lists["dense-reverse"][i].tolist()) & set(lists["residual"][i].tolist())
        for c, mname in enumerate(("dense-reverse", "residual")):
            ax = axes[r, c]
            codes = lists[mname][i]
            h = np.where(codes >= 0, row[np.maximum(codes, 0)], 0)
            height = np.where(h > 0, 100 - (h - 1), 0)
            shared = np.array([q in both for q in codes.tolist()])
            ax.bar(np.arange(1, len(codes) + 1)[~shared], height[~shared], width=0.8, color="tab:blue")
            ax.bar(np.arange(1, len(codes) + 1)[shared], height[shared], width=0.8, color="tab:orange")
            ax.set_title(f"doc {st.doc_ids[int(test[i])]} — {mname}: {per[mname][M][i]:.3f}", fontsize=8)
            if r == 3:
                ax.set_xlabel("ρ(q, ψ_d) + 1")
        axes[r, 0].set_ylabel("n − ρ(d, σ_q)")
    fig.suptitle("exposing queries retrieved (orange: by both models)", fontsize=9)
    fig.tight_layout()
    FIG.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIG / "fig1_four_documents.png", dpi=110)


if __name__ == "__main__":
    sys.exit(main())
