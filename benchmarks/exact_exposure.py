"""Exact exposure throughput, memory and lookups: the whole query log over the Debian catalog
(BM25 and dense, top 100).

    .venv/bin/python benchmarks/exact_exposure.py [--models bm25,dense] [--work DIR] [--repeats 3]
        [--naive 1000] [--limit N] [--lookups 500] [--out FILE]

For each model, compares on the same machine and interleaved (medians of ``--repeats``):
- retrieval alone: the retriever's ``search_batch`` over all 114,926 distinct queries in the
  job's batches (BM25: ``BM25.search_batch``; dense: encode the batch's queries + one FAISS
  batch search, ``DenseRetriever.search_batch``);
- the full job: ``compute_exposure`` (retrieve + Parquet shards, the pairs' one copy + the
  store's per-document index) + r(d) + Gini;
- a naive loop, once per query, on a sample of ``--naive`` queries (extrapolated to the log):
  BM25: bm25s ``retrieve``; dense: encode that one query + FAISS ``search`` for it.
Prints queries/s and exposure pairs/s of each and the ratios of the acceptance targets (issue
20: full job ≥ 0.85× retrieval alone for BM25, ≥ 0.95× for dense; ≥ 20× the naive loop).

For BM25 (issue 20 item 4), also:
- the peak resident memory (``VmHWM``) of the full job in a fresh process, index included
  (open the index, read the log, compute the store, r(d), Gini: what ``limelight exposure
  compute`` does), beside that of retrieval alone in another fresh process;
- the store's size on disk (every file of the directory, by kind);
- ``limelight exposure doc``'s library call, ``ExposureStore.open(store).exposing_queries(docid)``,
  timed ``--lookups`` times over documents drawn uniformly (seeded) among those the log
  exposes, plus the most exposed document: p50, p99, max; and the lookup alone on an open store.

Writes everything, per model, with the load averages at start and end, to
``docs/figures/exposure/bench_exact_exposure.json``, and the acceptance rows to the ``make
bench`` summary (``_summary.record``).

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
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from limelight.data import load_catalog, load_query_log
from limelight.exposure import compute_exposure, gini

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _summary import percentiles_ms, record  # noqa: E402

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
    from limelight.retrieval.index_dir import build_index, open_fingerprinted

    idx = a.work / "debian_idx"
    if not (idx / "meta.json").exists():
        build_index(coll, idx)
    retriever, fp, _ = open_fingerprinted(idx, "bm25")
    return retriever, fp


def dense_setup(coll):
    """The dense retriever of ``make demo`` over the cached catalog embeddings (never encodes
    the catalog: a cache miss raises)."""
    from limelight.audit.config import load_config
    from limelight.audit.stages.index import _dense_index
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

    def full_job(out: Path) -> tuple[float, dict]:
        shutil.rmtree(out, ignore_errors=True)
        enc0 = timed.seconds if timed else 0.0
        t = time.perf_counter()
        st = compute_exposure(retriever, qs, out, depth=100, shard_size=a.shard_size, fingerprint=fp)
        res = st.retrievability(c=100)
        g = gini(res.r)
        secs = time.perf_counter() - t
        parts = {**st.manifest["timings"], "gini": g}
        if timed:
            parts["encode_s"] = timed.seconds - enc0
        return secs, parts

    alone, alone_enc, job, parts, loads = [], [], [], [], []
    pairs = 0
    store = a.work / f"bench_store_{model}"
    for i in range(a.repeats):  # interleaved: the machine is shared and its load varies
        la = load_average()
        s, pairs, enc_s = retrieval_alone()
        alone.append(s)
        alone_enc.append(enc_s)
        s, tm = full_job(store)
        job.append(s)
        parts.append(tm)
        loads.append({"start": la, "end": load_average()})
        print(f"[{model}] repeat {i}: retrieval alone {alone[-1]:.2f}s"
              + (f" (encode {enc_s:.2f}s)" if enc_s is not None else "")
              + f", full job {job[-1]:.2f}s {tm}; load {loads[-1]}", flush=True)

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
    res["naive_per_query"] = {
        "what": ("bm25s retrieve, one call per query (n_threads=1)" if model == "bm25" else
                 "encode one query + FAISS IndexFlatIP search, one call each per query"),
        "sample": ns, "queries_per_s": nq / naive_s, "seconds_extrapolated": naive_s}
    med_alone, med_job = statistics.median(alone), statistics.median(job)
    res["job_vs_retrieval_alone"] = med_alone / med_job
    res["job_vs_naive"] = naive_s / med_job
    res["load_average_per_repeat"] = loads
    target = 0.85 if model == "bm25" else 0.95
    record(f"{model} full exposure job (retrieve + store + r(d) + Gini) vs retrieval alone, Debian "
           f"× whole log, top 100", nq / med_job, unit="queries/s", ratio=med_alone / med_job,
           anchor="retrieval alone", target=f"≥ {target}×", met=med_alone / med_job >= target,
           note=f"median of {a.repeats} interleaved repeats")
    record(f"{model} full exposure job vs the naive per-query loop", naive_s / med_job,
           anchor=res["naive_per_query"]["what"], ratio=naive_s / med_job, target="≥ 20×",
           met=naive_s / med_job >= 20)
    if model == "bm25" and a.lookups:
        res["store"] = store_size(store)
        res["lookups"] = bench_lookups(store, a.lookups)
        res["memory"] = bench_memory(a)
    shutil.rmtree(store, ignore_errors=True)
    return res


# ---- the store: size, lookups, memory ---------------------------------------------------------------


def store_size(store: Path) -> dict:
    """Bytes on disk of every file of the store, by kind."""
    kinds = {"shards": 0, "index": 0, "queries_documents": 0, "manifest": 0}
    for p in store.rglob("*"):
        if p.is_file():
            k = ("shards" if p.parent.name == "shards" else "manifest" if p.name == "manifest.json"
                 else "queries_documents" if p.name in ("queries.parquet", "documents.parquet") else "index")
            kinds[k] += p.stat().st_size
    total = sum(kinds.values())
    print(f"store on disk: {total / 1e6:.1f} MB ({', '.join(f'{k} {v / 1e6:.1f}' for k, v in kinds.items())})",
          flush=True)
    record("exposure store on disk, Debian × whole log, BM25 top 100 (8.9M pairs)", total / 1e6, unit="MB",
           anchor="150 MB", ratio=total / 150e6, target="≤ 150 MB", met=total <= 150e6,
           note=", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in kinds.items()))
    return {"bytes": total, **{f"{k}_bytes": v for k, v in kinds.items()}}


def bench_lookups(store: Path, n: int) -> dict:
    """``exposure doc``'s library call (open + exposing_queries) and the lookup alone, per document."""
    from limelight.exposure import ExposureStore

    st = ExposureStore.open(store)
    n_exp = st.n_exposing()
    rng = np.random.default_rng(0)
    exposed = np.flatnonzero(n_exp > 0)
    docs = st.doc_ids.decode(rng.choice(exposed, size=min(n, len(exposed)), replace=False)).tolist()
    docs.append(st.doc_ids[int(np.argmax(n_exp))])
    for docid in docs[:20]:  # warm: imports, page cache
        ExposureStore.open(store).exposing_queries(docid)
    cli, alone, lens = [], [], []
    for docid in docs:
        t = time.perf_counter()
        rows = ExposureStore.open(store).exposing_queries(docid)
        cli.append(time.perf_counter() - t)
        t = time.perf_counter()
        st.exposing_queries(docid)
        alone.append(time.perf_counter() - t)
        lens.append(len(rows))
    out = {"documents": len(docs), "exposing_queries": {"p50": float(np.median(lens)), "p99": float(
        np.percentile(lens, 99)), "max": int(max(lens))},
        "exposure_doc": percentiles_ms(cli), "lookup_on_open_store": percentiles_ms(alone),
        "most_exposed_document_ms": cli[-1] * 1000, "load_average": load_average()}
    e = out["exposure_doc"]
    print(f"exposure doc (open + exposing_queries), {len(docs)} documents: p50 {e['p50_ms']:.1f} ms, "
          f"p99 {e['p99_ms']:.1f} ms, max {e['max_ms']:.1f} ms; lookup on an open store p99 "
          f"{out['lookup_on_open_store']['p99_ms']:.1f} ms; load {out['load_average']}", flush=True)
    record("`limelight exposure doc` library call (ExposureStore.open + exposing_queries), p99, full "
           "Debian BM25 store", e["p99_ms"], unit="ms", anchor="50 ms", ratio=e["p99_ms"] / 50,
           target="≤ 50 ms", met=e["p99_ms"] <= 50,
           note=f"{len(docs)} documents drawn among the exposed ones + the most exposed; p50 "
                f"{e['p50_ms']:.1f} ms, max {e['max_ms']:.1f} ms")
    return out


