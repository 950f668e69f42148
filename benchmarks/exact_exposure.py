"""Exact exposure throughput: the whole query log over the Debian catalog (BM25, top 100).

    .venv/bin/python benchmarks/exact_exposure.py [--work DIR] [--repeats 3] [--naive 1000]

Compares, on the same machine and interleaved (medians of ``--repeats``):
- retrieval alone: ``BM25.search_batch`` over all 114,926 distinct queries in the job's batches;
- the full job: ``compute_exposure`` (retrieve + Parquet shards + DuckDB load) + r(d) + Gini,
  with ``exposure`` materialized as a DuckDB table (default) and as a view over the shards;
- a naive loop: bm25s ``retrieve`` called once per query, on a sample of ``--naive`` queries.
Prints queries/s and exposure pairs/s of each and the two ratios of the acceptance targets
(full job ≥ 0.8× retrieval alone, ≥ 20× the naive loop).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

import numpy as np

from limelight.data import load_catalog, load_query_log
from limelight.exposure import compute_exposure, gini


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--work", type=Path, default=Path("/tmp/limelight-exposure"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--naive", type=int, default=1000)
    ap.add_argument("--shard-size", type=int, default=8192)
    a = ap.parse_args()
    from limelight.exposure.cli import open_retriever
    from limelight.retrieval.index_dir import build_index

    coll = load_catalog("debian")
    idx = a.work / "debian_idx"
    if not (idx / "meta.json").exists():
        build_index(coll, idx)
    retriever, fp, _ = open_retriever(idx, "bm25")
    qs = load_query_log()
    texts = qs.texts.tolist()
    nq = len(texts)
    retriever.search_batch(texts[:2000], 100)  # warm the kernels

    def retrieval_alone() -> tuple[float, int]:
        t = time.perf_counter()
        pairs = 0
        for s in range(0, nq, a.shard_size):
            d, _ = retriever.search_batch(texts[s:s + a.shard_size], 100)
            pairs += int((d >= 0).sum())
        return time.perf_counter() - t, pairs

    def full_job(i: int, materialize: bool = True) -> tuple[float, int, dict]:
        out = a.work / f"bench_store_{i}"
        shutil.rmtree(out, ignore_errors=True)
        t = time.perf_counter()
        st = compute_exposure(retriever, qs, out, depth=100, shard_size=a.shard_size, fingerprint=fp,
                              materialize=materialize)
        res = st.retrievability(c=100)
        g = gini(res.r)
        secs = time.perf_counter() - t
        shutil.rmtree(out, ignore_errors=True)
        return secs, int(len(st.pair_arrays()[0])), {**st.manifest["timings"], "gini": g}

    alone, job, parts, view, vparts = [], [], [], [], []
    pairs = 0
    for i in range(a.repeats):  # interleaved: the machine is shared and its load varies
        s, pairs = retrieval_alone()
        alone.append(s)
        s, _, tm = full_job(i)
        job.append(s)
        parts.append(tm)
        s, _, tv = full_job(i, materialize=False)
        view.append(s)
        vparts.append(tv)
        print(f"repeat {i}: retrieval alone {alone[-1]:.2f}s, full job {job[-1]:.2f}s {tm}, "
              f"full job (view) {view[-1]:.2f}s {tv}", flush=True)

    # naive: bm25s, one retrieve call per query, on a sample
    import bm25s

    model = bm25s.BM25(k1=0.9, b=0.4)
    model.index(bm25s.tokenize(coll.texts.tolist(), stopwords="en", show_progress=False),
                show_progress=False)
    rng = np.random.default_rng(0)
    sample = [texts[i] for i in rng.choice(nq, size=a.naive, replace=False).tolist()]
    toks = bm25s.tokenize(sample, stopwords="en", return_ids=False, show_progress=False)
    t = time.perf_counter()
    for tk in toks:
        if tk:
            model.retrieve([tk], k=100, show_progress=False, n_threads=1)
    naive_s = (time.perf_counter() - t) / a.naive * nq  # extrapolated to the whole log

    med_alone, med_job = statistics.median(alone), statistics.median(job)
    med_view = statistics.median(view)
    out = {
        "queries": nq, "pairs": pairs, "repeats": a.repeats,
        "retrieval_alone": {"seconds": med_alone, "queries_per_s": nq / med_alone,
                            "pairs_per_s": pairs / med_alone, "all": alone},
        "full_job": {"seconds": med_job, "queries_per_s": nq / med_job, "pairs_per_s": pairs / med_job,
                     "all": job, "parts": parts},
        "full_job_view": {"seconds": med_view, "queries_per_s": nq / med_view,
                          "pairs_per_s": pairs / med_view, "all": view, "parts": vparts},
        "naive_bm25s_per_query": {"sample": a.naive, "queries_per_s": nq / naive_s,
                                  "seconds_extrapolated": naive_s},
        "job_vs_retrieval_alone": med_alone / med_job,
        "job_vs_naive": naive_s / med_job,
        "job_view_vs_retrieval_alone": med_alone / med_view,
        "job_view_vs_naive": naive_s / med_view,
    }
    print(json.dumps(out, indent=1))
    fig = Path(__file__).resolve().parents[1] / "docs" / "figures" / "exposure"
    fig.mkdir(parents=True, exist_ok=True)
    (fig / "bench_exact_exposure.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
