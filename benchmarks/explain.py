"""Issue 43, items 2 and 4: the cost of explaining a document page, and of its near misses.

    flock /tmp/heavy.lock .venv/bin/python benchmarks/explain.py [--audit demo-out] [--docs 200]

On the demo audit of the Debian catalog (read only; `make demo` first), for ``--docs`` random
documents that some query exposes:

- anchor: the document endpoint's own lookup, ``ExposureStore.exposing_queries(docid)``;
- BM25 page: the explanations (``explain_bm25``: contributions, spans, highlighted HTML of the
  query and the document) of the document's ``--per-page`` best exposing queries;
- dense page: the closest sentences (``explain_dense``, the audit's encoder) for its best query;

p50/p99 of each, and each p50 as a ratio of the anchor's. Near misses (``NearMisses``): the
one-time encoding of the log, then the time per document over ``--low`` documents with the
least exposure (ranks 101-1000). ``uptime`` is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from _summary import percentiles_ms, record

from limelight.exposure.nearmiss import NearMisses
from limelight.exposure.store import ExposureStore
from limelight.retrieval.bm25 import BM25, BM25Index
from limelight.retrieval.dense import DenseIndex, DenseRetriever
from limelight.retrieval.explain import explain_bm25, explain_dense


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--audit", default="demo-out")
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--per-page", type=int, default=10)
    ap.add_argument("--low", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=".cache/bench/explain.json")
    a = ap.parse_args()
    audit = Path(a.audit)
    print("uptime before:", _uptime(), flush=True)
    ix = BM25Index.load(audit / "index" / "bm25")
    bm25 = BM25(ix, k1=0.9, b=0.4)  # the demo audit's system `bm25`
    store = ExposureStore.open(audit / "systems" / "bm25" / "exposure")
    texts = pq.read_table(audit / "index" / "docs.parquet", columns=["text"]).column("text").to_pylist()
    dense = DenseRetriever(DenseIndex.load(audit / "index" / "dense"))

    n = store.n_exposing()
    rng = np.random.default_rng(a.seed)
    docs = rng.choice(np.flatnonzero(n > 0), a.docs, replace=False)
    # warm-up: kernels, caches, the encoder's first call
    d0 = store.doc_ids.strings[int(docs[0])]
    q0 = store.exposing_queries(d0)[0]["query"]
    explain_bm25(bm25, q0, d0, texts[int(docs[0])])
    explain_dense(dense, q0, texts[int(docs[0])])

    anchor, page, dense_t = [], [], []
    for d in docs.tolist():
        docid = store.doc_ids.strings[d]
        rows: list = []
        anchor.append(_timed(lambda docid=docid, rows=rows: rows.extend(store.exposing_queries(docid))))
        top = [r["query"] for r in rows[:a.per_page]]
        page.append(_timed(lambda docid=docid, top=top, d=d: [
            explain_bm25(bm25, q, docid, texts[d]) for q in top]))
        dense_t.append(_timed(lambda d=d, q=top[0]: explain_dense(dense, q, texts[d])))
    pa_, pb, pd = percentiles_ms(anchor), percentiles_ms(page), percentiles_ms(dense_t)
    print(json.dumps({"anchor": pa_, "bm25_page": pb, "dense_page": pd}), flush=True)
    record(f"BM25 explanation of a Debian document page ({a.per_page} queries), p50", pb["p50_ms"],
           unit="ms", anchor=f"exposing-queries lookup p50 {pa_['p50_ms']:.2f} ms",
           ratio=pb["p50_ms"] / pa_["p50_ms"], note=f"p99 {pb['p99_ms']:.1f} ms, {a.docs} docs")
    record("dense closest sentences of a Debian document page (1 query), p50", pd["p50_ms"],
           unit="ms", anchor=f"exposing-queries lookup p50 {pa_['p50_ms']:.2f} ms",
           ratio=pd["p50_ms"] / pa_["p50_ms"], note=f"p99 {pd['p99_ms']:.1f} ms, {a.docs} docs")

    t = time.perf_counter()
    nm = NearMisses(store, bm25)
    build = time.perf_counter() - t
    low = np.argsort(n, kind="stable")[:a.low]
    found: list[int] = []
    per_doc = [_timed(lambda d=d: found.append(len(nm.document(store.doc_ids.strings[d], None))))
               for d in low.tolist()]
    pn = percentiles_ms(per_doc)
    print(json.dumps({"near_miss_build_s": build, "near_miss": pn,
                      "near_misses_per_doc_mean": float(np.mean(found))}), flush=True)
    record(f"near misses (ranks 101-1000) of the {a.low} least exposed Debian documents, p50",
           pn["p50_ms"], unit="ms", anchor=f"exposing-queries lookup p50 {pa_['p50_ms']:.2f} ms",
           ratio=pn["p50_ms"] / pa_["p50_ms"],
           note=f"p99 {pn['p99_ms']:.0f} ms, total {sum(per_doc):.1f} s, log encoded once in "
                f"{build:.2f} s, {np.mean(found):.0f} near misses per document")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"anchor": pa_, "bm25_page": pb, "dense_page": pd,
                               "near_miss_build_s": build, "near_miss": pn,
                               "uptime": _uptime()}, indent=1))
    print("uptime after:", _uptime(), flush=True)


if __name__ == "__main__":
    main()