def _child(mode: str, work: Path, shard_size: int, limit: int) -> None:
    """In a fresh process: ``job`` (the full BM25 job) or ``retrieval`` (retrieval alone);
    prints the peak resident memory as JSON."""
    from limelight.retrieval.index_dir import open_fingerprinted

    t = time.perf_counter()
    qs = load_query_log()
    if limit:
        qs = qs.head(limit)
    retriever, fp, _ = open_fingerprinted(work / "debian_idx", "bm25")
    if mode == "job":
        out = work / "bench_store_memory"
        shutil.rmtree(out, ignore_errors=True)
        st = compute_exposure(retriever, qs, out, depth=100, shard_size=shard_size, fingerprint=fp)
        gini(st.retrievability(c=100).r)
        shutil.rmtree(out, ignore_errors=True)
    else:
        texts = qs.texts.tolist()
        for s in range(0, len(texts), shard_size):
            retriever.search_batch(texts[s:s + shard_size], 100)
    print(json.dumps({"mode": mode, "peak_rss_bytes": _peak_rss(), "seconds": time.perf_counter() - t}))


def _peak_rss() -> int:
    """This process's peak resident memory in bytes: ``VmHWM`` (the high-water mark of this
    process image; ``ru_maxrss`` would also count the parent's memory at the fork, which Linux
    carries over ``execve``), else ``ru_maxrss``."""
    import resource

    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return ru if sys.platform == "darwin" else ru * 1024  # bytes on macOS, KiB on Linux


