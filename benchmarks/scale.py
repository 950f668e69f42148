"""The Ray engine on this machine: 1 vs 2 workers, and the per-shard throughput behind docs/scale.md.

    .venv/bin/python benchmarks/scale.py [--work DIR] [--repeats 2] [--shard-size 4096]
                                         [--embed 512]

Exact exposure of the whole query log (114,926 distinct queries) over the Debian catalog (BM25,
top 100): a local Ray cluster with 1 worker (num_cpus=1) and with 2 workers (num_cpus=2), each
warmed first (workers started, index opened and kernels loaded by a small job) so that the timed
job measures steady-state throughput; cluster start-up is reported apart. The anchor of the
issue is the 1-worker run: the script prints the 2-worker figure beside it and their ratio (the
speedup), and the local engine (1 and 2 numba threads) for reference, interleaved, medians.

It also measures what the MS MARCO plan in docs/scale.md extrapolates from: BM25 cost per
posting touched (on npl and Debian, to see how cost grows with the collection), the index's
bytes per posting, FAISS flat inner-product search throughput (1 thread), and Ray Data
embedding throughput with 1 and 2 MiniLM actors on ``--embed`` log queries. Results go to
WORK/scale.json. The machine is shared: the load average is printed next to every timing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from pathlib import Path

import numpy as np

from limelight.data import load_catalog, load_dataset, load_query_log
from limelight.exposure import compute_exposure
from limelight.retrieval.index_dir import build_index, open_fingerprinted
from limelight.scale import IndexRetriever, ray_session


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def index(work: Path, name: str) -> Path:
    idx = work / f"idx-{name}"
    if not (idx / "meta.json").exists():
        coll = load_catalog("debian") if name == "debian" else load_dataset(name).collection
        build_index(coll, idx)
    return idx


def postings_touched(retriever, texts: list[str]) -> int:
    """Σ over queries of the posting-list lengths of their (distinct, known) terms."""
    qv = retriever.query_vectors(texts)
    df = np.diff(np.asarray(retriever.index.indptr))
    return int(df[qv.indices].sum())


def exposure_job(idx: Path, fp: str, qs, out: Path, shard: int, engine: str, threads: int | None = None):
    shutil.rmtree(out, ignore_errors=True)
    r = IndexRetriever(idx) if engine == "ray" else open_fingerprinted(idx, threads=threads)[0]
    t = time.perf_counter()
    st = compute_exposure(r, qs, out, depth=100, shard_size=shard, fingerprint=fp, engine=engine)
    return time.perf_counter() - t, st


def main() -> None:
    """The four measurements in the order they run (one straight sequence over shared state:
    the work folder, the log's texts and the load printed beside every timing)."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--work", type=Path, default=Path("/tmp/limelight-scale"))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--shard-size", type=int, default=4096)
    ap.add_argument("--embed", type=int, default=512, help="log queries embedded with Ray Data (0: skip)")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    res: dict = {"load_start": load()}
    qs = load_query_log()
    texts = qs.texts.tolist()
    nq = len(qs)

    # ---- BM25 cost per posting touched, npl vs Debian (1 thread, local) -------------------------
    cost = {}
    for name in ("npl", "debian"):
        idx = index(a.work, name)
        r = open_fingerprinted(idx, threads=1)[0]
        r.search_batch(texts[:2000], 100)  # warm
        t = time.perf_counter()
        for s in range(0, nq, 8192):
            r.search_batch(texts[s:s + 8192], 100)
        dt = time.perf_counter() - t
        touched = postings_touched(r, texts)
        size = sum(p.stat().st_size for p in (idx / "bm25").iterdir() if p.suffix == ".npy")
        cost[name] = {"docs": r.index.n_docs, "postings": int(len(r.index.docs)),
                      "index_npy_bytes": size, "bytes_per_posting": size / len(r.index.docs),
                      "q_per_s_1thread": nq / dt, "postings_touched_per_query": touched / nq,
                      "ns_per_posting_touched": dt / touched * 1e9, "load": load()}
        print(f"BM25 1 thread on {name}: {nq / dt:,.0f} q/s, {touched / nq:,.0f} postings/query, "
              f"{dt / touched * 1e9:.2f} ns/posting  [load {load()}]")
    res["bm25_cost"] = cost

    # ---- exposure: local engine vs Ray 1 and 2 workers ---------------------------------------
    idx = index(a.work, "debian")
    _, fp, _ = open_fingerprinted(idx)
    small = qs.head(2 * a.shard_size)
    runs: dict[str, list[float]] = {"local-1thread": [], "local-2threads": [], "ray-1worker": [],
                                    "ray-2workers": []}
    startup: dict[str, float] = {}
    n_shards = (nq + a.shard_size - 1) // a.shard_size
    for rep in range(a.repeats):  # interleaved: the machine is shared and its load varies
        for th in (1, 2):
            dt, st = exposure_job(idx, fp, qs, a.work / "store-local", a.shard_size, "local", th)
            runs[f"local-{th}thread{'s' if th > 1 else ''}"].append(dt)
            pairs = len(st.pair_arrays()[0])
        for w in (1, 2):
            t = time.perf_counter()
            with ray_session(num_cpus=w):
                startup[f"{w}"] = time.perf_counter() - t
                exposure_job(idx, fp, small, a.work / "store-warm", a.shard_size, "ray")  # warm
                dt, _ = exposure_job(idx, fp, qs, a.work / "store-ray", a.shard_size, "ray")
            runs[f"ray-{w}worker{'s' if w > 1 else ''}"].append(dt)
            print(f"rep {rep}: ray {w} worker(s) {dt:.2f} s (cluster start {startup[str(w)]:.1f} s) "
                  f"[load {load()}]")
    # same store from every engine
    for name in ("store-ray",):
        for i in range(n_shards):
            p = f"shards/part-{i:05d}.parquet"
            assert (a.work / name / p).read_bytes() == (a.work / "store-local" / p).read_bytes(), p
    med = {k: statistics.median(v) for k, v in runs.items()}
    res["exposure"] = {"queries": nq, "pairs": pairs, "shard_size": a.shard_size,
                       "shards": n_shards, "seconds_median": med, "seconds_all": runs,
                       "ray_cluster_start_s": startup, "load": load()}
    per_shard = med["ray-1worker"] / n_shards
    res["exposure"]["ray_1worker_s_per_shard"] = per_shard
    res["exposure"]["ray_1worker_q_per_s"] = nq / med["ray-1worker"]
    print(f"\nexact exposure, {nq:,} queries x top 100 over Debian ({pairs:,} pairs), "
          f"{n_shards} shards of {a.shard_size}, medians of {a.repeats}  [load {load()}]")
    for k, v in med.items():
        print(f"  {k:16s} {v:7.2f} s  {nq / v:9,.0f} q/s")
    print(f"  speedup ray 2 workers vs 1 worker (anchor): {med['ray-1worker'] / med['ray-2workers']:.2f}x")
    print(f"  ray 1 worker vs local 1 thread: {med['local-1thread'] / med['ray-1worker']:.2f}x; "
          f"ray 2 workers vs local 2 threads: {med['local-2threads'] / med['ray-2workers']:.2f}x")
    print(f"  per shard (1 worker): {per_shard:.3f} s for {a.shard_size} queries")

    # ---- FAISS flat inner product, 1 thread ----------------------------------------------------
    import faiss

    faiss.omp_set_num_threads(1)
    rng = np.random.default_rng(0)
    xb = rng.standard_normal((200_000, 384), dtype=np.float32)
    xq = rng.standard_normal((512, 384), dtype=np.float32)
    fi = faiss.IndexFlatIP(384)
    fi.add(xb)
    fi.search(xq[:32], 100)
    t = time.perf_counter()
    fi.search(xq, 100)
    dt = time.perf_counter() - t
    res["faiss_flat"] = {"docs": 200_000, "dim": 384, "q_per_s_1thread": len(xq) / dt,
                         "doc_scores_per_s": len(xq) * 200_000 / dt, "load": load()}
    print(f"\nFAISS IndexFlatIP 1 thread, 200k x 384: {len(xq) / dt:,.0f} q/s "
          f"({len(xq) * 200_000 / dt / 1e9:.2f} G doc-scores/s)  [load {load()}]")

    # ---- Ray Data embeddings, 1 vs 2 actors --------------------------------------------------
    if a.embed:
        from limelight.scale import RayEncoder

        emb_texts = texts[:a.embed]
        emb = {}
        for w in (1, 2):
            with ray_session(num_cpus=w):
                enc = RayEncoder(batch_size=32)
                enc.encode(emb_texts[:64])  # actors start, model loads
                t = time.perf_counter()
                enc.encode(emb_texts)
                emb[w] = time.perf_counter() - t
            print(f"Ray Data MiniLM, {w} actor(s): {a.embed / emb[w]:,.0f} queries/s  [load {load()}]")
        res["embed"] = {"texts": a.embed, "seconds": emb, "speedup": emb[1] / emb[2],
                        "variant": getattr(enc, "variant", "torch-fp32"), "load": load()}
        print(f"  speedup 2 vs 1 actor: {emb[1] / emb[2]:.2f}x (includes actor start per call)")
    (a.work / "scale.json").write_text(json.dumps(res, indent=1, default=str))
    print(f"\nwrote {a.work / 'scale.json'}")
    summarize(res)


def summarize(res: dict) -> None:
    """``make bench`` rows (issue 11 asks for the speedup of 2 workers over 1, with no target,
    and the per-shard throughput docs/scale.md extrapolates from); Ray Data embedding beside."""
    from _summary import record

    ex = res["exposure"]
    med, nq = ex["seconds_median"], ex["queries"]
    record(f"exact exposure on Ray, 2 workers ({nq:,} queries × top 100, Debian)",
           nq / med["ray-2workers"], unit="q/s",
           anchor=f"Ray 1 worker {nq / med['ray-1worker']:,.0f} q/s",
           ratio=med["ray-1worker"] / med["ray-2workers"],
           note=f"local engine 1 / 2 threads {nq / med['local-1thread']:,.0f} / "
                f"{nq / med['local-2threads']:,.0f} q/s")
    record(f"Ray 1 worker, seconds per shard of {ex['shard_size']:,} queries",
           ex["ray_1worker_s_per_shard"], unit="s", anchor="", note="docs/scale.md's cost model")
    if "embed" in res:
        e = res["embed"]
        record(f"Ray Data MiniLM embedding, 2 actors ({e['texts']} log queries)",
               e["texts"] / e["seconds"][2], unit="queries/s",
               anchor=f"1 actor {e['texts'] / e['seconds'][1]:,.0f} queries/s", ratio=e["speedup"],
               note="includes actor start per call")


if __name__ == "__main__":
    main()
