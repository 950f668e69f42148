"""Query variation throughput: variants per second per method.

The issue names no external anchor for generation speed (the paper's TextAttack implementations
are not installed here), so the anchor is the cost of *using* the variants: BM25 top-1000
retrieval of the same variant texts over the same collection (limelight's engine, 1 thread),
in queries per second. The ratio says whether generating variants or running them dominates a
robustness report.

Queries: the first ``--n-queries`` distinct queries of the shared query log (real web queries)
and npl's collection for the BM25 anchor. Each method runs ``--repeats`` times on the same
queries (its one-off set-up, e.g. loading GloVe or WordNet, is timed separately and excluded from
the rate); the median is reported with the load average.

    .venv/bin/python benchmarks/variations.py [--n-queries 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-queries", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--collection", default="npl")
    args = ap.parse_args()

    from limelight.data import load_dataset, load_query_log
    from limelight.querygen.variations import METHODS, _rng, get_method
    from limelight.retrieval.bm25 import BM25, BM25Index

    log = load_query_log()
    qs = log.head(args.n_queries)
    texts = qs.texts.tolist()
    qids = list(qs.ids.strings)
    print(f"load average before: {os.getloadavg()[0]:.2f} (2 cores, shared)")
    ds = load_dataset(args.collection)
    bm25 = BM25(BM25Index.build(ds.collection), threads=1)
    bm25.search_batch(texts[:10], 1000)  # compile / warm up
    print(f"{len(texts)} query-log queries; anchor: BM25 top-1000 on {args.collection} "
          f"({len(ds.collection)} docs), 1 thread\n")
    print(f"{'method':<16}{'setup s':>9}{'variants/s':>12}{'valid':>8}{'BM25 q/s':>10}{'gen/BM25':>10}")
    measured: list[tuple[str, float, float]] = []
    for name in METHODS:
        m = get_method(name)
        why = m.unavailable()
        if why:
            print(f"{name:<16} skipped: {why}")
            continue
        t0 = time.perf_counter()
        m.prepare(texts[:1])
        setup = time.perf_counter() - t0
        rates, out = [], []
        for _ in range(args.repeats):
            if hasattr(m, "_nn"):
                m._nn.clear()  # neighbour cache: every repeat pays the batched look-up
            if hasattr(m, "_cache"):
                m._cache.clear()
            t = time.perf_counter()
            m.prepare(texts)
            out = m.variants_many(texts, 1, [_rng(0, name, q) for q in qids])
            rates.append(time.perf_counter() - t)
        variants = [v[0] for v in out if v]
        rates = [len(variants) / r for r in rates]  # valid variants produced per second
        bq = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            bm25.search_batch(variants, 1000)
            bq.append(len(variants) / (time.perf_counter() - t))
        g, b = statistics.median(rates), statistics.median(bq)
        print(f"{name:<16}{setup:>9.2f}{g:>12,.0f}{len(variants):>8}{b:>10,.0f}{g / b:>10.2f}")
        measured.append((name, g, b))
    print(f"\nload average after: {os.getloadavg()[0]:.2f}; numpy {np.__version__}")
    summarize(measured, len(texts), args.collection)


def summarize(measured: list[tuple[str, float, float]], n: int, collection: str) -> None:
    """``make bench`` rows: variants per second per method (issue 7 asks for them, no target),
    beside BM25 top-1000 on the same variant texts."""
    from _summary import record

    for name, g, b in measured:
        record(f"{name}: valid variants/s ({n:,} log queries)", g, unit="variants/s",
               anchor=f"BM25 top-1000 on {collection}, 1 thread, {b:,.0f} q/s", ratio=g / b)


if __name__ == "__main__":
    main()