def bench_memory(a) -> dict:
    """Peak RSS of the full BM25 job and of retrieval alone, each in a fresh process."""
    out = {}
    for mode in ("retrieval", "job"):
        p = subprocess.run([sys.executable, __file__, "--child", mode, "--work", str(a.work),
                            "--shard-size", str(a.shard_size), "--limit", str(a.limit)],
                           capture_output=True, text=True, check=True)
        out[mode] = json.loads(p.stdout.strip().splitlines()[-1])
    job, ret = out["job"]["peak_rss_bytes"], out["retrieval"]["peak_rss_bytes"]
    print(f"peak RSS: full BM25 job {job / 1e6:.0f} MB, retrieval alone {ret / 1e6:.0f} MB "
          f"(fresh processes, index included)", flush=True)
    record("peak RSS of the full BM25 exposure job (Debian × whole log, index included, fresh process)",
           job / 1e6, unit="MB", anchor=f"retrieval alone {ret / 1e6:.0f} MB", ratio=job / 1.5e9,
           target="≤ 1.5 GB", met=job <= 1.5e9)
    return {"job_peak_rss_bytes": job, "retrieval_peak_rss_bytes": ret, "runs": out,
            "load_average": load_average()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="bm25,dense", help="comma-separated: bm25, dense")
    ap.add_argument("--work", type=Path, default=Path("/tmp/limelight-exposure"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--naive", type=int, default=1000, help="naive-loop sample size")
    ap.add_argument("--shard-size", type=int, default=8192)
    ap.add_argument("--limit", type=int, default=0, help="only the first N log queries (0: all)")
    ap.add_argument("--lookups", type=int, default=500,
                    help="documents timed for `exposure doc` (BM25 store; 0: skip lookups and memory)")
    ap.add_argument("--child", choices=["job", "retrieval"], help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=None,
                    help="JSON output (default docs/figures/exposure/bench_exact_exposure.json; "
                         "'-' to only print)")
    a = ap.parse_args()
    if a.child:
        _child(a.child, a.work, a.shard_size, a.limit)
        return
    models = [m.strip() for m in a.models.split(",") if m.strip()]
    bad = [m for m in models if m not in MODELS]
    if bad or not models:
        ap.error(f"--models: one or more of {', '.join(MODELS)}, not {a.models!r}")
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
