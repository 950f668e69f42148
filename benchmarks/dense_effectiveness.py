"""Effectiveness of MiniLM dense retrieval, BM25 and their fusions on the shared collections.

    .venv/bin/python benchmarks/dense_effectiveness.py [scifact npl ...]

Document embeddings are cached under ``.cache/embeddings`` (the first run encodes; later runs
read the cache). Evaluation uses ir_measures (nDCG@10, R@100, AP@1000) over the qrels' queries.
Public reference: all-MiniLM-L6-v2 nDCG@10 on BEIR SciFact is about 0.645.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import ir_measures  # noqa: E402
from ir_measures import AP, R, nDCG  # noqa: E402

from limelight.data import load_dataset  # noqa: E402
from limelight.retrieval.bm25 import BM25, BM25Index  # noqa: E402
from limelight.retrieval.dense import DenseIndex, DenseRetriever, Encoder  # noqa: E402
from limelight.retrieval.fusion import Hybrid, combmnz, combsum, linear, rrf  # noqa: E402

CACHE = Path(__file__).resolve().parents[1] / ".cache" / "embeddings"
MEASURES = [nDCG @ 10, R @ 100, AP @ 1000]
# the public figure of all-MiniLM-L6-v2 on BEIR SciFact (issue 2: "about 0.645")
MINILM_SCIFACT = 0.645


def evaluate(qrels, run) -> dict:
    res = ir_measures.calc_aggregate(MEASURES, qrels.to_ir_measures(), run.to_ir_measures())
    return {str(m): res[m] for m in MEASURES}


def main(names: list[str]) -> None:
    enc = Encoder(show_progress=sys.stderr.isatty())
    print(f"model: {enc.name} (dim {enc.dim}, max_seq_length {enc.max_seq_length}); "
          f"torch threads: {__import__('torch').get_num_threads()}")
    ndcg10: dict[str, dict[str, float]] = {}
    for name in names:
        ds = load_dataset(name)
        coll, queries, qrels = ds.collection, ds.queries, ds.qrels
        t = time.perf_counter()
        n0 = enc.n_encoded
        index = DenseIndex.build(coll, enc, cache_dir=CACHE)
        t_build = time.perf_counter() - t
        cached = enc.n_encoded == n0
        dense = DenseRetriever(index, enc)
        bm25 = BM25(BM25Index.build(coll))
        t = time.perf_counter()
        d_run = dense.retrieve(queries, 1000)
        t_dense = time.perf_counter() - t
        b_run = bm25.retrieve(queries, 1000)
        runs = {
            "BM25": b_run,
            "dense (MiniLM, flat)": d_run,
            "RRF(BM25, dense) top-100 each": rrf(b_run, d_run, depth=100),
            "RRF(BM25, dense) top-1000 each": rrf(b_run, d_run),
            "Hybrid retriever (k=1000, depth=100)": Hybrid(bm25, dense, depth=100).retrieve(queries, 1000),
            "CombSUM min-max": combsum(b_run, d_run),
            "CombMNZ min-max": combmnz(b_run, d_run),
        }
        for alpha in (0.1, 0.3, 0.5, 0.7, 0.9):
            runs[f"linear alpha(BM25)={alpha}"] = linear(b_run, d_run, alpha=alpha)
        hnsw = DenseIndex.from_embeddings(index.doc_ids, index.embeddings,
                                          {**index.meta, "hnsw": True})
        runs["dense (MiniLM, HNSW M=32 ef=128)"] = DenseRetriever(hnsw, enc).retrieve(queries, 1000)
        half = DenseIndex.from_embeddings(index.doc_ids, index.embeddings,
                                          {**index.meta, "dtype": "float16"})
        runs["dense (MiniLM, float16 storage)"] = DenseRetriever(half, enc).retrieve(queries, 1000)
        print(f"\n## {name}: {len(coll)} docs, {len(queries)} queries, {int((qrels.n_relevant() > 0).sum())} with a relevant document")
        print(f"dense index build: {t_build:.1f} s ({'embeddings from cache' if cached else f'{len(coll) / t_build:.1f} docs/s encoded'}); "
              f"dense retrieval of {len(queries)} queries (top 1000): {t_dense:.2f} s")
        print("| run | nDCG@10 | R@100 | AP@1000 |\n|---|---|---|---|")
        for label, run in runs.items():
            m = evaluate(qrels, run)
            ndcg10.setdefault(name, {})[label] = m["nDCG@10"]
            print(f"| {label} | {m['nDCG@10']:.4f} | {m['R@100']:.4f} | {m['AP@1000']:.4f} |")
        sys.stdout.flush()
    summarize(ndcg10)


def summarize(ndcg10: dict[str, dict[str, float]]) -> None:
    """``make bench`` rows: MiniLM nDCG@10 (on scifact against the public figure, within the
    ±0.01 issue 2 allows the BM25 reference points), RRF of BM25 and MiniLM beside the better of
    its inputs, float16 storage beside float32 (issue 2 names both, with no target)."""
    from _summary import record

    dense, rrf_, half = ("dense (MiniLM, flat)", "RRF(BM25, dense) top-1000 each",
                         "dense (MiniLM, float16 storage)")
    for name, m in ndcg10.items():
        if name == "scifact":
            record("MiniLM dense nDCG@10, scifact", m[dense],
                   anchor=f"public BEIR figure {MINILM_SCIFACT}",
                   target=f"{MINILM_SCIFACT} ± 0.01", met=abs(m[dense] - MINILM_SCIFACT) <= 0.01)
        else:
            record(f"MiniLM dense nDCG@10, {name}", m[dense], anchor=f"BM25 {m['BM25']:.4f}")
        best = max(("BM25", dense), key=m.__getitem__)
        record(f"RRF(BM25, MiniLM) nDCG@10, {name}", m[rrf_], anchor=f"{best} {m[best]:.4f}",
               ratio=m[rrf_] / m[best])
        record(f"MiniLM nDCG@10 with float16 storage, {name}", m[half],
               anchor=f"float32 {m[dense]:.4f}", ratio=m[half] / m[dense])


if __name__ == "__main__":
    main(sys.argv[1:] or ["scifact", "npl"])
