"""Exact exposure throughput: the whole query log over the Debian catalog (BM25 and dense, top 100).

    .venv/bin/python benchmarks/exact_exposure.py [--models bm25,dense] [--work DIR] [--repeats 3]
        [--naive 1000] [--limit N] [--view bm25] [--out FILE]

For each model, compares on the same machine and interleaved (medians of ``--repeats``):
- retrieval alone: the retriever's ``search_batch`` over all 114,926 distinct queries in the
  job's batches (BM25: ``BM25.search_batch``; dense: encode the batch's queries + one FAISS
  batch search, ``DenseRetriever.search_batch``);
- the full job: ``compute_exposure`` (retrieve + Parquet shards + DuckDB load) + r(d) + Gini,
  with ``exposure`` materialized as a DuckDB table (default) and, for the models of ``--view``,
  as a view over the shards;
- a naive loop, once per query, on a sample of ``--naive`` queries (extrapolated to the log):
  BM25: bm25s ``retrieve``; dense: encode that one query + FAISS ``search`` for it.
Prints queries/s and exposure pairs/s of each and the two ratios of the acceptance targets
(full job ≥ 0.8× retrieval alone, ≥ 20× the naive loop) and writes them, per model, with the
load averages at start and end, to ``docs/figures/exposure/bench_exact_exposure.json``.

The dense retriever is the one of ``make demo`` (``configs/debian.toml``): all-MiniLM-L6-v2,
default CPU encoder variant, exact FAISS inner product, over catalog embeddings read from the
audit's embedding cache (8,192-document chunks, as ``limelight.audit.stages`` writes them). The
catalog is never re-encoded here: a cache miss stops the benchmark (run ``make demo`` first).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from limelight.data import load_catalog, load_query_log
from limelight.exposure import compute_exposure, gini

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("bm25", "dense")


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class _Timed:
    """Wraps a method and adds up the seconds spent in it (for the dense encode/search split)."""

    def __init__(self, fn):
        self.fn, self.seconds = fn, 0.0

    def __call__(self, *args, **kw):
        t = time.perf_counter()
        try:
            return self.fn(*args, **kw)
        finally:
            self.seconds += time.perf_counter() - t


def bm25_setup(a, coll):
    from limelight.exposure.cli import open_retriever
    from limelight.retrieval.index_dir import build_index

    idx = a.work / "debian_idx"
    if not (idx / "meta.json").exists():
        build_index(coll, idx)
    retriever, fp, _ = open_retriever(idx, "bm25")
    return retriever, fp


def dense_setup(coll):
    """The dense retriever of ``make demo`` over the cached catalog embeddings (never encodes
    the catalog: a cache miss raises)."""
    from limelight.audit.config import load_config
    from limelight.audit.stages import _dense_index
    from limelight.retrieval.dense import DenseRetriever, Encoder

    cfg = load_config(ROOT / "configs" / "debian.toml")
    spec = next(s for s in cfg.systems if s.kind == "dense")
    cache = Path(cfg.embedding_cache)
    cache = cache if cache.is_absolute() else ROOT / cache
    # as AuditRunner.encoder(): the config's model and max_seq_length (none: MiniLM, its own
    # limit), default variant (auto: the fastest one meeting the quality bound on CPU)
    enc = Encoder(spec.params.get("model"), max_seq_length=spec.params.get("max_seq_length"))

    def refuse(texts, *args, **kw):
        raise SystemExit(f"the Debian catalog embeddings of {enc!r} are not all in {cache} "
                         f"(a chunk of {len(texts)} documents would be encoded); run `make demo` "
                         "first")

    enc.encode = refuse  # instance attribute: encode_collection's cache misses land here
    try:
        runner = SimpleNamespace(encoder=lambda: enc, cfg=SimpleNamespace(embedding_cache=str(cache)))
        di = _dense_index(runner, coll, SimpleNamespace(update=lambda *a: None))
    finally:
        del enc.encode
    retriever = DenseRetriever(di, enc, name=spec.name)
    retriever.encode_queries = _Timed(retriever.encode_queries)  # encode vs FAISS split
    fp = f"bench-dense:{di.meta['collection_fingerprint']}:{enc.fingerprint}:{enc.variant}"
    info = {"encoder": enc.identity(), "embedding_cache": str(cache), "faiss": "IndexFlatIP",
            "n_docs": len(di)}
    return retriever, fp, info


def naive_bm25(coll, sample: list[str]) -> float:
    """Seconds for bm25s ``retrieve`` called once per query of ``sample``."""
    import bm25s

    model = bm25s.BM25(k1=0.9, b=0.4)
    model.index(bm25s.tokenize(coll.texts.tolist(), stopwords="en", show_progress=False),
                show_progress=False)
    toks = bm25s.tokenize(sample, stopwords="en", return_ids=False, show_progress=False)
    t = time.perf_counter()
    for tk in toks:
        if tk:
            model.retrieve([tk], k=100, show_progress=False, n_threads=1)
    return time.perf_counter() - t


def naive_dense(retriever, sample: list[str]) -> float:
    """Seconds for: per query of ``sample``, encode it alone + one FAISS ``search``."""
    enc, fi = retriever.encoder, retriever.index.faiss_index
    for q in sample[:20]:  # warm
        fi.search(enc.encode([q]), 100)
    t = time.perf_counter()
    for q in sample:
        fi.search(enc.encode([q]), 100)
    return time.perf_counter() - t


def bench_model(a, model: str, coll, qs) -> dict:
    texts = qs.texts.tolist()
    nq = len(texts)
    info: dict = {}
    if model == "bm25":
        retriever, fp = bm25_setup(a, coll)
    else:
        retriever, fp, info = dense_setup(coll)
    timed = getattr(retriever, "encode_queries", None)
    timed = timed if isinstance(timed, _Timed) else None
    retriever.search_batch(texts[:2000], 100)  # warm the kernels / the ONNX session

    def retrieval_alone() -> tuple[float, int, float | None]:
        enc0 = timed.seconds if timed else 0.0
        t = time.perf_counter()
        pairs = 0
        for s in range(0, nq, a.shard_size):
            d, _ = retriever.search_batch(texts[s:s + a.shard_size], 100)
            pairs += int((d >= 0).sum())
        return time.perf_counter() - t, pairs, (timed.seconds - enc0) if timed else None

    def full_job(i: int, materialize: bool = True) -> tuple[float, dict]:
        out = a.work / f"bench_store_{model}_{i}"
        shutil.rmtree(out, ignore_errors=True)
        enc0 = timed.seconds if timed else 0.0
        t = time.perf_counter()
        st = compute_exposure(retriever, qs, out, depth=100, shard_size=a.shard_size, fingerprint=fp,
                              materialize=materialize)
        res = st.retrievability(c=100)
        g = gini(res.r)
        secs = time.perf_counter() - t
        shutil.rmtree(out, ignore_errors=True)
        parts = {**st.manifest["timings"], "gini": g}
        if timed:
            parts["encode_s"] = timed.seconds - enc0
        return secs, parts

    view = model in a.view
    alone, alone_enc, job, parts, vjob, vparts, loads = [], [], [], [], [], [], []
    pairs = 0
    for i in range(a.repeats):  # interleaved: the machine is shared and its load varies
        la = load_average()
        s, pairs, enc_s = retrieval_alone()
        alone.append(s)
        alone_enc.append(enc_s)
        s, tm = full_job(i)
        job.append(s)
        parts.append(tm)
        msg = (f"[{model}] repeat {i}: retrieval alone {alone[-1]:.2f}s"
               + (f" (encode {enc_s:.2f}s)" if enc_s is not None else "")
               + f", full job {job[-1]:.2f}s {tm}")
        if view:
            s, tv = full_job(i, materialize=False)
            vjob.append(s)
            vparts.append(tv)
            msg += f", full job (view) {vjob[-1]:.2f}s {tv}"
        loads.append({"start": la, "end": load_average()})
        print(f"{msg}; load {loads[-1]}", flush=True)

    rng = np.random.default_rng(0)
    ns = min(a.naive, nq)
    sample = [texts[i] for i in rng.choice(nq, size=ns, replace=False).tolist()]
    naive_s = (naive_bm25(coll, sample) if model == "bm25" else naive_dense(retriever, sample)) / ns * nq

    def fig(times: list[float], **extra) -> dict:
        m = statistics.median(times)
        return {"seconds": m, "queries_per_s": nq / m, "pairs_per_s": pairs / m, "all": times, **extra}

    res = {"queries": nq, "pairs": pairs, "repeats": a.repeats, **info,
           "retrieval_alone": fig(alone, **({"encode_s": alone_enc} if timed else {})),
           "full_job": fig(job, parts=parts)}
    if view:
        res["full_job_view"] = fig(vjob, parts=vparts)
    res["naive_per_query"] = {
        "what": ("bm25s retrieve, one call per query (n_threads=1)" if model == "bm25" else
                 "encode one query + FAISS IndexFlatIP search, one call each per query"),
        "sample": ns, "queries_per_s": nq / naive_s, "seconds_extrapolated": naive_s}
    med_alone, med_job = statistics.median(alone), statistics.median(job)
    res["job_vs_retrieval_alone"] = med_alone / med_job
    res["job_vs_naive"] = naive_s / med_job
    if view:
        med_view = statistics.median(vjob)
        res["job_view_vs_retrieval_alone"] = med_alone / med_view
        res["job_view_vs_naive"] = naive_s / med_view
    res["load_average_per_repeat"] = loads
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="bm25,dense", help="comma-separated: bm25, dense")
    ap.add_argument("--work", type=Path, default=Path("/tmp/limelight-exposure"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--naive", type=int, default=1000, help="naive-loop sample size")
    ap.add_argument("--shard-size", type=int, default=8192)
    ap.add_argument("--limit", type=int, default=0, help="only the first N log queries (0: all)")
    ap.add_argument("--view", default="bm25",
                    help="models whose full job is also timed with `exposure` as a view")
    ap.add_argument("--out", type=Path, default=None,
                    help="JSON output (default docs/figures/exposure/bench_exact_exposure.json; "
                         "'-' to only print)")
    a = ap.parse_args()
    models = [m.strip() for m in a.models.split(",") if m.strip()]
    bad = [m for m in models if m not in MODELS]
    if bad or not models:
        ap.error(f"--models: one or more of {', '.join(MODELS)}, not {a.models!r}")
    a.view = {m.strip() for m in a.view.split(",") if m.strip()}
    a.work.mkdir(parents=True, exist_ok=True)

    load_start = load_average()
    t0 = time.perf_counter()
    coll = load_catalog("debian")
    qs = load_query_log()
    if a.limit:
        qs = qs.head(a.limit)
    out: dict = {"queries": len(qs), "depth": 100, "shard_size": a.shard_size,
                 "cpu_count": os.cpu_count(), "load_average_start": load_start, "models": {}}
    for m in models:
        out["models"][m] = bench_model(a, m, coll, qs)
    out["load_average_end"] = load_average()
    out["wall_s"] = time.perf_counter() - t0
    print(json.dumps(out, indent=1))
    for m, r in out["models"].items():
        print(f"{m}: retrieval alone {r['retrieval_alone']['queries_per_s']:,.0f} q/s, full job "
              f"{r['full_job']['queries_per_s']:,.0f} q/s ({r['full_job']['pairs_per_s']:,.0f} "
              f"pairs/s), naive {r['naive_per_query']['queries_per_s']:,.0f} q/s; job/alone "
              f"{r['job_vs_retrieval_alone']:.2f}x, job/naive {r['job_vs_naive']:.1f}x")
    print(f"load average start {load_start}, end {out['load_average_end']}")
    if str(a.out) == "-":
        return
    path = a.out or ROOT / "docs" / "figures" / "exposure" / "bench_exact_exposure.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
