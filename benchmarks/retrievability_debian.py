"""Retrievability of the Debian catalog under the real query log (docs/results-exposure.md).

    .venv/bin/python benchmarks/retrievability_debian.py bm25 [--work DIR]
    .venv/bin/python benchmarks/retrievability_debian.py dense-sample --docs 3000 --queries 10000

``bm25``: BM25 (k1 0.9, b 0.4) over all 63,666 entries and the whole log (114,926 distinct
normalised queries, o_q = occurrences), depth 100: Gini at c = 10 and 100 over every entry,
retrievable fraction, bootstrap CIs, the 20 most and least retrievable sections, and plots.
``dense-sample``: all-MiniLM-L6-v2 (max_seq_length 128) against BM25 on the same random sample
of entries and queries (CPU encoding of the whole catalog takes ~30 min), with a paired bootstrap
test of the Gini difference. Results are written as JSON to ``docs/figures/exposure/``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from limelight.data import IdMap, load_catalog, load_query_log
from limelight.data.collection import Collection
from limelight.exposure import (
    bootstrap_gini,
    compute_exposure,
    group_retrievability,
    paired_bootstrap_gini,
)
from limelight.exposure.plots import plot_histogram, plot_lorenz, plot_rank_size

REPO = Path(__file__).resolve().parents[1]
FIG = REPO / "docs" / "figures" / "exposure"
# the CtrlQGen paper's Table 2 (600k-entity catalogs): the anchor of issue 4, not a target
PAPER_GINI = {"BM25": "CtrlQGen Table 2: BM25 0.75-0.78",
              "MiniLM": "CtrlQGen Table 2: bi-encoders 0.82-0.84"}


def summary(st, name: str, n_boot: int) -> dict:
    out: dict = {"system": name, "n_docs": len(st.doc_ids), "n_queries": len(st.queries),
                 "pairs": int(len(st.pair_arrays()[0]))}
    for c in (10, 100):
        res = st.retrievability(c=c)
        b = bootstrap_gini(st.ranks(), st.queries.weights, c=c, n_boot=n_boot, seed=0)
        out[f"c={c}"] = {"gini": res.gini, "gini_ci95": [b["low"], b["high"]],
                         "bootstrap_bias": b["bias"], "retrievable_fraction": res.retrievable_fraction,
                         "gini_retrieved_only": res.gini_retrieved_only}
    g = st.retrievability(c=100, beta=0.5)
    out["gravity_c=100_beta=0.5"] = {"gini": g.gini, "retrievable_fraction": g.retrievable_fraction}
    return out


def part_bm25(work: Path, n_boot: int) -> None:
    from limelight.retrieval.index_dir import build_index, open_fingerprinted

    coll = load_catalog("debian")
    idx = work / "debian_idx"
    if not (idx / "meta.json").exists():
        build_index(coll, idx)
    retriever, fp, settings = open_fingerprinted(idx, "bm25")
    qs = load_query_log()
    t0 = time.perf_counter()
    st = compute_exposure(retriever, qs, work / "store_bm25", depth=100, fingerprint=fp,
                          settings=settings)
    secs = time.perf_counter() - t0
    out = summary(st, "BM25", n_boot)
    out["job_seconds"] = secs
    r100 = st.retrievability(c=100)
    r10 = st.retrievability(c=10)
    for field in ("section",):
        g = group_retrievability(r100.r, coll.fields[field])
        g = g[g["n_docs"] >= 20]  # sections with at least 20 entries
        out[f"{field}_top20"] = g.head(20).to_dict("records")
        out[f"{field}_bottom20"] = g.tail(20).iloc[::-1].to_dict("records")
        out[f"{field}_n_groups"] = int(len(g))
    gt = group_retrievability(r100.r, coll.fields["tags"])
    gt = gt[gt["n_docs"] >= 50]
    out["tags_top10"] = gt.head(10).to_dict("records")
    out["tags_bottom10"] = gt.tail(10).iloc[::-1].to_dict("records")
    FIG.mkdir(parents=True, exist_ok=True)
    plot_lorenz({"BM25 c=10": r10.r, "BM25 c=100": r100.r}, FIG / "lorenz_debian_bm25",
                title="Debian catalog, query log: Lorenz curves of r(d)")
    plot_rank_size({"BM25 top-100": st.n_exposing(), "BM25 top-10": st.n_exposing(10)},
                   FIG / "rank_size_debian_bm25")
    plot_histogram(r100.r, FIG / "hist_debian_bm25_c100", title="BM25, c=100: r(d)")
    (FIG / "debian_bm25.json").write_text(json.dumps(out, indent=1, default=float))
    print(json.dumps({k: v for k, v in out.items() if not k.startswith(("section", "tags"))},
                     indent=1, default=float))
    summarize_system(out, f"BM25, Debian ({out['n_docs']:,} entries) × {out['n_queries']:,} queries")


def summarize_system(s: dict, what: str, name: str = "BM25") -> None:
    """``make bench`` rows: Gini and retrievable fraction at c = 10 and 100 (issue 4 reports
    them next to the paper's Table 2; an absolute Gini has no target)."""
    from _summary import record

    for c in (10, 100):
        r = s[f"c={c}"]
        lo, hi = r["gini_ci95"]
        record(f"Gini of r(d), c = {c}, {what}", r["gini"], anchor=PAPER_GINI[name],
               note=f"95% CI [{lo:.3f}, {hi:.3f}]")
        record(f"retrievable fraction, c = {c}, {what}", r["retrievable_fraction"], anchor="")


def part_dense_sample(work: Path, n_docs: int, n_queries: int, n_boot: int) -> None:
    from limelight.retrieval.bm25 import BM25, BM25Index
    from limelight.retrieval.dense import DenseIndex, DenseRetriever, Encoder

    full = load_catalog("debian")
    rng = np.random.default_rng(0)
    idx = np.sort(rng.choice(len(full), size=n_docs, replace=False))
    coll = Collection(IdMap(full.ids.strings[idx], kind="document"), full.texts[idx],
                      {k: v[idx] for k, v in full.fields.items()}, "debian-sample", full.text_fields)
    qs = load_query_log().sample(n_queries, seed=0)
    bm25 = BM25(BM25Index.build(coll))
    t0 = time.perf_counter()
    enc = Encoder(max_seq_length=128)
    dense = DenseRetriever(DenseIndex.build(coll, enc, cache_dir=work / "emb_cache"), enc)
    enc_s = time.perf_counter() - t0
    stores = {}
    for name, r in (("BM25", bm25), ("MiniLM", dense)):
        stores[name] = compute_exposure(r, qs, work / f"sample_{name}_{n_docs}_{n_queries}", depth=100)
    out = {"n_docs": n_docs, "n_queries": n_queries, "doc_encoding_seconds": enc_s,
           "systems": [summary(st, name, n_boot) for name, st in stores.items()]}
    for c in (10, 100):
        t = paired_bootstrap_gini(stores["MiniLM"].ranks(), stores["BM25"].ranks(), qs.weights,
                                  c=c, n_boot=n_boot, seed=0)
        out[f"paired_c={c}"] = {k: v for k, v in t.items() if k != "samples"}
    plot_lorenz({f"{n} c=100": st.retrievability(100).r for n, st in stores.items()},
                FIG / "lorenz_debian_sample_bm25_minilm",
                title=f"Debian sample ({n_docs} entries, {n_queries} queries)")
    FIG.mkdir(parents=True, exist_ok=True)
    (FIG / "debian_sample_bm25_minilm.json").write_text(json.dumps(out, indent=1, default=float))
    print(json.dumps(out, indent=1, default=float))
    for name, s in zip(stores, out["systems"], strict=True):
        summarize_system(s, f"{name}, Debian sample ({n_docs:,} entries × {n_queries:,} queries)",
                         name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("part", choices=["bm25", "dense-sample"])
    ap.add_argument("--work", type=Path, default=Path("/tmp/limelight-exposure"))
    ap.add_argument("--docs", type=int, default=3000)
    ap.add_argument("--queries", type=int, default=10000)
    ap.add_argument("--boot", type=int, default=200)
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    if a.part == "bm25":
        part_bm25(a.work, a.boot)
    else:
        part_dense_sample(a.work, a.docs, a.queries, a.boot)


if __name__ == "__main__":
    main()
