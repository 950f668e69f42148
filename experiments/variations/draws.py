"""Query variations with several draws per query, and the query-length test (issue 23 item 3).

Penha, Câmara & Hauff (ECIR 2022), Table 4 protocol (``limelight.querygen.robustness``) repeated
over seeds 0..S-1 on cranfield, npl and scifact with BM25 (k1 0.9, b 0.4, top 1000) and MiniLM
(all-MiniLM-L6-v2 onnx-int8, exact FAISS, top 1000; collection embeddings from the cache that
``benchmarks/dense_effectiveness.py`` filled):

- setting ``full``: the queries as they are, every available method;
- settings ``first<n>``: every query truncated to its first n content words
  (``limelight.querygen.draws.truncate_queries``; TREC-DL-2019's queries have 3.2 content words
  on average, ANTIQUE's are longer), the random methods only (misspellings, word order, synonym
  swaps), so that the drop of one typo can be read against the number of content words.

    .venv/bin/python experiments/variations/draws.py [cranfield npl scifact] [--seeds 5]
        [--truncate 2,3,4,6] [--systems bm25,dense]

Each (collection, setting, seed) is cached in ``results/draws_cache/`` (resumable; delete to
recompute). Writes ``experiments/variations/results/draws_<collection>.parquet`` (every per-query
value), ``results/variations_draws.json`` (summaries, strata, timings with load averages) and the
figure ``docs/figures/variations/length.png``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from limelight.data import load_dataset
from limelight.querygen.draws import (
    content_length,
    draw_values,
    stratified_drops,
    summarize_draws,
    truncate_queries,
)

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / "results"
CACHE = RESULTS / "draws_cache"
FIGURE = ROOT / "docs" / "figures" / "variations" / "length.png"
EMB_CACHE = ROOT / ".cache" / "embeddings"
RANDOM_METHODS = "NeighbCharSwap,RandomCharSub,QWERTYCharSub,RandOrderSwap,WEmbedSynSwap,WNetSynSwap"
BINS = (1, 4, 6, 9, 12)  # content-word bins for the natural strata: 1-3, 4-5, 6-8, 9-11, 12+
#: the paper's BM25 rows (Table 4): original and the three misspelling methods; content words of
#: TREC-DL-2019 measured on the 43 queries of the shared log (trec-dl-2019)
PAPER = {"TREC-DL-2019": {"original": 0.480, "misspelling": [0.275, 0.231, 0.244], "words": 5.51},
         "ANTIQUE": {"original": 0.229, "misspelling": [0.156, 0.162, 0.161], "words": 10.51}}


def load() -> str:
    a, b, c = os.getloadavg()
    return f"{a:.2f} {b:.2f} {c:.2f}"


def build_systems(ds, spec: str) -> dict:
    from limelight.retrieval.bm25 import BM25, BM25Index

    out = {}
    for name in spec.split(","):
        if name == "bm25":
            out["BM25"] = BM25(BM25Index.build(ds.collection)) % 1000
        elif name == "dense":
            from limelight.retrieval.dense import DenseIndex, DenseRetriever, Encoder

            enc = Encoder(variant="onnx-int8")
            out["MiniLM"] = DenseRetriever(DenseIndex.build(ds.collection, enc, cache_dir=EMB_CACHE)) % 1000
    return out


def run_collection(name: str, seeds: int, truncs: list[int], spec: str, timings: list) -> pd.DataFrame:
    ds = load_dataset(name)
    systems = None
    settings = [("full", ds.queries, "all")] + [(f"first{n}", truncate_queries(ds.queries, n), RANDOM_METHODS)
                                                for n in truncs]
    frames = []
    for setting, queries, methods in settings:
        for seed in range(seeds):
            path = CACHE / f"{name}-{setting}-s{seed}.parquet"
            if not path.exists():
                if systems is None:
                    systems = build_systems(ds, spec)
                t0, l0 = time.time(), load()
                f = draw_values(systems, queries, ds.qrels, seed, methods=methods)
                f.insert(0, "setting", setting)
                f.insert(0, "collection", name)
                path.parent.mkdir(parents=True, exist_ok=True)
                f.to_parquet(path, index=False)
                timings.append({"collection": name, "setting": setting, "seed": seed,
                                "seconds": round(time.time() - t0, 1), "load_before": l0, "load_after": load()})
                print(f"{name} {setting} seed {seed}: {timings[-1]['seconds']} s (load {l0} -> "
                      f"{timings[-1]['load_after']})", flush=True)
            frames.append(pd.read_parquet(path))
    return pd.concat(frames, ignore_index=True)


def summarise(frame: pd.DataFrame) -> dict:
    out: dict = {}
    for (coll, setting), g in frame.groupby(["collection", "setting"], sort=False):
        s = summarize_draws(g.drop(columns=["collection", "setting"]))
        out.setdefault(coll, {})[setting] = s.replace({np.nan: None}).to_dict(orient="records")
    return out


def strata(frame: pd.DataFrame) -> dict:
    out = {}
    for coll, g in frame[frame["setting"] == "full"].groupby("collection", sort=False):
        s = stratified_drops(g.drop(columns=["collection", "setting"]), BINS)
        out[coll] = s.replace({np.nan: None}).to_dict(orient="records")
    return out


def lengths(names: list[str]) -> dict:
    import gzip

    out = {}
    for n in names:
        q = load_dataset(n).queries
        out[n] = {"words": float(np.mean([len(t.split()) for t in q.texts])),
                  "content_words": float(content_length(q).mean())}
    log = ROOT.parent / "shared" / "data" / "querylogs" / "queries.tsv.gz"
    if log.exists():
        with gzip.open(log, "rt", encoding="utf-8") as fh:
            dl = [ln.rstrip("\n").split("\t")[2] for ln in fh if ln.startswith("trec-dl-2019\t")]
        out["TREC-DL-2019 (log)"] = {"words": float(np.mean([len(t.split()) for t in dl])),
                                     "content_words": float(content_length(dl).mean()), "n": len(dl)}
    return out


def figure(summary: dict, strat: dict, lens: dict, n_draws: int) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    systems = sorted({r["system"] for c in summary.values() for r in c["full"]})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=120, sharey=True)
    colors = {"cranfield": "tab:blue", "npl": "tab:orange", "scifact": "tab:green"}
    marks = {"BM25": "o-", "MiniLM": "s--"}
    ax = axes[0]
    for coll, settings in summary.items():
        for sname in systems:
            xs, ys, lo, hi = [], [], [], []
            for setting, rows in settings.items():
                r = next((r for r in rows if r["system"] == sname and r["level"] == "category"
                          and r["method"] == "misspelling"), None)
                if r is None:
                    continue
                x = lens[coll]["content_words"] if setting == "full" else int(setting[5:])
                xs.append(x)
                ys.append(100 * r["rel_drop"])
                lo.append(100 * (r["rel_drop"] - r["rel_drop_lo"]))
                hi.append(100 * (r["rel_drop_hi"] - r["rel_drop"]))
            order = np.argsort(xs)
            ax.errorbar(np.array(xs)[order], np.array(ys)[order],
                        yerr=[np.array(lo)[order], np.array(hi)[order]], fmt=marks.get(sname, "o-"),
                        color=colors.get(coll), capsize=3, label=f"{coll} {sname}", markersize=4)
    dl = PAPER["TREC-DL-2019"]
    x_dl = lens.get("TREC-DL-2019 (log)", {}).get("content_words", 3.2)
    ax.plot([x_dl], [100 * (1 - np.mean(dl["misspelling"]) / dl["original"])], "k*", markersize=12,
            label="paper BM25, TREC-DL-2019")
    ax.set_xlabel("content words per query\n(truncated to the first n; last point: untruncated, mean)")
    ax.set_ylabel("relative nDCG@10 drop, misspelling category (%)")
    ax.set_title(f"truncated queries: mean and 95 % CI over {n_draws} draws", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    ax = axes[1]
    for coll, rows in strat.items():
        for sname in systems:
            sel = [r for r in rows if r["system"] == sname and r["category"] == "misspelling"
                   and r["n_queries"] >= 10]
            if not sel:
                continue
            x = [r["bin_start"] for r in sel]
            y = [100 * r["rel_drop"] for r in sel]
            e = [[100 * (r["rel_drop"] - r["rel_drop_lo"]) for r in sel],
                 [100 * (r["rel_drop_hi"] - r["rel_drop"]) for r in sel]]
            ax.errorbar(x, y, yerr=e, fmt=marks.get(sname, "o-"), color=colors.get(coll), capsize=3,
                        label=f"{coll} {sname}", markersize=4)
    ax.set_xticks(list(BINS), ["1-3", "4-5", "6-8", "9-11", "12+"])
    ax.set_xlabel("content words per query\n(untruncated queries in length bins; bins with ≥ 10 queries)")
    ax.set_title(f"untruncated queries by length: mean and 95 % CI over {n_draws} draws", fontsize=9)
    ax.grid(alpha=0.3)
    ax.axhline(0, color="black", linewidth=0.8)
    axes[0].axhline(0, color="black", linewidth=0.8)
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, bbox_inches="tight")
    plt.close(fig)


def _pct(x: float) -> str:
    return f"{-100 * x + 0.0:+.1f}"  # relative change (a drop is negative); no "-0.0"


def _cell(r: dict, n: int) -> str:
    return (f"{_pct(r['rel_drop'])} [{_pct(r['rel_drop_hi'])}, {_pct(r['rel_drop_lo'])}] "
            f"{r['n_sig']}/{n}{r['sig_pooled']}")


def markdown(summary: dict, strat: dict, lens: dict, n: int) -> str:
    """The tables of docs/results-variations.md (relative change of nDCG@10 in %, 95 % CI over
    draws, draws significant / draws, ↓/↑ pooled test)."""
    cols = [(c, s) for c in summary for s in ("BM25", "MiniLM")]
    head = "| level | method | " + " | ".join(f"{c} {s}" for c, s in cols) + " |"
    sep = "|---|---|" + "---:|" * len(cols)
    out = [f"**Untruncated queries, {n} draws**\n", head, sep]
    orig = {(c, s): next(r["original"] for r in summary[c]["full"] if r["system"] == s) for c, s in cols}
    out.append("| – | original nDCG@10 | " + " | ".join(f"{orig[k]:.3f}" for k in cols) + " |")
    keys = list(dict.fromkeys((r["level"], r["method"]) for r in summary[cols[0][0]]["full"]))
    for lv, m in keys:
        cells = [next((_cell(r, n) for r in summary[c]["full"] if r["system"] == s and r["level"] == lv
                       and r["method"] == m), "") for c, s in cols]
        out.append(f"| {lv} | {m} | " + " | ".join(cells) + " |")
    for cat in ("misspelling", "paraphrasing", "ordering"):
        out += [f"\n**Truncated queries, category {cat}, {n} draws** (original nDCG@10 of the "
                "truncated queries, then the relative change)\n", "| content words | " +
                " | ".join(f"{c} {s}" for c, s in cols) + " |", "|---|" + "---:|" * len(cols)]
        settings = [k for k in summary[cols[0][0]] if k != "full"] + ["full"]
        for st in settings:
            cells = []
            for c, s in cols:
                r = next((r for r in summary[c].get(st, []) if r["system"] == s and r["level"] == "category"
                          and r["method"] == cat), None)
                cells.append(f"{r['original']:.3f}: {_cell(r, n)}" if r else "")
            means = ", ".join(f"{lens[c]['content_words']:.1f}" for c in summary)
            label = st[5:] if st != "full" else f"all ({means})"
            out.append(f"| {label} | " + " | ".join(cells) + " |")
    out += [f"\n**Untruncated queries by length, category misspelling, {n} draws** (queries in the "
            "bin, original nDCG@10, relative change)\n", "| content words | " +
            " | ".join(f"{c} {s}" for c, s in cols) + " |", "|---|" + "---:|" * len(cols)]
    bins = list(dict.fromkeys(r["bin"] for c in strat for r in strat[c]))
    for b in sorted(bins, key=lambda x: int(x.split("-")[0].rstrip("+"))):
        cells = []
        for c, s in cols:
            r = next((r for r in strat[c] if r["system"] == s and r["category"] == "misspelling"
                      and r["bin"] == b), None)
            cells.append(f"{r['n_queries']}, {r['original']:.3f}: {_pct(r['rel_drop'])} "
                         f"[{_pct(r['rel_drop_hi'])}, {_pct(r['rel_drop_lo'])}]" if r else "")
        out.append(f"| {b} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> None:
    seeds, truncs, spec = 5, [2, 3, 4, 6], "bm25,dense"
    if "--seeds" in argv:
        i = argv.index("--seeds")
        seeds = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    if "--truncate" in argv:
        i = argv.index("--truncate")
        truncs = [int(x) for x in argv[i + 1].split(",") if x]
        argv = argv[:i] + argv[i + 2:]
    if "--systems" in argv:
        i = argv.index("--systems")
        spec = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    names = argv or ["cranfield", "npl", "scifact"]
    t0, l0 = time.time(), load()
    timings: list = []
    frame = pd.concat([run_collection(n, seeds, truncs, spec, timings) for n in names], ignore_index=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    for n in names:
        frame[frame["collection"] == n].to_parquet(RESULTS / f"draws_{n}.parquet", index=False)
    summary, strat, lens = summarise(frame), strata(frame), lengths(names)
    figure(summary, strat, lens, seeds)
    out = {"command": "experiments/variations/draws.py " + " ".join(argv), "seeds": list(range(seeds)),
           "truncate": truncs, "systems": spec, "bins": list(BINS), "paper": PAPER, "lengths": lens,
           "summary": summary, "strata": strat, "timings": timings,
           "total_seconds_this_call": round(time.time() - t0, 1), "load_before": l0, "load_after": load()}
    (RESULTS / "variations_draws.md").write_text(markdown(summary, strat, lens, seeds), encoding="utf-8")
    path = RESULTS / "variations_draws.json"
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False), encoding="utf-8")
    print(f"wrote {path} and {FIGURE} in {time.time() - t0:.1f} s (load {l0} -> {load()})")


if __name__ == "__main__":
    main(sys.argv[1:])
