"""For whom (issue 45, item 4): quality by group of queries, BM25 vs dense vs hybrid.

    flock /tmp/heavy.lock .venv/bin/python experiments/fairness/searchers.py
        [--collections cranfield,npl,scifact] [--bins 4] [--boot 1000] [--seed 0]

Judged collections (``--collections``): each system's top 100 (BM25 k1 0.9 b 0.4;
all-MiniLM-L6-v2, exact inner product, document vectors cached under ``.cache/embeddings``;
hybrid = RRF k = 60 of both top 100s), per-query nDCG@10 and R@100 (queries with a relevant
document), queries grouped by length in words into ``--bins`` equal-width and equal-count bins;
per (collection, binning, measure, system) Kruskal-Wallis across the bins, Bonferroni over every
test of the judged table; the worst-off bin; lexirecall preferences between systems per bin.

The shared log over the Debian catalog (the demo audit's three stores, 114,926 distinct
queries), grouped by the log's source, with figures that need no judgment: whether the query
gets any result; the overlap of two systems' top 10 (Jaccard); and the concentration of what the
query hands out — the share of its top 10 among the 1 % most exposed entries of the catalog
(r(d) at c = 10 of the same system over the whole log). Kruskal-Wallis across the sources per
(figure, system), Bonferroni over the log table's tests. Each distinct query counts once (the
tests are over queries, not over their occurrences).

Writes ``results/searchers.json``; ``report.py`` renders it.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from limelight._io import atomic_path
from limelight.data import load_dataset
from limelight.evaluation import evaluate
from limelight.evaluation.relpos import relevance_positions
from limelight.evaluation.searchers import bonferroni, compare_groups, length_bins
from limelight.exposure.store import ExposureStore
from limelight.retrieval.base import run_from_topk

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SYSTEMS = ("bm25", "dense", "hybrid")
K = 100


def topk(ds, enc_box: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each system's padded top 100 for the collection's queries."""
    from limelight.retrieval.bm25 import BM25, BM25Index
    from limelight.retrieval.dense import DenseIndex, DenseRetriever, Encoder
    from limelight.retrieval.fusion import rrf_topk

    texts = ds.queries.texts.tolist()
    out = {"bm25": BM25(BM25Index.build(ds.collection)).search_batch(texts, K)}
    enc = enc_box.setdefault("enc", Encoder())
    dr = DenseRetriever(DenseIndex.build(ds.collection, enc, cache_dir=ROOT / ".cache" / "embeddings"), enc)
    out["dense"] = dr.search_vectors(dr.encode_queries(texts), K)
    (d1, s1), (d2, s2) = out["bm25"], out["dense"]
    out["hybrid"] = rrf_topk([d1, d2], len(ds.collection), K, 60, ds.collection.ids.lexical_rank(), [s1, s2])
    return {k: (np.asarray(v[0]), np.asarray(v[1], dtype=np.float64)) for k, v in out.items()}


def judged(name: str, enc_box: dict, bins: int, boot: int, seed: int) -> list[dict]:
    ds = load_dataset(name)
    tk = topk(ds, enc_box)
    runs = {s: run_from_topk(ds.queries.ids, ds.collection.ids, d, sc, s) for s, (d, sc) in tk.items()}
    res = {s: evaluate(r, ds.qrels, "nDCG@10 R@100") for s, r in runs.items()}
    qids = res["bm25"].qids
    texts = ds.queries.texts[ds.queries.ids.encode(qids.strings.tolist())]
    pos = {s: relevance_positions(r, ds.qrels, 1, len(ds.collection)) for s, r in runs.items()}
    out = []
    for kind in ("width", "count"):
        labels = length_bins(texts.tolist(), bins, kind)
        for m in ("nDCG@10", "R@100"):
            vals = {s: next(v for k, v in res[s].per_query.items() if str(k) == m) for s in SYSTEMS}
            r = compare_groups(vals, labels, m, {s: pos[s].pos for s in SYSTEMS}, n_boot=boot, seed=seed)
            out.append({"collection": name, "binning": kind, "measure": m, "n_queries": len(labels),
                        "groups": r.groups.to_dict("records"), "tests": r.tests.to_dict("records"),
                        "preferences": r.preferences.to_dict("records") if m == "nDCG@10" else []})
    return out


def log_side(audit: Path, boot: int, seed: int) -> list[dict]:
    stores = {s: ExposureStore.open(audit / "systems" / s / "exposure") for s in SYSTEMS}
    st0 = stores["bm25"]
    nq = len(st0.queries)
    source = np.array([q.split(":", 1)[0] for q in st0.queries.ids.strings.tolist()], dtype=object)
    top10 = {}
    for s, st in stores.items():
        if st.queries.ids.strings.tolist() != st0.queries.ids.strings.tolist():
            raise SystemExit(f"{s}: another query set")
        q, d, rank, _ = st.pair_arrays()
        keep = rank <= 10
        top10[s] = (q[keep], d[keep])
    values: dict[str, dict[str, np.ndarray]] = {"any result": {}, "top-10 overlap": {}, "concentration": {}}
    for s, st in stores.items():
        values["any result"][s] = (st.n_retrieved() > 0).astype(float)
        q, d = top10[s]
        r = st.retrievability(10).r
        top = r >= np.quantile(r, 0.99)
        n10 = np.bincount(q, minlength=nq)
        hit = np.bincount(q, weights=top[d].astype(float), minlength=nq)
        values["concentration"][s] = np.divide(hit, n10, out=np.full(nq, np.nan), where=n10 > 0)
    n_docs = len(st0.doc_ids)
    for i, a in enumerate(SYSTEMS):
        for b in SYSTEMS[i + 1:]:
            ka = top10[a][0].astype(np.int64) * n_docs + top10[a][1]
            kb = top10[b][0].astype(np.int64) * n_docs + top10[b][1]
            both = np.intersect1d(ka, kb)
            inter = np.bincount(both // n_docs, minlength=nq)
            union = np.bincount(top10[a][0], minlength=nq) + np.bincount(top10[b][0], minlength=nq) - inter
            values["top-10 overlap"][f"{a}∩{b}"] = np.divide(inter, union, out=np.full(nq, np.nan), where=union > 0)
    out = []
    for m, vals in values.items():
        ok = np.all([np.isfinite(v) for v in vals.values()], axis=0)  # queries every system answers
        r = compare_groups({k: v[ok] for k, v in vals.items()}, source[ok], m, n_boot=boot, seed=seed)
        out.append({"collection": "debian-log", "binning": "source", "measure": m, "n_queries": int(ok.sum()),
                    "groups": r.groups.to_dict("records"), "tests": r.tests.to_dict("records"),
                    "preferences": []})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collections", default="cranfield,npl,scifact")
    ap.add_argument("--audit", type=Path, default=ROOT / "demo-out")
    ap.add_argument("--bins", type=int, default=4)
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t0 = time.perf_counter()
    box: dict = {}
    judged_rows = [row for c in a.collections.split(",") for row in judged(c, box, a.bins, a.boot, a.seed)]
    log_rows = log_side(a.audit, a.boot, a.seed)
    for rows in (judged_rows, log_rows):  # Bonferroni within each table's family of tests
        tests = [t for row in rows for t in row["tests"]]
        for t, p in zip(tests, bonferroni([t["p"] for t in tests]), strict=True):
            t["p_bonferroni"] = float(p)
            t["family"] = len([x for x in tests if np.isfinite(x["p"])])
    out = {"judged": judged_rows, "log": log_rows, "bins": a.bins, "boot": a.boot, "seed": a.seed,
           "seconds": time.perf_counter() - t0, "load": list(os.getloadavg())}
    with atomic_path(HERE / "results" / "searchers.json") as tmp:
        tmp.write_text(json.dumps(out, indent=1, ensure_ascii=False, default=float))
    print(f"done in {out['seconds']:.0f} s")


if __name__ == "__main__":
    main()
